/**
 * One conversation of the built-in agent: its events (in the OpenHands SDK's shapes), its execution status, and
 * the agent loop that asks the user's model for the next step through an OpenAI-compatible chat-completions API
 * (the `openai` package, loaded on the first model call) and runs the tools it calls.
 */
import { randomUUID } from "node:crypto";
import { statSync } from "node:fs";
import { resolve } from "node:path";
import type { Json } from "./agent-server.ts";
import { messageEvent, redact, sdkTimestamp } from "./agent-server.ts";
import { Terminal, TOOL_SPECS, Toolbox, toAction } from "./agent-tools.ts";
import { maskStrings, secretMasker } from "./secret-mask.ts";
import { inWorkspace } from "./workspace-routes.ts";

export type ExecutionStatus =
  | "idle"
  | "running"
  | "paused"
  | "waiting_for_confirmation"
  | "finished"
  | "error"
  | "stuck";

/** The LLM of a start request (`agent.llm`), with LiteLLM's model names. */
export interface LlmSettings {
  model: string | null;
  baseUrl: string | null;
  apiKey: string | null;
  /** Seconds per model call (LLM.timeout; default 300). */
  timeoutSeconds: number;
  /** Retries of a failed call (429, 5xx, connection) with back-off (LLM.num_retries; default 4). */
  retries: number;
  temperature: number | null;
  maxOutputTokens: number | null;
}

/** What a conversation needs from its server. */
export interface ConversationHost {
  workspaceDir: string;
  shell: string;
  commandEnv: Record<string, string> | undefined;
  /** Every new event, in order (websockets, webhook). */
  onEvent(conversation: Conversation, event: Json): void;
  /** The conversation's info changed (status, title). */
  onInfo(conversation: Conversation): void;
}

/** Known LiteLLM provider prefixes and their OpenAI-compatible endpoints. */
const PROVIDER_URLS: Record<string, string> = {
  openai: "https://api.openai.com/v1",
  anthropic: "https://api.anthropic.com/v1/",
  gemini: "https://generativelanguage.googleapis.com/v1beta/openai/",
  openrouter: "https://openrouter.ai/api/v1",
  deepseek: "https://api.deepseek.com/v1",
  mistral: "https://api.mistral.ai/v1",
  groq: "https://api.groq.com/openai/v1",
  xai: "https://api.x.ai/v1",
  together_ai: "https://api.together.xyz/v1",
  fireworks_ai: "https://api.fireworks.ai/inference/v1",
  ollama: "http://localhost:11434/v1",
  lm_studio: "http://localhost:1234/v1",
};
/** Prefixes that only say "an OpenAI-compatible server at base_url". */
const GENERIC_PREFIXES = new Set([
  "litellm_proxy",
  "hosted_vllm",
  "openai_compatible",
  "custom_openai",
  "vllm",
]);

/**
 * The endpoint and model id for a LiteLLM-style model name: `openai/gpt-4o` → OpenAI's API with `gpt-4o`;
 * `anthropic/…`, `gemini/…`, … → that provider's OpenAI-compatible endpoint; with a base URL, any name (its
 * provider prefix dropped) goes to that server. Throws a readable error for a provider it cannot reach.
 */
export function resolveModel(
  model: string,
  baseUrl: string | null,
  gateway: string | null = process.env.SANDBOX_HOST_GATEWAY || null,
): { baseURL: string; model: string } {
  const target = resolveEndpoint(model, baseUrl);
  // In a network of its own (SANDBOX_HOST_GATEWAY, set by the runtimes) the host's loopback model is at the gateway.
  return gateway === null ? target : { ...target, baseURL: viaGateway(target.baseURL, gateway) };
}

/**
 * `url` with a loopback host replaced by `gateway`. The service's src/core/loopback-url.ts does the same; the agent
 * keeps its own copy because a sandbox sees only the agent's folder.
 */
function viaGateway(url: string, gateway: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return url;
  }
  const h = parsed.hostname.toLowerCase();
  if (!(h === "localhost" || h.endsWith(".localhost") || /^127\./.test(h) || h === "[::1]")) return url;
  parsed.hostname = gateway;
  const out = parsed.toString();
  return !url.endsWith("/") && out.endsWith("/") && parsed.pathname === "/" ? out.slice(0, -1) : out;
}

