import { EventEmitter } from "node:events";
import { setTimeout as sleep } from "node:timers/promises";
import { create } from "@bufbuild/protobuf";
import { type Clock, systemClock } from "../../core/clock.ts";
import { unavailable } from "../../core/errors.ts";
import { newHexId } from "../../core/ids.ts";
import {
  type AppConversationStartRequest,
  AppConversationStartRequestSchema,
} from "../../gen/workspace/v1/app_conversation_pb.js";
import type { AgentClient } from "../../ports/agent-client.ts";
import type {
  ClaimedStartTask,
  ConversationRepository,
  StartTaskRecord,
  StartTaskRepository,
} from "../../ports/conversation-repository.ts";
import type { LocalRepositoryCatalog } from "../../ports/local-repositories.ts";
import type { ChangeFeed } from "../change-feed.ts";
import { startRequestFromJson, startRequestJson } from "./conversation-codecs.ts";
import { HAND_OVER, runStartFlow, SHUTDOWN_DETAIL, saveUnsavedEnds } from "./conversation-start.ts";
import type { ConversationConfigSource, ConversationFacts, SecretSource, StartSandboxes } from "./ports.ts";
import type { StartFlowDeps, StartFlowTimeouts } from "./start-deps.ts";
import { checkStartRequest } from "./start-request.ts";

/** The detail of a task whose start was cut off too many times to go on. */
export const TOO_MANY_ATTEMPTS_DETAIL =
  "The start was interrupted too many times (each server running it stopped); start the conversation again";

export interface StartTaskRunnerOptions {
  conversations: ConversationRepository;
  startTasks: StartTaskRepository;
  /** What the starts need of the sandboxes (SandboxService). */
  sandboxStarts: StartSandboxes;
  settings: ConversationConfigSource;
  secrets: SecretSource;
  agent: AgentClient;
  clock?: Clock;
  timeouts?: Partial<StartFlowTimeouts>;
  /** How long shutdown lets running starts finish before cutting them off (default 10 s). */
  shutdownGraceMs?: number;
  log?: (msg: string, data?: Record<string, unknown>) => void;
  /** Where the facts of a start are told (a conversation was created). */
  facts?: ConversationFacts;
  /** The store's change feed: start task states are published there. */
  changes: ChangeFeed;
  /** This server's name as the owner of start task leases (unique per process). */
  leaseOwner: string;
  /**
   * How long a lease lasts (default 15 s): renewed every third of it while the start runs; once expired, any
   * server resumes the task. Also the period of that check.
   */
  leaseMs?: number;
  /** How many servers may take a task over before it ends in ERROR (default 3). */
  maxAttempts?: number;
  /** The repositories of LOCAL_REPOSITORY_ROOTS, which starts name by `@local/<folder>`. */
  localRepositories?: LocalRepositoryCatalog;
}

interface RunningStart {
  done: Promise<void>;
  abort: AbortController;
}

/**
 * The conversation starts this server runs: each start task saved with a lease of this server and run in the
 * background (conversation-start.ts), its lease renewed while it runs, expired leases of any server taken over and
 * resumed from their last saved state, and, at shutdown, running starts handed over.
 */
export class StartTaskRunner {
  readonly #o: StartTaskRunnerOptions;
  readonly #clock: Clock;
  readonly #flow: StartFlowDeps;
  /** Local listeners of task states (metrics). */
  readonly #events = new EventEmitter({ captureRejections: false });
  readonly #running = new Map<string, RunningStart>();
  readonly #leaseMs: number;
  #leaseTimer: NodeJS.Timeout | null = null;
  #leaseTick: Promise<void> | null = null;
  #closing = false;

