// Helpers shared by the benchmark runner, the load generators and the servers under test.
import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, openSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { cpus, totalmem } from "node:os";
import { join } from "node:path";

export const ROOT = join(import.meta.dirname, "..", "..");

/**
 * How `npm start` runs the server (package.json): the environment assignments before `node` and the Node flags,
 * so that the benchmarks run the service as users do.
 */
export function startCommand(): { env: Record<string, string>; flags: string[] } {
  const script = (
    JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { scripts: { start: string } }
  ).scripts.start;
  const m = /^((?:[A-Z_][A-Z0-9_]*=\S* )*)node ((?:--\S+ )*)/.exec(script);
  if (m === null) throw new Error(`cannot read the start script: ${script}`);
  const env: Record<string, string> = {};
  for (const assignment of (m[1] ?? "").trim().split(" ").filter(Boolean)) {
    const eq = assignment.indexOf("=");
    env[assignment.slice(0, eq)] = assignment.slice(eq + 1);
  }
  return { env, flags: (m[2] ?? "").trim().split(" ").filter(Boolean) };
}

/** What one load round measured (printed as one JSON line by the load generators). */
export interface LoadResult {
  /** Successful requests (2xx / gRPC OK) per second over the measured duration. */
  rps: number;
  ok: number;
  /** Non-2xx answers, transport errors and timeouts together. */
  failed: number;
  durationS: number;
  p50Ms: number;
  p99Ms: number;
}

/** Settings of one HTTP load round (bench/load/http-load.ts). */
export interface HttpLoadConfig {
  url: string;
  method: "GET" | "POST";
  headers: Record<string, string>;
  body?: string;
  connections: number;
  durationS: number;
}

/** Settings of one webhook load round (bench/load/events-load.ts). */
export interface EventsLoadConfig {
  url: string;
  headers: Record<string, string>;
  /** Events per request. */
  batch: number;
  connections: number;
  durationS: number;
}

/** Settings of one gRPC load round (bench/load/grpc-load.ts). */
export interface GrpcLoadConfig {
  address: string;
  key: string;
  inFlight: number;
  durationS: number;
}

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

/** Nearest-rank percentile (p in 0..100). */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((s.length * p) / 100) - 1))] as number;
}

/** Resident set size of a process in MiB (VmRSS of /proc/<pid>/status), NaN when it is gone. */
export function rssMiB(pid: number): number {
  try {
    const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) / 1024 : Number.NaN;
  } catch {
    return Number.NaN;
  }
}

/** CPU time (user + system) a process has used so far, in seconds; NaN when it is gone. */
export function cpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command (which may contain spaces) start after the last ")"; utime and stime are 14, 15.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
  } catch {
    return Number.NaN;
  }
}
const CLOCK_TICKS = 100;

/** A free TCP port on loopback (for servers that cannot report the port they bound, such as uvicorn). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const address = srv.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

export interface Machine {
  cpu: string;
  cores: number;
  ramGiB: number;
  node: string;
  kernel: string;
}

export function machine(): Machine {
  let cpu = cpus()[0]?.model ?? "unknown";
  try {
    const m = /^model name\s*:\s*(.+)$/m.exec(readFileSync("/proc/cpuinfo", "utf8"));
    if (m?.[1]) cpu = m[1].trim();
  } catch {
    // keep os.cpus()
  }
  let kernel = "";
  try {
    kernel = readFileSync("/proc/sys/kernel/osrelease", "utf8").trim();
  } catch {
    // not Linux
  }
  return {
    cpu,
    cores: cpus().length,
    ramGiB: Math.round((totalmem() / 1024 ** 3) * 10) / 10,
    node: process.version,
    kernel,
  };
}

export const machineLine = (m: Machine): string =>
  `${m.cpu}, ${m.cores} cores, ${m.ramGiB} GiB RAM, Node ${m.node}, Linux ${m.kernel}`;

/** A server under test running as a child process. */
export interface ServerChild<T> {
  proc: ChildProcess;
  pid: number;
  /** What the server printed as its first stdout line (JSON), or {} for servers that print nothing. */
  info: T;
  logPath: string;
  stop(): Promise<void>;
}