function resolveEndpoint(model: string, baseUrl: string | null): { baseURL: string; model: string } {
  const slash = model.indexOf("/");
  const prefix = slash > 0 ? model.slice(0, slash) : null;
  const known = prefix !== null && (prefix in PROVIDER_URLS || GENERIC_PREFIXES.has(prefix));
  const id = known ? model.slice(slash + 1) : model;
  if (baseUrl) {
    let url = baseUrl.replace(/\/+$/, "");
    // LiteLLM takes an Ollama base URL without /v1; its OpenAI-compatible API is under /v1.
    if (prefix === "ollama" && !url.endsWith("/v1")) url += "/v1";
    return { baseURL: url, model: id };
  }
  if (prefix === null) return { baseURL: PROVIDER_URLS.openai as string, model };
  const url = PROVIDER_URLS[prefix];
  if (url === undefined)
    throw new Error(
      `The built-in agent cannot reach model provider '${prefix}' of '${model}' on its own; set a base URL of an OpenAI-compatible server for it (for example a LiteLLM proxy) in the LLM settings.`,
    );
  return { baseURL: url, model: id };
}

const MAX_ITERATIONS_DEFAULT = 500;

/**
 * The model's view of a long conversation is bounded (the built-in agent has no condenser): each step sends the
 * events of the last MODEL_VIEW_TURNS user messages, at most MODEL_VIEW_EVENTS of them, after a note holding the
 * conversation's first user message and how many events are left out. Finding and building that tail looks only at
 * the tail, so a step's work and garbage are the same in turn 500 as in turn 5 (docs/builtin-agent.md).
 */
export const MODEL_VIEW_TURNS = 20;
export const MODEL_VIEW_EVENTS = 400;

/** A conversation and its agent loop. */
export class Conversation {
  readonly id: string;
  readonly record: Json;
  readonly events: Json[] = [];
  status: ExecutionStatus = "idle";
  readonly #host: ConversationHost;
  readonly #llm: LlmSettings;
  readonly #secrets: Map<string, string>;
  readonly #confirm: boolean;
  readonly #maxIterations: number;
  readonly #systemSuffix: string | null;
  /** Where the tools start: the request's `workspace.working_dir` when it is an existing folder in the workspace. */
  readonly workingDir: string;
  /** The tool specs offered to the model: the request's `agent.tools` this agent has, plus think and finish. */
  readonly #toolSpecs: Json[];
  #toolbox: Toolbox | undefined;
  /**
   * Actions of a model answer not run yet: waiting for the user's confirmation, or kept by a pause (the answer of a
   * model call in flight when the user paused, or the rest of a step's actions); run first when the loop resumes.
   */
  #pending: Json[] = [];
  /** Whether the user accepted the pending actions (confirmation mode asks before running them otherwise). */
  #pendingConfirmed = false;
  #running: Promise<void> | undefined;
  #pauseRequested = false;
  #abort: AbortController | undefined;
  #closed = false;
  #client: Promise<import("openai").OpenAI> | undefined;
  /** Masks the secrets and the model key in a text (secret-mask.ts), made on first use. */
  #masker: ((text: string) => string) | undefined;

