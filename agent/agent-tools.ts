/**
 * The built-in agent's tools, with the OpenHands SDK's names, parameters and observation shapes: `terminal` (a
 * persistent shell), `file_editor` (view, create, str_replace, insert, undo_edit), `task_tracker`, and the SDK's
 * built-in `finish` and `think`. Loaded with the agent loop, on the first conversation.
 */
import type { ChildProcess } from "node:child_process";
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { dirname, isAbsolute, join, relative } from "node:path";
import type { Json } from "./agent-server.ts";
import { killTree, listProcesses, signal } from "./shared/proc-tree.ts";

/** What a tool call produced: the observation (SDK shape, with `kind`) and whether the conversation ends. */
export interface ToolResult {
  observation: Json;
  finished?: boolean;
}

/** The tool specs sent to the model (OpenAI function-calling format), SDK names and parameters. */
export const TOOL_SPECS: Json[] = [
  {
    type: "function",
    function: {
      name: "terminal",
      description:
        "Run a bash command in a persistent shell session in the workspace (the working directory and exported " +
        "variables carry over between calls). One command at a time; chain several with && or ;. Commands get no " +
        "standard input. Long output is cut in the middle. Set `timeout` (seconds) for long commands; a command " +
        "that runs past it is stopped. Set `reset` to start a new shell.",
      parameters: {
        type: "object",
        properties: {
          command: { type: "string", description: "The bash command to run." },
          is_input: {
            type: "boolean",
            description: "Input for a running process (not supported here: commands run to completion).",
          },
          timeout: { type: "number", description: "Seconds before the command is stopped (default 120)." },
          reset: { type: "boolean", description: "Start a new shell session first." },
        },
        required: ["command"],
      },
    },
  },
  {
    type: "function",
    function: {
      name: "file_editor",
      description:
        "View, create and edit files. `view` shows a file with line numbers (or a directory two levels deep); " +
        "`create` writes a new file; `str_replace` replaces `old_str`, which must occur exactly once, with " +
        "`new_str`; `insert` adds `new_str` after line `insert_line` (0 = at the top); `undo_edit` reverts the " +
        "last edit of the file. Paths must be absolute.",
      parameters: {
        type: "object",
        properties: {
          command: { type: "string", enum: ["view", "create", "str_replace", "insert", "undo_edit"] },
          path: { type: "string", description: "Absolute path to a file or directory." },
          file_text: { type: "string", description: "Content of the file, for `create`." },
          old_str: { type: "string", description: "Text to replace, for `str_replace`." },
          new_str: { type: "string", description: "New text, for `str_replace` and `insert`." },
          insert_line: { type: "integer", description: "Line after which `new_str` goes, for `insert`." },
          view_range: {
            type: "array",
            items: { type: "integer" },
            description: "[start, end] lines to show (1-based; end -1 = to the end), for `view` of a file.",
          },
        },
        required: ["command", "path"],
      },
    },
  },
  {
    type: "function",
    function: {
      name: "task_tracker",
      description:
        "Keep a task list for complex work: `plan` replaces the list with `task_list`; `view` shows it.",
      parameters: {
        type: "object",
        properties: {
          command: { type: "string", enum: ["view", "plan"] },
          task_list: {
            type: "array",
            items: {
              type: "object",
              properties: {
                title: { type: "string" },
                notes: { type: "string" },
                status: { type: "string", enum: ["todo", "in_progress", "done"] },
              },
              required: ["title"],
            },
          },
        },
        required: ["command"],
      },
    },
  },
  {
    type: "function",
    function: {
      name: "think",
      description: "Write down a thought (no effect on the workspace).",
      parameters: {
        type: "object",
        properties: { thought: { type: "string" } },
        required: ["thought"],
      },
    },
  },
  {
    type: "function",
    function: {
      name: "finish",
      description: "Signal that the task is done, with a final message to the user.",
      parameters: {
        type: "object",
        properties: { message: { type: "string" } },
        required: ["message"],
      },
    },
  },
];