/**
 * Starts a server child with its stderr in a log file. Resolves once it printed its first stdout line (JSON)
 * or, with `ready`, once that check passes; rejects on exit or after `timeoutMs`.
 */
export async function startServer<T>(options: {
  name: string;
  command: string;
  args: string[];
  logPath: string;
  env?: Record<string, string>;
  /** Readiness check instead of a JSON line on stdout. */
  ready?: () => Promise<boolean>;
  timeoutMs?: number;
}): Promise<ServerChild<T>> {
  const log = openSync(options.logPath, "a");
  const proc = spawn(options.command, options.args, {
    cwd: ROOT,
    stdio: ["ignore", "pipe", log],
    env: { ...process.env, ...options.env },
  });
  closeSync(log);
  const exited = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
  const stop = async (): Promise<void> => {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    proc.kill("SIGTERM");
    const killer = setTimeout(() => proc.kill("SIGKILL"), 15_000);
    await exited;
    clearTimeout(killer);
  };
  const timeoutMs = options.timeoutMs ?? 120_000;
  let onEarlyExit: ((code: number | null, signal: NodeJS.Signals | null) => void) | undefined;
  try {
    const info = await new Promise<T>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`${options.name} not ready after ${timeoutMs} ms`)),
        timeoutMs,
      );
      onEarlyExit = (code, signal) => {
        clearTimeout(timer);
        reject(
          new Error(
            `${options.name} exited (${code ?? signal}) before it was ready; log: ${options.logPath}`,
          ),
        );
      };
      proc.once("exit", onEarlyExit);
      proc.once("error", (err) => {
        clearTimeout(timer);
        reject(err);
      });
      if (options.ready !== undefined) {
        const check = options.ready;
        void (async () => {
          const deadline = Date.now() + timeoutMs;
          while (Date.now() < deadline && proc.exitCode === null) {
            if (await check().catch(() => false)) {
              clearTimeout(timer);
              resolve({} as T);
              return;
            }
            await new Promise((r) => setTimeout(r, 100));
          }
        })();
        proc.stdout?.resume();
        return;
      }
      let buffered = "";
      proc.stdout?.setEncoding("utf8");
      const onData = (chunk: string): void => {
        buffered += chunk;
        const nl = buffered.indexOf("\n");
        if (nl < 0) return;
        proc.stdout?.off("data", onData);
        proc.stdout?.resume();
        clearTimeout(timer);
        try {
          resolve(JSON.parse(buffered.slice(0, nl)) as T);
        } catch (err) {
          reject(new Error(`${options.name} printed no JSON line: ${String(err)}`));
        }
      };
      proc.stdout?.on("data", onData);
    });
    if (onEarlyExit !== undefined) proc.off("exit", onEarlyExit);
    return { proc, pid: proc.pid ?? 0, info, logPath: options.logPath, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** Runs a load generator child to completion and returns the JSON line it printed. */
export async function runLoad(
  script: string,
  config: HttpLoadConfig | GrpcLoadConfig | EventsLoadConfig,
): Promise<LoadResult> {
  const proc = spawn(process.execPath, [join(ROOT, "bench", "load", script), JSON.stringify(config)], {
    cwd: ROOT,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  proc.stdout.setEncoding("utf8").on("data", (c: string) => {
    out += c;
  });
  proc.stderr.setEncoding("utf8").on("data", (c: string) => {
    err += c;
  });
  const timeout = setTimeout(() => proc.kill("SIGKILL"), (config.durationS + 60) * 1000);
  const code = await new Promise<number | null>((resolve) => proc.once("exit", (c) => resolve(c)));
  clearTimeout(timeout);
  const line = out.trim().split("\n").at(-1) ?? "";
  if (code !== 0 || line === "") throw new Error(`load generator ${script} failed (${code}): ${err.trim()}`);
  return JSON.parse(line) as LoadResult;
}
