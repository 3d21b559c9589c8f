// `npm run soak`: the service under churn, as users meet it. A real server process (node src/cli/main.ts serve, a
// SQLite file, process sandboxes) gets the mix of issue 30 from N users at once: settings over REST, Connect and
// gRPC; secrets created, listed, deleted; sandboxes started, paused, resumed, deleted; conversations started to
// READY and deleted; events posted through the agent webhook, searched and counted; two WatchSandboxes streams
// reopened periodically. Part-way through, the server is killed with SIGKILL and started again on the same data.
// After the load, everything is deleted. Prints one table per phase and the verdicts; exits 1 when one fails. The
// settings read is reported per protocol as the users, a probe in its own process and the server itself (its call
// metrics) timed it, to the status and from the handler to the answer, and one verdict compares the server's
// handler-to-answer p50 across REST, Connect and gRPC.
//
// Options: USAGE below (`npm run soak -- --help`).
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { ConnectError } from "@connectrpc/connect";
import Database from "better-sqlite3";
import { createSqliteStorage } from "../src/adapters/storage/sqlite/sqlite-storage.ts";
import { ApiKeyService } from "../src/domain/keys/api-key-service.ts";
import { SandboxService } from "../src/gen/workspace/v1/sandbox_pb.js";
import { SettingsService } from "../src/gen/workspace/v1/settings_pb.js";
import { connectClient, grpcClient } from "../test/helpers/rpc-clients.ts";
import { freePort, percentile, ROOT, rssMiB, startCommand } from "./lib/bench-util.ts";
import { request } from "./lib/harness.ts";

const USAGE = `usage: npm run soak -- [options]
  --duration S    seconds of load (default 600)
  --users N       users acting at once (default 10)
  --kill-at S     seconds into the load when the server is killed (SIGKILL) and started again
                  (default: half the duration; 0: never)
  --sweep-ms MS   the server's SWEEP_INTERVAL_MS (default 5000)
  --env NAME=VAL  an environment variable for the server (repeatable), e.g. MALLOC_ARENA_MAX=2; the soak
                  sets START_TASK_RETENTION_MS=60000 unless given (failed starts are kept that long)
  --node-flag F   a Node or V8 flag for the server besides npm start's (repeatable),
                  e.g. --node-flag=--max-semi-space-size=4
  --idle-ms MS    idle time after each cleanup before memory is measured (default 30000)
  --rounds N      load and cleanup N times on the same server, the kill in the first (default 1); with 2 or
                  more, a verdict checks that RSS after the last cleanup is within 10 MiB of the first
  --json          also print the result as one JSON line (last line of stdout)
  --keep          keep the data folder (its path is printed)
  --help          this text
Exit status: 0 when every verdict holds, 1 otherwise, 2 for a usage error.`;

function readOptions() {
  let values: Record<string, string | boolean | string[] | undefined>;
  try {
    values = parseArgs({
      options: {
        duration: { type: "string", default: "600" },
        users: { type: "string", default: "10" },
        "kill-at": { type: "string" },
        "sweep-ms": { type: "string", default: "5000" },
        rounds: { type: "string", default: "1" },
        "idle-ms": { type: "string", default: "30000" },
        env: { type: "string", multiple: true, default: [] },
        "node-flag": { type: "string", multiple: true, default: [] },
        json: { type: "boolean", default: false },
        keep: { type: "boolean", default: false },
        help: { type: "boolean", default: false },
      },
    }).values;
  } catch (err) {
    console.error(`${(err as Error).message}\n${USAGE}`);
    process.exit(2);
  }
  if (values.help === true) {
    console.log(USAGE);
    process.exit(0);
  }
  const int = (name: string, min: number, fallback?: number): number => {
    const text = values[name];
    if (text === undefined && fallback !== undefined) return fallback;
    const n = Number(text);
    if (!Number.isInteger(n) || n < min) {
      console.error(`--${name} must be an integer >= ${min}\n${USAGE}`);
      process.exit(2);
    }
    return n;
  };
  const duration = int("duration", 10);
  return {
    durationMs: duration * 1000,
    users: int("users", 1),
    killAtMs: int("kill-at", 0, Math.floor(duration / 2)) * 1000,
    sweepMs: int("sweep-ms", 100),
    rounds: int("rounds", 1),
    idleMs: int("idle-ms", 0),
    serverEnv: Object.fromEntries(
      (values.env as string[]).map((kv) => {
        const eq = kv.indexOf("=");
        if (eq < 1) {
          console.error(`--env takes NAME=VALUE, not ${JSON.stringify(kv)}\n${USAGE}`);
          process.exit(2);
        }
        return [kv.slice(0, eq), kv.slice(eq + 1)];
      }),
    ),
    nodeFlags: values["node-flag"] as string[],
    json: values.json === true,
    keep: values.keep === true,
  };
}

const opts = readOptions();
const dataDir = mkdtempSync(join(tmpdir(), "aws-soak-"));
const dbPath = join(dataDir, "workspace.sqlite");
const workspaceRoot = join(dataDir, "sandboxes");
const log = (msg: string): void => {
  process.stderr.write(`[soak ${((Date.now() - t0) / 1000).toFixed(0).padStart(4)}s] ${msg}\n`);
};
let t0 = Date.now();

// ---- the server -------------------------------------------------------------------------------------------------

const port = await freePort();
const grpcPort = await freePort();
const base = `http://127.0.0.1:${port}`;
/**
 * How long the server keeps a finished start task (START_TASK_RETENTION_MS). A start that failed made no
 * conversation, so no delete of the users' removes its task: it is kept, so that a client can read why the start
 * failed, until the retention sweep deletes it. The soak shortens it from a day to a minute, so that the cleanup
 * verdict checks that sweep: a failed start's task may be left only while it is younger than this.
 */
const TASK_RETENTION_MS = Number(opts.serverEnv.START_TASK_RETENTION_MS ?? 60_000);
/** /metrics wants an API key or METRICS_TOKEN (unless --env sets it, this one). */
const metricsToken = opts.serverEnv.METRICS_TOKEN ?? randomBytes(16).toString("hex");
let server: ChildProcess | null = null;
let serverPid = 0;

