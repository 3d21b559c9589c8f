/**
 * The background part of starting a conversation: sandbox → repository → setup script → git hooks → skills →
 * conversation on the agent server. Every state is saved before the step runs, so any server reading storage
 * reports where a start is; any failure ends in ERROR with a detail a person can act on. This module runs a start
 * and creates its conversation; its progress is in start-progress.ts, its sandbox in start-sandbox.ts, its
 * workspace steps in start-workspace.ts.
 */
import { ConnectError } from "@connectrpc/connect";
import { providerName, triggerName } from "../../codec/conversation-json.ts";
import { StorageUnavailableError } from "../../core/errors.ts";
import { newHexId, parseHexId } from "../../core/ids.ts";
import { LOCAL_REPOSITORY_PROVIDER } from "../../core/repository-names.ts";
import type { AppConversationStartRequest } from "../../gen/workspace/v1/app_conversation_pb.js";
import { AgentCallError, type AgentEndpoint } from "../../ports/agent-client.ts";
import type { ConversationRecord, StartTaskRecord } from "../../ports/conversation-repository.ts";
import type { LiveSandbox } from "../sandboxes/sandbox-state.ts";
import type { ConversationConfig } from "../settings/settings-service.ts";
import { agentStartRequest } from "./agent-request.ts";
import type { Effective, StartFlowDeps } from "./start-deps.ts";
import { LeaseLostError, StartError, StartProgress, type StartResume } from "./start-progress.ts";
import { StartSandbox } from "./start-sandbox.ts";
import { StartWorkspace } from "./start-workspace.ts";
import { localRepositoryPath, redact } from "./workspace-commands.ts";

/** Why a start was aborted: a shutdown hands it over (its lease is released, another server resumes it). */
export const HAND_OVER = new Error("server shutdown: the start is handed over");

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
  const flow = new StartFlow(deps, new StartProgress(deps, task, resume), request, signal);
  await flow.run();
}

/** One run of a start, from its progress to READY or ERROR. */
class StartFlow {
  readonly #d: StartFlowDeps;
  readonly #p: StartProgress;
  readonly #req: AppConversationStartRequest;
  readonly #signal: AbortSignal;
  /** Aborted when the sandbox stops holding its running slot mid-start (see StartSandbox.guard). */
  readonly #lost = new AbortController();
  /** What the agent calls stop on: a shutdown, or the sandbox lost. */
  readonly #callSignal: AbortSignal;
  /** Secret values in play (tokens, keys): never written into a detail or a log line. */
  readonly #secrets: string[] = [];
  readonly #sandbox: StartSandbox;

