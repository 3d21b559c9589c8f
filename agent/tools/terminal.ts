/**
 * The `terminal` tool (the SDK's TerminalTool): its spec for the model, its action, and the persistent shell that
 * runs it.
 */
import type { ChildProcess } from "node:child_process";
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import type { Json } from "../json.ts";
import { killTree, listProcesses, signal } from "../shared/proc-tree.ts";
import { text } from "./tool.ts";

/** The tool spec sent to the model (OpenAI function-calling format), with the SDK's name and parameters. */
export const TERMINAL_SPEC: Json = {
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
};

/** The TerminalAction of a tool call, or an error text for the model. */
export function terminalAction(args: Json): Json | string {
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
