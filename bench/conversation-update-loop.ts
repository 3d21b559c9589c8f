// `node bench/conversation-update-loop.ts`: how long the event loop is held per durable conversation UPDATE (the
// one the service makes at each status change an agent posts), through the storage's group commit (the WAL's
// fdatasync on the thread pool) against its baseline in the same run: the same UPDATE statement committed inline
// on the same connection under `synchronous = FULL` (the fdatasync inside the COMMIT, on the event loop). The two
// alternate, a round each, over one SQLite file in the temporary directory (the disk that file is on is what is
// measured). Per UPDATE: the loop's busy time (event-loop utilization's active time over the round, divided by the
// UPDATEs), and the time until it is acknowledged. A round makes `--concurrency` UPDATEs at once (of as many
// conversations, as a team's agents would), `--updates` in all. With `--disk-writer`, a worker thread writes and
// fdatasyncs 256 KiB at a time to a file beside the database meanwhile, as other processes on a shared disk do (the
// team benchmark's agents write their events): an fdatasync then costs milliseconds instead of ~0.1 ms.
//
// Options: USAGE below (`node bench/conversation-update-loop.ts --help`). Takes ~10-30 s with the defaults.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { Worker } from "node:worker_threads";
import { createSqliteStorage, sqliteDatabaseOf } from "../src/adapters/storage/sqlite/sqlite-storage.ts";
import { syntheticConversation } from "../test/helpers/conversation-fixtures.ts";
import { machine, machineLine, median, percentile } from "./lib/bench-util.ts";

const USAGE = `usage: node bench/conversation-update-loop.ts [options]
  --updates N       UPDATEs a side per round, default 300
  --rounds N        rounds a side (alternating), default 5
  --concurrency N   UPDATEs made at once (of as many conversations), default 1
  --disk-writer     a thread writing and syncing another file on the same disk meanwhile
  --help            this text`;

function options() {
  const { values } = parseArgs({
    options: {
      updates: { type: "string", default: "300" },
      rounds: { type: "string", default: "5" },
      concurrency: { type: "string", default: "1" },
      "disk-writer": { type: "boolean", default: false },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) {
    console.log(USAGE);
    process.exit(0);
  }
  const int = (name: string, text: string): number => {
    const n = Number(text);
    if (!Number.isInteger(n) || n < 1) {
      console.error(`--${name} must be an integer >= 1\n${USAGE}`);
      process.exit(2);
    }
    return n;
  };
  return {
    updates: int("updates", values.updates),
    rounds: int("rounds", values.rounds),
    concurrency: int("concurrency", values.concurrency),
    diskWriter: values["disk-writer"],
  };
}

const opts = options();
const dir = mkdtempSync(join(tmpdir(), "aws-update-loop-"));
const OWNER = "bench-owner";
const storage = createSqliteStorage({ path: join(dir, "workspace.sqlite") });
const db = sqliteDatabaseOf(storage);
const ids: string[] = [];
for (let i = 0; i < opts.concurrency; i++) {
  const record = syntheticConversation(i, OWNER);
  await storage.conversations.insert(record);
  ids.push(record.id);
}

const writer = opts.diskWriter
  ? new Worker(
      `const fs = require("node:fs");
       const fd = fs.openSync(require("node:worker_threads").workerData, "w");
       const chunk = Buffer.alloc(256 * 1024, 1);
       for (let i = 0; ; i++) { fs.writeSync(fd, chunk, 0, chunk.length, (i % 64) * chunk.length); fs.fdatasyncSync(fd); }`,
      { eval: true, workerData: join(dir, "other-writer.bin") },
    )
  : null;

// The baseline: the repository's UPDATE statement run inline on the FULL connection, its promise resolved after.
const inline = db.prepare(
  `UPDATE conversations SET
     title = CASE WHEN @setTitle THEN @title ELSE title END,
     llm_model = CASE WHEN @setModel THEN @llmModel ELSE llm_model END,
     metrics = CASE WHEN @setMetrics THEN @metrics ELSE metrics END,
     updated_at = @updatedAt
   WHERE id = @id AND owner_id = @ownerId`,
);
let seq = 0;
const metrics = () => ({ accumulated_cost: ++seq / 1000, turns: seq });
const sides = {
  "FULL, inline (baseline)": (id: string): Promise<boolean> =>
    Promise.resolve(
      inline.run({
        id,
        ownerId: OWNER,
        setTitle: 0,
        title: null,
        setModel: 1,
        llmModel: "scripted",
        setMetrics: 1,
        metrics: JSON.stringify(metrics()),
        updatedAt: Date.now(),
      }).changes === 1,
    ),
  "group commit, WAL sync on the thread pool": (id: string): Promise<boolean> =>
    storage.conversations.update(id, OWNER, {
      llmModel: "scripted",
      metrics: metrics(),
      updatedAt: new Date(),
    }),
};
type Side = keyof typeof sides;

interface Round {
  busyMsPerUpdate: number;
  ackMs: number[];
  wallMs: number;
}

async function round(update: (id: string) => Promise<boolean>): Promise<Round> {
  const ackMs: number[] = [];
  const startElu = performance.eventLoopUtilization();
  const started = performance.now();
  for (let done = 0; done < opts.updates; done += opts.concurrency) {
    await Promise.all(
      ids.map(async (id) => {
        const t0 = performance.now();
        if (!(await update(id))) throw new Error("conversation not found");
        ackMs.push(performance.now() - t0);
      }),
    );
    // A turn of the loop between waves, as between requests.
    await new Promise((r) => setImmediate(r));
  }
  const wallMs = performance.now() - started;
  const elu = performance.eventLoopUtilization(startElu);
  const updates = Math.ceil(opts.updates / opts.concurrency) * opts.concurrency;
  return { busyMsPerUpdate: elu.active / updates, ackMs, wallMs };
}

const results = new Map<Side, Round[]>(Object.keys(sides).map((s) => [s as Side, []]));
for (const side of Object.keys(sides) as Side[]) await round(sides[side]); // warm-up, not counted
for (let r = 0; r < opts.rounds; r++) {
  for (const side of Object.keys(sides) as Side[]) results.get(side)?.push(await round(sides[side]));
}

console.log(machineLine(machine()));
console.log(
  `${opts.rounds} rounds a side of ${opts.updates} UPDATEs, ${opts.concurrency} at once; SQLite file in ${tmpdir()}` +
    (writer === null ? "" : "; another thread writing and syncing the same disk"),
);
const fmt = (n: number): string => n.toFixed(3);
for (const [side, rounds] of results) {
  const busy = rounds.map((r) => r.busyMsPerUpdate);
  const acks = rounds.flatMap((r) => r.ackMs);
  const rate = rounds.map((r) => (r.ackMs.length / r.wallMs) * 1000);
  console.log(
    `${side}: loop busy ${fmt(median(busy))} ms an UPDATE (rounds ${fmt(Math.min(...busy))}–${fmt(Math.max(...busy))}); ` +
      `acknowledged p50 ${fmt(percentile(acks, 50))} / p99 ${fmt(percentile(acks, 99))} ms; ` +
      `${Math.round(median(rate))} UPDATEs/s`,
  );
}
const base = median(results.get("FULL, inline (baseline)")?.map((r) => r.busyMsPerUpdate) ?? []);
const after = median(
  results.get("group commit, WAL sync on the thread pool")?.map((r) => r.busyMsPerUpdate) ?? [],
);
console.log(`loop busy per UPDATE: ${(after / base).toFixed(3)}× the baseline`);
await writer?.terminate();
await storage.close();
rmSync(dir, { recursive: true, force: true });