  constructor(id: string, body: Json, host: ConversationHost) {
    this.id = id;
    this.#host = host;
    const agent = (body.agent ?? {}) as Json;
    const llm = (agent.llm ?? {}) as Json;
    const num = (v: unknown): number | null => (typeof v === "number" && Number.isFinite(v) ? v : null);
    this.#llm = {
      model: typeof llm.model === "string" && llm.model !== "" ? llm.model : null,
      baseUrl: typeof llm.base_url === "string" && llm.base_url !== "" ? llm.base_url : null,
      apiKey: typeof llm.api_key === "string" && llm.api_key !== "" ? llm.api_key : null,
      timeoutSeconds: Math.max(1, num(llm.timeout) ?? 300),
      retries: Math.max(0, Math.min(10, num(llm.num_retries) ?? 4)),
      temperature: num(llm.temperature),
      maxOutputTokens: num(llm.max_output_tokens),
    };
    this.#secrets = new Map();
    const secrets = body.secrets;
    if (secrets && typeof secrets === "object" && !Array.isArray(secrets)) {
      for (const [name, value] of Object.entries(secrets as Json)) {
        const v = typeof value === "string" ? value : (value as Json | null)?.value;
        if (typeof v === "string" && /^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) this.#secrets.set(name, v);
      }
    }
    const policy = (body.confirmation_policy ?? {}) as Json;
    this.#confirm = policy.kind === "AlwaysConfirm";
    this.#maxIterations = num(body.max_iterations) ?? MAX_ITERATIONS_DEFAULT;
    // The SDK's agent has only the tools the request names (plus think and finish); without a list, all of ours.
    const named = Array.isArray(agent.tools)
      ? new Set(
          agent.tools.map((t: unknown) => (t as Json | null)?.name).filter((n) => typeof n === "string"),
        )
      : null;
    this.#toolSpecs = TOOL_SPECS.filter((spec) => {
      const name = (spec.function as Json).name as string;
      return named === null || name === "think" || name === "finish" || named.has(name);
    });
    const requestedDir = ((body.workspace ?? {}) as Json).working_dir;
    let workingDir = host.workspaceDir;
    if (typeof requestedDir === "string" && requestedDir !== "") {
      const mapped = inWorkspace(resolve(host.workspaceDir, requestedDir), host.workspaceDir);
      if (mapped !== null && isDirectory(mapped)) workingDir = mapped;
    }
    this.workingDir = workingDir;
    const context = (agent.agent_context ?? {}) as Json;
    this.#systemSuffix =
      typeof context.system_message_suffix === "string" ? context.system_message_suffix : null;

    const record: Json = {};
    for (const [key, value] of Object.entries(body)) {
      if (key === "conversation_id" || key === "initial_message") continue;
      // Secrets stay out of the record: only their names are kept.
      if (key === "secrets") record.secret_names = [...this.#secrets.keys()];
      else record[key] = redact(value);
    }
    if (body.initial_message !== undefined) record.initial_message = body.initial_message;
    const now = new Date().toISOString();
    Object.assign(record, {
      id,
      title: null,
      execution_status: "idle",
      max_iterations: this.#maxIterations,
      workspace: { kind: "LocalWorkspace", working_dir: workingDir },
      metrics: null,
      created_at: now,
      updated_at: now,
    });
    this.record = record;
  }

  /**
   * Takes back the state a previous agent process saved (conversation-store.ts): its record and events, from which
   * the model's history is rebuilt. Actions the model asked for and that have no result yet are pending again when
   * the conversation was paused or waiting for confirmation; when it was running, the step was cut by the restart:
   * each such action is answered with an error (it may have run partly) and the conversation is in error, so that
   * the user's next message continues it.
   */
  restore(record: Json | null, events: readonly Json[]): void {
    if (record !== null) Object.assign(this.record, record, { id: this.id });
    this.events.push(...events);
    const answered = new Set<unknown>();
    for (const e of events)
      if (e.kind === "ObservationEvent" || e.kind === "AgentErrorEvent" || e.kind === "UserRejectObservation")
        answered.add(e.tool_call_id);
    const open = events.filter(
      (e) => e.kind === "ActionEvent" && e.action !== null && !answered.has(e.tool_call_id),
    );
    const saved = String(this.record.execution_status ?? "idle") as ExecutionStatus;
    this.status = saved;
    if (saved === "paused" || saved === "waiting_for_confirmation") {
      this.#pending = open;
      this.#pendingConfirmed = saved === "paused" && !this.#confirm;
    } else if (saved === "running") {
      for (const action of open)
        this.emit(
          this.#agentError(
            action,
            "The agent restarted before this action finished; it may have run in part.",
          ),
        );
      this.emit(
        this.#conversationError(
          "AgentRestarted",
          "The agent was restarted while it worked on this conversation; send a message to continue.",
        ),
      );
      this.#setStatus("error");
    }
  }

  /**
   * Appends an event, stamping the record. Every string of an event the agent's side makes (observations, errors,
   * its messages) is masked for the secrets first, in their common encodings too, so that what is kept, saved and
   * sent never holds one; the user's own events and the model's actions (which run as the model wrote them) are
   * kept as they are.
   */
  emit(event: Json): void {
    if (this.#closed) return;
    const shown =
      event.source === "user" || event.kind === "ActionEvent"
        ? event
        : maskStrings(event, (s) => this.mask(s));
    this.events.push(shown);
    this.record.updated_at = new Date().toISOString();
    this.#host.onEvent(this, shown);
  }

  #setStatus(status: ExecutionStatus): void {
    if (this.status === status) return;
    this.status = status;
    this.record.execution_status = status;
    this.emit({
      kind: "ConversationStateUpdateEvent",
      id: randomUUID(),
      timestamp: sdkTimestamp(),
      source: "environment",
      key: "execution_status",
      value: status,
    });
    this.#host.onInfo(this);
  }

  /** The state snapshot a new websocket subscriber gets first (key `full_state`). */
  fullState(): Json {
    return {
      kind: "ConversationStateUpdateEvent",
      id: randomUUID(),
      timestamp: sdkTimestamp(),
      source: "environment",
      key: "full_state",
      value: {
        id: this.id,
        execution_status: this.status,
        max_iterations: this.#maxIterations,
        confirmation_policy: this.record.confirmation_policy ?? { kind: "NeverConfirm" },
        agent: this.record.agent ?? null,
        workspace: this.record.workspace,
      },
    };
  }

  /** The execution_status event (for the start of a conversation). */
  announceStatus(): void {
    this.emit({
      kind: "ConversationStateUpdateEvent",
      id: randomUUID(),
      timestamp: sdkTimestamp(),
      source: "environment",
      key: "execution_status",
      value: this.status,
    });
  }

  /** A user message; with `run`, the agent starts on it unless it is already running. */
  sendMessage(role: string, content: Json[], run: boolean): void {
    if (this.status === "finished") this.#setStatus("idle");
    this.emit(messageEvent(role, content));
    if (!run || this.status === "waiting_for_confirmation") return;
    if (this.#running === undefined) this.start();
    else this.#resumeInFlight();
  }

  /**
   * POST /run: false when it is already running (a loop paused with its step still in flight resumes). As the
   * agent-server's run loop, a finished conversation stays as it is; beyond it, the model is asked only when it
   * has something to answer (actions kept by a pause, or input after its last answer: {@link #hasNewInput}), so
   * that a run with nothing new never pays for the same answer twice. A paused conversation with nothing to do
   * goes back to finished (it had answered) or idle.
   */
  run(): boolean {
    if (this.#closed || this.status === "finished") return true;
    if (this.#running !== undefined) return this.#resumeInFlight();
    if (this.#pending.length === 0 && !this.#hasNewInput()) {
      if (this.status === "paused") this.#setStatus(this.#hasAnswered() ? "finished" : "idle");
      return true;
    }
    this.start();
    return true;
  }

  /**
   * Whether the events after the model's last answer hold something for it: a user message, or a tool's result,
   * error or rejection (the model goes on from those). False when its last answer (a message, or the finish tool)
   * is the latest of them, or when there is nothing at all.
   */
  #hasNewInput(): boolean {
    for (let i = this.events.length - 1; i >= 0; i--) {
      const e = this.events[i] as Json;
      switch (e.kind) {
        case "MessageEvent":
          return e.source === "user";
        case "ObservationEvent":
          return e.tool_name !== "finish";
        case "AgentErrorEvent":
        case "UserRejectObservation":
          return true;
      }
    }
    return false;
  }

  /** Whether the model's last step was an answer (a message, or the finish tool), not an action under way. */
  #hasAnswered(): boolean {
    const last = this.events.findLast(
      (e) => e.kind === "MessageEvent" || e.kind === "ObservationEvent" || e.kind === "ActionEvent",
    );
    return (
      last !== undefined &&
      ((last.kind === "MessageEvent" && last.source === "agent") ||
        (last.kind === "ObservationEvent" && last.tool_name === "finish"))
    );
  }

  /** The user paused while a step was in flight and now runs again before it ended: the loop just goes on. */
  #resumeInFlight(): boolean {
    if (!this.#pauseRequested || this.#closed) return false;
    this.#pauseRequested = false;
    this.#setStatus("running");
    return true;
  }

  /** Starts the loop in the background (the caller's reply goes out first). */
  start(): void {
    if (this.#running !== undefined || this.#closed) return;
    this.#pauseRequested = false;
    this.#running = new Promise<void>((resolve) => setImmediate(resolve))
      .then(() => this.#loop())
      .catch((e: unknown) => this.#fail(e))
      .finally(() => {
        this.#running = undefined;
      });
  }

  /**
   * POST /pause: as the agent-server, only an idle or running conversation is paused (a PauseEvent, and the status
   * `paused` at once); a finished, failed, paused or waiting one is left as it is, so that a pause arriving just
   * after the turn ended does not make a finished conversation look stopped. A step in flight is not abandoned:
   * the model's answer is kept (emitted, its actions left to run on resume) and a running tool finishes; the loop
   * stops there.
   */
  pause(): void {
    if (this.#closed || (this.status !== "idle" && this.status !== "running")) return;
    this.emit({ kind: "PauseEvent", id: randomUUID(), timestamp: sdkTimestamp(), source: "user" });
    if (this.#running !== undefined) this.#pauseRequested = true;
    this.#setStatus("paused");
  }

  /** respond_to_confirmation: accept runs the pending actions and goes on; reject answers each with a rejection. */
  respond(accept: boolean, reason: string): void {
    if (this.#pending.length === 0) {
      if (accept && this.#running === undefined && this.status === "waiting_for_confirmation") this.start();
      return;
    }
    if (accept) {
      this.#pendingConfirmed = true;
      this.start();
      return;
    }
    for (const action of this.#pending.splice(0)) {
      this.emit({
        kind: "UserRejectObservation",
        id: randomUUID(),
        timestamp: sdkTimestamp(),
        source: "environment",
        tool_name: action.tool_name,
        tool_call_id: action.tool_call_id,
        rejection_reason: reason,
        action_id: action.id,
      });
    }
    this.#setStatus("idle");
  }

  /** The conversation's title (PATCH). */
  setTitle(title: string): void {
    this.record.title = title;
    this.record.updated_at = new Date().toISOString();
    this.#host.onInfo(this);
  }

  close(): void {
    this.#closed = true;
    this.#pauseRequested = true;
    this.#abort?.abort(new Error("deleted"));
    this.#toolbox?.close();
  }

  #tools(): Toolbox {
    if (this.#toolbox === undefined) {
      const env = { ...(this.#host.commandEnv ?? (process.env as Record<string, string>)) };
      for (const [name, value] of this.#secrets) env[name] = value;
      this.#toolbox = new Toolbox(
        new Terminal({
          shell: this.#host.shell,
          cwd: this.workingDir,
          env,
          mask: (s) => this.mask(s),
        }),
        // The UI and models trained on the reference image name files under /workspace/project; where the
        // workspace lies elsewhere (the process runtime) such a path means the same file inside it.
        (path) => inWorkspace(path, this.#host.workspaceDir) ?? path,
      );
    }
    return this.#toolbox;
  }

  /** Replaces every secret value (and the model key), as it is and encoded, with `<secret-hidden>` (secret-mask.ts). */
  mask(s: string): string {
    if (this.#masker === undefined) {
      const values = [...this.#secrets.values()];
      if (this.#llm.apiKey) values.push(this.#llm.apiKey);
      this.#masker = secretMasker(values);
    }
    return this.#masker(s);
  }

  async #loop(): Promise<void> {
    if (this.#closed) return;
    this.#setStatus("running");
    let iterations = 0;
    // Actions not run yet first: accepted by the user, or kept by a pause.
    if (this.#pending.length > 0) {
      if (this.#confirm && !this.#pendingConfirmed) {
        this.#setStatus("waiting_for_confirmation");
        return;
      }
      this.#pendingConfirmed = false;
      if (await this.#execute(this.#pending.splice(0))) return;
    }
    while (!this.#closed) {
      if (this.#pauseRequested) {
        this.#setStatus("paused");
        return;
      }
      if (iterations >= this.#maxIterations) {
        this.emit(
          this.#conversationError(
            "MaxIterationsReached",
            `The agent stopped after ${this.#maxIterations} iterations (max_iterations). Send a message to continue.`,
          ),
        );
        this.#setStatus("error");
        return;
      }
      iterations++;
      const answer = await this.#ask();
      if (answer === null) return; // error handled
      if (answer.message !== null) this.emit(answer.message);
      if (answer.actions.length === 0) {
        this.#setStatus("finished");
        return;
      }
      const runnable = answer.actions.filter((a) => a.action !== null);
      if (this.#pauseRequested && runnable.length > 0) {
        // Paused while the model answered: the answer is kept, its actions run when the user resumes.
        this.#pending = runnable;
        this.#pendingConfirmed = false;
        return;
      }
      if (this.#confirm && runnable.length > 0) {
        this.#pending = runnable;
        this.#pendingConfirmed = false;
        this.#setStatus("waiting_for_confirmation");
        return;
      }
      if (await this.#execute(answer.actions)) return;
    }
  }

  /**
   * Runs each action and emits its observation; true when the loop stops here (the agent finished). A pause keeps
   * the actions not run yet for the resume, and the loop stops at its next turn.
   */
  async #execute(actions: Json[]): Promise<boolean> {
    let finished = false;
    for (const [i, action] of actions.entries()) {
      if (this.#closed) return true;
      if (this.#pauseRequested) {
        this.#pending = actions.slice(i).filter((a) => a.action !== null);
        this.#pendingConfirmed = true; // the user accepted them already, or no confirmation is asked
        if (finished) {
          this.#pending = []; // the agent called finish: nothing is left to resume
          this.#setStatus("finished");
        }
        return true;
      }
      if (action.action === null) continue; // answered by an AgentErrorEvent already
      try {
        const result = await this.#tools().run(action.action as Json);
        this.emit({
          kind: "ObservationEvent",
          id: randomUUID(),
          timestamp: sdkTimestamp(),
          source: "environment",
          tool_name: action.tool_name,
          tool_call_id: action.tool_call_id,
          observation: result.observation,
          action_id: action.id,
        });
        if (result.finished) finished = true;
      } catch (e: unknown) {
        this.emit(this.#agentError(action, `Error running ${String(action.tool_name)}: ${errorText(e)}`));
      }
    }
    if (finished) this.#setStatus("finished");
    return finished;
  }

  #agentError(action: Json, error: string): Json {
    return {
      kind: "AgentErrorEvent",
      id: randomUUID(),
      timestamp: sdkTimestamp(),
      source: "agent",
      tool_name: action.tool_name,
      tool_call_id: action.tool_call_id,
      error: this.mask(error),
    };
  }

  #conversationError(code: string, detail: string): Json {
    return {
      kind: "ConversationErrorEvent",
      id: randomUUID(),
      timestamp: sdkTimestamp(),
      source: "environment",
      code,
      detail: this.mask(detail),
    };
  }

  #fail(e: unknown): void {
    if (this.#closed) return;
    this.emit(this.#conversationError(e instanceof Error ? e.constructor.name : "Error", errorText(e)));
    this.#setStatus("error");
  }

  async #openai(): Promise<import("openai").OpenAI> {
    this.#client ??= (async () => {
      if (this.#llm.model === null)
        throw new Error("No LLM model is set for this conversation; choose one in the LLM settings.");
      const target = resolveModel(this.#llm.model, this.#llm.baseUrl);
      let OpenAI: typeof import("openai").OpenAI;
      try {
        ({ default: OpenAI } = await import("openai"));
      } catch (e: unknown) {
        throw new Error(
          `The built-in agent cannot load its model client (the openai package): ${errorText(e)}`,
        );
      }
      return new OpenAI({
        apiKey: this.#llm.apiKey ?? "not-needed",
        baseURL: target.baseURL,
        timeout: this.#llm.timeoutSeconds * 1000,
        maxRetries: this.#llm.retries,
      });
    })();
    this.#client.catch(() => {
      this.#client = undefined;
    });
    return this.#client;
  }

  /** One model call: the next message and/or actions; null when it failed (error event emitted) or was paused. */
  async #ask(): Promise<{ message: Json | null; actions: Json[] } | null> {
    let client: import("openai").OpenAI;
    let model: string;
    try {
      client = await this.#openai();
      model = resolveModel(this.#llm.model as string, this.#llm.baseUrl).model;
    } catch (e: unknown) {
      this.emit(this.#conversationError("LLMConfigurationError", errorText(e)));
      this.#setStatus("error");
      return null;
    }
    const abort = new AbortController();
    this.#abort = abort;
    let completion: import("openai").OpenAI.Chat.Completions.ChatCompletion;
    try {
      completion = await client.chat.completions.create(
        {
          model,
          messages: this.#messages() as never,
          tools: this.#toolSpecs as never,
          tool_choice: "auto",
          ...(this.#llm.temperature !== null ? { temperature: this.#llm.temperature } : {}),
          ...(this.#llm.maxOutputTokens !== null ? { max_tokens: this.#llm.maxOutputTokens } : {}),
        },
        { signal: abort.signal },
      );
    } catch (e: unknown) {
      if (this.#closed) return null;
      const { code, detail } = describeLlmError(e);
      this.emit(this.#conversationError(code, detail));
      this.#setStatus("error");
      return null;
    } finally {
      this.#abort = undefined;
    }
    const choice = completion.choices?.[0];
    const msg = choice?.message;
    const responseId =
      typeof completion.id === "string" && completion.id !== "" ? completion.id : randomUUID();
    const textContent = typeof msg?.content === "string" ? msg.content : "";
    const calls = (msg?.tool_calls ?? []).filter((c) => c.type === "function");
    if (calls.length === 0) {
      const message = messageEvent("assistant", textContent ? [{ type: "text", text: textContent }] : []);
      message.llm_response_id = responseId;
      return { message, actions: [] };
    }
    const actions: Json[] = [];
    calls.forEach((call, i) => {
      const name = call.function.name;
      const rawArgs = call.function.arguments ?? "";
      let args: unknown;
      let action: Json | string;
      try {
        args = rawArgs.trim() === "" ? {} : JSON.parse(rawArgs);
        const offered = this.#toolSpecs.some((spec) => (spec.function as Json).name === name);
        action = !offered
          ? `Tool '${name}' not found. Available: ${this.#toolSpecs.map((spec) => (spec.function as Json).name).join(", ")}.`
          : typeof args === "object" && args !== null && !Array.isArray(args)
            ? toAction(name, args as Json)
            : "Tool arguments must be a JSON object.";
      } catch {
        action = `Error parsing the arguments of tool '${name}' as JSON: ${rawArgs.slice(0, 200)}`;
      }
      const callId = call.id || `call_${randomUUID().replaceAll("-", "")}`;
      const event: Json = {
        kind: "ActionEvent",
        id: randomUUID(),
        timestamp: sdkTimestamp(),
        source: "agent",
        thought: i === 0 && textContent ? [{ type: "text", text: textContent }] : [],
        reasoning_content: null,
        thinking_blocks: [],
        responses_reasoning_item: null,
        action: typeof action === "string" ? null : action,
        tool_name: name,
        tool_call_id: callId,
        tool_call: {
          id: callId,
          name,
          arguments: rawArgs,
          origin: "completion",
        },
        llm_response_id: responseId,
        security_risk: "UNKNOWN",
      };
      this.emit(event);
      if (typeof action === "string") this.emit(this.#agentError(event, action));
      actions.push(event);
    });
    return { message: null, actions };
  }

  #systemPrompt(): string {
    const secretNames = [...this.#secrets.keys()];
    const lines = [
      "You are an autonomous software engineering agent working in a sandbox for the user.",
      `The working directory is ${this.workingDir}; run commands and edit files there unless told otherwise.`,
      "Use the `terminal` tool to run bash commands and the `file_editor` tool to view, create and edit files " +
        "(absolute paths). Work in small verified steps: look before you change, and check your changes (run the " +
        "code or tests). When the task is done, call `finish` with a short summary, or answer without a tool call.",
      "If the user only asks a question, answer it directly.",
    ];
    const workspace = this.#host.workspaceDir;
    if (workspace !== "/workspace" && !workspace.startsWith("/workspace/"))
      // The UI names files in the reference image's layout (uploads go to /workspace/<name>).
      lines.push(
        `Paths under /workspace/project or /workspace that the user mentions (uploaded files, for example) are in ` +
          `${workspace} here: /workspace/project/a and /workspace/a both mean ${workspace}/a. The file editor ` +
          `takes either; in the terminal use ${workspace}.`,
      );
    if (secretNames.length > 0)
      lines.push(
        `These environment variables of the terminal hold the user's secrets: ${secretNames.join(", ")}. Use them ` +
          "by name (e.g. $NAME); never print their values.",
      );
    if (this.#systemSuffix) lines.push(this.#systemSuffix);
    return lines.join("\n");
  }

  /**
   * Where the model's view starts among the events: the last MODEL_VIEW_TURNS user messages' events, at most
   * MODEL_VIEW_EVENTS; 0 when the whole conversation fits. Scans only the tail.
   */
  #viewStart(): number {
    const events = this.events;
    const floor = Math.max(0, events.length - MODEL_VIEW_EVENTS);
    let turns = 0;
    for (let i = events.length - 1; i >= floor; i--) {
      const e = events[i] as Json;
      if (e.kind === "MessageEvent" && e.source === "user" && ++turns >= MODEL_VIEW_TURNS) return i;
    }
    return floor;
  }

  /**
   * The chat history for the model, rebuilt from the events of its bounded view ({@link #viewStart}). When the
   * start of the conversation is left out, a first user message says so and repeats the user's first message (the
   * task), and a tool result whose call was left out is dropped, so that every tool message answers a call the
   * model sees (as the chat-completions API requires).
   */
  #messages(): Json[] {
    const out: Json[] = [{ role: "system", content: this.#systemPrompt() }];
    let assistant: Json | null = null;
    let assistantResponse: unknown = null;
    const textOf = (content: unknown): string =>
      Array.isArray(content)
        ? content
            .filter((c: Json) => c?.type === "text" && typeof c.text === "string")
            .map((c: Json) => c.text as string)
            .join("\n")
        : "";
    const start = this.#viewStart();
    const calls = start > 0 ? new Set<unknown>() : null;
    if (start > 0) {
      const index = this.events.findIndex((e) => e.kind === "MessageEvent" && e.source === "user");
      const first = index >= 0 && index < start ? (this.events[index] as Json) : null;
      const text = first !== null ? textOf((first.llm_message as Json | undefined)?.content) : "";
      out.push({
        role: "user",
        content:
          `(The first ${start} events of this conversation are left out of your view to keep it bounded.` +
          (text !== "" ? ` It began with this message from the user:)\n\n${text}` : ")"),
      });
    }
    for (let i = start; i < this.events.length; i++) {
      const e = this.events[i] as Json;
      if (e.kind !== "ActionEvent") assistant = null;
      // A result (or error, or rejection) of a call before the view's start: its call is not in the view.
      if (
        calls !== null &&
        e.kind !== "ActionEvent" &&
        e.tool_call_id !== undefined &&
        !calls.has(e.tool_call_id)
      )
        continue;
      switch (e.kind) {
        case "MessageEvent": {
          const m = e.llm_message as Json;
          const role = m.role === "assistant" ? "assistant" : "user";
          if (role === "user") {
            const parts: Json[] = [];
            for (const c of (m.content as Json[]) ?? []) {
              if (c.type === "text" && typeof c.text === "string") parts.push({ type: "text", text: c.text });
              else if (c.type === "image" && Array.isArray(c.image_urls))
                for (const url of c.image_urls) parts.push({ type: "image_url", image_url: { url } });
            }
            out.push({
              role,
              content: parts.length === 1 && parts[0]?.type === "text" ? parts[0].text : parts,
            });
          } else out.push({ role, content: textOf(m.content) });
          break;
        }
        case "ActionEvent": {
          const call = e.tool_call as Json;
          calls?.add(e.tool_call_id);
          const toolCall = {
            id: e.tool_call_id,
            type: "function",
            function: { name: e.tool_name, arguments: call?.arguments ?? "{}" },
          };
          if (assistant !== null && assistantResponse === e.llm_response_id) {
            (assistant.tool_calls as Json[]).push(toolCall);
          } else {
            assistant = { role: "assistant", content: textOf(e.thought) || null, tool_calls: [toolCall] };
            assistantResponse = e.llm_response_id;
            out.push(assistant);
          }
          break;
        }
        case "ObservationEvent": {
          const obs = e.observation as Json;
          out.push({
            role: "tool",
            tool_call_id: e.tool_call_id,
            content: textOf(obs?.content) || "(no output)",
          });
          break;
        }
        case "UserRejectObservation":
          out.push({
            role: "tool",
            tool_call_id: e.tool_call_id,
            content: `The user rejected this action: ${String(e.rejection_reason)}`,
          });
          break;
        case "AgentErrorEvent":
          out.push({ role: "tool", tool_call_id: e.tool_call_id, content: String(e.error) });
          break;
      }
    }
    return out;
  }
}

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** A model failure as an error event's code and detail the user can act on. */
export function describeLlmError(e: unknown): { code: string; detail: string } {
  const err = e as { status?: unknown; name?: unknown; message?: unknown; constructor?: { name?: string } };
  const code = (
    typeof err?.constructor?.name === "string" && err.constructor.name !== "Object"
      ? err.constructor.name
      : "LLMError"
  ) as string;
  const message = typeof err?.message === "string" ? err.message : String(e);
  const status = typeof err?.status === "number" ? err.status : null;
  let hint = "";
  if (status === 401 || status === 403)
    hint = "The model provider refused the API key; check it in the LLM settings.";
  else if (status === 404) hint = "The model or endpoint was not found; check the model name and base URL.";
  else if (status === 429)
    hint = "The model provider is rate-limiting or out of quota; wait and send a message to retry.";
  else if (status !== null && status >= 500) hint = "The model provider failed; send a message to retry.";
  else if (/timed? ?out/i.test(message) || code === "APIConnectionTimeoutError")
    hint = "The model did not answer in time; send a message to retry.";
  else if (code === "APIConnectionError")
    hint = "The model endpoint could not be reached; check the base URL.";
  const head = status !== null ? `LLM request failed with status ${status}` : "LLM request failed";
  return { code, detail: `${head}: ${message}${hint ? `. ${hint}` : ""}` };
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}