async function startServer(): Promise<void> {
  const logFd = openSync(join(dataDir, "server.log"), "a");
  // Node flags and environment of `npm start` (package.json), so the server runs as users run it.
  const start = startCommand();
  const args = [...start.flags, ...opts.nodeFlags, join(ROOT, "src/cli/main.ts"), "serve"];
  const child = spawn(process.execPath, args, {
    cwd: ROOT,
    stdio: ["ignore", logFd, logFd],
    env: {
      ...process.env,
      ...start.env,
      DATA_DIR: dataDir,
      HOST: "127.0.0.1",
      PORT: String(port),
      GRPC_PORT: String(grpcPort),
      SWEEP_INTERVAL_MS: String(opts.sweepMs),
      START_TASK_RETENTION_MS: String(TASK_RETENTION_MS),
      RATE_LIMIT_PER_SECOND: "0",
      LOG_LEVEL: "warn",
      METRICS_TOKEN: metricsToken,
      ...opts.serverEnv,
    },
  });
  server = child;
  serverPid = child.pid ?? 0;
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null)
      throw new Error(`server exited (${child.exitCode}); see ${dataDir}/server.log`);
    try {
      if ((await fetch(`${base}/ready`)).status === 200) return;
    } catch {
      // not listening yet
    }
    await sleep(100);
  }
  throw new Error("server not ready after 120 s");
}

async function stopServer(signal: NodeJS.Signals): Promise<void> {
  const child = server;
  if (child === null || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  child.kill(signal);
  const killer = setTimeout(() => child.kill("SIGKILL"), 20_000);
  await exited;
  clearTimeout(killer);
}

// ---- measurements -----------------------------------------------------------------------------------------------

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const fds = (pid: number): number => {
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return Number.NaN;
  }
};
const fileBytes = (path: string): number => (existsSync(path) ? statSync(path).size : 0);

interface SandboxRow {
  id: string;
  owner_id: string;
  status: string;
  handle: string;
}
/** Reads the store (read-only, a moment each time: the server keeps writing). */
function readStore<T>(fn: (db: Database.Database) => T): T {
  const db = new Database(dbPath, { readonly: true, fileMustExist: true });
  try {
    return fn(db);
  } finally {
    db.close();
  }
}
/** Every sandbox process the store ever named (pid and start time), to find orphans at the end. */
const seenProcesses = new Map<number, string>();
function procState(pid: number, startTime?: string): { alive: boolean; stopped: boolean; startTime: string } {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const state = fields[0] ?? "";
    const start = fields[19] ?? "";
    if (startTime !== undefined && start !== startTime)
      return { alive: false, stopped: false, startTime: start };
    return {
      alive: state !== "Z" && state !== "X",
      stopped: state === "T" || state === "t",
      startTime: start,
    };
  } catch {
    return { alive: false, stopped: false, startTime: "" };
  }
}
function sandboxRows(): SandboxRow[] {
  const rows = readStore(
    (db) => db.prepare("SELECT id, owner_id, status, handle FROM sandboxes").all() as SandboxRow[],
  );
  for (const r of rows) {
    const pid = (JSON.parse(r.handle) as { data?: { pid?: number } }).data?.pid;
    if (typeof pid === "number" && !seenProcesses.has(pid)) {
      const s = procState(pid);
      if (s.alive) seenProcesses.set(pid, s.startTime);
    }
  }
  return rows;
}
/** Sandbox processes still alive among those the store ever named. */
const liveSandboxProcesses = (): number =>
  [...seenProcesses].filter(([pid, start]) => procState(pid, start).alive).length;
/** Bytes of each table with its indexes. */
const tableBytes = (): Record<string, number> =>
  readStore((db) =>
    Object.fromEntries(
      (
        db
          .prepare(
            "SELECT tbl_name AS t, sum(pgsize - unused) AS n FROM dbstat JOIN sqlite_schema USING (name) GROUP BY t",
          )
          .all() as { t: string; n: number }[]
      ).map((r) => [r.t, r.n]),
    ),
  );

/** From the server's /metrics (prom-client's default metrics), MiB. */
interface Memory {
  heapUsed: number;
  heapTotal: number;
  external: number;
}
async function memory(): Promise<Memory> {
  const text = await (
    await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${metricsToken}` } })
  ).text();
  const value = (name: string): number => {
    const m = new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.e+]+)$`, "m").exec(text);
    return m ? Number(m[1]) / 1024 / 1024 : Number.NaN;
  };
  return {
    heapUsed: value("nodejs_heap_size_used_bytes"),
    heapTotal: value("nodejs_heap_size_total_bytes"),
    external: value("nodejs_external_memory_bytes"),
  };
}

/** One series of the server's histograms: whether a line of /metrics is one of its buckets. */
type Series = (line: string) => boolean;
const GET_SETTINGS = 'method="workspace.v1.SettingsService/GetSettings"';
/** A protocol's GetSettings calls answered OK in the handler-to-answer histogram (rpc_answer_duration_seconds). */
const answerSeries =
  (protocol: string): Series =>
  (l) =>
    l.startsWith("rpc_answer_duration_seconds_bucket{") &&
    l.includes(`protocol="${protocol}"`) &&
    l.includes(GET_SETTINGS);

/**
 * The protocols the users and the probe read settings over, and the series of the server's metrics that time their
 * reads: `toStatus`, from the request head to the end of the answer (REST's in the HTTP histogram by its route,
 * Connect's and gRPC's in the call histogram by protocol and method); `answer`, from the handler's start to the
 * answer handed to the transport, on every protocol in one histogram.
 */
