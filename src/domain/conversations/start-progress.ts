/**
 * A conversation start's progress as storage holds it: its steps in order, the state it reached (a resumed start
 * skips the completed steps that need not run again), every state saved before its step runs and the ids planned
 * before they are used, each a compare-and-set on this server's lease. And the errors that end a start. Shared by
 * the jobs of a start (conversation-start.ts, start-sandbox.ts, start-workspace.ts).
 */
import type {
  StartTaskPatch,
  StartTaskPlan,
  StartTaskRecord,
  StartTaskStatus,
} from "../../ports/conversation-repository.ts";
import type { StartFlowDeps } from "./start-deps.ts";

/** Where a start resumes: the ids it had planned and the last state it saved (null: a new start). */
export interface StartResume {
  plan: StartTaskPlan;
  reached: StartTaskStatus | null;
}

/** The steps in order; a resumed start skips the completed ones that need not run again. */
const STEPS: readonly StartTaskStatus[] = [
  "WORKING",
  "WAITING_FOR_SANDBOX",
  "PREPARING_REPOSITORY",
  "RUNNING_SETUP_SCRIPT",
  "SETTING_UP_GIT_HOOKS",
  "SETTING_UP_SKILLS",
  "STARTING_CONVERSATION",
];

/** Raised when a save finds the task's lease taken by another server: this run stops, the other one goes on. */
export class LeaseLostError extends Error {
  constructor(taskId: string) {
    super(`start task ${taskId} is now run by another server`);
  }
}

/** A failure whose message is meant for the user (it becomes the task's detail as is). */
export class StartError extends Error {}

/** One run of a start: its task as last saved, its plan, and the state the run resumed from. */
export class StartProgress {
  readonly #d: Pick<StartFlowDeps, "startTasks" | "clock" | "onChange" | "leaseOwner">;
  /** The task as this run last saved it (a copy). */
  readonly task: StartTaskRecord;
  /** The ids planned so far (a copy, saved with the task). */
  readonly plan: StartTaskPlan;
  /** Index in STEPS of the last state saved before this run (-1: a new start). */
  readonly #reached: number;

  constructor(
    deps: Pick<StartFlowDeps, "startTasks" | "clock" | "onChange" | "leaseOwner">,
    task: StartTaskRecord,
    resume: StartResume,
  ) {
    this.#d = deps;
    this.task = { ...task };
    this.plan = { ...resume.plan };
    this.#reached = resume.reached === null ? -1 : STEPS.indexOf(resume.reached);
  }

  /** Whether a resumed start had finished `step` (it had saved a later state). */
  past(step: StartTaskStatus): boolean {
    return this.#reached > STEPS.indexOf(step);
  }

  /** Saves a state (compare-and-set on this server's lease) and reports it. */
  async save(patch: Omit<StartTaskPatch, "updatedAt" | "plan">): Promise<void> {
    const updatedAt = this.#d.clock.now();
    if (!(await this.#d.startTasks.update(this.task.id, { ...patch, updatedAt }, this.#d.leaseOwner)))
      throw new LeaseLostError(this.task.id);
    Object.assign(this.task, patch, { updatedAt });
    this.#d.onChange({ ...this.task });
  }

  /** Records ids before using them, so that a server resuming this start uses the same ones. */
  async savePlan(plan: StartTaskPlan): Promise<void> {
    Object.assign(this.plan, plan);
    if (!(await this.#d.startTasks.update(this.task.id, { plan: { ...this.plan } }, this.#d.leaseOwner)))
      throw new LeaseLostError(this.task.id);
  }
}