/** The action object of an ActionEvent for a tool call (SDK `kind` and defaults), or an error text. */
export function toAction(toolName: string, args: Json): Json | string {
  const str = (k: string): string | null => (typeof args[k] === "string" ? (args[k] as string) : null);
  switch (toolName) {
    case "terminal": {
      if (typeof args.command !== "string") return "Missing required argument `command` (a string).";
      const timeout = args.timeout;
      if (timeout !== undefined && timeout !== null && (typeof timeout !== "number" || timeout < 0))
        return "`timeout` must be a non-negative number.";
      return {
        kind: "TerminalAction",
        command: args.command,
        is_input: args.is_input === true,
        timeout: typeof timeout === "number" ? timeout : null,
        reset: args.reset === true,
      };
    }
    case "file_editor": {
      const command = str("command");
      if (command === null || !["view", "create", "str_replace", "insert", "undo_edit"].includes(command))
        return "`command` must be one of view, create, str_replace, insert, undo_edit.";
      if (str("path") === null) return "Missing required argument `path` (a string).";
      const range = args.view_range;
      const insertLine = args.insert_line;
      return {
        kind: "FileEditorAction",
        command,
        path: args.path,
        file_text: str("file_text"),
        old_str: str("old_str"),
        new_str: str("new_str"),
        insert_line: typeof insertLine === "number" && Number.isInteger(insertLine) ? insertLine : null,
        view_range:
          Array.isArray(range) && range.length === 2 && range.every((n) => Number.isInteger(n))
            ? range
            : null,
      };
    }
    case "task_tracker": {
      const command = str("command");
      if (command !== "view" && command !== "plan") return "`command` must be `view` or `plan`.";
      const list = Array.isArray(args.task_list) ? args.task_list : [];
      return {
        kind: "TaskTrackerAction",
        command,
        task_list: list
          .filter((t): t is Json => typeof t === "object" && t !== null)
          .map((t) => ({
            title: String(t.title ?? ""),
            notes: typeof t.notes === "string" ? t.notes : "",
            status: ["todo", "in_progress", "done"].includes(t.status as string) ? t.status : "todo",
          })),
      };
    }
    case "think":
      return { kind: "ThinkAction", thought: str("thought") ?? "" };
    case "finish":
      return { kind: "FinishAction", message: str("message") ?? "" };
    default:
      return `Tool '${toolName}' not found. Available: terminal, file_editor, task_tracker, think, finish.`;
  }
}

const text = (t: string): Json[] => [{ type: "text", text: t }];

/** Runs an action (from {@link toAction}) with the conversation's tools. */
export class Toolbox {
  readonly terminal: Terminal;
  readonly #editor: FileEditor;
  #tasks: Json[] = [];

  /** `mapPath` turns a file editor path into the one to open (see {@link FileEditor}). */
  constructor(terminal: Terminal, mapPath?: (path: string) => string) {
    this.terminal = terminal;
    this.#editor = new FileEditor(mapPath);
  }

  async run(action: Json): Promise<ToolResult> {
    switch (action.kind) {
      case "TerminalAction":
        return { observation: await this.terminal.execute(action) };
      case "FileEditorAction":
        return { observation: this.#editor.execute(action) };
      case "TaskTrackerAction": {
        if (action.command === "plan") this.#tasks = action.task_list as Json[];
        const lines = this.#tasks.map(
          (t, i) => `${i + 1}. [${t.status}] ${t.title}${t.notes ? ` (${t.notes})` : ""}`,
        );
        const summary =
          action.command === "plan"
            ? `Task list updated: ${this.#tasks.length} task(s).\n${lines.join("\n")}`
            : lines.length > 0
              ? lines.join("\n")
              : "No tasks yet.";
        return {
          observation: {
            kind: "TaskTrackerObservation",
            content: text(summary),
            is_error: false,
            command: action.command,
            task_list: this.#tasks,
          },
        };
      }
      case "ThinkAction":
        return {
          observation: {
            kind: "ThinkObservation",
            content: text("Your thought has been logged."),
            is_error: false,
          },
        };
      case "FinishAction":
        return {
          observation: {
            kind: "FinishObservation",
            content: text(String(action.message ?? "")),
            is_error: false,
          },
          finished: true,
        };
      default:
        throw new Error(`no tool for ${String(action.kind)}`);
    }
  }

  close(): void {
    this.terminal.close();
  }
}

/** Options of {@link Terminal}. */
export interface TerminalOptions {
  shell: string;
  cwd: string;
  env: Record<string, string> | undefined;
  /** Characters of output kept per command (default 30000, as the SDK); the middle of longer output is cut. */
  maxOutputChars?: number;
  /** Default per-command timeout in seconds (default 120); a command's own `timeout` can raise it to 600. */
  defaultTimeoutSeconds?: number;
  /** Replaces secret values in what a command printed. */
  mask?: (s: string) => string;
}