const READ_PROTOCOLS = {
  REST: {
    toStatus: (l: string) =>
      l.startsWith("http_request_duration_seconds_bucket{") &&
      l.includes('method="GET"') &&
      l.includes('route="/api/settings"') &&
      l.includes('status="200"'),
    answer: answerSeries("rest"),
  },
  Connect: {
    toStatus: (l: string) =>
      l.startsWith("rpc_duration_seconds_bucket{") &&
      l.includes('protocol="connect"') &&
      l.includes(GET_SETTINGS) &&
      l.includes('code="OK"'),
    answer: answerSeries("connect"),
  },
  gRPC: {
    toStatus: (l: string) =>
      l.startsWith("rpc_duration_seconds_bucket{") &&
      l.includes('protocol="grpc"') &&
      l.includes(GET_SETTINGS) &&
      l.includes('code="OK"'),
    answer: answerSeries("grpc"),
  },
} satisfies Record<string, { toStatus: Series; answer: Series }>;
type ReadProtocol = keyof typeof READ_PROTOCOLS;
/** A histogram's calls since the server's last start, and its p50 and p99 in ms. */
interface Timings {
  count: number;
  p50: number;
  p99: number;
}
interface ServerReads {
  /** GetSettings calls answered OK, by protocol: from the request head to the end of the answer (the status). */
  reads: Record<string, Timings>;
  /** The same calls, by protocol: from the handler's start to the answer handed to the transport. */
  answers: Record<string, Timings>;
  /** The server's event-loop delay since the last scrape of /metrics (prom-client's monitor), p50 and p99 in ms. */
  loopDelay: { p50: number; p99: number };
}

/**
 * One series' calls and quantiles from the text of /metrics. Quantiles are interpolated linearly within the
 * histogram's buckets (src/server/metrics.ts).
 */
function timings(text: string, series: Series): Timings {
  const buckets = text
    .split("\n")
    .filter(series)
    .map((l) => {
      const le = /le="([^"]+)"/.exec(l)?.[1] ?? "+Inf";
      return {
        le: le === "+Inf" ? Number.POSITIVE_INFINITY : Number(le) * 1000,
        n: Number(l.split(" ").at(-1)),
      };
    })
    .sort((a, b) => a.le - b.le);
  const count = buckets.at(-1)?.n ?? 0;
  const quantile = (q: number): number => {
    let prev = { le: 0, n: 0 };
    for (const b of buckets) {
      if (count > 0 && b.n >= count * q)
        return Number.isFinite(b.le)
          ? prev.le + ((count * q - prev.n) / Math.max(1, b.n - prev.n)) * (b.le - prev.le)
          : prev.le;
      prev = b;
    }
    return Number.NaN;
  };
  return { count, p50: quantile(0.5), p99: quantile(0.99) };
}

/**
 * The server's own time for the settings reads, per protocol, from its metrics (src/server/metrics.ts), two ways:
 * to the status, REST's GET /api/settings answered 200 (http_request_duration_seconds) and Connect's and gRPC's
 * GetSettings answered OK (rpc_duration_seconds), each from its request head to the end of its answer (REST and
 * Connect: the response written; gRPC: the status sent in the trailers, which Node writes one event-loop iteration
 * after the message); and handler to answer (rpc_answer_duration_seconds), from the handler's start with the
 * request read and admitted to the answer's body encoded as it is handed to the transport (REST: the payload
 * serialized; Connect and gRPC: the message encoded, before the transport's headers and writes).
 */
