// `node bench/store-growth.ts`: how big the SQLite store grows per conversation and per event, and how much of
// it comes back once everything is deleted. The whole service runs in this process over a SQLite file (REST
// through Fastify's inject), with a runtime and an agent client that run nothing (the test fakes), so that
// exactly the service's own writes reach the store: the sandbox, the conversation, its start task, their change
// log entries, and the events as the agent's webhook posts them.
//
// Options: USAGE below (`node bench/store-growth.ts --help`).
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { createSqliteStorage, sqliteDatabaseOf } from "../src/adapters/storage/sqlite/sqlite-storage.ts";
import { buildApp } from "../src/server/app.ts";
import { defaultSpecs } from "../src/server/sandbox-specs.ts";
import { FakeAgentClient, FakeSandboxRuntime } from "../test/helpers/fakes/index.ts";

const USAGE = `usage: node bench/store-growth.ts [options]
  --conversations N   conversations started (each in its own sandbox), default 100
  --events N          events posted to each conversation through the webhook, default 50
  --batch N           events per webhook post, default 5
  --event-bytes N     size of each event's JSON, default 1000
  --help              this text`;

function options() {
  const { values } = parseArgs({
    options: {
      conversations: { type: "string", default: "100" },
      events: { type: "string", default: "50" },
      batch: { type: "string", default: "5" },
      "event-bytes": { type: "string", default: "1000" },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) {
    console.log(USAGE);
    process.exit(0);
  }
  const int = (name: string, text: string, min: number): number => {
    const n = Number(text);
    if (!Number.isInteger(n) || n < min) {
      console.error(`--${name} must be an integer >= ${min}\n${USAGE}`);
      process.exit(2);
    }
    return n;
  };
  return {
    conversations: int("conversations", values.conversations, 1),
    events: int("events", values.events, 0),
    batch: int("batch", values.batch, 1),
    eventBytes: int("event-bytes", values["event-bytes"], 100),
  };
}

const opts = options();
const dir = mkdtempSync(join(tmpdir(), "aws-store-growth-"));
const path = join(dir, "workspace.sqlite");
const storage = createSqliteStorage({ path });
const db = sqliteDatabaseOf(storage);
const app = await buildApp({
  storage,
  encryptionKey: randomBytes(32),
  verifier: null,
  runtime: new FakeSandboxRuntime(),
  agent: new FakeAgentClient(),
  specs: defaultSpecs({ kind: "process" }, new Date()),
  rateLimit: { perSecond: 0, burst: 1 },
  maxRunningSandboxes: 1000,
  maxSandboxesPerUser: 100_000,
  sweepIntervalMs: 0,
});
const user = "growth-user";
const key = (await app.keys.issue(user)).key;

async function call(method: "GET" | "POST" | "DELETE", url: string, body?: unknown, sessionKey = key) {
  const res = await app.http.inject({
    method,
    url,
    headers: { "x-session-api-key": sessionKey },
    ...(body === undefined ? {} : { payload: body as Record<string, unknown> }),
  });
  if (res.statusCode >= 300) throw new Error(`${method} ${url}: ${res.statusCode} ${res.body}`);
  return res.json() as unknown;
}

/** Bytes on disk (the file and its WAL, after a full checkpoint) and bytes used per table and index. */
function measure(): { file: number; tables: Map<string, number> } {
  db.pragma("wal_checkpoint(TRUNCATE)");
  let file = 0;
  for (const suffix of ["", "-wal"]) {
    try {
      file += statSync(`${path}${suffix}`).size;
    } catch {
      // absent
    }
  }
  const tables = new Map<string, number>();
  const rows = db
    .prepare(
      "SELECT tbl_name AS t, sum(pgsize - unused) AS n FROM dbstat JOIN sqlite_schema USING (name) GROUP BY t",
    )
    .all() as { t: string; n: number }[];
  for (const r of rows) tables.set(r.t, r.n);
  return { file, tables };
}

const startOne = async (): Promise<{ conversation: string; sandbox: string }> => {
  const task = (await call("POST", "/api/v1/app-conversations", { llm_model: "openai/store-growth" })) as {
    id: string;
  };
  for (;;) {
    const [t] = (await call("GET", `/api/v1/app-conversations/start-tasks?ids=${task.id}`)) as {
      status: string;
      app_conversation_id: string;
      sandbox_id: string;
    }[];
    if (t?.status === "READY") return { conversation: t.app_conversation_id, sandbox: t.sandbox_id };
    if (t?.status === "ERROR") throw new Error(JSON.stringify(t));
    await new Promise((r) => setTimeout(r, 2));
  }
};

const baseline = measure();
const started: { conversation: string; sandbox: string; key: string }[] = [];
for (let i = 0; i < opts.conversations; i++) {
  const s = await startOne();
  const [sbx] = (await call("GET", `/api/v1/sandboxes?id=${s.sandbox}`)) as { session_api_key: string }[];
  started.push({ ...s, key: sbx?.session_api_key ?? "" });
}
const afterStarts = measure();

const filler = "x".repeat(Math.max(0, opts.eventBytes - 120));
let posted = 0;
for (const s of started) {
  for (let n = 0; n < opts.events; n += opts.batch) {
    const batch = Array.from({ length: Math.min(opts.batch, opts.events - n) }, (_, i) => ({
      kind: "MessageEvent",
      id: `${s.conversation.slice(0, 8)}-${n + i}`,
      timestamp: new Date(Date.UTC(2025, 0, 1, 0, 0, n + i)).toISOString().replace("Z", "000"),
      source: "agent",
      text: filler,
    }));
    await call("POST", `/api/v1/webhooks/${s.sandbox}/events/${s.conversation}`, batch, s.key);
    posted += batch.length;
  }
}
const afterEvents = measure();

for (const s of started) await call("DELETE", `/api/conversations/${s.conversation}`);
await app.sweep();
const afterDelete = measure();
// Once the change log's retention has passed (an hour by default): what the log held goes too.
await storage.changes.prune(new Date(Date.now() + 1000));
for (let i = 0; i < 64; i++) await storage.compact();
const afterRetention = measure();

const kib = (n: number) => `${(n / 1024).toFixed(1)} KiB`;
const perConversation = (afterStarts.file - baseline.file) / opts.conversations;
const perEvent = posted === 0 ? 0 : (afterEvents.file - afterStarts.file) / posted;
const tableDelta = (a: Map<string, number>, b: Map<string, number>, name: string) =>
  (b.get(name) ?? 0) - (a.get(name) ?? 0);
const names = [...new Set([...afterEvents.tables.keys(), ...baseline.tables.keys()])].sort();

console.log(`# Store growth (SQLite), ${opts.conversations} conversations × ${opts.events} events of ~${opts.eventBytes} B, ${opts.batch} per webhook post
`);
console.log("| state | file (+WAL) |");
console.log("|---|---|");
for (const [label, m] of [
  ["empty (schema only)", baseline],
  [`after ${opts.conversations} conversation starts`, afterStarts],
  [`after ${posted} events`, afterEvents],
  ["after deleting every conversation and one sweep", afterDelete],
  ["after the change log's retention has passed", afterRetention],
] as const)
  console.log(`| ${label} | ${kib(m.file)} |`);
console.log(`
per conversation (sandbox, conversation, start task, their change log entries): ${(perConversation / 1024).toFixed(2)} KiB
per event (${opts.eventBytes} B of JSON; row, indexes, its share of change log entries): ${(perEvent / 1024).toFixed(2)} KiB
`);
console.log("| table (with its indexes) | per conversation | per event |");
console.log("|---|---|---|");
for (const name of names) {
  const c = tableDelta(baseline.tables, afterStarts.tables, name) / opts.conversations;
  const e = posted === 0 ? 0 : tableDelta(afterStarts.tables, afterEvents.tables, name) / posted;
  if (Math.abs(c) < 1 && Math.abs(e) < 1) continue;
  console.log(`| ${name} | ${Math.round(c)} B | ${Math.round(e)} B |`);
}

await app.close();
rmSync(dir, { recursive: true, force: true });
