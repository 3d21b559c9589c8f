// `npm run bench`: runs every benchmark, prints progress to stderr and one markdown table to stdout, and writes
// bench/results/latest.{md,json} (partial.{md,json} for --quick or --only runs).
//
// Throughput benchmarks measure their own baseline in the same run, alternating ours/baseline round by round
// (ABAB…), and report the median of the per-round ratios. Servers under test and load generators are separate
// processes talking over loopback, so the load generator never shares an event loop with the server.
//
// Options and environment: USAGE below (`npm run bench -- --help`).
import { spawn, spawnSync } from "node:child_process";
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { DEFAULT_WARM_AGENTS } from "../src/server/config.ts";
import {
  cpuSeconds,
  freePort,
  type HttpLoadConfig,
  type LoadResult,
  machine,
  machineLine,
  median,
  percentile,
  ROOT,
  rssMiB,
  runLoad,
  type ServerChild,
  startCommand,
  startServer,
} from "./lib/bench-util.ts";
import { builtinAgentBenchmarks } from "./scenarios/builtin-agent.ts";
import { dockerWarmPool } from "./scenarios/docker-warm-pool.ts";
import { benchEventConversation, EVENTS_PER_CONVERSATION, type Fixture } from "./servers/fixture.ts";

const ALL = [
  "rest-get",
  "rest-post",
  "grpc",
  "connect",
  "reference",
  "sandboxes",
  "docker",
  "docker-warm",
  "conversations",
  "events",
  "replicas",
  "workers",
  "builtin-agent",
] as const;
type BenchName = (typeof ALL)[number];

/**
 * Every server under test (ours and the baselines) runs compiled to JavaScript, as `npm start` runs the service:
 * `npm run build` first, then dist/bench/servers/<name>.js.
 */
