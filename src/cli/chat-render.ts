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
 */

export type Json = Record<string, unknown>;

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

const CODES = {
  bold: [1, 22],
  dim: [2, 22],
  red: [31, 39],
  green: [32, 39],
  yellow: [33, 39],
  blue: [34, 39],
  magenta: [35, 39],
  cyan: [36, 39],
} as const;
export type Style = keyof typeof CODES;

/** `text` in a style, or as it is without colours. */
export function paint(color: boolean, style: Style, text: string): string {
  if (!color || text === "") return text;
  const [on, off] = CODES[style];
  return `\u001b[${on}m${text}\u001b[${off}m`;
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: terminal escape sequences are what is removed.
const ESCAPES = /\u001b\[[0-?]*[ -/]*[@-~]|\u001b\][^\u0007\u001b]*(?:\u0007|\u001b\\)?|\u001b[@-_]/g;
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is removed.
const CONTROLS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g;

/**
 * Text from the sandbox, safe to print: escape sequences and control characters (except line breaks and tabs)
 * removed; a carriage return inside a line (a progress bar) keeps what was written last.
 */
export function cleanText(s: string): string {
  return s
    .replace(ESCAPES, "")
    .split("\n")
    .map((line) => {
      const l = line.endsWith("\r") ? line.slice(0, -1) : line;
      return (l.includes("\r") ? (l.split("\r").findLast((p) => p !== "") ?? "") : l).replace(CONTROLS, "");
    })
    .join("\n")
    .replaceAll("\t", "  ");
}

/** The text of an SDK content list (text items; an image is `[image]`), or of a plain string. */
export function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .map((c: unknown) => {
      if (typeof c !== "object" || c === null) return "";
      const item = c as Json;
      if (typeof item.text === "string") return item.text;
      if (item.type === "image" || Array.isArray(item.image_urls)) return "[image]";
      return "";
    })
    .filter((t) => t !== "")
    .join("\n");
}

const str = (v: unknown): string | null => (typeof v === "string" ? v : null);
const obj = (v: unknown): Json | null =>
  typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Json) : null;

const TERMINAL_TOOLS = new Set(["terminal", "execute_bash", "bash"]);
const TERMINAL_KINDS = new Set(["TerminalAction", "ExecuteBashAction", "CmdRunAction"]);
const TERMINAL_OBSERVATIONS = new Set([
  "TerminalObservation",
  "ExecuteBashObservation",
  "CmdOutputObservation",
]);
const EDITOR_TOOLS = new Set(["file_editor", "str_replace_editor", "planning_file_editor"]);
const EDITOR_KINDS = new Set(["FileEditorAction", "StrReplaceEditorAction", "PlanningFileEditorAction"]);
const EDITOR_OBSERVATIONS = new Set([
  "FileEditorObservation",
  "StrReplaceEditorObservation",
  "PlanningFileEditorObservation",
]);
/** Kinds that say nothing a person needs (the system prompt, tokens, streaming, logs). */
const QUIET_KINDS = new Set([
  "SystemPromptEvent",
  "TokenEvent",
  "StreamingDeltaEvent",
  "LLMCompletionLogEvent",
  "HookExecutionEvent",
  "CondensationRequest",
  "PauseEvent",
]);

type ToolKind = "terminal" | "editor" | "tasks" | "think" | "finish" | "other";

function toolKind(toolName: unknown, actionKind: unknown): ToolKind {
  const name = str(toolName) ?? "";
  const kind = str(actionKind) ?? "";
  if (TERMINAL_TOOLS.has(name) || TERMINAL_KINDS.has(kind) || TERMINAL_OBSERVATIONS.has(kind))
    return "terminal";
  if (EDITOR_TOOLS.has(name) || EDITOR_KINDS.has(kind) || EDITOR_OBSERVATIONS.has(kind)) return "editor";
  if (name === "task_tracker" || kind.startsWith("TaskTracker")) return "tasks";
  if (name === "think" || kind.startsWith("Think")) return "think";
  if (name === "finish" || kind.startsWith("Finish")) return "finish";
  return "other";
}

/** What an execution status is called in the chat; null for one not worth a line (idle). */
export function statusWords(status: string): string | null {
  switch (status) {
    case "idle":
      return null;
    case "running":
      return "running";
    case "finished":
      return "finished";
    case "paused":
      return "paused (send a message or /resume to go on)";
    case "waiting_for_confirmation":
      return "waiting for your confirmation";
    case "error":
      return "stopped on an error (send a message to try again)";
    case "stuck":
      return "stuck (send a message to steer the agent)";
    default:
      return status.replaceAll("_", " ");
  }
}

/** One line of a diff: kept (" "), removed ("-") or added ("+"). */
export interface DiffLine {
  op: " " | "-" | "+";
  line: string;
}

/** Larger middles than this (lines × lines) are shown as removed then added, without a line-by-line match. */
const MAX_DIFF_CELLS = 4_000_000;