  constructor(options: StartTaskRunnerOptions) {
    this.#o = options;
    this.#clock = options.clock ?? systemClock;
    this.#events.setMaxListeners(0);
    this.#leaseMs = options.leaseMs ?? 15_000;
    const facts = options.facts;
    this.#flow = {
      startTasks: options.startTasks,
      conversations: options.conversations,
      sandboxes: options.sandboxStarts,
      settings: options.settings,
      secrets: options.secrets,
      agent: options.agent,
      clock: this.#clock,
      timeouts: {
        sandboxStartMs: 120_000,
        prepareSeconds: 600,
        setupScriptSeconds: 600,
        ...options.timeouts,
      },
      onChange: (task) => this.#changed(task),
      log: options.log ?? (() => {}),
      leaseOwner: options.leaseOwner,
      unsaved: new Map(),
      ...(options.localRepositories === undefined ? {} : { localRepositories: options.localRepositories }),
      ...(facts === undefined
        ? {}
        : { conversationCreated: (record) => facts.publish({ kind: "created", record }) }),
    };
  }

  /** The periodic sweep: saves start ends whose save failed; returns how many it saved. */
  sweep(): Promise<number> {
    return saveUnsavedEnds(this.#flow);
  }

  /**
   * Keeps this server's leases and takes over expired ones, every third of the lease (until shutdown); the first
   * round runs at once, so a restarted server resumes what it left.
   */
  startLeases(): void {
    if (this.#leaseTimer !== null || this.#closing) return;
    const tick = () => {
      this.#leaseTick ??= this.maintainLeases()
        .then(
          () => undefined,
          (err: unknown) => this.#flow.log("start task leases could not be kept", { error: String(err) }),
        )
        .finally(() => {
          this.#leaseTick = null;
        });
    };
    this.#leaseTimer = setInterval(tick, Math.max(50, Math.floor(this.#leaseMs / 3))).unref();
    tick();
  }

  /**
   * One lease round: renews the leases of the starts running here (a start whose lease another server took is
   * stopped), then claims the unfinished tasks whose lease expired and resumes each from its last saved state.
   * Returns how many it resumed.
   */
  async maintainLeases(): Promise<number> {
    const owner = this.#flow.leaseOwner;
    const now = this.#clock.now();
    const expiresAt = new Date(now.getTime() + this.#leaseMs);
    const mine = [...this.#running.keys()];
    if (mine.length > 0) {
      const held = new Set(await this.#o.startTasks.renewLeases(owner, mine, expiresAt));
      for (const id of mine)
        if (!held.has(id) && this.#running.has(id)) {
          this.#flow.log("start task lease lost; stopping this run", { taskId: id });
          this.#running.get(id)?.abort.abort(HAND_OVER);
        }
    }
    if (this.#closing) return 0;
    const claimed = await this.#o.startTasks.claimExpired(owner, now, expiresAt, 20);
    for (const c of claimed) await this.#resume(c);
    return claimed.length;
  }

  /** Calls `listener` with the state a start task enters, on every change (metrics). */
  onTaskChange(listener: (status: string) => void): void {
    this.#events.on("task-status", listener);
  }

  /**
   * Refuses new starts, lets running ones finish for up to `graceMs` (default: the option), then hands the rest
   * over: each stops where it is and its lease is released at once, so that another server sharing the store (or
   * this one, restarted) resumes it. Resolves once every start here has stopped.
   */
  async shutdown(graceMs = this.#o.shutdownGraceMs ?? 10_000): Promise<void> {
    this.#closing = true;
    if (this.#leaseTimer !== null) clearInterval(this.#leaseTimer);
    this.#leaseTimer = null;
    await this.#leaseTick;
    // No start begins from now on (#begin refuses or ends them), so the running set only shrinks.
    const all = () => Promise.all([...this.#running.values()].map((r) => r.done));
    if (this.#running.size > 0) await Promise.race([all(), sleep(graceMs, undefined, { ref: false })]);
    const cut = [...this.#running.keys()];
    for (const r of this.#running.values()) r.abort.abort(HAND_OVER);
    await all();
    if (cut.length > 0)
      await this.#o.startTasks.releaseLeases(this.#flow.leaseOwner, cut).catch((err: unknown) =>
        // They expire on their own; another server resumes them then.
        this.#flow.log("start task leases could not be released", { error: String(err) }),
      );
  }

  /**
   * Saves a new start task (leased by this server) and runs it in the background; UNAVAILABLE once shutdown began.
   * `id` is the task's.
   */
  async begin(userId: string, request: AppConversationStartRequest, id: string): Promise<StartTaskRecord> {
    if (this.#closing) throw unavailable("The server is shutting down; start the conversation again later");
    const now = this.#clock.now();
    const task: StartTaskRecord = {
      id,
      ownerId: userId,
      status: "WORKING",
      detail: null,
      appConversationId: null,
      sandboxId: null,
      agentServerUrl: null,
      request: startRequestJson(request),
      createdAt: now,
      updatedAt: now,
    };
    // The conversation id is chosen now and stored with the task: any server finds the start by it (the legacy
    // create names its conversation) and a resumed start asks the agent for the same one.
    const plan = { conversationId: request.conversationId ?? newHexId() };
    await this.#o.startTasks.insert(
      task,
      { owner: this.#flow.leaseOwner, expiresAt: new Date(now.getTime() + this.#leaseMs) },
      plan,
    );
    if (this.#closing) {
      // Shutdown began while the task was being saved: end it rather than start work nobody waits for.
      await this.#o.startTasks.update(id, { status: "ERROR", detail: SHUTDOWN_DETAIL, updatedAt: now });
      return { ...task, status: "ERROR", detail: SHUTDOWN_DETAIL };
    }
    this.#run(task, request, { task, plan, attempts: 0 });
    return task;
  }

  /** Runs a start here: a new one (attempts 0) or one taken over (from the state it had reached). */
  #run(task: StartTaskRecord, request: AppConversationStartRequest, from: ClaimedStartTask): void {
    const abort = new AbortController();
    const done = runStartFlow(this.#flow, task, request, abort.signal, {
      plan: from.plan,
      reached: from.attempts === 0 ? null : from.task.status,
    }).finally(() => this.#running.delete(task.id));
    this.#running.set(task.id, { done, abort });
  }

  /** Resumes a task this server just claimed (its lease had expired): from its last saved state. */
  async #resume(claimed: ClaimedStartTask): Promise<void> {
    const t = claimed.task;
    if (this.#running.has(t.id)) return;
    const maxAttempts = this.#o.maxAttempts ?? 3;
    if (claimed.attempts > maxAttempts) {
      const ended = {
        ...t,
        status: "ERROR" as const,
        detail: TOO_MANY_ATTEMPTS_DETAIL,
        updatedAt: this.#clock.now(),
      };
      if (
        await this.#o.startTasks.update(
          t.id,
          { status: ended.status, detail: ended.detail, updatedAt: ended.updatedAt },
          this.#flow.leaseOwner,
        )
      )
        this.#changed(ended);
      return;
    }
    this.#flow.log("resuming start task", {
      taskId: t.id,
      status: t.status,
      attempt: claimed.attempts,
      plan: claimed.plan,
    });
    let request: AppConversationStartRequest;
    try {
      request = checkStartRequest(startRequestFromJson(t.request));
    } catch {
      request = create(AppConversationStartRequestSchema);
    }
    this.#run(t, request, claimed);
  }

  /** A task entered a state (saved, and logged with it, by the store): wake watches, tell local listeners. */
  #changed(task: StartTaskRecord): void {
    this.#events.emit("task-status", task.status);
    this.#o.changes.poke();
  }
}
