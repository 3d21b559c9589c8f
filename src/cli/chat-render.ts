/**
 * The terminal chat's view of a conversation (`npm run cli -- chat`, src/cli/chat.ts): the agent SDK's events as a
 * person reads them. Messages, the commands the agent runs and their output (cut in the middle when long), file
 * edits as unified diffs, task lists, errors with what to do about them, and the changes of the execution status.
 * It keeps what the chat needs to know from the events: the current status, whether confirmation is on, and the
 * actions still waiting for a result (what a confirmation is asked for).
 *
 * Both agents' shapes are read: the built-in agent's (agent/) and the OpenHands agent-server's, also the
 * older names of its terminal (ExecuteBashAction/Observation, before SDK 1.5) and file editor. An event of a kind
 * this file does not know is a short line with its kind. Text from the sandbox is shown without terminal escape
 * sequences and control characters: a command's output cannot move the cursor or recolour the terminal.
 *
 * Its parts: chat-text.ts (colours, text cleaning, output cut in the middle), chat-diff.ts (file edits as diffs),
 * chat-vocabulary.ts (the tools and kinds of both agents, status words, model failures explained).
 */

import { unifiedDiff } from "./chat-diff.ts";
import { cleanText, contentText, cutMiddle, type Json, obj, paint, type Style, str } from "./chat-text.ts";
import { explainError, QUIET_KINDS, statusWords, toolKind } from "./chat-vocabulary.ts";

export interface RenderOptions {
  /** ANSI colours (the chat sets them only for a terminal without NO_COLOR). */
  color?: boolean;
  /** A tool's output longer than this many lines is cut in the middle (default 20). */
  maxOutputLines?: number;
  /** Lines of a file edit's diff shown (default 80). */
  maxDiffLines?: number;
  /** Characters of one output line shown (default 400). */
  maxLineLength?: number;
}

/** Renders events one by one and follows the conversation's state. */
export class ChatRenderer {
  /** The execution status as the events last told it (null before any). */
  status: string | null = null;
  /** Whether the agent asks before it acts (from the state's confirmation_policy). */
  confirmationMode = false;
  readonly #o: Required<RenderOptions>;
  /** Every action seen, by event id (an observation names its action). */
  readonly #actions = new Map<string, Json>();
  /** Actions without a result yet, by event id, in order. */
  readonly #pending = new Map<string, Json>();
  /** Texts this chat sent: their echo from the agent is not shown again. */
  readonly #echoes: string[] = [];
  /** The action whose lines were the last shown (its result then follows it without repeating it). */
  #lastShown: string | null = null;

