// Baseline of the events benchmarks: a bare Fastify app over better-sqlite3 on the given file, with the service's
// events table and indexes. POST /events/:conversation_id stores the posted JSON array of events in one
// transaction committed with synchronous = FULL before answering (durable, no group commit, no auth, no
// validation beyond JSON); GET /search runs the service's search SQL for one filter combination and answers the
// parsed events. Argument: the database file. Prints {port, pid} as one JSON line.
import Database from "better-sqlite3";
import Fastify from "fastify";

const db = new Database(process.argv[2] ?? ":memory:");
db.pragma("journal_mode = WAL");
db.pragma("synchronous = FULL");
db.exec(`
  CREATE TABLE IF NOT EXISTS events (
    conversation_id TEXT NOT NULL, id TEXT NOT NULL, owner_id TEXT NOT NULL, kind TEXT NOT NULL,
    ts INTEGER NOT NULL, body TEXT NOT NULL) STRICT;
  CREATE UNIQUE INDEX IF NOT EXISTS events_id_conversation ON events (id, conversation_id);
  CREATE INDEX IF NOT EXISTS events_owner_conversation_ts ON events (owner_id, conversation_id, ts, id);
  CREATE INDEX IF NOT EXISTS events_owner_conversation_kind_ts ON events (owner_id, conversation_id, kind, ts, id);
  CREATE INDEX IF NOT EXISTS events_owner_ts ON events (owner_id, ts, id);
  CREATE INDEX IF NOT EXISTS events_owner_kind_ts ON events (owner_id, kind, ts, id);
`);
const insert = db.prepare(
  "INSERT INTO events (conversation_id, id, owner_id, kind, ts, body) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
);
const store = db.transaction((conversationId: string, events: Record<string, unknown>[]) => {
  for (const e of events)
    insert.run(
      conversationId,
      String(e.id),
      "bench-user",
      String(e.kind),
      Date.parse(`${e.timestamp}Z`) * 1000,
      JSON.stringify(e),
    );
});
const searches = new Map<string, Database.Statement>();
const search = (where: string) => {
  let s = searches.get(where);
  if (s === undefined) {
    s = db.prepare(`SELECT body FROM events WHERE owner_id = @owner${where} ORDER BY ts, id LIMIT 101`);
    searches.set(where, s);
  }
  return s;
};

const app = Fastify({ logger: false, bodyLimit: 1024 * 1024 });
app.post("/events/:conversation_id", async (req) => {
  store((req.params as { conversation_id: string }).conversation_id, req.body as Record<string, unknown>[]);
  return { success: true };
});
app.get("/search", async (req) => {
  const q = req.query as { conversation_id__eq?: string; kind__eq?: string };
  const params: Record<string, string> = { owner: "bench-user" };
  let where = "";
  if (q.conversation_id__eq !== undefined) {
    where += " AND conversation_id = @conversation";
    params.conversation = q.conversation_id__eq;
  }
  if (q.kind__eq !== undefined) {
    where += " AND kind = @kind";
    params.kind = q.kind__eq;
  }
  const rows = search(where).all(params) as { body: string }[];
  return { items: rows.slice(0, 100).map((r) => JSON.parse(r.body) as unknown), next_page_id: null };
});
await app.listen({ host: "127.0.0.1", port: 0 });
const address = app.server.address();
const port = typeof address === "object" && address !== null ? address.port : 0;
process.stdout.write(`${JSON.stringify({ port, pid: process.pid })}\n`);
process.on("SIGTERM", () => void app.close().then(() => process.exit(0)));