/** A line diff (longest common subsequence on what differs between a common head and tail). */
export function diffLines(a: readonly string[], b: readonly string[]): DiffLine[] {
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  const head = a.slice(0, start).map((line): DiffLine => ({ op: " ", line }));
  const tail = a.slice(endA).map((line): DiffLine => ({ op: " ", line }));
  const ma = a.slice(start, endA);
  const mb = b.slice(start, endB);
  const middle: DiffLine[] = [];
  if (ma.length * mb.length > MAX_DIFF_CELLS) {
    for (const line of ma) middle.push({ op: "-", line });
    for (const line of mb) middle.push({ op: "+", line });
  } else {
    // lcs[i][j]: the longest common subsequence of ma[i..] and mb[j..].
    const w = mb.length + 1;
    const lcs = new Uint32Array((ma.length + 1) * w);
    for (let i = ma.length - 1; i >= 0; i--)
      for (let j = mb.length - 1; j >= 0; j--)
        lcs[i * w + j] =
          ma[i] === mb[j]
            ? (lcs[(i + 1) * w + j + 1] ?? 0) + 1
            : Math.max(lcs[(i + 1) * w + j] ?? 0, lcs[i * w + j + 1] ?? 0);
    let i = 0;
    let j = 0;
    while (i < ma.length || j < mb.length) {
      if (i < ma.length && j < mb.length && ma[i] === mb[j]) {
        middle.push({ op: " ", line: ma[i] as string });
        i++;
        j++;
      } else if (
        j < mb.length &&
        (i >= ma.length || (lcs[i * w + j + 1] ?? 0) >= (lcs[(i + 1) * w + j] ?? 0))
      ) {
        middle.push({ op: "+", line: mb[j] as string });
        j++;
      } else {
        middle.push({ op: "-", line: ma[i] as string });
        i++;
      }
    }
    // Removed lines first within each change, as diff(1) shows them.
    for (let k = 0; k < middle.length; ) {
      let end = k;
      while (end < middle.length && middle[end]?.op !== " ") end++;
      if (end > k) {
        const run = middle.slice(k, end);
        middle.splice(k, end - k, ...run.filter((d) => d.op === "-"), ...run.filter((d) => d.op === "+"));
        k = end;
      } else k++;
    }
  }
  return [...head, ...middle, ...tail];
}

const linesOf = (text: string): string[] => {
  if (text === "") return [];
  const lines = text.split("\n");
  if (lines.at(-1) === "") lines.pop();
  return lines;
};

/** The hunks of a unified diff (`@@ -a,b +c,d @@` and their lines), without the file header; [] when equal. */
export function unifiedDiff(oldText: string, newText: string, context = 3): string[] {
  const ops = diffLines(linesOf(oldText), linesOf(newText));
  const changed = ops.flatMap((d, i) => (d.op === " " ? [] : [i]));
  if (changed.length === 0) return [];
  // Group changes closer than 2 × context into one hunk.
  const hunks: [number, number][] = [];
  for (const i of changed) {
    const last = hunks.at(-1);
    if (last !== undefined && i - last[1] <= 2 * context) last[1] = i;
    else hunks.push([i, i]);
  }
  // Line numbers before each op.
  const oldAt: number[] = [];
  const newAt: number[] = [];
  let o = 1;
  let n = 1;
  for (const d of ops) {
    oldAt.push(o);
    newAt.push(n);
    if (d.op !== "+") o++;
    if (d.op !== "-") n++;
  }
  const out: string[] = [];
  for (const [first, last] of hunks) {
    const from = Math.max(0, first - context);
    const to = Math.min(ops.length - 1, last + context);
    const slice = ops.slice(from, to + 1);
    const oldLen = slice.filter((d) => d.op !== "+").length;
    const newLen = slice.filter((d) => d.op !== "-").length;
    const oldStart = oldLen === 0 ? (oldAt[from] ?? 1) - 1 : (oldAt[from] ?? 1);
    const newStart = newLen === 0 ? (newAt[from] ?? 1) - 1 : (newAt[from] ?? 1);
    out.push(`@@ -${oldStart},${oldLen} +${newStart},${newLen} @@`);
    for (const d of slice) out.push(`${d.op}${d.line}`);
  }
  return out;
}

/**
 * The lines of `lines` that fit `max`: the first third and the rest from the end, and how many were left out
 * between them (0: all fit).
 */
export function cutMiddle(
  lines: readonly string[],
  max: number,
): { head: string[]; tail: string[]; hidden: number } {
  if (lines.length <= max) return { head: [...lines], tail: [], hidden: 0 };
  const headCount = Math.max(1, Math.floor(max / 3));
  const tailCount = Math.max(1, max - headCount - 1);
  return {
    head: lines.slice(0, headCount),
    tail: lines.slice(lines.length - tailCount),
    hidden: lines.length - headCount - tailCount,
  };
}

/** A model failure told as what it means for the person, with what to check; null for another error. */
export function explainError(code: string, detail: string): { headline: string; hint: string } | null {
  const text = `${code} ${detail}`;
  const settings = "npm run cli -- settings get, then settings set KEY=VALUE";
  if (
    /APIConnectionError|could not be reached|connection error|ECONNREFUSED|ENOTFOUND|EAI_AGAIN|getaddrinfo|ServiceUnavailable/i.test(
      text,
    ) ||
    /APIConnectionTimeoutError|Timeout|timed? ?out/i.test(text)
  )
    return {
      headline: "The model could not be reached.",
      hint: `Check llm_base_url (the model server's address, reachable from the sandbox) and llm_api_key in your settings (${settings}).`,
    };
  if (/AuthenticationError|PermissionDenied|status 40[13]\b|api key|api_key/i.test(text))
    return {
      headline: "The model provider refused the API key.",
      hint: `Check llm_api_key (and llm_base_url) in your settings (${settings}).`,
    };
  if (/LLMConfigurationError|NotFoundError|status 404\b|No LLM model|llm_model|base URL/i.test(text))
    return {
      headline: "The model is not set up right.",
      hint: `Check llm_model, llm_base_url and llm_api_key in your settings (${settings}).`,
    };
  if (/RateLimit|status 429\b|quota/i.test(text))
    return {
      headline: "The model provider is rate-limiting or out of quota.",
      hint: "Wait a moment, then send a message to try again.",
    };
  return null;
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