  constructor(options: RenderOptions = {}) {
    this.#o = {
      color: options.color ?? false,
      maxOutputLines: options.maxOutputLines ?? 20,
      maxDiffLines: options.maxDiffLines ?? 80,
      maxLineLength: options.maxLineLength ?? 400,
    };
  }

  #p(style: Style, text: string): string {
    return paint(this.#o.color, style, text);
  }

  /** The next user message with this text is this chat's own: it is not shown again. */
  expectEcho(text: string): void {
    this.#echoes.push(text);
  }

  /** The actions the agent asked for that have no result yet (those a confirmation answers). */
  pendingActions(): Json[] {
    return [...this.#pending.values()];
  }

  /** The pending actions as the confirmation question shows them. */
  describePending(): string {
    return this.pendingActions()
      .map((a) => {
        const lines = this.#actionLines(a, true);
        const risk = str(a.security_risk);
        if (risk !== null && risk !== "UNKNOWN")
          lines.push(this.#p("yellow", `    (security risk: ${risk})`));
        return lines.join("\n");
      })
      .join("\n");
  }

  /** The lines that show `event` (joined with line breaks, no final one), or null when it shows nothing. */
  render(event: unknown): string | null {
    const shown = this.#render(event);
    if (shown !== null) {
      const e = obj(event);
      this.#lastShown = e?.kind === "ActionEvent" ? str(e.id) : null;
    }
    return shown;
  }

  #render(event: unknown): string | null {
    const e = obj(event);
    if (e === null) return this.#p("dim", "· (an event that is not an object)");
    const kind = str(e.kind);
    if (kind === null) return this.#p("dim", "· (an event without a kind)");
    switch (kind) {
      case "MessageEvent":
        return this.#message(e);
      case "ActionEvent":
        return this.#action(e);
      case "ObservationEvent":
        return this.#observation(e);
      case "UserRejectObservation":
        this.#resolve(e);
        return this.#p(
          "yellow",
          `  ✗ rejected${str(e.rejection_reason) ? `: ${cleanText(str(e.rejection_reason) ?? "")}` : ""}`,
        );
      case "AgentErrorEvent":
        this.#resolve(e);
        return this.#p(
          "red",
          `  ✗ ${str(e.tool_name) ? `${str(e.tool_name)}: ` : ""}${cleanText(str(e.error) ?? "error")}`,
        );
      case "ConversationErrorEvent":
        return this.#conversationError(e);
      case "ConversationStateUpdateEvent":
        return this.#state(e);
      case "InterruptEvent":
        return this.#p("dim", "· interrupted");
      case "Condensation":
      case "CondensationSummaryEvent":
        return this.#p("dim", "· (older events were summarised to fit the model's context)");
      default:
        if (QUIET_KINDS.has(kind)) return null;
        return this.#p("dim", `· ${cleanText(kind)}`);
    }
  }

  #labelled(label: string, style: Style, text: string): string {
    const [first = "", ...rest] = cleanText(text).split("\n");
    return [`${this.#p(style, this.#p("bold", `${label}:`))} ${first}`, ...rest.map((l) => `  ${l}`)].join(
      "\n",
    );
  }

  #message(e: Json): string | null {
    const message = obj(e.llm_message);
    const text = contentText(message?.content);
    const role = str(message?.role);
    if (e.source === "user" || role === "user") {
      if (this.#echoes[0] === text) {
        this.#echoes.shift();
        return null;
      }
      return this.#labelled("you", "green", text);
    }
    if (e.source === "agent" || role === "assistant")
      return this.#labelled("agent", "cyan", text === "" ? "(an empty answer)" : text);
    return text === "" ? null : this.#p("dim", cleanText(text));
  }

  #action(e: Json): string | null {
    const id = str(e.id);
    const action = obj(e.action);
    if (id !== null) this.#actions.set(id, e);
    if (id !== null && action !== null) this.#pending.set(id, e);
    const out: string[] = [];
    const thought = contentText(e.thought);
    if (thought.trim() !== "") out.push(this.#labelled("agent", "cyan", thought));
    out.push(...this.#actionLines(e, false));
    return out.length === 0 ? null : out.join("\n");
  }

  /** The lines of an action; `detailed` (a confirmation) adds what it would write. */
  #actionLines(e: Json, detailed: boolean): string[] {
    const action = obj(e.action) ?? {};
    const tool = str(e.tool_name) ?? "";
    switch (toolKind(tool, action.kind)) {
      case "terminal": {
        if (action.reset === true && (str(action.command) ?? "").trim() === "")
          return [this.#p("yellow", "  $ (restart the terminal)")];
        const [first = "", ...rest] = cleanText(str(action.command) ?? "").split("\n");
        const prompt = action.is_input === true ? "  ⌨ " : "  $ ";
        return [
          `${this.#p("yellow", prompt)}${this.#p("bold", first)}`,
          ...rest.map((l) => `    ${this.#p("bold", l)}`),
        ];
      }
      case "editor": {
        const command = str(action.command) ?? "";
        const path = cleanText(str(action.path) ?? "?");
        const verb =
          {
            view: "read",
            create: "create",
            str_replace: "edit",
            insert: "insert into",
            undo_edit: "undo the last edit of",
          }[command] ?? command;
        if (command === "view") return [this.#p("dim", `  ✎ read ${path}`)];
        const lines = [`${this.#p("magenta", "  ✎")} ${verb} ${this.#p("bold", path)}`];
        if (detailed) {
          if (command === "create" && typeof action.file_text === "string")
            lines.push(...this.#diff("", action.file_text));
          else if (command === "str_replace" && typeof action.old_str === "string")
            lines.push(...this.#diff(action.old_str, str(action.new_str) ?? ""));
          else if (command === "insert" && typeof action.new_str === "string")
            lines.push(
              this.#p("dim", `    after line ${String(action.insert_line ?? "?")}:`),
              ...this.#diff("", action.new_str),
            );
        }
        return lines;
      }
      case "tasks": {
        if (action.command === "view") return [this.#p("dim", "  ☰ read the task list")];
        return detailed && Array.isArray(action.task_list)
          ? [`${this.#p("magenta", "  ☰")} plan:`, ...this.#tasks(action.task_list)]
          : [];
      }
      case "think": {
        const thought = str(action.thought) ?? "";
        return thought === "" ? [] : [this.#p("dim", `  (thinking) ${cleanText(thought)}`)];
      }
      case "finish": {
        const message = str(action.message) ?? "";
        return message === "" ? [] : [this.#labelled("agent", "cyan", message)];
      }
      default: {
        const call = obj(e.tool_call);
        let args = str(call?.arguments);
        if (args === null) {
          const { kind: _kind, ...rest } = action;
          args = JSON.stringify(rest);
        }
        const shown = cleanText(args).replaceAll("\n", " ");
        return [
          `${this.#p("blue", "  ⚙")} ${this.#p("bold", cleanText(tool || str(action.kind) || "tool"))} ${this.#p(
            "dim",
            shown.length > 200 ? `${shown.slice(0, 199)}…` : shown,
          )}`,
        ];
      }
    }
  }

  /** Forgets the action an observation, error or rejection answers. */
  #resolve(e: Json): Json | undefined {
    const actionId = str(e.action_id);
    let action = actionId === null ? undefined : this.#actions.get(actionId);
    if (actionId !== null) this.#pending.delete(actionId);
    const callId = str(e.tool_call_id);
    if (callId !== null)
      for (const [id, a] of this.#pending)
        if (a.tool_call_id === callId) {
          this.#pending.delete(id);
          action ??= a;
        }
    if (action === undefined && callId !== null)
      action = [...this.#actions.values()].findLast((a) => a.tool_call_id === callId);
    return action;
  }

  #observation(e: Json): string | null {
    const actionEvent = this.#resolve(e);
    const body = this.#observationBody(e, actionEvent);
    if (body === null || actionEvent === undefined || str(actionEvent.id) === this.#lastShown) return body;
    // Other lines came between the action and its result (a confirmation, another action): say what it answers.
    const kind = toolKind(actionEvent.tool_name, obj(actionEvent.action)?.kind);
    if (kind !== "terminal" && kind !== "editor" && kind !== "other") return body;
    return [...this.#actionLines(actionEvent, false).map((l) => this.#p("dim", l)), body].join("\n");
  }

  #observationBody(e: Json, actionEvent: Json | undefined): string | null {
    const action = obj(actionEvent?.action) ?? {};
    const o = obj(e.observation) ?? {};
    const isError = o.is_error === true || (typeof o.error === "string" && o.error !== "");
    const text = contentText(o.content) || str(o.output) || str(o.error) || "";
    switch (toolKind(e.tool_name, o.kind)) {
      case "terminal":
        return this.#terminalOutput(o, text, isError);
      case "editor": {
        if (isError) return this.#p("red", `    ✗ ${cleanText(text)}`);
        const command = str(o.command) ?? str(action.command) ?? "";
        if (command === "view") return null;
        const oldContent = str(o.old_content);
        const newContent = str(o.new_content);
        let lines: string[];
        if (command === "create") lines = newContent === null ? [] : this.#diff("", newContent);
        else if (oldContent !== null && newContent !== null) lines = this.#diff(oldContent, newContent);
        else if (typeof action.old_str === "string")
          lines = this.#diff(action.old_str, str(action.new_str) ?? "");
        else if (typeof action.new_str === "string") lines = this.#diff("", action.new_str);
        else lines = [];
        if (lines.length === 0) {
          const first = cleanText(text).split("\n")[0] ?? "";
          return first === "" ? null : this.#p("dim", `    ${first}`);
        }
        return lines.join("\n");
      }
      case "tasks": {
        const list = Array.isArray(o.task_list)
          ? o.task_list
          : Array.isArray(action.task_list)
            ? action.task_list
            : null;
        if (list === null) return this.#output(text, isError);
        if (list.length === 0) return this.#p("dim", "  ☰ no tasks");
        return [`${this.#p("magenta", "  ☰")} tasks:`, ...this.#tasks(list)].join("\n");
      }
      case "think":
      case "finish":
        return isError ? this.#output(text, true) : null;
      default:
        return this.#output(text, isError);
    }
  }

  #tasks(list: unknown[]): string[] {
    return list.map((t) => {
      const task = obj(t) ?? {};
      const title = cleanText(str(task.title) ?? "");
      const notes = cleanText(str(task.notes) ?? "");
      const withNotes = notes ? `${title} ${this.#p("dim", `— ${notes}`)}` : title;
      switch (task.status) {
        case "done":
          return `    ${this.#p("green", "✓")} ${this.#p("dim", withNotes)}`;
        case "in_progress":
          return `    ${this.#p("yellow", "▸")} ${this.#p("bold", withNotes)}`;
        default:
          return `    ○ ${withNotes}`;
      }
    });
  }

  #terminalOutput(o: Json, raw: string, isError: boolean): string {
    let text = raw;
    const metadata = obj(o.metadata);
    const suffix = str(metadata?.suffix);
    const prefix = str(metadata?.prefix);
    if (suffix && text.endsWith(suffix)) text = text.slice(0, text.length - suffix.length);
    if (prefix && text.startsWith(prefix)) text = text.slice(prefix.length);
    text = text.replace(/\n*\[The command (?:completed|has no new output|timed out)[^\]\n]*\]\s*$/, "");
    const exitCode = typeof o.exit_code === "number" ? o.exit_code : metadata?.exit_code;
    const lines = [this.#output(text, isError && typeof exitCode !== "number")];
    if (o.timeout === true) lines.push(this.#p("yellow", "    ⏱ stopped: it ran past its timeout"));
    else if (typeof exitCode === "number" && exitCode !== 0 && exitCode !== -1)
      lines.push(this.#p("red", `    ✗ exit code ${exitCode}`));
    return lines.join("\n");
  }

  /** A tool's text output, indented and cut in the middle when long. */
  #output(text: string, isError: boolean): string {
    const clean = cleanText(text).replace(/\s+$/, "");
    if (clean === "") return this.#p("dim", "    (no output)");
    const max = this.#o.maxLineLength;
    const all = clean.split("\n").map((l) => (l.length > max ? `${l.slice(0, max - 1)}…` : l));
    const { head, tail, hidden } = cutMiddle(all, this.#o.maxOutputLines);
    const show = (l: string) => `    ${isError ? this.#p("red", l) : l}`;
    return [
      ...head.map(show),
      ...(hidden > 0 ? [this.#p("dim", `    … ${hidden} more lines …`)] : []),
      ...tail.map(show),
    ].join("\n");
  }

  /** A file change as diff hunks, indented and coloured, cut after maxDiffLines. */
  #diff(oldText: string, newText: string): string[] {
    const hunks = unifiedDiff(cleanText(oldText), cleanText(newText));
    const shown = hunks.slice(0, this.#o.maxDiffLines).map((l) => {
      if (l.startsWith("@@")) return this.#p("cyan", `    ${l}`);
      const line = l.length > this.#o.maxLineLength ? `${l.slice(0, this.#o.maxLineLength - 1)}…` : l;
      if (line.startsWith("+")) return this.#p("green", `    ${line}`);
      if (line.startsWith("-")) return this.#p("red", `    ${line}`);
      return this.#p("dim", `    ${line}`);
    });
    if (hunks.length > this.#o.maxDiffLines)
      shown.push(this.#p("dim", `    … ${hunks.length - this.#o.maxDiffLines} more diff lines …`));
    return shown;
  }

  #conversationError(e: Json): string {
    const code = cleanText(str(e.code) ?? "");
    const detail = cleanText(str(e.detail) ?? "");
    const explained = explainError(code, detail);
    if (explained === null)
      return this.#p("red", `✗ error${code ? ` (${code})` : ""}: ${detail || "the conversation failed"}`);
    return [
      this.#p("red", this.#p("bold", `✗ ${explained.headline}`)),
      this.#p("red", `  ${code ? `${code}: ` : ""}${detail}`),
      this.#p("yellow", `  ${explained.hint}`),
    ].join("\n");
  }

  #state(e: Json): string | null {
    const key = str(e.key);
    if (key === "full_state") {
      const value = obj(e.value) ?? {};
      if (typeof value.execution_status === "string") this.status = value.execution_status;
      this.#policy(value.confirmation_policy);
      return null;
    }
    if (key === "confirmation_policy") {
      this.#policy(e.value);
      return null;
    }
    if (key !== "execution_status" || typeof e.value !== "string") return null;
    const previous = this.status;
    this.status = e.value;
    if (previous === e.value) return null;
    const words = statusWords(e.value);
    if (words === null) return null;
    const style: Style =
      e.value === "error"
        ? "red"
        : e.value === "waiting_for_confirmation" || e.value === "paused"
          ? "yellow"
          : "dim";
    return this.#p(style, `· ${words}`);
  }

  #policy(policy: unknown): void {
    const kind = str(obj(policy)?.kind);
    if (kind !== null) this.confirmationMode = kind !== "NeverConfirm";
  }
}