  constructor(
    deps: StartFlowDeps,
    progress: StartProgress,
    request: AppConversationStartRequest,
    signal: AbortSignal,
  ) {
    this.#d = deps;
    this.#p = progress;
    this.#req = request;
    this.#signal = signal;
    this.#callSignal = AbortSignal.any([signal, this.#lost.signal]);
    this.#sandbox = new StartSandbox({
      sandboxes: deps.sandboxes,
      progress,
      sandboxStartMs: deps.timeouts.sandboxStartMs,
      signal,
      log: deps.log,
    });
  }

  async run(): Promise<void> {
    const task = this.#p.task;
    try {
      await this.#steps();
    } catch (err) {
      if (err instanceof LeaseLostError || (this.#signal.aborted && this.#signal.reason === HAND_OVER)) {
        this.#d.log(
          err instanceof LeaseLostError
            ? "start task taken over by another server; this run stops"
            : "start task handed over at shutdown",
          { taskId: task.id, status: task.status },
        );
        return;
      }
      // An agent's error answer may echo the request, which carries tokens and keys.
      const detail = redact(this.#detailOf(err), this.#secrets);
      // Every failed start, with the ids to look for and its cause (an unexpected error in full: the detail only
      // points at this log then). The conversation id is null until the start has chosen one.
      this.#d.log("conversation start failed", {
        taskId: task.id,
        userId: task.ownerId,
        conversationId:
          task.appConversationId ?? this.#req.conversationId ?? this.#p.plan.conversationId ?? null,
        sandboxId: task.sandboxId ?? this.#p.plan.sandboxId ?? null,
        status: task.status,
        detail,
        ...(err instanceof StartError ? {} : { error: redact(String(err), this.#secrets) }),
      });
      await this.#sandbox.pauseCreated();
      try {
        await this.#p.save({ status: "ERROR", detail });
      } catch (saveErr) {
        // Storage is down: report the end to listeners anyway; recovery at the next start settles the record.
        this.#d.log("could not save the failed start task", {
          taskId: task.id,
          error: String(saveErr),
        });
        const ended: StartTaskRecord = {
          ...task,
          status: "ERROR",
          detail,
          updatedAt: this.#d.clock.now(),
        };
        this.#d.unsaved?.set(ended.id, ended);
        this.#d.onChange(ended);
      }
    }
  }

  #detailOf(err: unknown): string {
    if (this.#lost.signal.aborted) return (this.#lost.signal.reason as Error).message;
    if (err instanceof StartError || err instanceof AgentCallError) return err.message;
    if (err instanceof StorageUnavailableError)
      return "Storage was unavailable; start the conversation again";
    if (err instanceof ConnectError) return err.rawMessage;
    return `Internal error while starting the conversation (task ${this.#p.task.id}); see the server log`;
  }

  async #steps(): Promise<void> {
    const owner = this.#p.task.ownerId;
    const eff = await this.#effective();
    const config = await this.#d.settings.openConversationConfig(owner);
    // The agent cannot run without a model: say so before a sandbox is started for nothing.
    const model = eff.llmModel ?? config.llmModel;
    if (model === null)
      throw new StartError(
        "No LLM model is set: choose one in the settings (llm_model, e.g. anthropic/claude-sonnet-4-5, with llm_api_key) or pass llm_model in the start request",
      );
    const [sandbox, secrets] = await Promise.all([
      this.#sandbox.acquire(eff.sandboxId),
      this.#d.secrets.openAll(owner),
    ]);
    const guard = this.#sandbox.guard(sandbox.record.id, this.#lost);
    try {
      await this.#stepsIn(sandbox, eff, model, config, secrets);
    } finally {
      clearInterval(guard);
    }
  }

  /** Collects the secret values in play (see #secrets): the config's tokens and keys, the custom secrets. */
  #collectSecrets(config: ConversationConfig, secrets: Record<string, string>): void {
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
  }

  async #stepsIn(
    sandbox: LiveSandbox,
    eff: Effective,
    /** The model: the request's (or its parent's), else the settings'. */
    model: string,
    config: ConversationConfig,
    secrets: Record<string, string>,
  ): Promise<void> {
    this.#collectSecrets(config, secrets);
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

    const workspace = new StartWorkspace({
      progress: this.#p,
      timeouts: this.#d.timeouts,
      localRepositories: this.#d.localRepositories,
      secrets: this.#secrets,
      exec: (command, cwd, timeoutSeconds) => this.#exec(agent, command, cwd, timeoutSeconds),
      callSignal: this.#callSignal,
      log: this.#d.log,
    });
    const { project, provider, local } = await workspace.prepare(eff, config);
    await workspace.setUp(project);

    // The repository's skills (and where the sandbox serves applications), for the agent's context.
    await this.#p.save({ status: "SETTING_UP_SKILLS" });
    const workers = this.#d.sandboxes
      .toInfo(sandbox)
      .exposedUrls.filter((u) => u.name.startsWith("WORKER_"))
      .map((u) => ({ url: u.url, port: u.port }));
    const skills = await workspace.skills(workers, project.projectDir);

    // The id is chosen here and saved before the agent is asked, so that a resumed start asks for the same one
    // (the agent answers an existing conversation for a known id) and never creates a second conversation.
    const conversationId = this.#req.conversationId ?? this.#p.plan.conversationId ?? newHexId();
    if (this.#p.plan.conversationId !== conversationId) await this.#p.savePlan({ conversationId });
    if (await this.#endedBefore(conversationId, sandbox, eff, publicAgentUrl)) return;
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
    await this.#p.save({ status: "STARTING_CONVERSATION", agentServerUrl: publicAgentUrl });
    const info = await this.#d.agent.startConversation(agent, body, this.#callSignal);
    const id = parseHexId(info.id) ?? conversationId;
    await this.#createConversation(id, sandbox, eff, model, local);
  }

  /**
   * True when an earlier run of this start created the conversation and only its end was not saved: its READY is
   * saved now. Throws when another conversation has the id.
   */
  async #endedBefore(
    conversationId: string,
    sandbox: LiveSandbox,
    eff: Effective,
    publicAgentUrl: string,
  ): Promise<boolean> {
    const existing = await this.#d.conversations.get(conversationId, this.#p.task.ownerId);
    if (existing === null) return false;
    // Resumed after the record was stored: that run created it; only its end was not saved.
    if (this.#p.past("SETTING_UP_SKILLS") && existing.sandboxId === sandbox.record.id) {
      if (eff.parent !== null && !eff.parent.subConversationIds.includes(existing.id))
        await this.#d.conversations.addSubConversation(eff.parent.id, existing.id, this.#d.clock.now());
      await this.#p.save({ status: "READY", appConversationId: existing.id, agentServerUrl: publicAgentUrl });
      return true;
    }
    throw new StartError(`Conversation ${conversationId} already exists`);
  }

  /** Stores the conversation the agent started (under its parent, if any), and saves READY. */
  async #createConversation(
    id: string,
    sandbox: LiveSandbox,
    eff: Effective,
    model: string,
    local: { name: string } | null,
  ): Promise<void> {
    const now = this.#d.clock.now();
    const record: ConversationRecord = {
      id,
      ownerId: this.#p.task.ownerId,
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
    await this.#p.save({ status: "READY", appConversationId: id });
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
    const parent = await this.#d.conversations.get(r.parentConversationId, this.#p.task.ownerId);
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

  async #exec(agent: AgentEndpoint, command: string, cwd: string | undefined, timeoutSeconds: number) {
    this.#callSignal.throwIfAborted();
    return this.#d.agent.executeCommand(
      agent,
      { command, timeoutSeconds, ...(cwd === undefined ? {} : { cwd }) },
      this.#callSignal,
    );
  }
}
