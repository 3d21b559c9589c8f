/**
 * The background part of starting a conversation: sandbox → repository → setup script → git hooks → skills →
 * conversation on the agent server. Every state is saved before the step runs, so any server reading storage
 * reports where a start is; any failure ends in ERROR with a detail a person can act on.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import type { Clock } from "../../core/clock.ts";
import { StorageUnavailableError } from "../../core/errors.ts";
import { newHexId, parseHexId } from "../../core/ids.ts";
import { LOCAL_REPOSITORY_PROVIDER, localRepositoryFolder } from "../../core/repository-names.ts";
import type { AppConversationStartRequest } from "../../gen/workspace/v1/app_conversation_pb.js";
import { AgentCallError, type AgentClient, type AgentEndpoint } from "../../ports/agent-client.ts";
import type {
  ConversationRecord,
  ConversationRepository,
  StartTaskPatch,
  StartTaskPlan,
  StartTaskRecord,
  StartTaskRepository,
  StartTaskStatus,
} from "../../ports/conversation-repository.ts";
import type { LocalRepositoryCatalog, LocalRepositoryRecord } from "../../ports/local-repositories.ts";
import { ACTIVE_STATUSES } from "../../ports/sandbox-repository.ts";
import type { SlotWait } from "../sandboxes/sandbox-lifecycle.ts";
import type { LiveSandbox } from "../sandboxes/sandbox-state.ts";
import { PROVIDERS } from "../settings/settings-fields.ts";
import type { ConversationConfig } from "../settings/settings-service.ts";
import {
  agentStartRequest,
  parseSkillFiles,
  type SkillJson,
  skillFilesCommand,
  workHostsSkill,
} from "./agent-request.ts";
import { providerName, triggerName } from "./conversation-json.ts";
import type { ConversationConfigSource, SecretSource, StartSandboxes } from "./ports.ts";
import {
  cloneSource,
  gitHooksCommand,
  isDirectRepository,
  localRepositoryPath,
  PREPARE_EXIT,
  parsePrepareOutput,
  prepareCommand,
  redact,
  repositoryDirName,
  SETUP_SCRIPT,
  setupScriptCommand,
  tail,
} from "./workspace-commands.ts";

/** Timeouts of the start flow. */
export interface StartFlowTimeouts {
  /** How long a STARTING sandbox may take to become RUNNING (default 120 s). */
  sandboxStartMs: number;
  /** Clone and checkout (default 600 s; the agent caps a command at 600 s). */
  prepareSeconds: number;
  /** .openhands/setup.sh (default 600 s). */
  setupScriptSeconds: number;
}

export interface StartFlowDeps {
  startTasks: StartTaskRepository;
  conversations: ConversationRepository;
  sandboxes: StartSandboxes;
  settings: ConversationConfigSource;
  secrets: SecretSource;
  agent: AgentClient;
  clock: Clock;
  timeouts: StartFlowTimeouts;
  /** Called with a copy of the task after each saved state. */
  onChange: (task: StartTaskRecord) => void;
  /**
   * Called once a conversation's record exists (the events service names it from a first user message that the
   * agent posted before the record was created). Must not throw.
   */
  conversationCreated?: (record: ConversationRecord) => void;
  /** Final states (READY/ERROR) whose save failed, by task id: {@link sweepStartTasks} saves them later. */
  unsaved?: Map<string, StartTaskRecord>;
  log: (msg: string, data?: Record<string, unknown>) => void;
  /** This server's lease owner name: every save is a compare-and-set on it (see StartTaskRepository). */
  leaseOwner: string;
  /** The repositories of LOCAL_REPOSITORY_ROOTS, which a start names by `@local/<folder>` (none: no such names). */
  localRepositories?: LocalRepositoryCatalog;
}

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

/** Why a start was aborted: a shutdown hands it over (its lease is released, another server resumes it). */
export const HAND_OVER = new Error("server shutdown: the start is handed over");

/** A failure whose message is meant for the user (it becomes the task's detail as is). */
export class StartError extends Error {}

/** The detail of a task that was cut off by a shutdown. */
export const SHUTDOWN_DETAIL =
  "Interrupted: the server shut down before the conversation was ready; start the conversation again";

/**
 * Saves the final states whose save failed (kept in `deps.unsaved`); each is retried at the next sweep while it
 * still fails. Returns how many were saved.
 */
