/**
 * `POST /api/bash/execute_bash_command`: one shell command run to its end (or its timeout) in the workspace, its
 * output kept up to a limit per stream.
 */
import type { ChildProcess } from "node:child_process";
import { existsSync, statSync } from "node:fs";
import { delimiter, isAbsolute, join, relative, resolve } from "node:path";
import type { Json } from "./json.ts";
import { type AgentViolation, unprocessable } from "./replies.ts";
import { killTree } from "./shared/proc-tree.ts";

// Not static imports: the agent's start is on every sandbox's critical path (see agent-server.ts).
const { spawn } = process.getBuiltinModule("node:child_process");
const { constants } = process.getBuiltinModule("node:os");

/** Result of `POST /api/bash/execute_bash_command`. */
export interface CommandResult {
  /** The command's exit code; 128 + signal number when killed by a signal; -1 when it timed out. */
  exit_code: number;
  stdout: string;
  stderr: string;
}

const DEFAULT_TIMEOUT_SECONDS = 60;
const MAX_TIMEOUT_SECONDS = 600;
/** After the shell exits, how long to wait for its output pipes to close (a background job may hold them open). */
const PIPE_DRAIN_MS = 200;

/** A command request, checked: its command, its folder (inside the workspace), its timeout. */
export interface CommandRequest {
  command: string;
  cwd: string;
  timeoutSeconds: number;
}

/** What {@link runCommand} runs commands with. */
export interface CommandRunner {
  /** Used as `<shell> -c <command>`. */
  shell: string;
  /** Environment of the command (default: inherited from the agent process). */
  commandEnv: Record<string, string> | undefined;
  /** Output kept per stream in bytes; the rest is dropped with a marker. */
  maxOutputBytes: number;
  /** The commands running now (the server kills them when it closes). */
  running: Set<ChildProcess>;
}

/** Checks a request body against the workspace (422 for bad fields). */
export function parseCommandRequest(body: Json, workspaceDir: string): CommandRequest {
  const violations: AgentViolation[] = [];
  const { command, cwd, timeout } = body;
  if (command === undefined)
    violations.push({ type: "missing", loc: ["body", "command"], msg: "Field required", input: body });
  else if (typeof command !== "string") violations.push(stringType("command", command));
  let dir = workspaceDir;
  if (cwd !== undefined && cwd !== null) {
    if (typeof cwd !== "string") violations.push(stringType("cwd", cwd));
    else {
      dir = resolve(workspaceDir, cwd);
      const rel = relative(workspaceDir, dir);
      if (rel.startsWith("..") || isAbsolute(rel)) {
        violations.push(valueError("cwd", "cwd must be inside the workspace", cwd));
      } else if (!isDirectory(dir)) {
        violations.push(valueError("cwd", "cwd is not an existing directory", cwd));
      }
    }
  }
  let timeoutSeconds = DEFAULT_TIMEOUT_SECONDS;
  if (timeout !== undefined && timeout !== null) {
    if (typeof timeout !== "number" || !Number.isFinite(timeout)) {
      violations.push({
        type: "float_type",
        loc: ["body", "timeout"],
        msg: "Input should be a valid number",
        input: timeout,
      });
    } else if (timeout <= 0) {
      violations.push({
        type: "greater_than",
        loc: ["body", "timeout"],
        msg: "Input should be greater than 0",
        input: timeout,
        ctx: { gt: 0 },
      });
    } else if (timeout > MAX_TIMEOUT_SECONDS) {
      violations.push({
        type: "less_than_equal",
        loc: ["body", "timeout"],
        msg: `Input should be less than or equal to ${MAX_TIMEOUT_SECONDS}`,
        input: timeout,
        ctx: { le: MAX_TIMEOUT_SECONDS },
      });
    } else {
      timeoutSeconds = timeout;
    }
  }
  if (violations.length > 0) throw unprocessable(violations);
  return { command: command as string, cwd: dir, timeoutSeconds };
}

const stringType = (field: string, input: unknown): AgentViolation => ({
  type: "string_type",
  loc: ["body", field],
  msg: "Input should be a valid string",
  input,
});

const valueError = (field: string, message: string, input: unknown): AgentViolation => ({
  type: "value_error",
  loc: ["body", field],
  msg: `Value error, ${message}`,
  input,
  ctx: { error: message },
});

/** Runs a command; resolves with its result (never rejects: a failure to start is in stderr, exit code -1). */
export function runCommand(request: CommandRequest, o: CommandRunner): Promise<CommandResult> {
  const { shell, maxOutputBytes, running } = o;
  return new Promise((resolvePromise) => {
    const stdout = collector(maxOutputBytes);
    const stderr = collector(maxOutputBytes);
    const child = spawn(shell, ["-c", request.command], {
      cwd: request.cwd,
      // Not detached: commands stay in the agent's process group, so the runtime's pause, resume and removal
      // (signals to that group) reach them and their background jobs too.
      stdio: ["ignore", "pipe", "pipe"],
      ...(o.commandEnv ? { env: o.commandEnv } : {}),
    });
    running.add(child);
    child.stdout?.on("data", stdout.push);
    child.stderr?.on("data", stderr.push);
    let timedOut = false;
    let exitCode = -1;
    let settled = false;
    let drainTimer: NodeJS.Timeout | undefined;
    const timer = setTimeout(() => {
      timedOut = true;
      if (child.pid !== undefined) killTree(child.pid);
    }, request.timeoutSeconds * 1000);
    const finish = (startError?: Error): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      clearTimeout(drainTimer);
      running.delete(child);
      child.stdout?.destroy();
      child.stderr?.destroy();
      let err = stderr.text();
      if (startError) err += `${err ? "\n" : ""}failed to start ${shell}: ${startError.message}`;
      if (timedOut) err += `${err ? "\n" : ""}[command timed out after ${request.timeoutSeconds} seconds]`;
      resolvePromise({
        exit_code: timedOut || startError ? -1 : exitCode,
        stdout: stdout.text(),
        stderr: err,
      });
    };
    child.on("error", (e) => finish(e));
    child.on("exit", (code, signal) => {
      exitCode = code ?? (signal ? 128 + (constants.signals[signal] ?? 0) : -1);
      drainTimer = setTimeout(() => finish(), PIPE_DRAIN_MS);
    });
    child.on("close", () => finish());
  });
}

/** Keeps at most `limit` bytes of a stream and counts the rest. */
export function collector(limit: number): { push: (chunk: Buffer) => void; text: () => string } {
  const chunks: Buffer[] = [];
  let kept = 0;
  let dropped = 0;
  return {
    push: (chunk) => {
      const room = limit - kept;
      if (room >= chunk.length) {
        chunks.push(chunk);
        kept += chunk.length;
      } else {
        if (room > 0) chunks.push(chunk.subarray(0, room));
        kept += Math.max(room, 0);
        dropped += chunk.length - Math.max(room, 0);
      }
    },
    text: () => {
      const out = Buffer.concat(chunks).toString("utf8");
      return dropped > 0 ? `${out}\n[output truncated: ${dropped} more bytes]` : out;
    },
  };
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

/** The shell commands run with: `bash` from PATH, else `/bin/sh`. */
export function findShell(pathVariable: string | undefined): string {
  const dirs = (pathVariable ?? "/usr/local/bin:/usr/bin:/bin").split(delimiter).filter((d) => d !== "");
  for (const dir of dirs) if (existsSync(join(dir, "bash"))) return join(dir, "bash");
  return "/bin/sh";
}
