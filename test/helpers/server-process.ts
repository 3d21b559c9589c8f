// A server run as its own Node process, as users and scripts run it (the service's CLI `serve` from source or
// from dist/, the built-in agent, the agent-server stand-in): spawned with an exact environment, its stdout and
// stderr captured, waited for by what it prints, and stopped with a signal. The suites that test the process
// itself (test/e2e/server-process.test.ts, workers, sandbox-isolation, …) use it; in-process apps are test-app.ts.
import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";

const root = join(import.meta.dirname, "..", "..");

/** The service's CLI from source. */
export const CLI = join(root, "src", "cli", "main.ts");
/** The service's CLI as `npm run build` compiles it (what `npm start` runs). */
export const BUILT_CLI = join(root, "dist", "src", "cli", "main.js");
/** The text of the service's log line that says it listens (with its `http` and `grpc` URLs). */
export const LISTENING = '"agent workspace service listening"';

const LISTENING_LINE = new RegExp(`^.*${LISTENING}.*(?=\n)`, "m");

/**
 * The environment of a service of its own: PATH and HOME of this process, its data in `dataDir`, free HTTP and gRPC
 * ports (0), provider tokens not verified (no test reaches a real git provider); then `extra`.
 */
export function serviceEnv(dataDir: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: process.env.HOME ?? "/tmp",
    DATA_DIR: dataDir,
    PORT: "0",
    GRPC_PORT: "0",
    GIT_PROVIDER_VERIFY: "false",
    ...extra,
  };
}

export interface ServerProcessOptions {
  /** The whole environment of the process (nothing of this one's is passed on unless it is in here). */
  env: NodeJS.ProcessEnv;
  /** The script Node runs: {@link CLI} unless given. */
  entry?: string;
  /** Its arguments: `serve` unless given. */
  args?: string[];
  cwd?: string;
  /** Called with every whole line of stdout and stderr as it arrives. */
  onLine?: (line: string) => void;
}

export interface ServerProcess {
  readonly proc: ChildProcess;
  /** stdout and stderr together, in the order they arrived. */
  output(): string;
  stdout(): string;
  stderr(): string;
  /**
   * The first match of `pattern` in the output (the matched text), once it is there; rejects, showing the output,
   * when the process exits first or after `ms`.
   */
  waitFor(pattern: string | RegExp, ms?: number): Promise<string>;
  /** Waits for the service's listening line ({@link LISTENING}) and returns its URLs; rejects as waitFor does. */
  listening(ms?: number): Promise<{ http: string; grpc: string }>;
  /** The exit code once the process has ended by itself; rejects after `ms` (when given). */
  exited(ms?: number): Promise<number | null>;
  /**
   * Sends `signal` (SIGTERM unless given) and resolves once the process has exited, with its exit code and all it
   * printed; SIGKILL follows after `killAfterMs` when given. At once when it already ended.
   */
  stop(options?: {
    signal?: NodeJS.Signals;
    killAfterMs?: number;
  }): Promise<{ code: number | null; output: string }>;
}

/** What this file's tests spawned, for {@link killServers}. */
const spawned = new Set<ChildProcess>();

const ended = (proc: ChildProcess): boolean => proc.exitCode !== null || proc.signalCode !== null;

/** Spawns `node <entry> <args>` with stdout and stderr captured (see {@link ServerProcess}). */
export function spawnServer(options: ServerProcessOptions): ServerProcess {
  const proc = spawn(process.execPath, [options.entry ?? CLI, ...(options.args ?? ["serve"])], {
    env: options.env,
    stdio: ["ignore", "pipe", "pipe"],
    ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
  });
  spawned.add(proc);
  let output = "";
  let stdout = "";
  let stderr = "";
  /** Called after every chunk and at exit: the waiters look at the output again. */
  const watchers = new Set<() => void>();
  const onLine = options.onLine;
  const reader = (append: (text: string) => void) => {
    let rest = "";
    return (d: Buffer) => {
      const text = d.toString();
      output += text;
      append(text);
      if (onLine !== undefined) {
        const parts = (rest + text).split("\n");
        rest = parts.pop() ?? "";
        for (const line of parts) onLine(line);
      }
      for (const w of watchers) w();
    };
  };
  const outReader = reader((t) => {
    stdout += t;
  });
  const errReader = reader((t) => {
    stderr += t;
  });
  proc.stdout?.on("data", outReader);
  proc.stderr?.on("data", errReader);
  const exit = new Promise<number | null>((resolve) => {
    proc.once("exit", (code) => {
      spawned.delete(proc);
      resolve(code);
      for (const w of watchers) w();
    });
  });

  const waitFor = (pattern: string | RegExp, ms = 20_000): Promise<string> =>
    new Promise((resolve, reject) => {
      const find = (): string | null => {
        if (typeof pattern === "string") return output.includes(pattern) ? pattern : null;
        return pattern.exec(output)?.[0] ?? null;
      };
      const done = () => {
        clearTimeout(timer);
        watchers.delete(check);
      };
      const check = () => {
        const found = find();
        if (found !== null) {
          done();
          resolve(found);
        } else if (ended(proc)) {
          done();
          reject(
            new Error(
              `the process exited (${proc.exitCode ?? proc.signalCode}) before ${pattern}:\n${output}`,
            ),
          );
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`no ${pattern} within ${ms} ms:\n${output}`));
      }, ms);
      watchers.add(check);
      check();
    });

  return {
    proc,
    output: () => output,
    stdout: () => stdout,
    stderr: () => stderr,
    waitFor,
    async listening(ms) {
      let line: string;
      try {
        // The whole line, so that it parses.
        line = await waitFor(LISTENING_LINE, ms);
      } catch (e) {
        throw new Error(`server did not start: ${(e as Error).message}`);
      }
      return JSON.parse(line) as { http: string; grpc: string };
    },
    exited(ms) {
      if (ms === undefined) return exit;
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`the process did not exit within ${ms} ms:\n${output}`)),
          ms,
        );
      });
      return Promise.race([exit, late]).finally(() => clearTimeout(timer));
    },
    async stop({ signal = "SIGTERM", killAfterMs } = {}) {
      if (!ended(proc)) {
        proc.kill(signal);
        const timer =
          killAfterMs === undefined ? undefined : setTimeout(() => proc.kill("SIGKILL"), killAfterMs);
        await exit;
        clearTimeout(timer);
      }
      return { code: await exit, output };
    },
  };
}

/** A service that listens: its REST URL and its gRPC address. */
export type StartedServer = ServerProcess & { url: string; grpc: string };

/** Spawns the service and waits until it listens (up to `ms`). */
export async function startServer(options: ServerProcessOptions, ms = 20_000): Promise<StartedServer> {
  const server = spawnServer(options);
  const { http, grpc } = await server.listening(ms);
  return Object.assign(server, { url: http, grpc });
}

/** Sends `signal` (SIGKILL unless given) to every server this test file spawned that still runs (for afterAll). */
export function killServers(signal: NodeJS.Signals = "SIGKILL"): void {
  for (const proc of spawned) if (!ended(proc)) proc.kill(signal);
}