async function serverReads(): Promise<ServerReads> {
  const text = await (
    await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${metricsToken}` } })
  ).text();
  const reads: ServerReads["reads"] = {};
  const answers: ServerReads["answers"] = {};
  for (const [name, series] of Object.entries(READ_PROTOCOLS)) {
    reads[name] = timings(text, series.toStatus);
    answers[name] = timings(text, series.answer);
  }
  const gauge = (name: string): number =>
    Number(new RegExp(`^${name} ([0-9.e+-]+)$`, "m").exec(text)?.[1] ?? Number.NaN) * 1000;
  return {
    reads,
    answers,
    loopDelay: {
      p50: gauge("nodejs_eventloop_lag_p50_seconds"),
      p99: gauge("nodejs_eventloop_lag_p99_seconds"),
    },
  };
}

/**
 * The server's main thread as the kernel scheduled it (/proc/<pid>/task/<pid>/schedstat): seconds on a CPU and
 * seconds runnable but waiting for one, since the process started.
 */
function mainThreadSchedule(pid: number): { run: number; wait: number } {
  try {
    const [run, wait] = readFileSync(`/proc/${pid}/task/${pid}/schedstat`, "utf8").split(" ").map(Number);
    return { run: (run ?? Number.NaN) / 1e9, wait: (wait ?? Number.NaN) / 1e9 };
  } catch {
    return { run: Number.NaN, wait: Number.NaN };
  }
}

interface Sample {
  at: number;
  rss: number;
  fds: number;
  /** The database file, and its WAL (bounded by SQLite's checkpoints). */
  store: number;
  wal: number;
  records: Record<string, number>;
  processes: number;
}
const samples: Sample[] = [];
function sample(): Sample {
  const rows = sandboxRows();
  const records: Record<string, number> = {};
  for (const r of rows) records[r.status] = (records[r.status] ?? 0) + 1;
  const s = {
    at: Date.now() - t0,
    rss: rssMiB(serverPid),
    fds: fds(serverPid),
    store: fileBytes(dbPath),
    wal: fileBytes(`${dbPath}-wal`),
    records,
    processes: liveSandboxProcesses(),
  };
  samples.push(s);
  return s;
}

// ---- operations -------------------------------------------------------------------------------------------------

interface OpRecord {
  op: string;
  at: number;
  ms: number;
  /** HTTP status, gRPC/Connect code name, or "down" (no connection: the server was being restarted). */
  status: string;
}
const ops: OpRecord[] = [];
let serverDown = false;
/** 5xx answers and unexpected failures, with what they said. */
const failures: string[] = [];

async function timed<R extends { status: string }>(op: string, fn: () => Promise<R>): Promise<R | undefined> {
  const start = performance.now();
  const at = Date.now() - t0;
  try {
    const result = await fn();
    ops.push({ op, at, ms: performance.now() - start, status: result.status });
    return result;
  } catch (err) {
    const status =
      err instanceof ConnectError
        ? `rpc:${err.code}`
        : typeof (err as { code?: unknown }).code === "number"
          ? `grpc:${(err as { code: number }).code}`
          : "down";
    if (status === "down" && !serverDown) failures.push(`${op}: ${String(err)}`);
    ops.push({ op, at, ms: performance.now() - start, status });
    return undefined;
  }
}

async function rest(key: string, method: string, path: string, body?: unknown) {
  const r = await request(base, key, method, path, body === undefined ? undefined : JSON.stringify(body));
  if (r.status >= 500) failures.push(`${method} ${path}: ${r.status} ${r.text.slice(0, 200)}`);
  return { status: String(r.status), value: r.json ?? r.text, ok: r.status < 300 };
}

interface User {
  name: string;
  key: string;
  /** Acknowledged and not deleted. */
  sandboxes: Set<string>;
  conversations: Map<string, { sandbox: string; sandboxKey: string }>;
  secrets: Set<string>;
  /** Secrets whose create or delete got no answer (the server died): either outcome is right. */
  unsure: Set<string>;
  /** Sandboxes and conversations whose delete got no answer (the server died): gone or kept is right. */
  unsureDeleted: Set<string>;
  settings: { acked: string | null; unsure: Set<string> };
  seq: number;
}

const pick = <T>(items: readonly T[]): T | undefined => items[Math.floor(Math.random() * items.length)];

async function act(u: User, connect: ReturnType<typeof settingsClients>): Promise<void> {
  const roll = Math.random() * 100;
  const n = ++u.seq;
  if (roll < 10) await timed("settings GET (REST)", async () => rest(u.key, "GET", "/api/settings"));
  else if (roll < 18) {
    const model = `soak/model-${u.name}-${n}`;
    u.settings.unsure.add(model);
    const r = await timed("settings POST (REST)", async () =>
      rest(u.key, "POST", "/api/settings", { llm_model: model }),
    );
    if (r?.ok) u.settings = { acked: model, unsure: new Set() };
  } else if (roll < 26)
    await timed("settings GetSettings (Connect)", async () => ({
      status: "ok",
      value: await connect.connect(u.key).getSettings({}),
    }));
  else if (roll < 34)
    await timed("settings GetSettings (gRPC)", async () => ({
      status: "ok",
      value: await connect.grpc.unary("GetSettings", {}, u.key),
    }));
  else if (roll < 42) {
    const name = `SOAK_${u.name.toUpperCase().replace(/[^A-Z0-9]/g, "_")}_${n}`;
    u.unsure.add(name);
    const r = await timed("secret create (REST)", async () =>
      rest(u.key, "POST", "/api/secrets", { name, value: `v${n}`, description: "soak" }),
    );
    if (r?.ok) {
      u.unsure.delete(name);
      u.secrets.add(name);
    }
  } else if (roll < 47 && u.secrets.size > 0) {
    const name = pick([...u.secrets]) ?? "";
    u.secrets.delete(name);
    u.unsure.add(name);
    const r = await timed("secret delete (REST)", async () => rest(u.key, "DELETE", `/api/secrets/${name}`));
    if (r?.ok) u.unsure.delete(name);
  } else if (roll < 52) await timed("secrets list (REST)", async () => rest(u.key, "GET", "/api/secrets"));
  else if (roll < 57)
    await timed("sandboxes search (REST)", async () => rest(u.key, "GET", "/api/v1/sandboxes/search"));
  else if (roll < 60 && u.sandboxes.size < 2) {
    const r = await timed("sandbox start (REST)", async () => rest(u.key, "POST", "/api/v1/sandboxes"));
    const id = (r?.value as { id?: string } | null)?.id;
    if (r?.ok && id !== undefined) u.sandboxes.add(id);
  } else if (roll < 64 && u.sandboxes.size > 0) {
    const id = pick([...u.sandboxes]) ?? "";
    const action = Math.random() < 0.5 ? "pause" : "resume";
    await timed(`sandbox ${action} (REST)`, async () =>
      rest(u.key, "POST", `/api/v1/sandboxes/${id}/${action}`),
    );
  } else if (roll < 66 && u.sandboxes.size > 0) {
    const id = pick([...u.sandboxes]) ?? "";
    const r = await timed("sandbox delete (REST)", async () =>
      rest(u.key, "DELETE", `/api/v1/sandboxes/${id}`),
    );
    if (r?.ok) u.sandboxes.delete(id);
    else if (r === undefined) u.unsureDeleted.add(id);
  } else if (roll < 68 && u.conversations.size < 1) await startConversation(u);
  else if (roll < 70 && u.conversations.size > 0) {
    const id = pick([...u.conversations.keys()]) ?? "";
    const r = await timed("conversation delete (REST)", async () =>
      rest(u.key, "DELETE", `/api/conversations/${id}`),
    );
    if (r?.ok) u.conversations.delete(id);
    else if (r === undefined) u.unsureDeleted.add(id);
  } else if (roll < 82 && u.conversations.size > 0) {
    const [id, c] = pick([...u.conversations]) ?? ["", { sandbox: "", sandboxKey: "" }];
    const events = [0, 1].map((i) => ({
      kind: "MessageEvent",
      id: `soak-${u.name}-${n}-${i}`,
      timestamp: new Date().toISOString().replace("Z", "000"),
      source: "agent",
      llm_message: { role: "assistant", content: [{ type: "text", text: "x".repeat(400) }] },
    }));
    await timed("event webhook POST", async () =>
      rest(c.sandboxKey, "POST", `/api/v1/webhooks/${c.sandbox}/events/${id}`, events),
    );
  } else if (roll < 90)
    await timed("events search (REST)", async () => rest(u.key, "GET", "/api/v1/events/search?limit=20"));
  else await timed("events count (REST)", async () => rest(u.key, "GET", "/api/v1/events/count"));
}

async function startConversation(u: User): Promise<void> {
  const start = performance.now();
  const at = Date.now() - t0;
  const task = await timed("conversation start (REST)", async () =>
    // A start needs a model; no message is run, so the model is never called.
    rest(u.key, "POST", "/api/v1/app-conversations", { llm_model: "openai/soak-model" }),
  );
  const taskId = (task?.value as { id?: string } | null)?.id;
  if (taskId === undefined) return;
  const deadline = Date.now() + 90_000;
  while (Date.now() < deadline) {
    await sleep(200);
    const r = await rest(u.key, "GET", `/api/v1/app-conversations/start-tasks?ids=${taskId}`).catch(
      () => null,
    );
    const [t] =
      (r?.value as { status: string; app_conversation_id: string; sandbox_id: string }[] | null) ?? [];
    if (t?.status === "ERROR") {
      ops.push({ op: "conversation to READY", at, ms: performance.now() - start, status: "ERROR" });
      return;
    }
    if (t?.status !== "READY") continue;
    ops.push({ op: "conversation to READY", at, ms: performance.now() - start, status: "READY" });
    const s = await rest(u.key, "GET", `/api/v1/sandboxes?id=${t.sandbox_id}`).catch(() => null);
    const [sbx] = (s?.value as ({ session_api_key: string | null } | null)[] | null) ?? [];
    u.conversations.set(t.app_conversation_id, {
      sandbox: t.sandbox_id,
      sandboxKey: sbx?.session_api_key ?? "",
    });
    return;
  }
  ops.push({ op: "conversation to READY", at, ms: performance.now() - start, status: "timeout" });
}

function settingsClients() {
  const cache = new Map<string, ReturnType<typeof connectClient<typeof SettingsService>>>();
  return {
    connect(key: string) {
      let c = cache.get(key);
      if (c === undefined) {
        // Reads as Connect GETs (useHttpGet), as a Connect client of this service is configured (docs/transport.md).
        c = connectClient(SettingsService, base, key, "connect", true);
        cache.set(key, c);
      }
      return c;
    },
    grpc: grpcClient(SettingsService, `127.0.0.1:${grpcPort}`),
  };
}

/** Two WatchSandboxes streams (users 0 and 1), each reopened every `everyMs`; counts what they receive. */
function watches(users: User[], everyMs: number, until: () => boolean) {
  let received = 0;
  let opened = 0;
  const loops = users.slice(0, 2).map(async (u) => {
    while (!until()) {
      const abort = new AbortController();
      const timer = setTimeout(() => abort.abort(), everyMs);
      opened++;
      try {
        for await (const _ of connectClient(SandboxService, base, u.key).watchSandboxes(
          {},
          { signal: abort.signal },
        ))
          received++;
      } catch {
        // ended by the abort, or by the server's death
      }
      clearTimeout(timer);
      if (!until()) await sleep(100);
    }
  });
  return { done: Promise.all(loops), stats: () => ({ opened, received }) };
}

/**
 * The settings probe (bench/load/settings-probe.ts): one more reader of user 0's settings, in its own process, one
 * call at a time over each protocol; stopped (stdin closed) at the end of the load, it answers its latencies.
 */
function startProbe(u: User): { stop(): Promise<Record<string, number[]>> } {
  const config = { base, grpcAddress: `127.0.0.1:${grpcPort}`, key: u.key, intervalMs: 50 };
  const child = spawn(
    process.execPath,
    [join(ROOT, "bench/load/settings-probe.ts"), JSON.stringify(config)],
    {
      stdio: ["pipe", "pipe", "inherit"],
    },
  );
  let out = "";
  child.stdout?.on("data", (d: Buffer) => {
    out += d.toString();
  });
  const exited = new Promise<void>((resolve) => child.on("exit", () => resolve()));
  return {
    async stop() {
      child.stdin?.end();
      await exited;
      try {
        return (JSON.parse(out) as { ms: Record<string, number[]> }).ms;
      } catch {
        log(`the settings probe answered nothing: ${out.slice(0, 200)}`);
        return {};
      }
    },
  };
}
const probeMs: Record<string, number[]> = {};
/** The server's own time per protocol of settings reads and its loop delay, read at the end of the last load. */
let serverSide: ServerReads = { reads: {}, answers: {}, loopDelay: { p50: Number.NaN, p99: Number.NaN } };
/**
 * The server's main thread over the last load (since the restart when it was killed during it): its share of the
 * time on a CPU and runnable but waiting for one.
 */
let schedule = { run: Number.NaN, wait: Number.NaN };

// ---- the run ----------------------------------------------------------------------------------------------------

mkdirSync(workspaceRoot, { recursive: true });
const users: User[] = [];
{
  const storage = createSqliteStorage({ path: dbPath });
  const keys = new ApiKeyService(storage.apiKeys);
  for (let i = 0; i < opts.users; i++) {
    const name = `soak-user-${i}`;
    users.push({
      name,
      key: (await keys.issue(name)).key,
      sandboxes: new Set(),
      conversations: new Map(),
      secrets: new Set(),
      unsure: new Set(),
      unsureDeleted: new Set(),
      settings: { acked: null, unsure: new Set() },
      seq: 0,
    });
  }
  await storage.close();
}
await startServer();
t0 = Date.now();
await sleep(1000);
const baseline = sample();
const baselineMemory = await memory();
const baselineTables = tableBytes();
log(`server pid ${serverPid}, ${opts.users} users, ${opts.durationMs / 1000} s, data in ${dataDir}`);

const clients = settingsClients();
const lost: string[] = [];
const divergent: string[] = [];
const leftovers: string[] = [];
/** What the server keeps on purpose after the cleanup, for a bounded time (reported beside the leftovers). */
const retained: string[] = [];
interface Round {
  afterLoad: Sample;
  cleaned: Sample;
  cleanedTables: Record<string, number>;
  /** The server's V8 heap and what it holds outside it (buffers, native objects), after the cleanup. */
  memory: Memory;
}
const rounds: Round[] = [];
const sampler = setInterval(() => {
  if (!serverDown) sample();
}, 5_000);
let lastLoadEnd = 0;
/** When the server killed during the load was started again, and its main thread's schedule then. */
let restarted: { at: number; pid: number; run: number; wait: number } | null = null;
const w = { opened: 0, received: 0 };
for (let round = 1; round <= opts.rounds; round++) {
  const tag = opts.rounds > 1 ? `round ${round}: ` : "";
  const endAt = Date.now() + opts.durationMs;
  const loadOver = () => Date.now() >= endAt;
  if (opts.rounds > 1) log(`round ${round}`);
  const watch = watches(users, Math.max(5_000, Math.min(60_000, opts.durationMs / 5)), loadOver);
  // The loop-delay monitor starts afresh at each scrape: this one makes the end-of-load reading cover the load.
  await serverReads();
  const loadStart = { at: performance.now(), pid: serverPid, ...mainThreadSchedule(serverPid) };
  const probe = startProbe(users[0] as User);
  const killer =
    opts.killAtMs > 0 && round === 1
      ? (async () => {
          await sleep(opts.killAtMs);
          log(`kill -9 of the server (pid ${serverPid})`);
          serverDown = true;
          await stopServer("SIGKILL");
          await startServer();
          restarted = { at: performance.now(), pid: serverPid, ...mainThreadSchedule(serverPid) };
          serverDown = false;
          log(`server started again (pid ${serverPid})`);
        })()
      : Promise.resolve();
  await Promise.all(
    users.map(async (u) => {
      while (!loadOver()) {
        await act(u, clients);
        await sleep(20);
      }
    }),
  );
  lastLoadEnd = Date.now() - t0;
  await killer;
  const probed = await probe.stop();
  serverSide = await serverReads();
  {
    const now = mainThreadSchedule(serverPid);
    // Set by the killer meanwhile (TypeScript cannot see that).
    const again = restarted as typeof loadStart | null;
    const since = again !== null && again.pid === serverPid ? again : loadStart;
    const seconds = (performance.now() - since.at) / 1000;
    schedule = { run: (now.run - since.run) / seconds, wait: (now.wait - since.wait) / seconds };
  }
  for (const [name, list] of Object.entries(probed)) probeMs[name] = [...(probeMs[name] ?? []), ...list];
  await watch.done;
  w.opened += watch.stats().opened;
  w.received += watch.stats().received;
  log("load over; letting the sweep run");
  await sleep(opts.sweepMs * 2 + 2_000);
  const afterLoad = sample();

  // Acknowledged writes, read back (after the restart).
  for (const u of users) {
    const s = await rest(u.key, "GET", "/api/settings");
    const model = (s.value as { llm_model?: string }).llm_model ?? null;
    if (
      u.settings.acked !== null &&
      model !== u.settings.acked &&
      !(model !== null && u.settings.unsure.has(model))
    )
      lost.push(`${tag}${u.name}: settings ${model} instead of ${u.settings.acked}`);
    const listed = new Set(
      (
        (await rest(u.key, "GET", "/api/secrets")).value as { custom_secrets: { name: string }[] }
      ).custom_secrets.map((c) => c.name),
    );
    for (const name of u.secrets) if (!listed.has(name)) lost.push(`${tag}${u.name}: secret ${name}`);
    for (const name of listed)
      if (!u.secrets.has(name) && !u.unsure.has(name))
        lost.push(`${tag}${u.name}: deleted secret ${name} is back`);
    const sbx = (await rest(u.key, "GET", "/api/v1/sandboxes/search?limit=100")).value as {
      items: { id: string; status: string }[];
    };
    const ids = new Set(sbx.items.map((i) => i.id));
    for (const id of u.sandboxes)
      if (!ids.has(id) && !u.unsureDeleted.has(id)) lost.push(`${tag}${u.name}: sandbox ${id}`);
    for (const id of u.conversations.keys()) {
      const got = (await rest(u.key, "GET", `/api/v1/app-conversations?ids=${id}`)).value;
      if ((!Array.isArray(got) || got[0] === null || got[0] === undefined) && !u.unsureDeleted.has(id))
        lost.push(`${tag}${u.name}: conversation ${id}`);
    }
  }

  // Records against processes, after the sweep: what the store says runs, runs; what it says paused, is stopped.
  const apiStatus = new Map<string, string>();
  for (const u of users) {
    const page = (await rest(u.key, "GET", "/api/v1/sandboxes/search?limit=100")).value as {
      items: { id: string; status: string }[];
    };
    for (const i of page.items) apiStatus.set(i.id, i.status);
  }
  for (const r of sandboxRows()) {
    const pid = (JSON.parse(r.handle) as { data?: { pid?: number } }).data?.pid;
    const p =
      typeof pid === "number" ? procState(pid, seenProcesses.get(pid)) : { alive: false, stopped: false };
    const runs = p.alive && !p.stopped;
    if ((r.status === "RUNNING" || r.status === "STARTING") !== runs)
      divergent.push(
        `${tag}${r.id}: store ${r.status}, process ${p.alive ? (p.stopped ? "stopped" : "running") : "gone"}`,
      );
    const api = apiStatus.get(r.id);
    if (api !== undefined && api !== r.status) divergent.push(`${tag}${r.id}: store ${r.status}, API ${api}`);
  }

  // Cleanup: everything the users made is deleted.
  log("deleting everything");
  for (const u of users) {
    for (const id of u.conversations.keys()) await rest(u.key, "DELETE", `/api/conversations/${id}`);
    const page = (await rest(u.key, "GET", "/api/v1/sandboxes/search?limit=100")).value as {
      items: { id: string }[];
    };
    for (const i of page.items) await rest(u.key, "DELETE", `/api/v1/sandboxes/${i.id}`);
    // A user's writes are held to its write rate (USER_DATA_WRITES_PER_SECOND): a refused delete is sent again
    // once the rate allows it, else the secret would stay and show up in the next round's checks.
    for (const name of [...u.secrets, ...u.unsure]) {
      for (let attempt = 0; attempt < 30; attempt++) {
        if ((await rest(u.key, "DELETE", `/api/secrets/${name}`)).status !== "429") break;
        await sleep(200);
      }
    }
    u.conversations.clear();
    u.sandboxes.clear();
    u.secrets.clear();
    u.unsure.clear();
    u.unsureDeleted.clear();
  }
  // Two sweeps, then the idle wait: V8's memory reducer gives back a load's heap once allocation stays low.
  await sleep(Math.max(opts.sweepMs * 2 + 2_000, opts.idleMs));
  const cleaned = sample();
  const cleanedMemory = await memory();
  const cleanedTables = tableBytes();
  for (const u of users) {
    const events = (await rest(u.key, "GET", "/api/v1/events/count")).value;
    if (events !== 0) leftovers.push(`${tag}${u.name}: ${String(events)} events`);
    const convs = (await rest(u.key, "GET", "/api/v1/app-conversations/count")).value;
    if (convs !== 0) leftovers.push(`${tag}${u.name}: ${String(convs)} conversations`);
    const secrets = (
      (await rest(u.key, "GET", "/api/secrets")).value as { custom_secrets?: unknown[] } | null
    )?.custom_secrets?.length;
    if (secrets !== 0) leftovers.push(`${tag}${u.name}: ${String(secrets)} secrets`);
  }
  // Every start task is gone but a failed start's within its retention, plus one sweep (TASK_RETENTION_MS).
  const kept = Date.now() - TASK_RETENTION_MS - opts.sweepMs;
  const tasks = readStore(
    (db) =>
      db.prepare("SELECT status, updated_at FROM start_tasks").all() as {
        status: string;
        updated_at: number;
      }[],
  );
  const failedKept = tasks.filter((t) => t.status === "ERROR" && t.updated_at >= kept).length;
  const tasksLeft = tasks.length - failedKept;
  if (tasksLeft > 0) leftovers.push(`${tag}${tasksLeft} start tasks`);
  if (failedKept > 0) retained.push(`${tag}${failedKept} failed starts' tasks within their retention`);
  const recordsLeft = Object.values(cleaned.records).reduce((a, b) => a + b, 0);
  if (recordsLeft > 0) leftovers.push(`${tag}${recordsLeft} sandbox records`);
  if (cleaned.processes > 0) leftovers.push(`${tag}${cleaned.processes} sandbox processes`);
  const folders = readdirSync(workspaceRoot).filter((f) => !f.startsWith(".") && !f.startsWith("ws-"));
  if (folders.length > 0) leftovers.push(`${tag}${folders.length} workspace folders`);
  rounds.push({ afterLoad, cleaned, cleanedTables, memory: cleanedMemory });
}
clearInterval(sampler);
await stopServer("SIGTERM");
const orphans = liveSandboxProcesses();
if (orphans > 0) leftovers.push(`${orphans} sandbox processes after the server stopped`);
const firstRound = rounds[0] as Round;
const final = rounds.at(-1) as Round;
const { cleaned, cleanedTables } = final;
const marks = new Map<Sample, string>([[baseline, "start"]]);
rounds.forEach((r, i) => {
  const tag = rounds.length > 1 ? ` (round ${i + 1})` : "";
  marks.set(r.afterLoad, `after load + sweep${tag}`);
  marks.set(r.cleaned, `after cleanup + sweep${tag}`);
});

// ---- report -----------------------------------------------------------------------------------------------------

const mib = (n: number) => (n / 1024 / 1024).toFixed(1);
const without = (t: Record<string, number>, name: string) =>
  Object.entries(t).reduce((sum, [k, v]) => (k === name ? sum : sum + v), 0);
const window = Math.min(60_000, opts.durationMs / 4);
console.log(
  `# Soak: ${opts.users} users, ${opts.rounds > 1 ? `${opts.rounds} rounds of ` : ""}${opts.durationMs / 1000} s${opts.killAtMs > 0 ? `, kill -9 at ${opts.killAtMs / 1000} s` : ""}, ${ops.length} operations\n`,
);
console.log(
  "| at | server RSS MiB | fds | store file / WAL MiB | records (by status) | live sandbox processes |",
);
console.log("|---|---|---|---|---|---|");
const during = samples.filter((s) => !marks.has(s));
const every = Math.max(1, Math.ceil(during.length / (8 * rounds.length)));
const shownDuring = new Set(during.filter((_s, i) => i % every === every - 1));
const shown = samples.filter((s) => marks.has(s) || shownDuring.has(s));
for (const s of shown)
  console.log(
    `| ${marks.get(s) ?? `${(s.at / 1000).toFixed(0)} s`} | ${s.rss.toFixed(0)} | ${s.fds} | ${mib(s.store)} / ${mib(s.wal)} | ${
      Object.entries(s.records)
        .map(([k, v]) => `${k} ${v}`)
        .join(", ") || "-"
    } | ${s.processes} |`,
  );
const byOp = new Map<string, OpRecord[]>();
for (const o of ops) byOp.set(o.op, [...(byOp.get(o.op) ?? []), o]);
console.log("\n| operation | count | answers by status | p50 ms | p99 ms | p50 first / last window ms |");
console.log("|---|---|---|---|---|---|");
for (const [op, list] of [...byOp].sort()) {
  const counts = new Map<string, number>();
  for (const o of list) counts.set(o.status, (counts.get(o.status) ?? 0) + 1);
  const ms = list.map((o) => o.ms);
  const first = list.filter((o) => o.at < window).map((o) => o.ms);
  const last = list.filter((o) => o.at >= lastLoadEnd - window && o.at < lastLoadEnd).map((o) => o.ms);
  const p = (v: number[], q: number) => (v.length === 0 ? "-" : percentile(v, q).toFixed(1));
  console.log(
    `| ${op} | ${list.length} | ${[...counts].map(([k, v]) => `${k}: ${v}`).join(", ")} | ${p(ms, 50)} | ${p(ms, 99)} | ${p(first, 50)} / ${p(last, 50)} |`,
  );
}
console.log(`\nwatches: ${w.opened} streams opened, ${w.received} updates received`);
/** The users' successful settings reads of one protocol, in ms (the whole load, both servers). */
const usersReads = (name: ReadProtocol): number[] =>
  ops
    .filter(
      (o) =>
        o.op === (name === "REST" ? "settings GET (REST)" : `settings GetSettings (${name})`) &&
        (o.status === "200" || o.status === "ok"),
    )
    .map((o) => o.ms);
const cell = (list: number[]) =>
  list.length === 0
    ? "-"
    : `${list.length}, ${percentile(list, 50).toFixed(1)} / ${percentile(list, 99).toFixed(1)}`;
const serverCell = (t: Timings | undefined) =>
  t === undefined || t.count === 0 ? "-" : `${t.count}, ${t.p50.toFixed(2)} / ${t.p99.toFixed(2)}`;
console.log(
  "\n| settings reads by protocol (answered) | users (the soak's process): calls, p50 / p99 ms | probe (a process of its own): calls, p50 / p99 ms | the server, to the status: calls, p50 / p99 ms | the server, handler to answer: calls, p50 / p99 ms |",
);
console.log("|---|---|---|---|---|");
for (const name of Object.keys(READ_PROTOCOLS) as ReadProtocol[]) {
  console.log(
    `| ${name} | ${cell(usersReads(name))} | ${cell(probeMs[name] ?? [])} | ${serverCell(serverSide.reads[name])} | ${serverCell(serverSide.answers[name])} |`,
  );
}
console.log(
  `\nThe server's time to the status runs from a call's request head to the end of its answer (gRPC: its status, sent in the trailers one event-loop iteration after its message); handler to answer, from the handler's start with the request read and admitted to the answer's body encoded as it is handed to the transport. Both count the calls since the server's last start${opts.killAtMs > 0 ? " (the restart after the kill)" : ""}. Over the same time, the server's event-loop delay p50 / p99: ${serverSide.loopDelay.p50.toFixed(1)} / ${serverSide.loopDelay.p99.toFixed(1)} ms; its main thread ran ${(schedule.run * 100).toFixed(0)}% of the time and waited for a CPU ${(schedule.wait * 100).toFixed(0)}% (/proc schedstat).`,
);
console.log("\n| server memory, MiB | RSS | V8 heap used / total | external (buffers, native objects) |");
console.log("|---|---|---|---|");
const memRow = (label: string, rss: number, m: Memory) =>
  console.log(
    `| ${label} | ${rss.toFixed(0)} | ${m.heapUsed.toFixed(0)} / ${m.heapTotal.toFixed(0)} | ${m.external.toFixed(1)} |`,
  );
memRow("start", baseline.rss, baselineMemory);
rounds.forEach((r, i) => {
  memRow(
    `after cleanup${rounds.length > 1 ? ` (round ${i + 1})` : ""}, ${opts.idleMs / 1000} s idle`,
    r.cleaned.rss,
    r.memory,
  );
});

const storeOther = without(cleanedTables, "changes") - without(baselineTables, "changes");
/** The server's handler-to-answer p50 of a settings read per protocol, and the largest ratio between two of them. */
const readP50s = Object.entries(serverSide.answers)
  .filter(([, r]) => r.count > 0 && Number.isFinite(r.p50))
  .map(([name, r]) => ({ name, p50: r.p50 }))
  .sort((a, b) => a.p50 - b.p50);
const fastest = readP50s[0];
const slowest = readP50s.at(-1);
const readRatio =
  fastest === undefined || slowest === undefined ? Number.NaN : slowest.p50 / Math.max(fastest.p50, 1e-3);
const fileGrowth = cleaned.store - baseline.store;
const verdicts = [
  { name: "no acknowledged write lost", ok: lost.length === 0, detail: lost.slice(0, 10).join("; ") },
  {
    name: "no 5xx answer, no failure outside the restart",
    ok: failures.length === 0,
    detail: failures.slice(0, 5).join("; "),
  },
  {
    name: "records and processes agree after the sweep (store, runtime, API)",
    ok: divergent.length === 0,
    detail: divergent.slice(0, 10).join("; "),
  },
  {
    name: "nothing left after cleanup (records, processes, folders, events, conversations, start tasks, secrets; a failed start's task only within START_TASK_RETENTION_MS)",
    ok: leftovers.length === 0,
    detail: [...leftovers, ...retained.map((r) => `kept: ${r}`)].join("; "),
  },
  {
    name: "store back near its baseline (besides the change log, bounded by its retention)",
    ok: storeOther < 256 * 1024 && fileGrowth <= (cleanedTables.changes ?? 0) + 1024 * 1024,
    detail: `data ${(storeOther / 1024).toFixed(0)} KiB above the start besides the change log (${((cleanedTables.changes ?? 0) / 1024).toFixed(0)} KiB); file ${mib(baseline.store)} -> ${mib(cleaned.store)} MiB`,
  },
  {
    name: "a settings read costs the same on every protocol (the server's handler-to-answer p50 per protocol within 1.5x of each other)",
    ok: readP50s.length === Object.keys(READ_PROTOCOLS).length && readRatio <= 1.5,
    detail: `${readP50s.map((r) => `${r.name} ${r.p50.toFixed(2)} ms`).join(", ")}${readP50s.length < 2 ? "" : `: ${slowest?.name} ${readRatio.toFixed(2)}x ${fastest?.name}`}`,
  },
  {
    name: "fds back near their baseline",
    ok: cleaned.fds - baseline.fds <= 20,
    detail: `${baseline.fds} -> ${cleaned.fds}`,
  },
  ...(rounds.length > 1
    ? [
        {
          name: "memory does not grow from one round to the next (RSS after the last cleanup within 10 MiB of the first)",
          ok: final.cleaned.rss - firstRound.cleaned.rss <= 10,
          detail: `RSS after cleanup: ${rounds.map((r) => r.cleaned.rss.toFixed(0)).join(" -> ")} MiB (start ${baseline.rss.toFixed(0)})`,
        },
      ]
    : []),
];
console.log("\n| verdict | holds | detail |\n|---|---|---|");
for (const v of verdicts) console.log(`| ${v.name} | ${v.ok ? "yes" : "NO"} | ${v.detail} |`);
if (opts.json)
  console.log(
    JSON.stringify({
      operations: ops.length,
      verdicts,
      rss: {
        start: baseline.rss,
        rounds: rounds.map((r) => ({ afterLoad: r.afterLoad.rss, cleaned: r.cleaned.rss })),
      },
      memory: { start: baselineMemory, rounds: rounds.map((r) => r.memory) },
      serverSide,
      schedule,
      probe: Object.fromEntries(
        Object.entries(probeMs).map(([name, list]) => [
          name,
          { calls: list.length, p50: percentile(list, 50), p99: percentile(list, 99) },
        ]),
      ),
      store: {
        start: baseline.store,
        rounds: rounds.map((r) => ({ afterLoad: r.afterLoad.store, cleaned: r.cleaned.store })),
      },
    }),
  );
if (opts.keep) log(`data kept in ${dataDir}`);
else rmSync(dataDir, { recursive: true, force: true });
clients.grpc.close();
process.exit(verdicts.every((v) => v.ok) ? 0 : 1);