/**
 * A persistent shell: one bash process reading commands on stdin, so `cd` and `export` carry over. Each command
 * runs as the body of a shell function called with `</dev/null` (it never reads the agent's pipe), followed by a
 * marker line carrying `$?` and `$PWD`. A command past its timeout is stopped and the shell kept: the processes it
 * started are killed (those running before it, such as a server started in the background earlier, are left
 * alone) and a SIGINT makes the shell's trap return from the function, so the rest of the command does not run and
 * exported variables and the working directory stay. A shell that does not come back from that (or a non-bash
 * shell) is killed with every process below it; the next command starts a new shell in the last working directory.
 */
export class Terminal {
  readonly #o: TerminalOptions;
  #child: ChildProcess | undefined;
  #out = "";
  #dropped = 0;
  #onData: (() => void) | undefined;
  #cwd: string;
  #queue: Promise<unknown> = Promise.resolve();

  constructor(options: TerminalOptions) {
    this.#o = options;
    this.#cwd = options.cwd;
  }

  #start(): ChildProcess {
    const shell = this.#o.shell;
    const args = shell.endsWith("bash") ? ["--noprofile", "--norc"] : [];
    const child = spawn(shell, args, {
      cwd: this.#cwd,
      stdio: ["pipe", "pipe", "pipe"],
      ...(this.#o.env ? { env: this.#o.env } : {}),
    });
    const push = (chunk: Buffer): void => {
      this.#out += chunk.toString("utf8");
      const cap = this.#o.maxOutputChars ?? 30_000;
      if (this.#out.length > cap * 4) {
        // Keep the head and enough of the tail to find the marker; count what is cut.
        const cut = this.#out.length - cap * 2;
        this.#dropped += cut;
        this.#out = this.#out.slice(0, cap) + this.#out.slice(cap + cut);
      }
      this.#onData?.();
    };
    child.stdout?.on("data", push);
    child.stderr?.on("data", push);
    child.stdin?.on("error", () => {});
    child.on("error", () => {});
    child.on("exit", () => {
      if (this.#child === child) this.#child = undefined;
      this.#onData?.();
    });
    // A no-op INT handler at the top (not an ignored INT: commands would inherit that and ignore ^C themselves).
    child.stdin?.write(`exec 2>&1\n${this.#bash ? "trap : INT\n" : ""}`);
    this.#child = child;
    return child;
  }

  get #bash(): boolean {
    return this.#o.shell.endsWith("bash");
  }

