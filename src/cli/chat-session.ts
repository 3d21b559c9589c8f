/**
 * One attached conversation of the terminal chat (chat.ts): its events websocket (chat-socket.ts), reconnected
 * while the sandbox runs and resumed with the next message once it stopped; the person's lines (chat-input.ts) as
 * messages, commands and answers to the agent's confirmation questions; Ctrl-C; and what is shown (the events by
 * chat-render.ts, the chat's own lines over the prompt on a terminal, on stderr with --json).
 */
import { clearLine, createInterface, cursorTo, type Interface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";
import WebSocket from "ws";
import { ApiError, createApiClient } from "./api-client.ts";
import { HELP, MessageDraft, parseAnswer } from "./chat-input.ts";
import { ChatRenderer } from "./chat-render.ts";
import { openEventSocket } from "./chat-socket.ts";
import type { AppConversation, Info } from "./chat-start.ts";
import { type Json, paint, type Style } from "./chat-text.ts";

export interface SessionOptions {
  serviceUrl: string;
  conversation: AppConversation;
  /** The conversation was started by this chat (else attached). */
  started: boolean;
  /**
   * The message given with -m: a new conversation started with it (shown with the history, since it was not typed
   * here), or sent to the one attached to once its history is shown.
   */
  firstMessage: string | null;
  json: boolean;
  tty: boolean;
  color: boolean;
  input: NodeJS.ReadableStream & { isTTY?: boolean };
  output: NodeJS.WritableStream;
  errorOutput: NodeJS.WritableStream;
  read(id: string): Promise<AppConversation | null>;
  resume(c: AppConversation, say: Info): Promise<AppConversation | null>;
}

/** Statuses in which the agent is at work (a pause means something). */
const WORKING = new Set(["running"]);

/** One attached conversation: its websocket, the person's input, and what is shown. */
export class ChatSession {
  readonly #o: SessionOptions;
  readonly #renderer: ChatRenderer;
  #conversation: AppConversation;
  #ws: WebSocket | null = null;
  #rl: Interface | null = null;
  readonly #seen = new Set<string>();
  /** Events of the resent history still to come (before them, no confirmation is asked). */
  #historyLeft = 0;
  #live = false;
  #everLive = false;
  /** Whether a confirmation question is open. */
  #confirming = false;
  /** The question was answered; the agent has not left waiting_for_confirmation yet (do not ask again). */
  #answered = false;
  /** A message being written over several lines (`\` or `"""`). */
  readonly #draft = new MessageDraft();
  /** A first Ctrl-C was pressed (the next one leaves), until the next line. */
  #interrupted = false;
  /** The input ended: leave once the agent's turn is over. */
  #inputEnded = false;
  /** A message was sent and its turn has not ended yet; `#sawRunning`: the agent ran since. */
  #turnPending = false;
  #sawRunning = false;
  /** The websocket is down because the sandbox stopped: the next message resumes it. */
  #suspended = false;
  #reconnects = 0;
  #leaving = false;
  #fallback: NodeJS.Timeout | null = null;
  /** stdout was closed (`chat --json | head`): nothing more is written, and the chat leaves. */
  #outputGone = false;
  #finish: (code: number) => void = () => {};
  readonly #onSigint = () => this.#interrupt();

  constructor(options: SessionOptions) {
    this.#o = options;
    this.#conversation = options.conversation;
    this.#renderer = new ChatRenderer({ color: options.color });
    // A message given with --message was not typed here: its echo is shown with the history, and its turn is
    // waited for when the input ends at once (`chat -m "…" < /dev/null`).
    this.#turnPending = options.started && options.firstMessage !== null;
  }

  get #id(): string {
    return this.#conversation.id;
  }

  /** The agent's base URL: the conversation's URL (relative: the service's own origin) without its path. */
  get #agentBase(): string {
    const url = new URL(this.#conversation.conversation_url ?? "/", this.#o.serviceUrl);
    const prefix = url.pathname.replace(/\/api\/conversations\/[^/]*\/?$/, "").replace(/\/+$/, "");
    return `${url.origin}${prefix}`;
  }

  /** A call to the conversation's agent with its session key (through the service when the URL is relative). */
  #agent<T>(method: string, path: string, body?: unknown): Promise<T> {
    return createApiClient(this.#agentBase, this.#conversation.session_api_key ?? "")<T>(method, path, body);
  }

  run(): Promise<number> {
    const done = new Promise<number>((resolve) => {
      this.#finish = resolve;
    });
    const rl = createInterface({
      input: this.#o.input,
      ...(this.#o.tty
        ? { output: this.#o.output as NodeJS.WritableStream, terminal: true }
        : { terminal: false }),
      prompt: this.#prompt("> "),
    });
    this.#rl = rl;
    this.#o.output.on("error", (err: NodeJS.ErrnoException) => {
      if (err.code !== "EPIPE") throw err;
      this.#outputGone = true;
      this.#leave(0);
    });
    rl.pause();
    rl.on("line", (line) => this.#onLine(line));
    rl.on("close", () => this.#onInputEnd());
    rl.on("SIGINT", this.#onSigint);
    process.on("SIGINT", this.#onSigint);
    const status = this.#conversation.execution_status;
    const title = this.#conversation.title ? ` "${this.#conversation.title}"` : "";
    this.#say(
      this.#o.started
        ? `Conversation ${this.#id} is ready (attach to it again later with: npm run cli -- chat ${this.#id}).`
        : `Conversation ${this.#id}${title}${status ? ` (${status.replaceAll("_", " ")})` : ""}:`,
      "bold",
    );
    void this.#connect();
    return done.finally(() => {
      process.off("SIGINT", this.#onSigint);
    });
  }

  #prompt(text: string): string {
    return paint(this.#o.color, "bold", text);
  }

  /** A line of the chat's own (status, hints): over the prompt on a terminal, on stderr with --json. */
  #say(text: string, style?: Style): void {
    this.#print(style ? paint(this.#o.color, style, text) : text, this.#o.json);
  }

  #print(text: string, toStderr = false): void {
    if (this.#outputGone) return;
    const out = toStderr ? this.#o.errorOutput : this.#o.output;
    if (this.#o.tty && this.#live && this.#rl !== null && !toStderr) {
      clearLine(this.#o.output, 0);
      cursorTo(this.#o.output, 0);
      out.write(`${text}\n`);
      this.#rl.prompt(true);
    } else out.write(`${text}\n`);
  }

  /** Opens the websocket (after asking the agent how many events it will resend). */
  async #connect(): Promise<void> {
    this.#live = false;
    try {
      this.#historyLeft = await this.#agent<number>(
        "GET",
        `/api/conversations/${encodeURIComponent(this.#id)}/events/count`,
      );
      if (typeof this.#historyLeft !== "number") this.#historyLeft = 0;
    } catch {
      this.#historyLeft = 0;
    }
    if (this.#leaving) return;
    // Only the current socket speaks: one replaced (reconnected) or left is ignored.
    this.#ws = openEventSocket(this.#agentBase, this.#id, this.#conversation.session_api_key ?? "", {
      open: (ws) => {
        if (ws !== this.#ws) return;
        if (this.#historyLeft <= 0) setImmediate(() => this.#goLive());
        else this.#armFallback();
      },
      event: (ws, event) => {
        if (ws === this.#ws) this.#onEvent(event);
      },
      down: (ws, why, code) => {
        if (ws !== this.#ws) return;
        this.#ws = null;
        ws.terminate(); // a refused upgrade's socket; one that closed is already down
        void this.#onDisconnect(why, code);
      },
    });
  }

  /**
   * Should the agent resend fewer events than it counted, the history is taken as over once no event came for a
   * moment (the resent events come in one burst).
   */
  #armFallback(): void {
    if (this.#fallback !== null) clearTimeout(this.#fallback);
    this.#fallback = setTimeout(() => {
      this.#fallback = null;
      if (this.#ws !== null) this.#goLive();
    }, 1500);
  }

  #goLive(): void {
    if (this.#fallback !== null) clearTimeout(this.#fallback);
    this.#fallback = null;
    if (this.#live || this.#leaving) return;
    this.#live = true;
    this.#reconnects = 0;
    if (!this.#everLive) {
      this.#everLive = true;
      this.#say(
        'Type a message and press Enter (end a line with \\ or use """ for several lines). Ctrl-C pauses the agent, /exit leaves, /help lists the commands.',
        "dim",
      );
      this.#rl?.resume();
      // chat ID -m TEXT: the message goes to the conversation attached to.
      if (!this.#o.started && this.#o.firstMessage !== null && this.#o.firstMessage !== "")
        void this.#send(this.#o.firstMessage);
    }
    if (this.#o.tty) this.#rl?.prompt(true);
    this.#afterEvent();
  }

  #onEvent(event: unknown): void {
    const e = (typeof event === "object" && event !== null ? event : {}) as Json;
    const isState = e.kind === "ConversationStateUpdateEvent" && e.key === "full_state";
    if (!this.#live && !isState) this.#historyLeft--;
    if (!this.#live) this.#armFallback();
    const id = typeof e.id === "string" ? e.id : null;
    const duplicate = !isState && id !== null && this.#seen.has(id);
    if (id !== null && !isState) this.#seen.add(id);
    if (!duplicate) {
      const before = this.#renderer.status;
      const shown = this.#renderer.render(event);
      if (this.#o.json) this.#print(JSON.stringify(event));
      else if (shown !== null) this.#print(shown);
      // The snapshot's status is the current one, not a step of the history: it does not end a turn.
      if (this.#renderer.status !== before && !isState) this.#onStatus(this.#renderer.status);
    }
    if (!this.#live && this.#historyLeft <= 0 && !isState) this.#goLive();
    else this.#afterEvent();
  }

  #onStatus(status: string | null): void {
    if (status !== "waiting_for_confirmation") this.#answered = false;
    if (status === "running") this.#sawRunning = true;
    else if (this.#sawRunning) {
      this.#turnPending = false;
      this.#sawRunning = false;
    }
    if (status !== "waiting_for_confirmation" && this.#confirming) {
      // Answered elsewhere (the web UI, another chat).
      this.#confirming = false;
      this.#setPrompt();
    }
  }

  #busy(): boolean {
    return this.#turnPending || WORKING.has(this.#renderer.status ?? "");
  }

  /** After each event: ask for a confirmation the agent waits for; leave when the input ended and all is done. */
  #afterEvent(): void {
    if (!this.#live || this.#leaving) return;
    const waiting = this.#renderer.status === "waiting_for_confirmation";
    if (waiting && !this.#confirming && !this.#answered && this.#renderer.pendingActions().length > 0) {
      if (this.#inputEnded) {
        this.#say("· the agent waits for a confirmation, but the input ended: leaving", "yellow");
        this.#leave(0);
        return;
      }
      this.#confirming = true;
      this.#say("The agent asks to run:", "yellow");
      this.#print(this.#renderer.describePending(), this.#o.json);
      this.#say('Allow it? Answer y or n (after n, a reason may follow: "n use a dry run first").', "yellow");
      this.#setPrompt();
      return;
    }
    if (this.#inputEnded && !this.#busy()) this.#leave(0);
  }

  #setPrompt(): void {
    const text = this.#confirming ? "allow? [y/n] " : this.#draft.open ? "… " : "> ";
    this.#rl?.setPrompt(this.#prompt(text));
    if (this.#o.tty && this.#live) this.#rl?.prompt(true);
  }

  async #onDisconnect(why: string, code: number): Promise<void> {
    if (this.#leaving) return;
    this.#live = false;
    if (code === 4004) {
      this.#say(`error: the agent has no conversation ${this.#id} (${why})`, "red");
      this.#leave(1);
      return;
    }
    const c = await this.#o.read(this.#id).catch(() => null);
    if (this.#leaving) return;
    if (c === null) {
      this.#say(`error: ${why}, and the conversation cannot be read`, "red");
      this.#leave(1);
      return;
    }
    this.#conversation = c;
    if (c.sandbox_status === "MISSING") {
      this.#say(`error: ${why}: its sandbox is gone`, "red");
      this.#leave(1);
      return;
    }
    if (c.sandbox_status === "RUNNING" || c.sandbox_status === "STARTING") {
      if (++this.#reconnects > 5) {
        this.#say(`error: ${why}; gave up after 5 tries`, "red");
        this.#leave(1);
        return;
      }
      this.#say(`· ${why}; connecting again…`, "dim");
      await sleep(500 * 2 ** (this.#reconnects - 1));
      if (this.#leaving) return;
      const again = await this.#o.read(this.#id).catch(() => null);
      if (again !== null) this.#conversation = again;
      await this.#connect();
      return;
    }
    this.#suspended = true;
    this.#live = true;
    this.#say(
      `· its sandbox is ${c.sandbox_status.toLowerCase()} (${why}): the next message you send resumes it`,
      "yellow",
    );
    if (this.#inputEnded) this.#leave(0);
  }

  #onLine(raw: string): void {
    if (this.#leaving) return;
    const line = raw.replace(/\r$/, "");
    this.#interrupted = false;
    if (this.#confirming) {
      this.#answer(line);
      return;
    }
    const wasOpen = this.#draft.open;
    const taken = this.#draft.take(line);
    if (taken === "more") {
      if (!wasOpen) this.#setPrompt();
      return;
    }
    if (taken !== undefined) {
      this.#submit(taken.message);
      return;
    }
    const command = line.trim();
    if (command.startsWith("/") && !command.includes(" ")) {
      this.#command(command);
      return;
    }
    this.#submit(line);
  }

  #submit(text: string): void {
    this.#draft.clear();
    this.#setPrompt();
    if (text.trim() === "") {
      if (this.#o.tty) this.#rl?.prompt();
      return;
    }
    void this.#send(text);
  }

  #command(command: string): void {
    switch (command) {
      case "/exit":
      case "/quit":
        this.#leave(0);
        return;
      case "/help":
        this.#say(HELP);
        break;
      case "/pause":
        void this.#pause();
        break;
      case "/resume":
      case "/run":
        void this.#agentAction("run", "· going on");
        break;
      case "/status":
        this.#say(
          `Conversation ${this.#id}: ${this.#renderer.status?.replaceAll("_", " ") ?? "unknown"}${this.#renderer.confirmationMode ? " (asks for confirmation)" : ""}; sandbox ${this.#conversation.sandbox_id}.`,
        );
        break;
      default:
        this.#say(
          `unknown command ${command} (/help lists them; a message cannot start with / alone)`,
          "yellow",
        );
    }
    if (this.#o.tty) this.#rl?.prompt();
  }

  async #send(text: string): Promise<void> {
    if (this.#suspended) {
      this.#suspended = false;
      this.#say("· resuming its sandbox…", "dim");
      const c = await this.#o.resume(this.#conversation, (text, style) => this.#say(text, style));
      if (c === null) {
        this.#leave(1);
        return;
      }
      this.#conversation = c;
      await this.#connect();
      await this.#until(() => this.#live || this.#leaving);
    }
    const ws = this.#ws;
    if (ws === null || ws.readyState !== WebSocket.OPEN) {
      this.#say(
        "· not connected to the agent yet; the message was not sent (try again in a moment)",
        "yellow",
      );
      return;
    }
    // On a terminal the typed line stays on the screen: the agent's echo of it is not shown again.
    if (this.#o.tty) this.#renderer.expectEcho(text);
    this.#turnPending = true;
    this.#sawRunning = WORKING.has(this.#renderer.status ?? "");
    ws.send(JSON.stringify({ role: "user", content: [{ type: "text", text }] }));
  }

  async #until(done: () => boolean, ms = 30_000): Promise<void> {
    const deadline = Date.now() + ms;
    while (!done() && Date.now() < deadline) await sleep(50);
  }

  #answer(line: string): void {
    const answer = parseAnswer(line);
    if (answer === null) {
      if (line.trim() === "/exit" || line.trim() === "/quit") {
        this.#leave(0);
        return;
      }
      this.#say('Answer y (run it) or n (do not), e.g. "n use a dry run first".', "yellow");
      if (this.#o.tty) this.#rl?.prompt();
      return;
    }
    const { accept, reason } = answer;
    this.#confirming = false;
    this.#answered = true;
    this.#setPrompt();
    // A refusal is shown by the agent's rejection event.
    if (accept) this.#say("· allowed", "dim");
    if (accept) {
      this.#turnPending = true;
      this.#sawRunning = false;
    }
    void this.#agent(
      "POST",
      `/api/conversations/${encodeURIComponent(this.#id)}/events/respond_to_confirmation`,
      {
        accept,
        reason: reason || "The user rejected the action.",
      },
    ).catch((err: unknown) => {
      this.#turnPending = false;
      this.#answered = false;
      this.#say(`error: the answer was not taken: ${(err as Error).message}`, "red");
      this.#afterEvent(); // asks again
    });
  }

  async #pause(): Promise<void> {
    await this.#agentAction("pause", null);
  }

  async #agentAction(action: "pause" | "run", done: string | null): Promise<void> {
    if (this.#suspended) {
      this.#say("· the sandbox is not running: send a message to resume it", "yellow");
      return;
    }
    try {
      await this.#agent("POST", `/api/conversations/${encodeURIComponent(this.#id)}/${action}`);
      if (done !== null) this.#say(done, "dim");
    } catch (err) {
      const message = err instanceof ApiError ? err.message : (err as Error).message;
      this.#say(`error: ${action} failed: ${message}`, "red");
    }
  }

  #interrupt(): void {
    if (this.#leaving) return;
    if (this.#interrupted) {
      this.#leave(0);
      return;
    }
    this.#interrupted = true;
    if (this.#draft.open) {
      this.#draft.clear();
      this.#setPrompt();
    }
    if (this.#busy()) {
      this.#say("· pausing the agent… (Ctrl-C again leaves)", "yellow");
      void this.#pause();
    } else this.#say("(Ctrl-C again, Ctrl-D or /exit leaves)", "dim");
  }

  #onInputEnd(): void {
    if (this.#leaving) return;
    // On a terminal, Ctrl-D leaves now; piped input leaves once the agent's turn is over.
    if (this.#o.tty || this.#o.input.isTTY === true) {
      this.#leave(0);
      return;
    }
    this.#inputEnded = true;
    if (this.#confirming) {
      this.#say("· the input ended while a confirmation was asked: leaving", "yellow");
      this.#leave(0);
      return;
    }
    if (this.#live && !this.#busy()) this.#leave(0);
    else if (this.#live)
      this.#say("· the input ended: leaving when the agent's turn is over (Ctrl-C leaves now)", "dim");
  }

  #leave(code: number): void {
    if (this.#leaving) return;
    this.#leaving = true;
    if (this.#fallback !== null) clearTimeout(this.#fallback);
    const ws = this.#ws;
    this.#ws = null;
    if (ws !== null) {
      ws.close(1000);
      // The close handshake should not keep the process: the socket goes after a second at most.
      setTimeout(() => ws.terminate(), 1000).unref();
    }
    if (this.#o.tty && this.#live && !this.#outputGone) {
      clearLine(this.#o.output, 0);
      cursorTo(this.#o.output, 0);
    }
    this.#live = false; // no prompt after this line
    this.#say(
      `Left the conversation; it goes on in its sandbox. Attach again with: npm run cli -- chat ${this.#id}`,
      "dim",
    );
    this.#rl?.close();
    // A pipe left open by whoever feeds the input must not keep the process.
    (this.#o.input as Partial<NodeJS.ReadStream>).destroy?.();
    this.#finish(code);
  }
}