export async function saveUnsavedEnds(
  deps: Pick<StartFlowDeps, "startTasks" | "log" | "unsaved" | "leaseOwner">,
): Promise<number> {
  let saved = 0;
  for (const [id, task] of deps.unsaved ?? []) {
    try {
      await deps.startTasks.update(
        id,
        { status: task.status, detail: task.detail, updatedAt: task.updatedAt },
        deps.leaseOwner,
      );
      deps.unsaved?.delete(id);
      saved++;
    } catch (err) {
      deps.log("start task end still cannot be saved", { taskId: id, error: String(err) });
    }
  }
  return saved;
}

/**
 * Runs one start (new, or resumed from `resume`) to READY or ERROR. Never rejects; the task's final state is saved
 * (and reported) either way, except when the run stops because another server took the task over or because a
 * shutdown handed it over ({@link HAND_OVER}): then whoever resumes it saves its end.
 */
export async function runStartFlow(
  deps: StartFlowDeps,
  task: StartTaskRecord,
  request: AppConversationStartRequest,
  signal: AbortSignal,
  resume: StartResume = { plan: {}, reached: null },
): Promise<void> {
  const flow = new StartFlow(deps, task, request, signal, resume);
  await flow.run();
}

/** Values a sub-conversation takes from its parent when the request leaves them unset. */
interface Effective {
  sandboxId: string | null;
  repository: string | null;
  branch: string | null;
  provider: string | null;
  llmModel: string | null;
  parent: ConversationRecord | null;
}

class StartFlow {
  readonly #d: StartFlowDeps;
  readonly #task: StartTaskRecord;
  readonly #req: AppConversationStartRequest;
  readonly #signal: AbortSignal;
  /** Aborted when the sandbox stops holding its running slot mid-start (see #guardSandbox). */
  readonly #lost = new AbortController();
  /** What the agent calls stop on: a shutdown, or the sandbox lost. */
  readonly #callSignal: AbortSignal;
  readonly #plan: StartTaskPlan;
  /** Index in STEPS of the last state saved before this run (-1: a new start). */
  readonly #reached: number;
  /** Secret values in play (tokens, keys): never written into a detail or a log line. */
  readonly #secrets: string[] = [];

  constructor(
    deps: StartFlowDeps,
    task: StartTaskRecord,
    request: AppConversationStartRequest,
    signal: AbortSignal,
    resume: StartResume,
  ) {
    this.#d = deps;
    this.#task = { ...task };
    this.#req = request;
    this.#signal = signal;
    this.#callSignal = AbortSignal.any([signal, this.#lost.signal]);
    this.#plan = { ...resume.plan };
    this.#reached = resume.reached === null ? -1 : STEPS.indexOf(resume.reached);
  }