  /** The shell's direct children now. */
  #childrenOf(pid: number | undefined): number[] {
    if (pid === undefined) return [];
    return listProcesses()
      .filter((p) => p.ppid === pid)
      .map((p) => p.pid);
  }

  /** Runs a TerminalAction; answers a TerminalObservation. Calls are serialised. */
  execute(action: Json): Promise<Json> {
    const next = this.#queue.then(() => this.#execute(action));
    this.#queue = next.catch(() => {});
    return next;
  }

  async #execute(action: Json): Promise<Json> {
    const command = String(action.command ?? "");
    const observation = (output: string, exitCode: number | null, extra: Json = {}): Json => {
      const masked = this.#o.mask ? this.#o.mask(output) : output;
      return {
        kind: "TerminalObservation",
        content: text(masked),
        is_error: extra.is_error === true,
        command,
        exit_code: exitCode,
        timeout: extra.timeout === true,
        metadata: {
          exit_code: exitCode ?? -1,
          pid: -1,
          username: null,
          hostname: null,
          working_dir: this.#cwd,
          py_interpreter_path: null,
          prefix: "",
          suffix: extra.suffix ?? "",
        },
      };
    };
    if (action.is_input === true)
      return observation(
        "Sending input to a running process is not supported by this terminal: every command runs to completion " +
          "without standard input. Run it non-interactively (e.g. with `yes |` or command-line flags).",
        null,
        { is_error: true },
      );
    if (action.reset === true) this.#kill();
    if (command.trim() === "" && action.reset === true)
      return observation("Terminal session has been reset.", 0);
    if (command.trim() === "")
      return observation("No command given (no command is running).", null, { is_error: true });

    const timeoutSeconds = Math.min(
      600,
      typeof action.timeout === "number" && action.timeout > 0
        ? action.timeout
        : (this.#o.defaultTimeoutSeconds ?? 120),
    );
    const child = this.#child ?? this.#start();
    const marker = `__OH_DONE_${randomUUID().replaceAll("-", "")}__`;
    this.#out = "";
    this.#dropped = 0;
    const markerLine = new RegExp(`\\n?${marker}(-?\\d+):(.*)\\n`);
    const before = new Set(this.#childrenOf(child.pid));
    const printMarker = `printf '\\n${marker}%s:%s\\n' "$__oh_rc" "$PWD"\n`;
    child.stdin?.write(
      this.#bash
        ? // Defined through eval: a command that does not parse is an error of eval (status 2), where bash reading
          // its script from stdin would exit.
          `if eval ${shellQuote(`__oh_cmd() {\n${command}\n}`)}; then\ntrap 'trap : INT; return 130' INT\n` +
            `__oh_cmd </dev/null\n__oh_rc=$?\ntrap : INT\nelse __oh_rc=2; fi\n${printMarker}`
        : `{\n${command}\n} </dev/null\n__oh_rc=$?\n${printMarker}`,
    );

    let timedOut = false;
    const result = await new Promise<{ output: string; exitCode: number | null; restarted: boolean }>(
      (resolveResult) => {
        const done = (r: { output: string; exitCode: number | null; restarted: boolean }): void => {
          clearTimeout(timer);
          this.#onData = undefined;
          resolveResult(r);
        };
        this.#onData = () => {
          const m = markerLine.exec(this.#out);
          if (m !== null) {
            this.#cwd = m[2] ?? this.#cwd;
            done({ output: this.#out.slice(0, m.index), exitCode: Number(m[1]), restarted: false });
          } else if (this.#child !== child) {
            done({ output: this.#out, exitCode: null, restarted: true });
          }
        };
        let timer = setTimeout(() => {
          timedOut = true;
          if (this.#bash && child.pid !== undefined) {
            // The shell's trap runs once its foreground process is gone: it returns from the command's function.
            signal(child.pid, "SIGINT");
            for (const pid of this.#childrenOf(child.pid)) if (!before.has(pid)) killTree(pid);
            timer = setTimeout(giveUp, SHELL_RECOVERY_MS);
          } else giveUp();
        }, timeoutSeconds * 1000);
        const giveUp = (): void => {
          // Stop the command with the whole shell; the next command gets a new shell in the same directory.
          timedOut = true;
          this.#kill();
          done({ output: this.#out, exitCode: null, restarted: true });
        };
        this.#onData();
      },
    );
    let output = result.output;
    const cap = this.#o.maxOutputChars ?? 30_000;
    let dropped = this.#dropped;
    if (output.length > cap) {
      dropped += output.length - cap;
      output = output.slice(0, cap / 2) + output.slice(output.length - cap / 2);
    }
    if (dropped > 0) {
      const half = Math.floor(cap / 2);
      output = `${output.slice(0, half)}\n[... ${dropped} characters of output cut ...]\n${output.slice(half)}`;
    }
    let suffix = "";
    if (timedOut && !result.restarted)
      suffix =
        `\n[The command was stopped after ${timeoutSeconds} seconds (its timeout). The shell session goes on in ` +
        `${this.#cwd}; processes started before the command still run.]`;
    else if (timedOut)
      suffix =
        `\n[The command was stopped after ${timeoutSeconds} seconds (its timeout). The next command runs in a new ` +
        `shell session in ${this.#cwd}: exported variables are reset.]`;
    else if (result.restarted)
      suffix = "\n[The shell exited; a new shell session starts with the next command.]";
    if (!timedOut && result.exitCode !== null)
      suffix += `\n[The command completed with exit code ${result.exitCode}.]`;
    return observation(`${output}${suffix}`, timedOut ? -1 : result.exitCode, {
      timeout: timedOut,
      is_error: timedOut || result.restarted,
      suffix,
    });
  }

  #kill(): void {
    const child = this.#child;
    this.#child = undefined;
    if (child?.pid !== undefined) killTree(child.pid);
  }

  close(): void {
    this.#kill();
  }
}

/** A single-quoted shell word holding `s` as it is. */
const shellQuote = (s: string): string => `'${s.replaceAll("'", "'\\''")}'`;

/** After a timed-out command's processes are killed, how long the shell has to come back before it is killed too. */
const SHELL_RECOVERY_MS = 2000;

const SNIPPET_LINES = 4;
/** Contents larger than this are left out of a FileEditorObservation (null), so an event stays small. */
const MAX_EVENT_CONTENT_CHARS = 256 * 1024;
const small = (s: string | null): string | null =>
  s !== null && s.length > MAX_EVENT_CONTENT_CHARS ? null : s;
const MAX_VIEW_CHARS = 100_000;

/**
 * The SDK's file editor, on the real file system. Keeps each file's previous contents for undo_edit. `mapPath`
 * turns an absolute path as the model wrote it into the file to open (the agent maps the reference image's
 * `/workspace/...` layout into a workspace that lies elsewhere); the observation keeps the path as written.
 */
export class FileEditor {
  readonly #history = new Map<string, string[]>();
  readonly #mapPath: (path: string) => string;

  constructor(mapPath: (path: string) => string = (p) => p) {
    this.#mapPath = mapPath;
  }

  execute(action: Json): Json {
    const command = action.command as string;
    const given = action.path as string;
    const path = isAbsolute(given) ? this.#mapPath(given) : given;
    const base = { kind: "FileEditorObservation", command, path: given };
    const fail = (message: string): Json => ({
      ...base,
      content: text(message),
      is_error: true,
      prev_exist: existsSync(path),
      old_content: null,
      new_content: null,
    });
    if (!isAbsolute(path))
      return fail(`The path ${path} is not an absolute path, it should start with \`/\`.`);
    try {
      switch (command) {
        case "view":
          return this.#view(path, action.view_range as number[] | null, base, fail);
        case "create": {
          if (existsSync(path))
            return fail(
              `File already exists at: ${path}. Cannot overwrite files using command \`create\`; use str_replace.`,
            );
          if (typeof action.file_text !== "string")
            return fail("Parameter `file_text` is required for command: create.");
          mkdirSync(dirname(path), { recursive: true });
          writeFileSync(path, action.file_text);
          return {
            ...base,
            content: text(`File created successfully at: ${path}`),
            is_error: false,
            prev_exist: false,
            old_content: null,
            new_content: small(action.file_text),
          };
        }
        case "str_replace": {
          const old = this.#readFile(path);
          if (typeof old !== "string") return fail(old.error);
          const oldStr = action.old_str;
          if (typeof oldStr !== "string" || oldStr === "")
            return fail("Parameter `old_str` is required for command: str_replace.");
          const newStr = typeof action.new_str === "string" ? action.new_str : "";
          const first = old.indexOf(oldStr);
          if (first < 0)
            return fail(
              `No replacement was performed, old_str \`${oldStr}\` did not appear verbatim in ${path}.`,
            );
          const lines: number[] = [];
          for (let i = first; i >= 0; i = old.indexOf(oldStr, i + 1)) lines.push(lineOf(old, i));
          if (lines.length > 1)
            return fail(
              `No replacement was performed. Multiple occurrences of old_str \`${oldStr}\` in lines ${JSON.stringify(lines)}. Please ensure it is unique.`,
            );
          const updated = old.slice(0, first) + newStr + old.slice(first + oldStr.length);
          this.#write(path, old, updated);
          const start = lineOf(old, first);
          return this.#edited(base, path, old, updated, start, newStr.split("\n").length);
        }
        case "insert": {
          const old = this.#readFile(path);
          if (typeof old !== "string") return fail(old.error);
          const at = action.insert_line;
          if (typeof action.new_str !== "string")
            return fail("Parameter `new_str` is required for command: insert.");
          const lines = old.split("\n");
          const count = old.endsWith("\n") ? lines.length - 1 : lines.length;
          if (typeof at !== "number" || at < 0 || at > count)
            return fail(
              `Invalid \`insert_line\` parameter: ${String(at)}. It should be within the range of lines of the file: [0, ${count}].`,
            );
          const added = action.new_str.split("\n");
          lines.splice(at, 0, ...added);
          const updated = lines.join("\n");
          this.#write(path, old, updated);
          return this.#edited(base, path, old, updated, at + 1, added.length);
        }
        case "undo_edit": {
          const stack = this.#history.get(path);
          const previous = stack?.pop();
          if (previous === undefined) return fail(`No edit history found for ${path}.`);
          const current = existsSync(path) ? readFileSync(path, "utf8") : null;
          writeFileSync(path, previous);
          return {
            ...base,
            content: text(
              `Last edit to ${path} undone successfully.\n${numbered(previous.slice(0, MAX_VIEW_CHARS), 1)}`,
            ),
            is_error: false,
            prev_exist: true,
            old_content: small(current),
            new_content: small(previous),
          };
        }
        default:
          return fail(`Unknown command ${command}.`);
      }
    } catch (e: unknown) {
      return fail(`Error: ${e instanceof Error ? e.message : String(e)}`);
    }
  }

  #readFile(path: string): string | { error: string } {
    if (!existsSync(path)) return { error: `The path ${path} does not exist. Please provide a valid path.` };
    if (statSync(path).isDirectory())
      return { error: `The path ${path} is a directory; only \`view\` works on directories.` };
    return readFileSync(path, "utf8");
  }

  #write(path: string, old: string, updated: string): void {
    let stack = this.#history.get(path);
    if (stack === undefined) {
      stack = [];
      this.#history.set(path, stack);
    }
    stack.push(old);
    writeFileSync(path, updated);
  }

  #edited(base: Json, path: string, old: string, updated: string, firstLine: number, count: number): Json {
    const lines = updated.split("\n");
    const from = Math.max(1, firstLine - SNIPPET_LINES);
    const to = Math.min(lines.length, firstLine + count - 1 + SNIPPET_LINES);
    const snippet = numbered(lines.slice(from - 1, to).join("\n"), from);
    return {
      ...base,
      content: text(
        `The file ${path} has been edited. Here's the result of running \`cat -n\` on a snippet of ${path}:\n${snippet}\nReview the changes and make sure they are as expected. Edit the file again if necessary.`,
      ),
      is_error: false,
      prev_exist: true,
      old_content: small(old),
      new_content: small(updated),
    };
  }

  #view(path: string, range: number[] | null, base: Json, fail: (m: string) => Json): Json {
    if (!existsSync(path)) return fail(`The path ${path} does not exist. Please provide a valid path.`);
    const ok = (output: string): Json => ({
      ...base,
      content: text(output),
      is_error: false,
      prev_exist: true,
      old_content: null,
      new_content: null,
    });
    if (statSync(path).isDirectory()) {
      if (range !== null)
        return fail("The `view_range` parameter is not allowed when `path` points to a directory.");
      const entries: string[] = [];
      const walk = (dir: string, depth: number): void => {
        for (const name of readdirSync(dir).sort()) {
          if (name.startsWith(".")) continue;
          const full = join(dir, name);
          const isDir = statSync(full, { throwIfNoEntry: false })?.isDirectory() ?? false;
          entries.push(`${relative(path, full)}${isDir ? "/" : ""}`);
          if (isDir && depth < 2 && entries.length < 1000) walk(full, depth + 1);
        }
      };
      walk(path, 1);
      return ok(
        `Here's the files and directories up to 2 levels deep in ${path}, excluding hidden items:\n${entries.join("\n")}`,
      );
    }
    let content = readFileSync(path, "utf8");
    let start = 1;
    if (range !== null) {
      const lines = content.split("\n");
      const [from = 1, to = -1] = range;
      if (from < 1 || from > lines.length)
        return fail(
          `Invalid \`view_range\`: ${JSON.stringify(range)}. Its first element should be within [1, ${lines.length}].`,
        );
      const end = to === -1 ? lines.length : to;
      if (end < from || end > lines.length)
        return fail(
          `Invalid \`view_range\`: ${JSON.stringify(range)}. Its second element should be -1 or within [${from}, ${lines.length}].`,
        );
      content = lines.slice(from - 1, end).join("\n");
      start = from;
    }
    if (content.length > MAX_VIEW_CHARS)
      content = `${content.slice(0, MAX_VIEW_CHARS)}\n[... file cut: view a smaller range with view_range ...]`;
    return ok(`Here's the result of running \`cat -n\` on ${path}:\n${numbered(content, start)}`);
  }
}

function lineOf(s: string, index: number): number {
  let n = 1;
  for (let i = s.indexOf("\n"); i >= 0 && i < index; i = s.indexOf("\n", i + 1)) n++;
  return n;
}

function numbered(content: string, start: number): string {
  return content
    .split("\n")
    .map((line, i) => `${String(i + start).padStart(6)}\t${line}`)
    .join("\n");
}