const compiled = (name: string): string => join(ROOT, "dist", "bench", "servers", `${name}.js`);
const USAGE = `usage: npm run bench -- [--quick] [--only a,b] [--rounds N]

Runs the benchmarks against their own baselines (measured in the same run) and prints one markdown table;
progress goes to stderr. Writes bench/results/latest.{md,json}, or partial.{md,json} for --quick and --only.

  --quick          short rounds (CI smoke)
  --only a,b       run only these benchmarks: ${ALL.join(", ")}
  --rounds N       rounds per side (at least 3; default 5, 3 with --quick)
  -h, --help       this text

Environment:
  BENCH_INSTALL_REFERENCE=1   apt-get install the reference Python stack when it is missing
  BENCH_SERVICE_LOG_LEVEL=L   log level of the service under test (default info, as in production)
  BENCH_SERVICE_NODE_FLAGS=…  Node flags of the service under test instead of \`npm start\`'s
`;
/** The command-line options; a bad option stops here with the usage, before anything is built or started. */
function parseOptions() {
  try {
    return parseArgs({
      options: {
        quick: { type: "boolean", default: false },
        only: { type: "string" },
        rounds: { type: "string" },
        help: { type: "boolean", short: "h", default: false },
      },
    }).values;
  } catch (err) {
    console.error(`bench: ${err instanceof Error ? err.message : String(err)}\n\n${USAGE}`);
    process.exit(2);
  }
}
const values = parseOptions();
if (values.help === true) {
  process.stdout.write(USAGE);
  process.exit(0);
}
const QUICK = values.quick === true;
const only = values.only?.split(",").map((s) => s.trim()) ?? null;
for (const name of only ?? []) {
  if (!(ALL as readonly string[]).includes(name)) {
    console.error(`unknown benchmark ${name}; known: ${ALL.join(", ")}`);
    process.exit(2);
  }
}
const selected = (name: BenchName): boolean => only === null || only.includes(name);
const ROUNDS = Math.max(3, Number(values.rounds ?? (QUICK ? 3 : 5)));
if (!Number.isInteger(ROUNDS)) {
  console.error(`bench: --rounds takes a whole number, not ${values.rounds}`);
  process.exit(2);
}
const build = spawnSync(
  process.execPath,
  [join(ROOT, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.build.json"],
  {
    cwd: ROOT,
    stdio: "inherit",
  },
);
if (build.status !== 0) {
  console.error("bench: npm run build failed");
  process.exit(1);
}
const ROUND_S = QUICK ? 1.5 : 5;
const WARMUP_S = QUICK ? 0.5 : 2;
const CONNECTIONS = 50;
const SANDBOX_SAMPLES = QUICK ? 10 : 30;
const PAUSED_SANDBOXES = 50;
const CONVERSATION_ROWS = 100_000;
const CONVERSATION_STARTS = QUICK ? 5 : 20;
const STORED_EVENTS = QUICK ? 100_000 : 1_000_000;
const EVENT_SEARCHES = 200;
/**
 * When the idle RSS is read: V8's memory reducer samples the allocation rate every 8 s and collects once it is low,
 * which on this service is its second or third sample (~17–26 s after start).
 */
const IDLE_AFTER_MS = 30_000;

/** The settings body every POST sends (and that GET then returns, shaped). */
const SETTINGS_BODY = JSON.stringify({
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

const log = (msg: string): void => {
  process.stderr.write(`${msg}\n`);
};
const fmt = (n: number, digits = 0): string =>
  Number.isFinite(n)
    ? n.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits })
    : "—";

interface Row {
  bench: BenchName | "rss";
  what: string;
  ours: string;
  baseline: string;
  ratio: string;
  target: string;
  /** null: not applicable / not measured. */
  pass: boolean | null;
  data?: unknown;
}
const rows: Row[] = [];

const work = mkdtempSync(join(tmpdir(), "aws-bench-run-"));
const children = new Set<ServerChild<unknown>>();
async function start<T>(options: Parameters<typeof startServer>[0]): Promise<ServerChild<T>> {
  log(`  starting ${options.name}`);
  const child = await startServer<T>(options);
  children.add(child as ServerChild<unknown>);
  return child;
}
async function stop(child: ServerChild<unknown> | null): Promise<void> {
  if (child === null) return;
  children.delete(child);
  await child.stop();
}
let interrupted = false;
process.on("SIGINT", () => {
  if (interrupted) return;
  interrupted = true;
  log("interrupted: stopping servers");
  void Promise.all([...children].map((c) => c.stop())).then(() => process.exit(130));
});

interface ServiceInfo {
  port: number;
  grpcPort: number;
  key: string;
  userId: string;
  pid: number;
  dir: string;
}

/** The service logs like production (info: one line per request and per response) unless told otherwise. */
const SERVICE_LOG_LEVEL = process.env.BENCH_SERVICE_LOG_LEVEL ?? "info";
/**
 * Node flags and environment of the service under test: those of `npm start` (from package.json; the flags unless
 * BENCH_SERVICE_NODE_FLAGS says otherwise), so memory and throughput are measured as users run the service.
 */
const START = startCommand();
const SERVICE_NODE_FLAGS =
  process.env.BENCH_SERVICE_NODE_FLAGS?.split(" ").filter((f) => f !== "") ?? START.flags;
const startService = (name: string, args: string[] = []): Promise<ServerChild<ServiceInfo>> =>
  start<ServiceInfo>({
    name,
    command: process.execPath,
    args: [
      ...SERVICE_NODE_FLAGS,
      // The compiled service, as `npm start` runs the server.
      compiled("service"),
      "--log-level",
      SERVICE_LOG_LEVEL,
      ...args,
    ],
    env: START.env,
    logPath: join(work, `${name}.log`),
  });

async function request(
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

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Samples the RSS of a process every 100 ms while `during` runs; returns its result and the peak. */
async function withRss<T>(pid: number, during: () => Promise<T>): Promise<{ result: T; peakMiB: number }> {
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
async function idleRss(pid: number, windowMs = 1000): Promise<number> {
  const samples: number[] = [];
  for (let t = 0; t < windowMs; t += 100) {
    samples.push(rssMiB(pid));
    await sleep(100);
  }
  return median(samples);
}

interface Measured extends LoadResult {
  /** CPU time the server process used per successful request, in µs (robust to a busy machine). */
  cpuUsPerRequest: number;
}

interface Alternation {
  ours: Measured[];
  baseline: Measured[];
  ratios: number[];
  /** Per-round ratio of baseline CPU per request to ours (1.0: as cheap as the baseline). */
  cpuRatios: number[];
}

/** One side of an alternation: the server's pid (for CPU accounting) and how to load it for a duration. */
interface Side {
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

/** Warm-up of both sides, then ROUNDS alternating rounds (ours, baseline, ours, baseline, …). */
async function alternate(name: string, ours: Side, baseline: Side, unit: string): Promise<Alternation> {
  log(`[${name}] warm-up (${WARMUP_S} s each side)`);
  await ours.load(WARMUP_S);
  await baseline.load(WARMUP_S);
  const out: Alternation = { ours: [], baseline: [], ratios: [], cpuRatios: [] };
  for (let round = 1; round <= ROUNDS; round++) {
    const a = await measure(ours, ROUND_S);
    const b = await measure(baseline, ROUND_S);
    out.ours.push(a);
    out.baseline.push(b);
    out.ratios.push(a.rps / b.rps);
    out.cpuRatios.push(b.cpuUsPerRequest / a.cpuUsPerRequest);
    log(
      `[${name}] round ${round}/${ROUNDS}: ours ${fmt(a.rps)} ${unit} (p50 ${fmt(a.p50Ms, 1)} ms, ${fmt(a.cpuUsPerRequest)} µs CPU each${a.failed ? `, ${a.failed} failed` : ""}) · baseline ${fmt(b.rps)} ${unit} (${fmt(b.cpuUsPerRequest)} µs CPU each${b.failed ? `, ${b.failed} failed` : ""}) · ratio ${fmt(a.rps / b.rps, 3)}`,
    );
  }
  return out;
}

function ratioRow(
  bench: BenchName,
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

const httpLoad = (config: Omit<HttpLoadConfig, "durationS" | "connections">) => (durationS: number) =>
  runLoad("http-load.ts", { ...config, durationS, connections: CONNECTIONS });

// ---------------------------------------------------------------------------------------------------------------

async function throughputBenchmarks(): Promise<void> {
  const wanted = (["rest-get", "rest-post", "grpc", "connect", "reference"] as const).filter(selected);
  if (wanted.length === 0) return;
  const service = await startService("service");
  const s = service.info;
  const base = `http://127.0.0.1:${s.port}`;
  const auth = { "x-session-api-key": s.key };
  let bareFastify: ServerChild<{ port: number }> | null = null;
  let bareGrpc: ServerChild<{ grpcPort: number }> | null = null;
  let bareConnect: ServerChild<{ port: number }> | null = null;
  try {
    // Right after start the heap still holds the startup's garbage; V8's memory reducer gives it back once the
    // server has been idle for a while (src/server/idle-memory.ts). Both are reported; the target is the idle one.
    const started = performance.now();
    await sleep(1000);
    const afterStart = await idleRss(service.pid);
    await sleep(IDLE_AFTER_MS - (performance.now() - started));
    const idle = await idleRss(service.pid, 2000);
    log(`  service RSS ${fmt(afterStart, 1)} MiB 1 s after start, ${fmt(idle, 1)} MiB idle`);
    rows.push({
      bench: "rss",
      what: "server RSS 1 s after start",
      ours: `${fmt(afterStart, 1)} MiB`,
      baseline: "—",
      ratio: "—",
      target: "—",
      pass: null,
    });
    rows.push({
      bench: "rss",
      what: `server RSS idle (${IDLE_AFTER_MS / 1000} s after start, no requests)`,
      ours: `${fmt(idle, 1)} MiB`,
      baseline: "—",
      ratio: "—",
      target: "≤ 100 MB",
      pass: idle * 1.048576 <= 100,
    });

    const stored = await request(base, s.key, "POST", "/api/settings", SETTINGS_BODY);
    if (stored.status !== 200) throw new Error(`seeding settings failed: ${stored.status} ${stored.text}`);
    const got = await request(base, s.key, "GET", "/api/settings");
    const rpc = await request(base, s.key, "POST", "/workspace.v1.SettingsService/GetSettings", "{}");
    if (got.status !== 200 || rpc.status !== 200)
      throw new Error(`reading settings failed: ${got.text} ${rpc.text}`);
    const fixture: Fixture = { key: s.key, restSettings: got.json as never, rpcSettings: rpc.json as never };
    const fixturePath = join(work, "fixture.json");
    writeFileSync(fixturePath, JSON.stringify(fixture));

    /** An HTTP load on the service that also records the service's RSS peak during it into `peaks`. */
    const loadOurs =
      (peaks: number[]) =>
      (config: Omit<HttpLoadConfig, "durationS" | "connections">) =>
      async (durationS: number) => {
        const { result, peakMiB } = await withRss(service.pid, () => httpLoad(config)(durationS));
        peaks.push(peakMiB);
        return result;
      };
    const restPeaks: number[] = [];
    const oursRest = loadOurs(restPeaks);
    const getConfig = { url: `${base}/api/settings`, method: "GET" as const, headers: auth };
    const postConfig = {
      url: `${base}/api/settings`,
      method: "POST" as const,
      headers: { ...auth, "content-type": "application/json" },
      body: SETTINGS_BODY,
    };

    if (selected("rest-get") || selected("rest-post")) {
      bareFastify = await start<{ port: number }>({
        name: "bare-fastify",
        command: process.execPath,
        args: [compiled("bare-fastify"), fixturePath],
        logPath: join(work, "bare-fastify.log"),
      });
      const bare = `http://127.0.0.1:${bareFastify.info.port}`;
      if (selected("rest-get")) {
        const alt = await alternate(
          "rest-get",
          { pid: service.pid, load: oursRest(getConfig) },
          { pid: bareFastify.pid, load: httpLoad({ ...getConfig, url: `${bare}/api/settings` }) },
          "req/s",
        );
        rows.push(ratioRow("rest-get", "REST GET /api/settings (SQLite)", alt, "bare Fastify", 0.5, "req/s"));
      }
      if (selected("rest-post")) {
        const alt = await alternate(
          "rest-post",
          { pid: service.pid, load: oursRest(postConfig) },
          { pid: bareFastify.pid, load: httpLoad({ ...postConfig, url: `${bare}/api/settings` }) },
          "req/s",
        );
        rows.push(
          ratioRow(
            "rest-post",
            "REST POST /api/settings (SQLite, durable commit)",
            alt,
            "bare Fastify",
            0.3,
            "req/s",
          ),
        );
      }
      await stop(bareFastify);
      bareFastify = null;
    }

    // Every REST load (ours against bare Fastify, then against the reference stack) runs before the RPC loads, so
    // the REST memory peak is that of a server that has served REST; the Connect load's own peak is reported on its
    // own row (a Connect call allocates several times what a REST call does).
    if (selected("reference")) await referenceBenchmarks(service, oursRest, getConfig, postConfig);

    if (restPeaks.length > 0) {
      const peak = Math.max(...restPeaks);
      rows.push({
        bench: "rss",
        what: "server RSS under the REST load (peak)",
        ours: `${fmt(peak, 1)} MiB`,
        baseline: "—",
        ratio: "—",
        target: "≤ 250 MB",
        pass: peak * 1.048576 <= 250,
      });
    }

    if (selected("grpc")) {
      bareGrpc = await start<{ grpcPort: number }>({
        name: "bare-grpc",
        command: process.execPath,
        args: [compiled("bare-grpc"), fixturePath],
        logPath: join(work, "bare-grpc.log"),
      });
      const grpcLoad = (port: number) => (durationS: number) =>
        runLoad("grpc-load.ts", {
          address: `127.0.0.1:${port}`,
          key: s.key,
          inFlight: CONNECTIONS,
          durationS,
        });
      const alt = await alternate(
        "grpc",
        { pid: service.pid, load: grpcLoad(s.grpcPort) },
        { pid: bareGrpc.pid, load: grpcLoad(bareGrpc.info.grpcPort) },
        "calls/s",
      );
      rows.push(
        ratioRow("grpc", "gRPC GetSettings (grpc-js client, 1 channel)", alt, "bare grpc-js", 0.8, "calls/s"),
      );
      await stop(bareGrpc);
      bareGrpc = null;
    }

    if (selected("connect")) {
      bareConnect = await start<{ port: number }>({
        name: "bare-connect",
        command: process.execPath,
        args: [compiled("bare-connect"), fixturePath],
        logPath: join(work, "bare-connect.log"),
      });
      const connectConfig = (port: number) => ({
        url: `http://127.0.0.1:${port}/workspace.v1.SettingsService/GetSettings`,
        method: "POST" as const,
        headers: { ...auth, "content-type": "application/json" },
        body: "{}",
      });
      const connectPeaks: number[] = [];
      const oursConnect = loadOurs(connectPeaks)(connectConfig(s.port));
      const alt = await alternate(
        "connect",
        { pid: service.pid, load: oursConnect },
        { pid: bareConnect.pid, load: httpLoad(connectConfig(bareConnect.info.port)) },
        "req/s",
      );
      rows.push(ratioRow("connect", "Connect JSON GetSettings", alt, "bare connect-node", 0.9, "req/s"));
      rows.push({
        bench: "rss",
        what: "server RSS under the Connect load (peak; after the REST loads)",
        ours: `${fmt(Math.max(...connectPeaks), 1)} MiB`,
        baseline: "—",
        ratio: "—",
        target: "—",
        pass: null,
      });
      await stop(bareConnect);
      bareConnect = null;
    }
  } finally {
    await stop(bareFastify);
    await stop(bareGrpc);
    await stop(bareConnect);
    await stop(service);
  }
}

/** A Python that imports FastAPI and uvicorn (Debian's packages serve /usr/bin/python3, which a pyenv may shadow). */
function referencePython(): string | null {
  for (const python of ["python3", "/usr/bin/python3"]) {
    if (spawnSync(python, ["-c", "import fastapi, uvicorn"], { stdio: "ignore" }).status === 0) return python;
  }
  return null;
}

async function referenceBenchmarks(
  service: ServerChild<ServiceInfo>,
  oursRest: (
    config: Omit<HttpLoadConfig, "durationS" | "connections">,
  ) => (durationS: number) => Promise<LoadResult>,
  getConfig: Omit<HttpLoadConfig, "durationS" | "connections">,
  postConfig: Omit<HttpLoadConfig, "durationS" | "connections">,
): Promise<void> {
  if (referencePython() === null && process.env.BENCH_INSTALL_REFERENCE === "1") {
    log("[reference] installing python3-fastapi python3-uvicorn (BENCH_INSTALL_REFERENCE=1)");
    spawnSync("apt-get", ["update"], { stdio: ["ignore", 2, 2] });
    spawnSync("apt-get", ["install", "-y", "python3-fastapi", "python3-uvicorn"], {
      stdio: ["ignore", 2, 2],
      env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
    });
  }
  const python = referencePython();
  if (python === null) {
    log("[reference] reference stack not installed (set BENCH_INSTALL_REFERENCE=1 to apt-get install it)");
    for (const what of ["GET", "POST"])
      rows.push({
        bench: "reference",
        what: `REST ${what} /api/settings vs the reference Python stack`,
        ours: "—",
        baseline: "reference stack not installed",
        ratio: "—",
        target: "≥ 10×",
        pass: null,
      });
    return;
  }
  const port = await freePort();
  const key = (getConfig.headers["x-session-api-key"] ?? "") as string;
  const dataDir = join(work, "reference-data");
  mkdirSync(dataDir, { recursive: true });
  const refBase = `http://127.0.0.1:${port}`;
  const ref = await start<Record<string, never>>({
    name: "reference (FastAPI + uvicorn)",
    command: python,
    args: [join(ROOT, "bench", "servers", "reference.py"), String(port), dataDir, key],
    logPath: join(work, "reference.log"),
    ready: async () => (await request(refBase, key, "GET", "/api/settings")).status > 0,
    timeoutMs: 30_000,
  });
  try {
    const seeded = await request(refBase, key, "POST", "/api/settings", postConfig.body);
    const read = await request(refBase, key, "GET", "/api/settings");
    if (seeded.status !== 200 || read.status !== 200)
      throw new Error(
        `reference stack answered ${seeded.status}/${read.status}: ${seeded.text} ${read.text}`,
      );
    const getAlt = await alternate(
      "reference-get",
      { pid: service.pid, load: oursRest(getConfig) },
      { pid: ref.pid, load: httpLoad({ ...getConfig, url: `${refBase}/api/settings` }) },
      "req/s",
    );
    rows.push(
      ratioRow(
        "reference",
        "REST GET /api/settings vs the reference Python stack",
        getAlt,
        "FastAPI + uvicorn",
        10,
        "req/s",
      ),
    );
    const postAlt = await alternate(
      "reference-post",
      { pid: service.pid, load: oursRest(postConfig) },
      { pid: ref.pid, load: httpLoad({ ...postConfig, url: `${refBase}/api/settings` }) },
      "req/s",
    );
    rows.push(
      ratioRow(
        "reference",
        "REST POST /api/settings vs the reference Python stack",
        postAlt,
        "FastAPI + uvicorn",
        10,
        "req/s",
      ),
    );
  } finally {
    await stop(ref as ServerChild<unknown>);
  }
}

// ---------------------------------------------------------------------------------------------------------------

const latencyCell = (values: number[]): string =>
  `${fmt(percentile(values, 50), 1)} / ${fmt(percentile(values, 99), 1)} ms`;

interface SandboxJson {
  id: string;
  status: string;
}

/** Starts a sandbox through the REST API and polls until it is RUNNING; `created` tracks what is left to delete. */
async function startSandbox(
  base: string,
  key: string,
  created: string[],
): Promise<{ id: string; ms: number }> {
  const t0 = performance.now();
  const res = await request(base, key, "POST", "/api/v1/sandboxes");
  if (res.status !== 200) throw new Error(`start sandbox: ${res.status} ${res.text}`);
  const sandbox = res.json as SandboxJson;
  created.push(sandbox.id);
  let status = sandbox.status;
  const deadline = Date.now() + 30_000;
  while (status !== "RUNNING") {
    if (status === "ERROR" || status === "MISSING" || Date.now() > deadline)
      throw new Error(`sandbox ${sandbox.id} ended ${status}`);
    await sleep(2);
    const list = await request(base, key, "GET", `/api/v1/sandboxes?id=${sandbox.id}`);
    status = ((list.json as (SandboxJson | null)[])[0]?.status ?? "MISSING") as string;
  }
  return { id: sandbox.id, ms: performance.now() - t0 };
}

/** Start→RUNNING latencies of SANDBOX_SAMPLES starts, each deleted before the next (after 2 warm-up starts). */
async function sandboxStarts(base: string, key: string, created: string[]): Promise<number[]> {
  const remove = async (id: string): Promise<void> => {
    await request(base, key, "DELETE", `/api/v1/sandboxes/${id}`);
    created.splice(created.indexOf(id), 1);
  };
  for (let i = 0; i < 2; i++) await remove((await startSandbox(base, key, created)).id);
  const starts: number[] = [];
  for (let i = 0; i < SANDBOX_SAMPLES; i++) {
    const { id, ms } = await startSandbox(base, key, created);
    starts.push(ms);
    await remove(id);
  }
  return starts;
}

async function sandboxBenchmarks(): Promise<void> {
  if (!selected("sandboxes")) return;
  // The baseline: the same starts without warm agents (every start boots the agent's Node process).
  log(`[sandboxes] start→RUNNING × ${SANDBOX_SAMPLES} without warm agents (baseline)`);
  const cold = await startService("service-sandboxes-cold", ["--warm-agents", "0"]);
  let coldStarts: number[];
  const coldCreated: string[] = [];
  try {
    coldStarts = await sandboxStarts(`http://127.0.0.1:${cold.info.port}`, cold.info.key, coldCreated);
  } finally {
    await stop(cold);
  }
  log(`[sandboxes] cold start→RUNNING p50/p99 ${latencyCell(coldStarts)}`);

  const service = await startService("service-sandboxes");
  const { key } = service.info;
  const base = `http://127.0.0.1:${service.info.port}`;
  const created: string[] = [];
  const startOne = () => startSandbox(base, key, created);
  const remove = async (id: string): Promise<void> => {
    await request(base, key, "DELETE", `/api/v1/sandboxes/${id}`);
    created.splice(created.indexOf(id), 1);
  };
  try {
    await sleep(1000);
    const idleBefore = await idleRss(service.pid);

    log(
      `[sandboxes] start→RUNNING × ${SANDBOX_SAMPLES} (2 warm-up starts; ${DEFAULT_WARM_AGENTS} warm agents)`,
    );
    const starts = await sandboxStarts(base, key, created);
    log(`[sandboxes] start→RUNNING p50/p99 ${latencyCell(starts)}`);
    rows.push({
      bench: "sandboxes",
      what: `process sandbox start→RUNNING, p50 / p99 (n=${SANDBOX_SAMPLES}; ${DEFAULT_WARM_AGENTS} warm agents, the default)`,
      ours: latencyCell(starts),
      baseline: `${latencyCell(coldStarts)} (no warm agents: the agent's Node process boots in every start)`,
      ratio: `p50 ${fmt(percentile(starts, 50) / percentile(coldStarts, 50), 2)}×`,
      target: "≤ 100 / 300 ms",
      pass: percentile(starts, 50) <= 100 && percentile(starts, 99) <= 300,
      data: { warm: starts, cold: coldStarts },
    });

    log(`[sandboxes] pause and resume × ${SANDBOX_SAMPLES}`);
    const { id } = await startOne();
    const pauses: number[] = [];
    const resumes: number[] = [];
    for (let i = 0; i < SANDBOX_SAMPLES + 2; i++) {
      let t0 = performance.now();
      const p = await request(base, key, "POST", `/api/v1/sandboxes/${id}/pause`);
      const pauseMs = performance.now() - t0;
      t0 = performance.now();
      const r = await request(base, key, "POST", `/api/v1/sandboxes/${id}/resume`);
      const resumeMs = performance.now() - t0;
      if (p.status !== 200 || r.status !== 200) throw new Error(`pause/resume: ${p.text} ${r.text}`);
      if (i < 2) continue; // warm-up
      pauses.push(pauseMs);
      resumes.push(resumeMs);
    }
    const after = await request(base, key, "GET", `/api/v1/sandboxes?id=${id}`);
    const finalStatus = (after.json as (SandboxJson | null)[])[0]?.status;
    await remove(id);
    log(
      `[sandboxes] pause ${latencyCell(pauses)} · resume ${latencyCell(resumes)} (final status ${finalStatus})`,
    );
    for (const [what, values] of [
      ["pause", pauses],
      ["resume (answers once the agent is healthy again)", resumes],
    ] as const) {
      rows.push({
        bench: "sandboxes",
        what: `sandbox ${what} via REST, p50 / p99 (n=${SANDBOX_SAMPLES})`,
        ours: latencyCell(values),
        baseline: "—",
        ratio: "—",
        target: "≤ 50 ms p50",
        pass: percentile(values, 50) <= 50 && finalStatus === "RUNNING",
        data: values,
      });
    }

    log(`[sandboxes] ${PAUSED_SANDBOXES} paused sandboxes: starting`);
    const ids: string[] = [];
    for (let i = 0; i < PAUSED_SANDBOXES; i++) ids.push((await startOne()).id);
    for (const sid of ids) await request(base, key, "POST", `/api/v1/sandboxes/${sid}/pause`);
    const search = await request(base, key, "GET", "/api/v1/sandboxes/search?limit=100");
    const paused = ((search.json as { items: SandboxJson[] }).items ?? []).filter(
      (x) => x.status === "PAUSED",
    ).length;
    await sleep(2000);
    const withPaused = await idleRss(service.pid, 2000);
    log(
      `[sandboxes] RSS idle ${fmt(idleBefore, 1)} MiB before, ${fmt(withPaused, 1)} MiB with ${paused} paused`,
    );
    rows.push({
      bench: "sandboxes",
      what: `server RSS idle with ${paused} paused sandboxes`,
      ours: `${fmt(withPaused, 1)} MiB`,
      baseline: `${fmt(idleBefore, 1)} MiB before any sandbox`,
      ratio: "—",
      target: "≤ 150 MB",
      pass: paused === PAUSED_SANDBOXES && withPaused * 1.048576 <= 150,
    });
  } finally {
    log(`[sandboxes] removing ${created.length} sandboxes`);
    for (const id of [...created]) await remove(id).catch(() => undefined);
    await stop(service);
  }
}

// ---------------------------------------------------------------------------------------------------------------

/**
 * Docker runtime latencies (start→RUNNING, pause, resume→RUNNING) on the engine of DOCKER_HOST with the image of
 * WORKSPACE_TEST_DOCKER_IMAGE (what .ci/docker.sh builds offline: Node + the built-in agent), network host.
 * Reported as not available where there is no engine or image.
 */
async function dockerBenchmarks(): Promise<void> {
  if (!selected("docker")) return;
  const socket = process.env.DOCKER_HOST?.startsWith("unix://")
    ? process.env.DOCKER_HOST.slice(7)
    : "/var/run/docker.sock";
  const image = process.env.WORKSPACE_TEST_DOCKER_IMAGE;
  const { default: Docker } = await import("dockerode");
  const { createDockerRuntime } = await import("../src/sandbox/docker/docker-runtime.ts");
  const docker = new Docker({ socketPath: socket });
  const unavailable = (why: string) =>
    rows.push({
      bench: "docker",
      what: "Docker sandbox start→RUNNING, p50",
      ours: `not available: ${why}`,
      baseline: "—",
      ratio: "—",
      target: "≤ 800 ms p50",
      pass: null,
    });
  try {
    await docker.ping();
  } catch {
    unavailable("no Docker engine (DOCKER_HOST)");
    return;
  }
  if (image === undefined) {
    unavailable("WORKSPACE_TEST_DOCKER_IMAGE not set (source .ci/docker.sh; docker_up)");
    return;
  }
  const runtime = benchDockerRuntime(createDockerRuntime, docker);
  const starts: number[] = [];
  const pauses: number[] = [];
  const resumes: number[] = [];
  try {
    for (let i = 0; i < SANDBOX_SAMPLES + 2; i++) {
      const t0 = performance.now();
      const handle = await runtime.start({
        sandboxId: `bench${i}${Date.now().toString(36)}`,
        spec: { id: image, command: [], initialEnv: {}, workingDir: "/workspace/project" },
        sessionApiKey: "bench-key",
      });
      if (!(await runtime.waitHealthy(handle, 30_000)))
        throw new Error("container agent never became healthy");
      const started = performance.now() - t0;
      let t = performance.now();
      await runtime.pause(handle);
      const paused = performance.now() - t;
      t = performance.now();
      const resumed = await runtime.resume(handle);
      if (!(await runtime.waitHealthy(resumed, 30_000)))
        throw new Error("container agent unhealthy after resume");
      const resumeMs = performance.now() - t;
      await runtime.remove(resumed);
      if (i < 2) continue; // warm-up
      starts.push(started);
      pauses.push(paused);
      resumes.push(resumeMs);
    }
  } finally {
    await runtime.removeAll();
  }
  log(
    `[docker] start→RUNNING ${latencyCell(starts)} · pause ${latencyCell(pauses)} · resume ${latencyCell(resumes)}`,
  );
  rows.push({
    bench: "docker",
    what: `Docker sandbox start→RUNNING, p50 / p99 (n=${starts.length})`,
    ours: latencyCell(starts),
    baseline: "—",
    ratio: "—",
    target: "≤ 800 ms p50",
    pass: percentile(starts, 50) <= 800,
    data: starts,
  });
  rows.push({
    bench: "docker",
    what: `Docker sandbox pause / resume→RUNNING, p50 (n=${pauses.length})`,
    ours: `${fmt(percentile(pauses, 50), 1)} / ${fmt(percentile(resumes, 50), 1)} ms`,
    baseline: "—",
    ratio: "—",
    target: "—",
    pass: null,
    data: { pauses, resumes },
  });
}

/** A conversation start's body: no repository, a model (a start needs one; no message is run, so it is never called). */
const START_BODY = JSON.stringify({ llm_model: "openai/bench" });

/**
 * Starts `n` conversations without repository one after another, each polled to READY: the time of each, start
 * request to READY. The user gets a model first (a start needs one).
 */
async function timeConversationStarts(
  base: string,
  key: string,
  n: number,
  timeoutMs: number,
): Promise<number[]> {
  const stored = await request(
    base,
    key,
    "POST",
    "/api/settings",
    JSON.stringify({ llm_model: "openai/bench" }),
  );
  if (stored.status !== 200) throw new Error(`storing the model failed: ${stored.status} ${stored.text}`);
  const timings: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const res = await request(base, key, "POST", "/api/v1/app-conversations", START_BODY);
    let task = res.json as { id: string; status: string; detail?: string | null };
    const deadline = Date.now() + timeoutMs;
    while (task.status !== "READY" && task.status !== "ERROR" && Date.now() < deadline) {
      await sleep(2);
      const got = await request(base, key, "GET", `/api/v1/app-conversations/start-tasks?ids=${task.id}`);
      task = (got.json as (typeof task | null)[])[0] ?? task;
    }
    if (task.status !== "READY") throw new Error(`conversation start ended ${task.status}: ${task.detail}`);
    timings.push(performance.now() - t0);
  }
  return timings;
}

/** The benchmarks' Docker runtime: the host network, containers labelled for removal, a short stop. */
const benchDockerRuntime = (
  create: typeof import("../src/sandbox/docker/docker-runtime.ts").createDockerRuntime,
  docker: import("dockerode"),
) => create({ docker, network: "host", labels: { "workspace.bench": "1" }, stopTimeoutSeconds: 2 });

/** Starts with a stand-in boot delay of several seconds, as the Python agent-server's: few samples. */
const AGENT_SERVER_SAMPLES = QUICK ? 3 : 8;

/**
 * The OpenHands agent-server on Docker, through its stand-in image (WORKSPACE_TEST_AGENT_SERVER_IMAGE, made by
 * .ci/docker.sh), which takes seconds to boot like the Python server: a sandbox of the default spec start→RUNNING
 * (the runtime alone), and a conversation start→READY through a service on the Docker runtime. The figures a user
 * of the real image meets; no baseline.
 */
async function agentServerBenchmarks(): Promise<void> {
  if (!selected("docker")) return;
  const image = process.env.WORKSPACE_TEST_AGENT_SERVER_IMAGE;
  const row = (what: string, ours: string, data?: unknown): void => {
    rows.push({ bench: "docker", what, ours, baseline: "—", ratio: "—", target: "—", pass: null, data });
  };
  const socket = process.env.DOCKER_HOST?.startsWith("unix://")
    ? process.env.DOCKER_HOST.slice(7)
    : undefined;
  const { default: Docker } = await import("dockerode");
  const docker = new Docker(socket === undefined ? {} : { socketPath: socket });
  const absent = image === undefined ? "WORKSPACE_TEST_AGENT_SERVER_IMAGE not set" : null;
  if (
    absent !== null ||
    !(await docker.ping().then(
      () => true,
      () => false,
    ))
  ) {
    row(
      "agent-server (stand-in) Docker sandbox start→RUNNING",
      `not available: ${absent ?? "no Docker engine"}`,
    );
    return;
  }
  const { createDockerRuntime } = await import("../src/sandbox/docker/docker-runtime.ts");
  const { defaultSpecs } = await import("../src/server/sandbox-specs.ts");
  const [spec] = defaultSpecs({ kind: "docker", image: image as string }, new Date());
  const runtime = benchDockerRuntime(createDockerRuntime, docker);
  const starts: number[] = [];
  try {
    for (let i = 0; i < AGENT_SERVER_SAMPLES && spec !== undefined; i++) {
      const t0 = performance.now();
      const handle = await runtime.start({
        sandboxId: `benchas${i}${Date.now().toString(36)}`,
        spec: { ...spec, initialEnv: { ...spec.initialEnv } },
        sessionApiKey: "bench-key-0123",
      });
      if (!(await runtime.waitHealthy(handle, 60_000)))
        throw new Error("the agent-server never became healthy");
      starts.push(performance.now() - t0);
      await runtime.remove(handle);
    }
  } finally {
    await runtime.removeAll();
  }
  log(`[docker] agent-server start→RUNNING ${latencyCell(starts)}`);
  row(
    `agent-server (stand-in, seconds of boot) Docker sandbox start→RUNNING, p50 / p99 (n=${starts.length})`,
    latencyCell(starts),
    starts,
  );
  const service = await startService("service-agent-server", ["--docker-image", image as string]);
  try {
    const base = `http://127.0.0.1:${service.info.port}`;
    const timings = await timeConversationStarts(base, service.info.key, AGENT_SERVER_SAMPLES, 120_000);
    log(`[docker] agent-server conversation start→READY ${latencyCell(timings)}`);
    row(
      `agent-server (stand-in) on Docker: conversation start→READY without repository, p50 / p99 (n=${timings.length})`,
      latencyCell(timings),
      timings,
    );
  } finally {
    await stop(service);
  }
}

async function conversationBenchmarks(): Promise<void> {
  if (!selected("conversations")) return;
  const implemented = existsSync(join(ROOT, "src", "services", "conversations"));
  log(`[conversations] starting a service with ${fmt(CONVERSATION_ROWS)} stored conversations`);
  const service = await startService("service-conversations", ["--conversations", String(CONVERSATION_ROWS)]);
  const { key } = service.info;
  const base = `http://127.0.0.1:${service.info.port}`;
  try {
    const probe = await request(base, key, "GET", "/api/v1/app-conversations/search?limit=100");
    if (probe.status !== 200) {
      log(`[conversations] search: not available (${probe.status})`);
      rows.push({
        bench: "conversations",
        what: `conversation search over ${fmt(CONVERSATION_ROWS)} stored rows, p99`,
        ours: "not available",
        baseline: "—",
        ratio: "—",
        target: "≤ 20 ms p99",
        pass: null,
      });
    } else {
      log("[conversations] search × 200 pages of 100 (10 warm-up)");
      for (let i = 0; i < 10; i++)
        await request(base, key, "GET", "/api/v1/app-conversations/search?limit=100");
      const timings: number[] = [];
      let pageId: string | null = null;
      for (let i = 0; i < 200; i++) {
        const query: string = `/api/v1/app-conversations/search?limit=100${i % 4 === 3 ? "&include_sub_conversations=true" : ""}${pageId ? `&page_id=${encodeURIComponent(pageId)}` : ""}`;
        const t0 = performance.now();
        const res = await request(base, key, "GET", query);
        timings.push(performance.now() - t0);
        if (res.status !== 200) throw new Error(`search: ${res.status} ${res.text}`);
        pageId = (res.json as { next_page_id?: string | null }).next_page_id ?? null;
      }
      log(`[conversations] search p50/p99 ${latencyCell(timings)}`);
      rows.push({
        bench: "conversations",
        what: `conversation search via REST over ${fmt(CONVERSATION_ROWS)} stored rows (pages of 100), p50 / p99`,
        ours: latencyCell(timings),
        baseline: "—",
        ratio: "—",
        target: "≤ 20 ms p99",
        pass: percentile(timings, 99) <= 20,
        data: timings,
      });
    }

    const startRow: Row = {
      bench: "conversations",
      what: "conversation start→READY without repository, p50 / p99",
      ours: "not available",
      baseline: "—",
      ratio: "—",
      target: "≤ 300 ms p50",
      pass: null,
    };
    if (implemented) {
      const first = await request(base, key, "POST", "/api/v1/app-conversations", START_BODY);
      if (first.status === 200) {
        // The first start is the warm-up.
        const timings = (await timeConversationStarts(base, key, CONVERSATION_STARTS + 1, 30_000)).slice(1);
        log(`[conversations] start→READY p50/p99 ${latencyCell(timings)}`);
        Object.assign(startRow, {
          what: `conversation start→READY without repository, p50 / p99 (n=${CONVERSATION_STARTS})`,
          ours: latencyCell(timings),
          pass: percentile(timings, 50) <= 300,
          data: timings,
        });
      } else {
        startRow.ours = `not available (${first.status})`;
      }
    }
    rows.push(startRow);
  } finally {
    await stop(service);
  }
}

/**
 * Two servers (`npm start`'s compiled server) on one DATA_DIR, as replicas behind a load balancer: the time from a
 * write request on one to the WatchSandboxes answer on the other, for pauses and resumes of one sandbox.
 */
async function replicaBenchmarks(): Promise<void> {
  if (!selected("replicas")) return;
  const dataDir = join(work, "replicas");
  mkdirSync(dataDir, { recursive: true });
  const cli = join(ROOT, "dist", "src", "cli", "main.js");
  const env = { ...START.env, DATA_DIR: dataDir, LOG_LEVEL: SERVICE_LOG_LEVEL, RATE_LIMIT_PER_SECOND: "0" };
  const made = spawnSync(process.execPath, [cli, "keys", "create", "--init", "--user", "bench-user"], {
    env: { ...process.env, ...env },
    encoding: "utf8",
  });
  if (made.status !== 0) throw new Error(`replicas: keys create failed: ${made.stderr}`);
  const key = made.stdout.trim().split("\n").at(-1) ?? "";
  const replica = async (name: string) => {
    const port = await freePort();
    const grpcPort = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const child = await start<unknown>({
      name,
      command: process.execPath,
      args: [...SERVICE_NODE_FLAGS, cli, "serve"],
      env: { ...env, PORT: String(port), GRPC_PORT: String(grpcPort) },
      logPath: join(work, `${name}.log`),
      ready: async () => (await fetch(`${base}/alive`)).ok,
    });
    return { child, base };
  };
  log("[replicas] starting two servers on one DATA_DIR");
  const a = await replica("replica-a");
  const b = await replica("replica-b");
  try {
    const created = await request(a.base, key, "POST", "/api/v1/sandboxes");
    if (created.status !== 200) throw new Error(`replicas: sandbox start ${created.status} ${created.text}`);
    const id = (created.json as { id: string }).id;
    const { createClient } = await import("@connectrpc/connect");
    const { createConnectTransport } = await import("@connectrpc/connect-node");
    const { SandboxService, SandboxStatus } = await import("../src/gen/workspace/v1/sandbox_pb.js");
    const abort = new AbortController();
    /** A WatchSandboxes client on `base`; `seen(status)` resolves with the time that status next arrives. */
    const watcher = (base: string) => {
      const client = createClient(
        SandboxService,
        createConnectTransport({
          baseUrl: base,
          httpVersion: "1.1",
          interceptors: [
            (next) => async (req) => {
              req.header.set("x-session-api-key", key);
              return next(req);
            },
          ],
        }),
      );
      const waiters: { status: number; resolve: (t: number) => void }[] = [];
      const running = (async () => {
        try {
          for await (const m of client.watchSandboxes({ id: [id] }, { signal: abort.signal })) {
            const now = performance.now();
            const status = m.sandbox?.status ?? 0;
            for (const w of waiters.splice(0)) {
              if (w.status === status) w.resolve(now);
              else waiters.push(w);
            }
          }
        } catch {
          // cancelled at the end
        }
      })();
      const seen = (status: number) => new Promise<number>((resolve) => waiters.push({ status, resolve }));
      return { running, seen };
    };
    // The baseline: the same watch on the server that makes the change (woken at once, no log poll between).
    const same = watcher(a.base);
    const other = watcher(b.base);
    await new Promise((r) => setTimeout(r, 500));
    const across: number[] = [];
    const local: number[] = [];
    const n = QUICK ? 20 : 100;
    log(`[replicas] ${n} pauses and resumes through server A, watched on A and on B`);
    for (let i = 0; i < n; i++) {
      for (const [action, status] of [
        ["pause", SandboxStatus.PAUSED],
        ["resume", SandboxStatus.STARTING],
      ] as const) {
        const onA = same.seen(status);
        const onB = other.seen(status);
        const t0 = performance.now();
        const r = await request(a.base, key, "POST", `/api/v1/sandboxes/${id}/${action}`);
        if (r.status !== 200) throw new Error(`replicas: ${action} ${r.status} ${r.text}`);
        local.push((await onA) - t0);
        across.push((await onB) - t0);
      }
    }
    abort.abort();
    await Promise.all([same.running, other.running]);
    const p50 = percentile(across, 50);
    const p99 = percentile(across, 99);
    const base50 = percentile(local, 50);
    const base99 = percentile(local, 99);
    const signed = (ms: number): string => `${ms < 0 ? "−" : "+"}${fmt(Math.abs(ms), 1)}`;
    log(
      `[replicas] write on A → watch answer on B: p50 ${fmt(p50, 1)} ms, p99 ${fmt(p99, 1)} ms (on A itself: p50 ${fmt(base50, 1)} ms, p99 ${fmt(base99, 1)} ms)`,
    );
    rows.push({
      bench: "replicas",
      what: `watch latency across servers: a pause or resume sent to server A until the WatchSandboxes answer on server B (same SQLite file); baseline: the same watch on A itself; ${across.length} changes, p50 / p99`,
      ours: `${fmt(p50, 1)} / ${fmt(p99, 1)} ms`,
      baseline: `${fmt(base50, 1)} / ${fmt(base99, 1)} ms`,
      ratio: `${signed(p50 - base50)} / ${signed(p99 - base99)} ms`,
      target: "p99 ≤ 50 ms",
      pass: p99 <= 50,
      data: { changes: across.length, p50, p99, sameServerP50: base50, sameServerP99: base99 },
    });
    await request(a.base, key, "DELETE", `/api/v1/sandboxes/${id}`);
  } finally {
    await stop(a.child);
    await stop(b.child);
  }
}

/** The process `pid` and its descendants. */
function processTree(pid: number): number[] {
  const out = [pid];
  for (let i = 0; i < out.length; i++) {
    try {
      for (const tid of readdirSync(`/proc/${out[i]}/task`)) {
        const text = readFileSync(`/proc/${out[i]}/task/${tid}/children`, "utf8").trim();
        if (text !== "") out.push(...text.split(/\s+/).map(Number));
      }
    } catch {
      // gone
    }
  }
  return out;
}

/**
 * WORKERS=2 against WORKERS=1: `npm start`'s compiled server (the real `serve` command, so the cluster primary and
 * its workers as users run them), each on its own DATA_DIR, its log (stdout, at the production level) in a file,
 * loaded alternately by the same autocannon load as the REST benchmarks. CPU is that of the whole process tree.
 */
async function workerBenchmarks(): Promise<void> {
  if (!selected("workers")) return;
  const WORKERS = 2;
  const cli = join(ROOT, "dist", "src", "cli", "main.js");
  const key = "bench-workers-key";
  const server = async (workers: number): Promise<{ child: ServerChild<unknown>; base: string }> => {
    const name = `workers-${workers}`;
    const dataDir = join(work, name);
    mkdirSync(dataDir, { recursive: true });
    const port = await freePort();
    const grpcPort = await freePort();
    const logPath = join(work, `${name}.log`);
    const fd = openSync(logPath, "a");
    log(`  starting ${name} (WORKERS=${workers})`);
    const proc = spawn(process.execPath, [...SERVICE_NODE_FLAGS, cli, "serve"], {
      cwd: ROOT,
      stdio: ["ignore", fd, fd],
      env: {
        ...process.env,
        ...START.env,
        WORKERS: String(workers),
        DATA_DIR: dataDir,
        PORT: String(port),
        GRPC_PORT: String(grpcPort),
        SESSION_API_KEY: key,
        LOG_LEVEL: SERVICE_LOG_LEVEL,
        GIT_PROVIDER_VERIFY: "false",
        // No sandbox is started here: warm agents would only add their processes to the tree's RSS and CPU.
        SANDBOX_WARM_AGENTS: "0",
        // As for the REST benchmarks' service: the limiter stays on the hot path without ever answering 429.
        RATE_LIMIT_PER_SECOND: "1000000",
        RATE_LIMIT_BURST: "10000000",
      },
    });
    closeSync(fd);
    const exited = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
    const child: ServerChild<unknown> = {
      proc,
      pid: proc.pid ?? 0,
      info: {},
      logPath,
      stop: async () => {
        if (proc.exitCode !== null || proc.signalCode !== null) return;
        proc.kill("SIGTERM");
        const killer = setTimeout(() => proc.kill("SIGKILL"), 45_000);
        await exited;
        clearTimeout(killer);
      },
    };
    children.add(child);
    // Ready once every worker listens (the primary says so), or once the single server does.
    const readyLine =
      workers > 1 ? `"cluster primary started ${workers} workers"` : '"agent workspace service listening"';
    const deadline = Date.now() + 120_000;
    while (!readFileSync(logPath, "utf8").includes(readyLine)) {
      if (proc.exitCode !== null || Date.now() > deadline) {
        await stop(child);
        throw new Error(`${name} did not start; log: ${logPath}`);
      }
      await sleep(100);
    }
    return { child, base: `http://127.0.0.1:${port}` };
  };
  const cores = availableParallelism();
  const one = await server(1);
  const two = await server(WORKERS);
  try {
    const tree = (pid: number) => () => processTree(pid).reduce((sum, p) => sum + (cpuSeconds(p) || 0), 0);
    const treeRss = (pid: number) => processTree(pid).reduce((sum, p) => sum + (rssMiB(p) || 0), 0);
    const config = (base: string) => ({
      url: `${base}/api/settings`,
      method: "GET" as const,
      headers: { "x-session-api-key": key },
    });
    for (const { base } of [one, two]) {
      const stored = await request(base, key, "POST", "/api/settings", SETTINGS_BODY);
      if (stored.status !== 200)
        throw new Error(`workers: seeding settings failed: ${stored.status} ${stored.text}`);
    }
    await sleep(1000);
    const idle = { one: treeRss(one.child.pid), two: treeRss(two.child.pid) };
    log(
      `[workers] idle RSS: WORKERS=1 ${fmt(idle.one, 1)} MiB, WORKERS=${WORKERS} ${fmt(idle.two, 1)} MiB (primary and workers)`,
    );
    const alt = await alternate(
      "workers",
      { pid: two.child.pid, load: httpLoad(config(two.base)), cpu: tree(two.child.pid) },
      { pid: one.child.pid, load: httpLoad(config(one.base)), cpu: tree(one.child.pid) },
      "req/s",
    );
    const row = ratioRow(
      "workers",
      `REST GET /api/settings (SQLite), WORKERS=${WORKERS} against WORKERS=1 (npm start; CPU of all processes)`,
      alt,
      "WORKERS=1",
      1.6,
      "req/s",
    );
    const measurable = cores >= WORKERS + 1;
    if (!measurable) {
      const note = `not measurable here: ${cores} CPUs for ${WORKERS} workers and the load generator (needs ≥ ${WORKERS + 1})`;
      log(`[workers] ${note}`);
      row.ratio = `${row.ratio} — ${note}`;
      row.pass = null;
    }
    row.data = { ...alt, cores, measurable, idleRssMiB: idle };
    rows.push(row);
  } finally {
    await stop(two.child);
    await stop(one.child);
  }
}

/**
 * Events: webhook ingest (every event durable before the answer) against a bare Fastify + better-sqlite3 endpoint
 * committing each request with synchronous = FULL on the same schema, then searches over STORED_EVENTS stored
 * events against the same bare server running the same SQL on the service's file.
 */
async function eventBenchmarks(): Promise<void> {
  if (!selected("events")) return;
  log("[events] starting a service and a conversation (its sandbox reports through the webhook)");
  const service = await startService("service-events");
  const { key } = service.info;
  const base = `http://127.0.0.1:${service.info.port}`;
  let bare: ServerChild<{ port: number; pid: number }> | null = null;
  try {
    const task = (await request(base, key, "POST", "/api/v1/app-conversations", START_BODY)).json as {
      id: string;
    };
    let ready: { status: string; app_conversation_id: string; sandbox_id: string } | undefined;
    for (let i = 0; i < 3000 && ready?.status !== "READY"; i++) {
      await sleep(10);
      ready = (
        (await request(base, key, "GET", `/api/v1/app-conversations/start-tasks?ids=${task.id}`))
          .json as (typeof ready)[]
      )[0];
    }
    if (ready?.status !== "READY") throw new Error(`events: conversation start ended ${ready?.status}`);
    const sandbox = (
      (await request(base, key, "GET", `/api/v1/sandboxes?id=${ready.sandbox_id}`)).json as {
        session_api_key: string;
      }[]
    )[0];
    const sandboxKey = sandbox?.session_api_key ?? "";
    bare = await start<{ port: number; pid: number }>({
      name: "bare-events",
      command: process.execPath,
      args: [compiled("bare-events"), join(work, "bare-events.sqlite")],
      logPath: join(work, "bare-events.log"),
    });
    const conversation = ready.app_conversation_id;
    const ours = `${base}/api/v1/webhooks/${ready.sandbox_id}/events/${conversation}`;
    const baseline = `http://127.0.0.1:${bare.info.port}/events/${conversation}`;
    for (const batch of [1, 5]) {
      const side = (pid: number, url: string, headers: Record<string, string>): Side => ({
        pid,
        load: (durationS) =>
          runLoad("events-load.ts", { url, headers, batch, connections: CONNECTIONS, durationS }),
      });
      const alt = await alternate(
        `events ingest ×${batch}`,
        side(service.pid, ours, { "x-session-api-key": sandboxKey }),
        side(bare.pid, baseline, {}),
        "req/s",
      );
      const row = ratioRow(
        "events",
        `webhook event ingest, ${batch} event${batch > 1 ? "s" : ""} per POST (durable before the answer), events/s`,
        alt,
        "bare Fastify + SQLite, FULL commit per request",
        0,
        "req/s",
      );
      const eventsPerS = median(alt.ours.map((r) => r.rps)) * batch;
      const failed = alt.ours.reduce((n, r) => n + r.failed, 0);
      rows.push({
        ...row,
        ours: `${fmt(eventsPerS)} events/s; ${row.ours}`,
        baseline: `${fmt(median(alt.baseline.map((r) => r.rps)) * batch)} events/s; ${row.baseline}`,
        target: "≥ 5,000 events/s",
        pass: failed === 0 && eventsPerS >= 5000,
      });
    }
    const counted = (
      await request(base, key, "GET", `/api/v1/events/count?conversation_id__eq=${conversation}`)
    ).json as number;
    log(`[events] ${fmt(counted)} events stored in the benchmark conversation`);
  } finally {
    await stop(bare as ServerChild<unknown> | null);
    await stop(service);
  }

  log(`[events] starting a service with ${fmt(STORED_EVENTS)} stored events`);
  const loaded = await startService("service-events-search", ["--events", String(STORED_EVENTS)]);
  const lbase = `http://127.0.0.1:${loaded.info.port}`;
  bare = null;
  try {
    bare = await start<{ port: number; pid: number }>({
      name: "bare-events-search",
      command: process.execPath,
      args: [compiled("bare-events"), join(loaded.info.dir, "workspace.sqlite")],
      logPath: join(work, "bare-events-search.log"),
    });
    const bbase = `http://127.0.0.1:${bare.info.port}`;
    const conversations = STORED_EVENTS / EVENTS_PER_CONVERSATION;
    const queries = Array.from({ length: EVENT_SEARCHES + 10 }, (_, i) => {
      const c = benchEventConversation((i * 7919) % conversations);
      return i % 3 === 0
        ? `conversation_id__eq=${c}`
        : i % 3 === 1
          ? `conversation_id__eq=${c}&kind__eq=ActionEvent`
          : "";
    });
    const time = async (url: (q: string) => string, auth: string) => {
      const timings: number[] = [];
      for (const [i, q] of queries.entries()) {
        const t0 = performance.now();
        const res = await request(url(q), auth, "GET", "");
        if (i >= 10) timings.push(performance.now() - t0); // the first 10 are the warm-up
        if (res.status !== 200 || (res.json as { items: unknown[] }).items.length !== 100)
          throw new Error(`events search ${q}: ${res.status} ${res.text.slice(0, 200)}`);
      }
      return timings;
    };
    log(`[events] search × ${EVENT_SEARCHES} (pages of 100) on ours and on the baseline`);
    const oursT = await time((q) => `${lbase}/api/v1/events/search?limit=100&${q}`, loaded.info.key);
    const baseT = await time((q) => `${bbase}/search?${q}`, "");
    log(`[events] search p50/p99 ours ${latencyCell(oursT)} · baseline ${latencyCell(baseT)}`);
    rows.push({
      bench: "events",
      what: `events search via REST over ${fmt(STORED_EVENTS)} stored events (by conversation, conversation+kind, all; pages of 100), p50 / p99`,
      ours: latencyCell(oursT),
      baseline: `${latencyCell(baseT)} (bare Fastify + SQLite, same SQL)`,
      ratio: `p99 ${fmt(percentile(oursT, 99) / percentile(baseT, 99), 2)}× the baseline's`,
      target: "≤ 20 ms p99",
      pass: percentile(oursT, 99) <= 20,
      data: { ours: oursT, baseline: baseT },
    });
    const countT: number[] = [];
    for (let i = 0; i < EVENT_SEARCHES + 10; i++) {
      const c = benchEventConversation((i * 7919) % conversations);
      const t0 = performance.now();
      const res = await request(
        lbase,
        loaded.info.key,
        "GET",
        `/api/v1/events/count?conversation_id__eq=${c}`,
      );
      if (i >= 10) countT.push(performance.now() - t0);
      if (res.json !== EVENTS_PER_CONVERSATION) throw new Error(`events count: ${res.text}`);
    }
    log(`[events] count p50/p99 ${latencyCell(countT)}`);
    rows.push({
      bench: "events",
      what: `events count of a conversation (the UI's call) over ${fmt(STORED_EVENTS)} stored events, p50 / p99`,
      ours: latencyCell(countT),
      baseline: "—",
      ratio: "—",
      target: "≤ 20 ms p99",
      pass: percentile(countT, 99) <= 20,
      data: countT,
    });
  } finally {
    await stop(bare as ServerChild<unknown> | null);
    await stop(loaded);
  }
}

// ---------------------------------------------------------------------------------------------------------------

function table(): string {
  const lines = [
    "| Benchmark | Ours | Baseline | Ratio | Target | Result |",
    "| --- | --- | --- | --- | --- | --- |",
  ];
  for (const r of rows) {
    const result = r.pass === null ? "n/a" : r.pass ? "pass" : "**FAIL**";
    lines.push(`| ${r.what} | ${r.ours} | ${r.baseline} | ${r.ratio} | ${r.target} | ${result} |`);
  }
  return lines.join("\n");
}

const m = machine();
const startedAt = new Date();
log(`machine: ${machineLine(m)}`);
log(
  `rounds: ${ROUNDS} per side, ${ROUND_S} s each (warm-up ${WARMUP_S} s), ${CONNECTIONS} connections${QUICK ? " (--quick)" : ""}`,
);
let failure: unknown = null;
try {
  await throughputBenchmarks();
  await sandboxBenchmarks();
  await dockerBenchmarks();
  await agentServerBenchmarks();
  if (selected("docker-warm"))
    rows.push(...(await dockerWarmPool({ startService, stop, log, quick: QUICK })));
  await conversationBenchmarks();
  await eventBenchmarks();
  await replicaBenchmarks();
  await workerBenchmarks();
  if (selected("builtin-agent"))
    rows.push(...(await builtinAgentBenchmarks({ samples: QUICK ? 20 : 100, log })));
} catch (err) {
  failure = err;
  log(`benchmark failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
} finally {
  await Promise.all([...children].map((c) => c.stop()));
}
// Rows in the order of the issue: throughput, absolute latencies, memory.
const order: Row["bench"][] = [
  "rest-get",
  "rest-post",
  "grpc",
  "connect",
  "reference",
  "sandboxes",
  "docker-warm",
  "conversations",
  "events",
  "replicas",
  "workers",
  "builtin-agent",
  "rss",
];
rows.sort((a, b) => order.indexOf(a.bench) - order.indexOf(b.bench));

const settingsLine = `${ROUNDS} alternating rounds per side of ${ROUND_S} s (after ${WARMUP_S} s warm-up), ${CONNECTIONS} connections / calls in flight, loopback; ratios are medians of per-round ratios`;
const markdown = `${table()}\n\nMachine: ${machineLine(m)}. Run ${startedAt.toISOString().slice(0, 16).replace("T", " ")} UTC; ${settingsLine}.\n`;
process.stdout.write(`\n${markdown}`);

const partial = QUICK || only !== null;
const resultsDir = join(ROOT, "bench", "results");
mkdirSync(resultsDir, { recursive: true });
const stem = join(resultsDir, partial ? "partial" : "latest");
writeFileSync(`${stem}.md`, markdown);
writeFileSync(
  `${stem}.json`,
  `${JSON.stringify({ startedAt, machine: m, quick: QUICK, only, rounds: ROUNDS, roundSeconds: ROUND_S, connections: CONNECTIONS, rows, error: failure === null ? null : String(failure) }, null, 2)}\n`,
);
// Keep the committed JSON in the formatter's shape so `biome check` stays clean.
spawnSync(join(ROOT, "node_modules", ".bin", "biome"), ["format", "--write", `${stem}.json`], {
  stdio: "ignore",
});
log(`wrote ${stem}.md and ${stem}.json`);
if (failure === null) rmSync(work, { recursive: true, force: true });
else log(`server logs kept in ${work}`);
process.exit(failure === null ? 0 : 1);