  /** Whether a resumed start had finished `step` (it had saved a later state). */
  #past(step: StartTaskStatus): boolean {
    return this.#reached > STEPS.indexOf(step);
  }

  async run(): Promise<void> {
    try {
      await this.#steps();
    } catch (err) {
      if (err instanceof LeaseLostError || (this.#signal.aborted && this.#signal.reason === HAND_OVER)) {
        this.#d.log(
          err instanceof LeaseLostError
            ? "start task taken over by another server; this run stops"
            : "start task handed over at shutdown",
          { taskId: this.#task.id, status: this.#task.status },
        );
        return;
      }
      // An agent's error answer may echo the request, which carries tokens and keys.
      const detail = redact(this.#detailOf(err), this.#secrets);
      // Every failed start, with the ids to look for and its cause (an unexpected error in full: the detail only
      // points at this log then). The conversation id is null until the start has chosen one.
      this.#d.log("conversation start failed", {
        taskId: this.#task.id,
        userId: this.#task.ownerId,
        conversationId:
          this.#task.appConversationId ?? this.#req.conversationId ?? this.#plan.conversationId ?? null,
        sandboxId: this.#task.sandboxId ?? this.#plan.sandboxId ?? null,
        status: this.#task.status,
        detail,
        ...(err instanceof StartError ? {} : { error: redact(String(err), this.#secrets) }),
      });
      await this.#pauseCreatedSandbox();
      try {
        await this.#save({ status: "ERROR", detail });
      } catch (saveErr) {
        // Storage is down: report the end to listeners anyway; recovery at the next start settles the record.
        this.#d.log("could not save the failed start task", {
          taskId: this.#task.id,
          error: String(saveErr),
        });
        const ended: StartTaskRecord = {
          ...this.#task,
          status: "ERROR",
          detail,
          updatedAt: this.#d.clock.now(),
        };
        this.#d.unsaved?.set(ended.id, ended);
        this.#d.onChange(ended);
      }
    }
  }

  /**
   * A failed start pauses the sandbox it created (before its ERROR is saved, so whoever sees the ERROR sees the
   * sandbox paused): it stops holding one of the user's running slots, and its workspace stays for a look (resume
   * it) until the user deletes it. A sandbox the request named, or a parent conversation's, is left as it is.
   */
  async #pauseCreatedSandbox(): Promise<void> {
    const id = this.#plan.sandboxId;
    if (id === undefined || this.#task.sandboxId !== id) return;
    try {
      await this.#d.sandboxes.pause(this.#task.ownerId, id);
    } catch (err) {
      // Deleted meanwhile, or storage down: the sweep settles a sandbox whose process is gone.
      this.#d.log("could not pause the sandbox of a failed start", {
        taskId: this.#task.id,
        sandboxId: id,
        error: String(err),
      });
    }
  }

  #detailOf(err: unknown): string {
    if (this.#lost.signal.aborted) return (this.#lost.signal.reason as Error).message;
    if (err instanceof StartError || err instanceof AgentCallError) return err.message;
    if (err instanceof StorageUnavailableError)
      return "Storage was unavailable; start the conversation again";
    if (err instanceof ConnectError) return err.rawMessage;
    return `Internal error while starting the conversation (task ${this.#task.id}); see the server log`;
  }

  /** Saves a state (compare-and-set on this server's lease) and reports it. */
  async #save(patch: Omit<StartTaskPatch, "updatedAt" | "plan">): Promise<void> {
    const updatedAt = this.#d.clock.now();
    if (!(await this.#d.startTasks.update(this.#task.id, { ...patch, updatedAt }, this.#d.leaseOwner)))
      throw new LeaseLostError(this.#task.id);
    Object.assign(this.#task, patch, { updatedAt });
    this.#d.onChange({ ...this.#task });
  }

  /** Records ids before using them, so that a server resuming this start uses the same ones. */
  async #savePlan(plan: StartTaskPlan): Promise<void> {
    Object.assign(this.#plan, plan);
    if (!(await this.#d.startTasks.update(this.#task.id, { plan: { ...this.#plan } }, this.#d.leaseOwner)))
      throw new LeaseLostError(this.#task.id);
  }

  async #steps(): Promise<void> {
    const owner = this.#task.ownerId;
    const eff = await this.#effective();
    const config = await this.#d.settings.openConversationConfig(owner);
    // The agent cannot run without a model: say so before a sandbox is started for nothing.
    const model = eff.llmModel ?? config.llmModel;
    if (model === null)
      throw new StartError(
        "No LLM model is set: choose one in the settings (llm_model, e.g. anthropic/claude-sonnet-4-5, with llm_api_key) or pass llm_model in the start request",
      );
    const [sandbox, secrets] = await Promise.all([
      this.#sandbox(eff.sandboxId),
      this.#d.secrets.openAll(owner),
    ]);
    const guard = this.#guardSandbox(sandbox.record.id);
    try {
      await this.#stepsIn(sandbox, eff, model, config, secrets);
    } finally {
      clearInterval(guard);
    }
  }

  /**
   * Checks the sandbox's recorded status every second while the start uses it: once it no longer holds its
   * running slot (another start or resume of the user evicted it, or it was deleted), the agent calls in flight
   * stop at once instead of waiting for a paused agent, and the start ends with the reason.
   */
  #guardSandbox(id: string): NodeJS.Timeout {
    const timer = setInterval(() => {
      void this.#d.sandboxes.recordedStatus(this.#task.ownerId, id).then(
        (status) => {
          if (status !== null && ACTIVE_STATUSES.includes(status)) return;
          this.#lost.abort(
            new StartError(
              status === "PAUSED"
                ? `Sandbox ${id} was paused while the conversation was starting: another start or resume took its running slot (the running limit was reached). Resume the sandbox and start the conversation again`
                : `Sandbox ${id} was ${status === null || status === "MISSING" ? "deleted" : `set ${status}`} while the conversation was starting`,
            ),
          );
        },
        () => undefined,
      );
    }, 1000);
    timer.unref();
    return timer;
  }

  async #stepsIn(
    sandbox: LiveSandbox,
    eff: Effective,
    /** The model: the request's (or its parent's), else the settings'. */
    model: string,
    config: ConversationConfig,
    secrets: Record<string, string>,
  ): Promise<void> {
    const owner = this.#task.ownerId;
    for (const t of Object.values(config.providerTokens))
      this.#secrets.push(t.token, encodeURIComponent(t.token));
    if (config.llmApiKey !== null) this.#secrets.push(config.llmApiKey);
    this.#secrets.push(...Object.values(secrets));
    for (const s of Object.values(config.mcpConfig ?? {}).flat())
      if ("api_key" in s && s.api_key) this.#secrets.push(s.api_key);
      else if ("env" in s) this.#secrets.push(...Object.values(s.env));
    // As they appear inside a JSON answer (an agent's error may echo the request).
    this.#secrets.push(
      ...this.#secrets.map((v) => JSON.stringify(v).slice(1, -1)).filter((v, i) => v !== this.#secrets[i]),
    );
    const handle = sandbox.handle;
    if (handle === null) throw new StartError(`Sandbox ${sandbox.record.id} has no agent server`);
    const agent: AgentEndpoint = {
      url: handle.agentUrl,
      sessionApiKey: this.#d.sandboxes.sessionKey(sandbox.record),
    };
    // What the start task answers as agent_server_url: the agent as clients reach it (through this service's
    // origin when proxied), never the loopback address the service itself calls.
    const publicAgentUrl =
      this.#d.sandboxes.toInfo(sandbox).exposedUrls.find((u) => u.name === "AGENT_SERVER")?.url ?? agent.url;

    // The repository: clone (or reuse a clone already in the workspace) and check out, or git init.
    await this.#save({ status: "PREPARING_REPOSITORY" });
    const provider = eff.provider ?? firstProviderWithToken(config);
    const token = provider === null ? null : (config.providerTokens[provider] ?? null);
    // A listed local repository is cloned from its path, whether the request named it or gave its path or URL.
    const local = await this.#localRepository(eff.repository);
    const source =
      eff.repository === null
        ? null
        : local !== null
          ? { url: local.path, secrets: [] }
          : cloneSource(eff.repository, provider, token);
    this.#secrets.push(...(source?.secrets ?? []));
    const prepared = await this.#exec(
      agent,
      prepareCommand({
        clone:
          source === null || eff.repository === null
            ? null
            : { url: source.url, dir: repositoryDirName(eff.repository) },
        branch: eff.branch,
        gitUserName: config.gitUserName,
        gitUserEmail: config.gitUserEmail,
      }),
      undefined,
      this.#d.timeouts.prepareSeconds,
    );
    if (prepared.exitCode !== 0) throw new StartError(prepareFailure(prepared, eff));
    const project = parsePrepareOutput(prepared.stdout);
    if (project === null) throw new StartError("Preparing the repository printed no project folder");

    await this.#save({ status: "RUNNING_SETUP_SCRIPT" });
    // A resumed start runs the setup script again unless it had finished (scripts are expected to be re-runnable).
    if (project.hasSetupScript && !this.#past("RUNNING_SETUP_SCRIPT")) {
      const r = await this.#exec(
        agent,
        setupScriptCommand(),
        project.projectDir,
        this.#d.timeouts.setupScriptSeconds,
      );
      if (r.exitCode !== 0) {
        const output = tail(`${r.stdout}${r.stderr ? `\n${r.stderr}` : ""}`);
        const why =
          r.exitCode === -1
            ? `did not finish within ${this.#d.timeouts.setupScriptSeconds} s`
            : `failed with exit code ${r.exitCode}`;
        throw new StartError(`Setup script ${SETUP_SCRIPT} ${why}. Last output:\n${output}`);
      }
    }

    await this.#save({ status: "SETTING_UP_GIT_HOOKS" });
    // The setup script may have created the pre-commit script, so check again after it ran.
    if ((project.hasPreCommit || project.hasSetupScript) && !this.#past("SETTING_UP_GIT_HOOKS")) {
      const r = await this.#exec(agent, gitHooksCommand(), project.projectDir, 60);
      if (r.exitCode !== 0)
        throw new StartError(`Installing the git pre-commit hook failed: ${tail(r.stderr || r.stdout, 500)}`);
    }

    // The repository's skills (and where the sandbox serves applications), for the agent's context.
    await this.#save({ status: "SETTING_UP_SKILLS" });
    const skills = await this.#skills(agent, sandbox, project.projectDir);

    // The id is chosen here and saved before the agent is asked, so that a resumed start asks for the same one
    // (the agent answers an existing conversation for a known id) and never creates a second conversation.
    const conversationId = this.#req.conversationId ?? this.#plan.conversationId ?? newHexId();
    if (this.#plan.conversationId !== conversationId) await this.#savePlan({ conversationId });
    const existing = await this.#d.conversations.get(conversationId, owner);
    if (existing !== null) {
      // Resumed after the record was stored: that run created it; only its end was not saved.
      if (this.#past("SETTING_UP_SKILLS") && existing.sandboxId === sandbox.record.id) {
        if (eff.parent !== null && !eff.parent.subConversationIds.includes(existing.id))
          await this.#d.conversations.addSubConversation(eff.parent.id, existing.id, this.#d.clock.now());
        await this.#save({ status: "READY", appConversationId: existing.id, agentServerUrl: publicAgentUrl });
        return;
      }
      throw new StartError(`Conversation ${conversationId} already exists`);
    }
    const body = agentStartRequest({
      request: this.#req,
      conversationId,
      model,
      config,
      customSecrets: secrets,
      provider,
      workingDir: project.projectDir,
      skills,
      hostGateway: handle.hostGateway,
    });
    await this.#save({ status: "STARTING_CONVERSATION", agentServerUrl: publicAgentUrl });
    const info = await this.#d.agent.startConversation(agent, body, this.#callSignal);
    const id = parseHexId(info.id) ?? conversationId;

    const now = this.#d.clock.now();
    const record: ConversationRecord = {
      id,
      ownerId: owner,
      sandboxId: sandbox.record.id,
      // A local repository by its name and provider, whichever way the request gave it: the UI takes the working
      // folder from the name's second segment and shows repository and branch only with a provider.
      selectedRepository: local?.name ?? eff.repository,
      selectedBranch: eff.branch,
      // An unlisted local path keeps the provider the request named, if it named one.
      gitProvider:
        local !== null ||
        (eff.provider === null && eff.repository !== null && localRepositoryPath(eff.repository) !== null)
          ? LOCAL_REPOSITORY_PROVIDER
          : eff.provider,
      title: `Conversation ${id}`,
      trigger: triggerName(this.#req.trigger),
      prNumber: [...this.#req.prNumber],
      llmModel: model,
      metrics: null,
      parentConversationId: eff.parent?.id ?? null,
      subConversationIds: [],
      createdAt: now,
      updatedAt: now,
    };
    try {
      await this.#d.conversations.insert(record);
    } catch (err) {
      if (err instanceof StorageUnavailableError) throw err;
      throw new StartError(`Conversation ${id} already exists`);
    }
    this.#d.conversationCreated?.(record);
    if (eff.parent !== null) await this.#d.conversations.addSubConversation(eff.parent.id, id, now);
    await this.#save({ status: "READY", appConversationId: id });
  }

  /**
   * The listed local repository a start is on: named (`@local/<folder>`), or given by a path or file:// URL that
   * is one; null for any other repository (an unlisted local path is cloned as given). A name that is not listed
   * (any more) ends the start.
   */
  async #localRepository(repository: string | null): Promise<LocalRepositoryRecord | null> {
    if (repository === null) return null;
    const named = localRepositoryFolder(repository) !== null;
    const path = named ? null : localRepositoryPath(repository);
    if (!named && path === null) return null;
    const listed = (await this.#d.localRepositories?.list()) ?? [];
    const found = listed.find((r) => (named ? r.name === repository : r.path === path)) ?? null;
    if (named && found === null)
      throw new StartError(
        `No local repository is named ${repository}: the server offers the repositories in LOCAL_REPOSITORY_ROOTS (see GET /api/user/repositories)`,
      );
    return found;
  }

  /** The request's values, with a parent conversation's filling the gaps. */
  async #effective(): Promise<Effective> {
    const r = this.#req;
    const own: Effective = {
      sandboxId: r.sandboxId ?? null,
      repository: r.selectedRepository || null,
      branch: r.selectedBranch || null,
      provider: providerName(r.gitProvider),
      llmModel: r.llmModel || null,
      parent: null,
    };
    if (r.parentConversationId === undefined) return own;
    const parent = await this.#d.conversations.get(r.parentConversationId, this.#task.ownerId);
    if (parent === null) throw new StartError(`Parent conversation ${r.parentConversationId} not found`);
    return {
      sandboxId: own.sandboxId ?? parent.sandboxId,
      repository: own.repository ?? parent.selectedRepository,
      branch: own.branch ?? parent.selectedBranch,
      provider: own.provider ?? parent.gitProvider,
      llmModel: own.llmModel ?? parent.llmModel,
      parent,
    };
  }

  /** A RUNNING sandbox: a new one, or the given one (resumed when PAUSED, waited for when STARTING). */
  async #sandbox(sandboxId: string | null): Promise<LiveSandbox> {
    const owner = this.#task.ownerId;
    const s = this.#d.sandboxes;
    let live: LiveSandbox;
    // When every running slot of the user is held by a starting sandbox, the start waits for one (and says so).
    const wait: SlotWait = {
      onWait: (detail) => this.#save({ status: "WAITING_FOR_SANDBOX", detail }),
      waitMs: this.#d.timeouts.sandboxStartMs,
      signal: this.#signal,
    };
    const planned = sandboxId === null ? (this.#plan.sandboxId ?? null) : null;
    const existing = planned === null ? null : await s.get(owner, planned);
    // The task names the planned sandbox once it was created: gone since means deleted, not never started.
    if (planned !== null && existing === null && this.#task.sandboxId === planned)
      throw new StartError(`Sandbox ${planned} was deleted while the conversation was starting`);
    if (sandboxId === null && existing === null) {
      // A new sandbox, under an id saved first: a resumed start finds it rather than starting a second one.
      // A warm sandbox when the runtime has one: its id is taken (for good) here, and saved as the plan's.
      const id = planned ?? (await s.newSandboxId(owner));
      if (planned === null) await this.#savePlan({ sandboxId: id });
      try {
        live = await s.start(owner, undefined, id, wait);
      } catch (err) {
        if (err instanceof LeaseLostError || this.#signal.aborted) throw err;
        throw new StartError(
          `Could not start a sandbox: ${err instanceof Error ? err.message : String(err)}`,
        );
      }
      await this.#save({ status: "WAITING_FOR_SANDBOX", sandboxId: live.record.id, detail: null });
    } else if (existing !== null) {
      // Resumed: the sandbox this start created. Started again when the server starting it died before it ran.
      await this.#save({ status: "WAITING_FOR_SANDBOX", sandboxId: existing.record.id });
      live =
        existing.status === "STARTING" && existing.handle === null
          ? await s.restartUnstarted(owner, existing.record.id)
          : existing.status === "PAUSED"
            ? await this.#resumeSandbox(existing.record.id, wait)
            : existing;
    } else {
      const given = sandboxId ?? "";
      const found = await s.get(owner, given);
      if (found === null) throw new StartError(`Sandbox ${given} not found`);
      await this.#save({ status: "WAITING_FOR_SANDBOX", sandboxId: given });
      // Paused, or in error because its agent ended: resumed (the agent then starts again on its workspace).
      live =
        found.status === "PAUSED" || found.status === "ERROR"
          ? await this.#resumeSandbox(given, wait)
          : found;
    }
    const id = live.record.id;
    // Also a sandbox holding its slot whose agent does not answer yet (a loaded machine): wait for it.
    if (
      live.status === "STARTING" ||
      (live.status === "ERROR" && ACTIVE_STATUSES.includes(live.record.status))
    ) {
      const settled = await abortable(
        s.waitUntilSettled(owner, id, this.#d.timeouts.sandboxStartMs),
        this.#signal,
      );
      if (settled === null)
        throw new StartError(`Sandbox ${id} was deleted while the conversation was starting`);
      live = settled;
      if (live.status === "STARTING")
        throw new StartError(
          `Sandbox ${id} did not start within ${Math.round(this.#d.timeouts.sandboxStartMs / 1000)} s`,
        );
    }
    this.#signal.throwIfAborted();
    if (live.status !== "RUNNING")
      throw new StartError(
        sandboxId === null
          ? `Sandbox ${id} failed to start (status ${live.status}${live.reason ? `: ${live.reason}` : ""}); see the server log`
          : `Sandbox ${id} cannot be used: its status is ${live.status}`,
      );
    return live;
  }

  /** Resumes the sandbox; a refusal (FAILED_PRECONDITION: it cannot be started again) fails the start with why. */
  async #resumeSandbox(id: string, wait: SlotWait): Promise<LiveSandbox> {
    try {
      return await this.#d.sandboxes.resume(this.#task.ownerId, id, wait);
    } catch (err) {
      if (err instanceof LeaseLostError || this.#signal.aborted) throw err;
      if (err instanceof ConnectError && err.code === Code.FailedPrecondition)
        throw new StartError(`Sandbox ${id} cannot be used: ${err.rawMessage}`);
      throw err;
    }
  }

  /**
   * The skills of the repository in `projectDir`, after a skill telling where the sandbox serves applications.
   * A failure to read them is logged and the start goes on without them, as the reference's.
   */
  async #skills(agent: AgentEndpoint, sandbox: LiveSandbox, projectDir: string): Promise<SkillJson[]> {
    const workers = this.#d.sandboxes
      .toInfo(sandbox)
      .exposedUrls.filter((u) => u.name.startsWith("WORKER_"))
      .map((u) => ({ url: u.url, port: u.port }));
    const skills: SkillJson[] = [];
    const hosts = workHostsSkill(workers);
    if (hosts !== null) skills.push(hosts);
    const skip = (path: string, why: string) =>
      this.#d.log("skill file left out", { taskId: this.#task.id, path, why });
    try {
      const r = await this.#exec(agent, skillFilesCommand(), projectDir, 30);
      if (r.exitCode === 0) skills.push(...parseSkillFiles(r.stdout, skip));
      else skip(projectDir, `listing skills exited with ${r.exitCode}: ${tail(r.stderr, 300)}`);
    } catch (err) {
      if (this.#callSignal.aborted) throw err;
      skip(projectDir, redact(String(err), this.#secrets));
    }
    return skills;
  }

  async #exec(agent: AgentEndpoint, command: string, cwd: string | undefined, timeoutSeconds: number) {
    this.#callSignal.throwIfAborted();
    return this.#d.agent.executeCommand(
      agent,
      { command, timeoutSeconds, ...(cwd === undefined ? {} : { cwd }) },
      this.#callSignal,
    );
  }
}

function firstProviderWithToken(config: ConversationConfig): string | null {
  return PROVIDERS.find((p) => config.providerTokens[p] !== undefined) ?? null;
}

/** What to check when a clone fails: the token only matters for a provider's "owner/repo". */
function cloneHint(repository: string): string {
  if (localRepositoryPath(repository) !== null || localRepositoryFolder(repository) !== null)
    return "Check that the path is a git repository inside LOCAL_REPOSITORY_ROOTS, readable by the server's user.";
  if (isDirectRepository(repository))
    return "Check the URL, and that the sandbox can reach it (its credentials, if any, go in the URL).";
  return "Check the repository name and your git provider token.";
}

function prepareFailure(r: { exitCode: number; stdout: string; stderr: string }, eff: Effective): string {
  const output = tail(r.stderr || r.stdout, 1000);
  switch (r.exitCode) {
    case PREPARE_EXIT.clone:
      return `Could not clone ${eff.repository}: ${output || "git clone failed"}. ${cloneHint(eff.repository ?? "")}`;
    case PREPARE_EXIT.checkout:
      return eff.branch === null
        ? `Could not create a working branch in ${eff.repository}: ${output}`
        : `Could not check out branch ${eff.branch} of ${eff.repository}: ${output}`;
    case PREPARE_EXIT.occupied:
      return `Cannot clone ${eff.repository} into the sandbox: the folder is taken (${output}). Start the conversation in a new sandbox.`;
    case PREPARE_EXIT.init:
      return `Could not initialise a git repository in the workspace: ${output}`;
    case -1:
      return `Preparing the repository did not finish in time: ${output}`;
    default:
      return `Preparing the repository failed with exit code ${r.exitCode}: ${output}`;
  }
}

/** Resolves like `p`, or rejects as soon as `signal` aborts. */
function abortable<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(e);
      },
    );
  });
}
