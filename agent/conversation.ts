/**
 * One conversation of the built-in agent: its events (in the OpenHands SDK's shapes, made by events.ts), its
 * execution status, and the agent loop that asks the user's model for the next step (model-client.ts, with the
 * view of model-view.ts) and runs the tools it calls (tools/).
 */
import {
  type ConversationStart,
  type ExecutionStatus,
  hasAnswered,
  hasNewInput,
  openActions,
  readStart,
} from "./conversation-state.ts";
import {
  agentErrorEvent,
  conversationErrorEvent,
  messageEvent,
  observationEvent,
  pauseEvent,
  stateUpdateEvent,
  userRejectObservation,
} from "./events.ts";
import type { Json } from "./json.ts";
import { answerEvents } from "./model-answer.ts";
import { type CompleteChat, describeLlmError, ModelClient, readAnswer } from "./model-client.ts";
import { modelMessages, systemPrompt } from "./model-view.ts";
import { maskStrings, secretMasker } from "./secret-mask.ts";
import { Terminal } from "./tools/terminal.ts";
import { Toolbox } from "./tools/toolbox.ts";
import { inWorkspace } from "./workspace-paths.ts";

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

/** A conversation and its agent loop. */
export class Conversation {
  readonly id: string;
  readonly record: Json;
  readonly events: Json[] = [];
  status: ExecutionStatus = "idle";
  readonly #host: ConversationHost;
  /** What the start request set: the model, secrets, confirmation, iterations, tools, working folder, prompt. */
  readonly #start: ConversationStart;
  /** Where the tools start: the request's `workspace.working_dir` when it is an existing folder in the workspace. */
  readonly workingDir: string;
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
  readonly #model: ModelClient;
  /** Masks the secrets and the model key in a text (secret-mask.ts), made on first use. */
  #masker: ((text: string) => string) | undefined;

  constructor(id: string, body: Json, host: ConversationHost) {
    this.id = id;
    this.#host = host;
    this.#start = readStart(id, body, host.workspaceDir);
    this.#model = new ModelClient(this.#start.llm);
    this.workingDir = this.#start.workingDir;
    this.record = this.#start.record;
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
    const open = openActions(events);
    const saved = String(this.record.execution_status ?? "idle") as ExecutionStatus;
    this.status = saved;
    if (saved === "paused" || saved === "waiting_for_confirmation") {
      this.#pending = open;
      this.#pendingConfirmed = saved === "paused" && !this.#start.confirm;
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
    this.emit(stateUpdateEvent("execution_status", status));
    this.#host.onInfo(this);
  }

  /** The state snapshot a new websocket subscriber gets first (key `full_state`). */
  fullState(): Json {
    return stateUpdateEvent("full_state", {
      id: this.id,
      execution_status: this.status,
      max_iterations: this.#start.maxIterations,
      confirmation_policy: this.record.confirmation_policy ?? { kind: "NeverConfirm" },
      agent: this.record.agent ?? null,
      workspace: this.record.workspace,
    });
  }

  /** The execution_status event (for the start of a conversation). */
  announceStatus(): void {
    this.emit(stateUpdateEvent("execution_status", this.status));
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
   * has something to answer (actions kept by a pause, or input after its last answer: {@link hasNewInput}), so
   * that a run with nothing new never pays for the same answer twice. A paused conversation with nothing to do
   * goes back to finished (it had answered) or idle.
   */
  run(): boolean {
    if (this.#closed || this.status === "finished") return true;
    if (this.#running !== undefined) return this.#resumeInFlight();
    if (this.#pending.length === 0 && !hasNewInput(this.events)) {
      if (this.status === "paused") this.#setStatus(hasAnswered(this.events) ? "finished" : "idle");
      return true;
    }
    this.start();
    return true;
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
    this.emit(pauseEvent());
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
      this.emit(userRejectObservation(action, reason));
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
      for (const [name, value] of this.#start.secrets) env[name] = value;
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
      const values = [...this.#start.secrets.values()];
      if (this.#start.llm.apiKey) values.push(this.#start.llm.apiKey);
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
      if (this.#start.confirm && !this.#pendingConfirmed) {
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
      if (iterations >= this.#start.maxIterations) {
        this.emit(
          this.#conversationError(
            "MaxIterationsReached",
            `The agent stopped after ${this.#start.maxIterations} iterations (max_iterations). Send a message to continue.`,
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
      if (this.#start.confirm && runnable.length > 0) {
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
        this.emit(observationEvent(action, result.observation));
        if (result.finished) finished = true;
      } catch (e: unknown) {
        this.emit(this.#agentError(action, `Error running ${String(action.tool_name)}: ${errorText(e)}`));
      }
    }
    if (finished) this.#setStatus("finished");
    return finished;
  }

  #agentError(action: Json, error: string): Json {
    return agentErrorEvent(action, this.mask(error));
  }

  #conversationError(code: string, detail: string): Json {
    return conversationErrorEvent(code, this.mask(detail));
  }

  #fail(e: unknown): void {
    if (this.#closed) return;
    this.emit(this.#conversationError(e instanceof Error ? e.constructor.name : "Error", errorText(e)));
    this.#setStatus("error");
  }

  /** One model call: the next message and/or actions; null when it failed (error event emitted) or was paused. */
  async #ask(): Promise<{ message: Json | null; actions: Json[] } | null> {
    let complete: CompleteChat;
    try {
      complete = await this.#model.connect();
    } catch (e: unknown) {
      this.emit(this.#conversationError("LLMConfigurationError", errorText(e)));
      this.#setStatus("error");
      return null;
    }
    const abort = new AbortController();
    this.#abort = abort;
    let completion: Awaited<ReturnType<CompleteChat>>;
    try {
      completion = await complete(this.#messages(), this.#start.toolSpecs, abort.signal);
    } catch (e: unknown) {
      if (this.#closed) return null;
      const { code, detail } = describeLlmError(e);
      this.emit(this.#conversationError(code, detail));
      this.#setStatus("error");
      return null;
    } finally {
      this.#abort = undefined;
    }
    const answer = answerEvents(readAnswer(completion), this.#start.toolSpecs, (s) => this.mask(s));
    for (const event of answer.events) this.emit(event);
    return { message: answer.message, actions: answer.actions };
  }

  /** The chat history for the model (model-view.ts), after the system prompt. */
  #messages(): Json[] {
    const system = systemPrompt({
      workingDir: this.workingDir,
      workspaceDir: this.#host.workspaceDir,
      secretNames: [...this.#start.secrets.keys()],
      suffix: this.#start.systemSuffix,
    });
    return modelMessages(this.events, system);
  }
}

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
