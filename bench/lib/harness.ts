// The benchmark harness: the rows of the table, the servers under test and their lifecycle, and the alternating
// rounds that give every throughput benchmark its ratio against a baseline measured in the same run.
// Scenarios (bench/scenarios/*.ts) receive one Bench and return their rows; bench/run.ts selects and runs them.
import { join } from "node:path";
import {
  cpuSeconds,
  type HttpLoadConfig,
  type LoadResult,
  median,
  percentile,
  ROOT,
  rssMiB,
  runLoad,
  type ServerChild,
  startCommand,
  startServer,
} from "./bench-util.ts";

/** One line of the results table. */
export interface Row {
  /** The benchmark name the row belongs to (what --only selects), or "rss" for memory rows. */
  bench: string;
  what: string;
  ours: string;
  baseline: string;
  ratio: string;
  target: string;
  /** null: not applicable / not measured. */
  pass: boolean | null;
  data?: unknown;
}

export const log = (msg: string): void => {
  process.stderr.write(`${msg}\n`);
};
export const fmt = (n: number, digits = 0): string =>
  Number.isFinite(n)
    ? n.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits })
    : "—";
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
export const latencyCell = (values: number[]): string =>
  `${fmt(percentile(values, 50), 1)} / ${fmt(percentile(values, 99), 1)} ms`;

/**
 * Every server under test (ours and the baselines) runs compiled to JavaScript, as `npm start` runs the service:
 * `npm run build` first, then dist/bench/servers/<name>.js.
 */
export const compiled = (name: string): string => join(ROOT, "dist", "bench", "servers", `${name}.js`);

/** What bench/servers/service.ts prints once it listens. */
export interface ServiceInfo {
  port: number;
  grpcPort: number;
  key: string;
  userId: string;
  pid: number;
  dir: string;
}

/** The settings body every POST sends (and that GET then returns, shaped). */
export const SETTINGS_BODY = JSON.stringify({
  language: "en",
  agent: "CodeActAgent",
  max_iterations: 100,
  confirmation_mode: false,
  llm_model: "anthropic/claude-sonnet-4-5-20250929",
  llm_base_url: "https://llm.example.com/v1",
  enable_default_condenser: true,
  enable_sound_notifications: false,
  condenser_max_size: 120,
  git_user_name: "openhands",
  git_user_email: "openhands@example.com",
  mcp_config: {
    sse_servers: [{ url: "https://mcp.example.com/sse" }],
    stdio_servers: [{ name: "fetch", command: "uvx", args: ["mcp-server-fetch"] }],
    shttp_servers: [],
  },
});

/** One HTTP request with the service's key; the body parsed as JSON when it is JSON. */
export async function request(
  base: string,
  key: string,
  method: string,
  path: string,
  body?: string,
): Promise<{ status: number; text: string; json: unknown }> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: {
      "x-session-api-key": key,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    ...(body === undefined ? {} : { body }),
  });
  const text = await res.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    // not JSON
  }
  return { status: res.status, text, json };
}

/** Samples the RSS of a process every 100 ms while `during` runs; returns its result and the peak. */
export async function withRss<T>(
  pid: number,
  during: () => Promise<T>,
): Promise<{ result: T; peakMiB: number }> {
  let peak = rssMiB(pid);
  const timer = setInterval(() => {
    const v = rssMiB(pid);
    if (v > peak) peak = v;
  }, 100);
  try {
    const result = await during();
    return { result, peakMiB: Math.max(peak, rssMiB(pid)) };
  } finally {
    clearInterval(timer);
  }
}

/** Median RSS over a short idle window. */
export async function idleRss(pid: number, windowMs = 1000): Promise<number> {
  const samples: number[] = [];
  for (let t = 0; t < windowMs; t += 100) {
    samples.push(rssMiB(pid));
    await sleep(100);
  }
  return median(samples);
}

export interface Measured extends LoadResult {
  /** CPU time the server process used per successful request, in µs (robust to a busy machine). */
  cpuUsPerRequest: number;
}

export interface Alternation {
  ours: Measured[];
  baseline: Measured[];
  ratios: number[];
  /** Per-round ratio of baseline CPU per request to ours (1.0: as cheap as the baseline). */
  cpuRatios: number[];
}

/** One side of an alternation: the server's pid (for CPU accounting) and how to load it for a duration. */
export interface Side {
  pid: number;
  load: (durationS: number) => Promise<LoadResult>;
  /** CPU seconds the server used so far (default: those of the process `pid`). */
  cpu?: () => number;
}

async function measure(side: Side, durationS: number): Promise<Measured> {
  const cpuNow = side.cpu ?? (() => cpuSeconds(side.pid));
  const before = cpuNow();
  const result = await side.load(durationS);
  const cpu = cpuNow() - before;
  return { ...result, cpuUsPerRequest: (cpu * 1e6) / Math.max(1, result.ok) };
}

/** A row of a throughput benchmark: the median of the per-round ratios against its target. */
export function ratioRow(
  bench: string,
  what: string,
  alt: Alternation,
  baselineName: string,
  target: number,
  unit: string,
): Row {
  const ratio = median(alt.ratios);
  const failed = alt.ours.reduce((n, r) => n + r.failed, 0);
  const baselineFailed = alt.baseline.reduce((n, r) => n + r.failed, 0);
  const oursRps = median(alt.ours.map((r) => r.rps));
  const baseRps = median(alt.baseline.map((r) => r.rps));
  return {
    bench,
    what,
    ours: `${fmt(oursRps)} ${unit} (${fmt(median(alt.ours.map((r) => r.cpuUsPerRequest)))} µs CPU)`,
    baseline: `${fmt(baseRps)} ${unit} (${fmt(median(alt.baseline.map((r) => r.cpuUsPerRequest)))} µs CPU, ${baselineName})`,
    ratio: `${fmt(ratio, 2)}× (CPU ${fmt(median(alt.cpuRatios), 2)}×)${failed > 0 ? ` (ours: ${failed} failed requests)` : ""}${baselineFailed > 0 ? ` (baseline: ${baselineFailed} failed requests)` : ""}`,
    target: `≥ ${target}×`,
    pass: failed === 0 && ratio >= target,
    data: alt,
  };
}

/** The settings of one run, from the command line. */
export interface RunSettings {
  quick: boolean;
  /** Rounds per side of every alternation. */
  rounds: number;
  /** Benchmark names selected by --only, or null for all. */
  only: readonly string[] | null;
  /** Folder for the servers' logs and data; kept when the run fails. */
  work: string;
}

/**
 * What every scenario gets: the run's settings, the servers it starts (all stopped at the end or on Ctrl-C), the
 * service under test as `npm start` runs it, and the alternating rounds.
 */
export class Bench {
  readonly quick: boolean;
  readonly rounds: number;
  readonly roundS: number;
  readonly warmupS: number;
  readonly connections = 50;
  readonly work: string;
  /** The service logs like production (info: one line per request and per response) unless told otherwise. */
  readonly serviceLogLevel = process.env.BENCH_SERVICE_LOG_LEVEL ?? "info";
  /**
   * Node flags and environment of the service under test: those of `npm start` (from package.json; the flags unless
   * BENCH_SERVICE_NODE_FLAGS says otherwise), so memory and throughput are measured as users run the service.
   */
  readonly startCommand = startCommand();
  readonly serviceNodeFlags: string[];
  private readonly only: readonly string[] | null;
  private readonly children = new Set<ServerChild<unknown>>();

  constructor(settings: RunSettings) {
    this.quick = settings.quick;
    this.rounds = settings.rounds;
    this.only = settings.only;
    this.work = settings.work;
    this.roundS = settings.quick ? 1.5 : 5;
    this.warmupS = settings.quick ? 0.5 : 2;
    this.serviceNodeFlags =
      process.env.BENCH_SERVICE_NODE_FLAGS?.split(" ").filter((f) => f !== "") ?? this.startCommand.flags;
  }

  /** Whether --only selects the benchmark `name` (everything is selected without --only). */
  selected(name: string): boolean {
    return this.only === null || this.only.includes(name);
  }

  /** One line describing the rounds, for the log and the table's footer. */
  get settingsLine(): string {
    return `${this.rounds} alternating rounds per side of ${this.roundS} s (after ${this.warmupS} s warm-up), ${this.connections} connections / calls in flight, loopback; ratios are medians of per-round ratios`;
  }

  async start<T>(options: Parameters<typeof startServer>[0]): Promise<ServerChild<T>> {
    log(`  starting ${options.name}`);
    const child = await startServer<T>(options);
    this.children.add(child as ServerChild<unknown>);
    return child;
  }

  /** Tracks a server the scenario started itself, so that it is stopped at the end or on Ctrl-C. */
  track(child: ServerChild<unknown>): void {
    this.children.add(child);
  }

  async stop(child: ServerChild<unknown> | null): Promise<void> {
    if (child === null) return;
    this.children.delete(child);
    await child.stop();
  }

  async stopAll(): Promise<void> {
    await Promise.all([...this.children].map((c) => c.stop()));
  }

  /** The service under test (bench/servers/service.ts, compiled) with `npm start`'s flags and environment. */
  startService(
    name: string,
    args: string[] = [],
    env: Record<string, string> = {},
  ): Promise<ServerChild<ServiceInfo>> {
    return this.start<ServiceInfo>({
      name,
      command: process.execPath,
      args: [...this.serviceNodeFlags, compiled("service"), "--log-level", this.serviceLogLevel, ...args],
      env: { ...this.startCommand.env, ...env },
      logPath: join(this.work, `${name}.log`),
    });
  }

  /** An autocannon-style HTTP load (bench/load/http-load.ts) of the run's connection count. */
  httpLoad(
    config: Omit<HttpLoadConfig, "durationS" | "connections">,
  ): (durationS: number) => Promise<LoadResult> {
    return (durationS) => runLoad("http-load.ts", { ...config, durationS, connections: this.connections });
  }

  /** Warm-up of both sides, then the run's rounds alternating (ours, baseline, ours, baseline, …). */
  async alternate(name: string, ours: Side, baseline: Side, unit: string): Promise<Alternation> {
    log(`[${name}] warm-up (${this.warmupS} s each side)`);
    await ours.load(this.warmupS);
    await baseline.load(this.warmupS);
    const out: Alternation = { ours: [], baseline: [], ratios: [], cpuRatios: [] };
    for (let round = 1; round <= this.rounds; round++) {
      const a = await measure(ours, this.roundS);
      const b = await measure(baseline, this.roundS);
      out.ours.push(a);
      out.baseline.push(b);
      out.ratios.push(a.rps / b.rps);
      out.cpuRatios.push(b.cpuUsPerRequest / a.cpuUsPerRequest);
      log(
        `[${name}] round ${round}/${this.rounds}: ours ${fmt(a.rps)} ${unit} (p50 ${fmt(a.p50Ms, 1)} ms, ${fmt(a.cpuUsPerRequest)} µs CPU each${a.failed ? `, ${a.failed} failed` : ""}) · baseline ${fmt(b.rps)} ${unit} (${fmt(b.cpuUsPerRequest)} µs CPU each${b.failed ? `, ${b.failed} failed` : ""}) · ratio ${fmt(a.rps / b.rps, 3)}`,
      );
    }
    return out;
  }
}
