import type { ChangeStream, Db } from "mongodb";
import type { ChangeEntry, ChangeLog, ChangeRecord } from "../../../ports/change-log.ts";
import { guarded } from "./mongo-errors.ts";
import { COLLECTIONS } from "./mongo-indexes.ts";
import { DURABLE_WRITE } from "./mongo-write-concern.ts";

/** A change log entry; `_id` is its sequence number. */
interface ChangeDoc extends ChangeEntry {
  _id: number;
  at: Date;
}

/** The counter handing out sequence numbers (`_id` "changes"). */
interface CounterDoc {
  _id: string;
  seq: number;
}

/**
 * How long a reader waits for a sequence number handed out but not stored yet before presuming its writer dead
 * and reading past it.
 */
export const CHANGE_GAP_GRACE_MS = 5_000;

/**
 * The change log on MongoDB, without multi-document transactions (no replica set needed): an append takes its
 * numbers from a counter document (`$inc`, one round trip) and then inserts its entries. Numbers are therefore
 * handed out before their entries are stored: a reader stops at a missing number until it is stored, or until it
 * has been missing for {@link CHANGE_GAP_GRACE_MS} (its writer died between the two steps; the entry is lost,
 * while the state it described was stored before the number was taken).
 *
 * Where the server runs as a replica set, {@link ChangeLog.subscribe} follows inserts with a change stream, so
 * readers wake up at once instead of at their next poll.
 */
export function createMongoChangeLog(db: Db, log?: (msg: string, data?: object) => void): ChangeLog {
  const changes = db.collection<ChangeDoc>(COLLECTIONS.changes);
  const counters = db.collection<CounterDoc>(COLLECTIONS.counters);
  /** Missing sequence numbers a reader stopped at, with when that was first seen. */
  const gaps = new Map<number, number>();

  const head = async (): Promise<number> => (await counters.findOne({ _id: "changes" }))?.seq ?? 0;

  return {
    append: (entries) =>
      guarded(async () => {
        if (entries.length === 0) return [];
        const counter = await counters.findOneAndUpdate(
          { _id: "changes" },
          { $inc: { seq: entries.length } },
          { upsert: true, returnDocument: "after", ...DURABLE_WRITE },
        );
        const last = counter?.seq ?? 0;
        const first = last - entries.length + 1;
        const at = new Date();
        const docs = entries.map((e, i): ChangeDoc => ({ ...e, _id: first + i, at }));
        await changes.insertMany(docs, DURABLE_WRITE);
        return docs.map((d) => d._id);
      }),
    read: (after, limit) =>
      guarded(async () => {
        const docs = await changes
          .find({ _id: { $gt: after } })
          .sort({ _id: 1 })
          .limit(limit)
          .toArray();
        const out: ChangeRecord[] = [];
        let expected = after + 1;
        const now = Date.now();
        for (const d of docs) {
          if (d._id !== expected) {
            const since = gaps.get(expected) ?? now;
            gaps.set(expected, since);
            if (now - since < CHANGE_GAP_GRACE_MS) break;
            log?.("change log: a sequence number was never stored (its writer died); reading past it", {
              from: expected,
              to: d._id - 1,
            });
            gaps.delete(expected);
          }
          gaps.delete(d._id);
          out.push({ seq: d._id, ownerId: d.ownerId, topic: d.topic, key: d.key, body: d.body, at: d.at });
          expected = d._id + 1;
        }
        return out;
      }),
    head: () => guarded(head),
    floor: () =>
      guarded(async () => {
        const [oldest] = await changes.find({}).sort({ _id: 1 }).limit(1).toArray();
        return oldest === undefined ? head() : oldest._id - 1;
      }),
    prune: (before, keep) =>
      guarded(async () => {
        let n = (await changes.deleteMany({ at: { $lt: before } }, DURABLE_WRITE)).deletedCount;
        if (keep !== undefined) {
          // The newest `keep` by sequence number stay (numbers never stored, a dead writer's, count as kept).
          const limit = (await head()) - Math.max(0, keep);
          n += (await changes.deleteMany({ _id: { $lte: limit } }, DURABLE_WRITE)).deletedCount;
        }
        return n;
      }),
    subscribe(onAppend) {
      if (typeof changes.watch !== "function") return () => {};
      let stream: ChangeStream | null = null;
      try {
        stream = changes.watch([{ $match: { operationType: "insert" } }]);
      } catch {
        return () => {};
      }
      stream.on("change", () => onAppend());
      stream.on("error", (err: unknown) => {
        // Standalone servers have no change streams: readers keep polling.
        log?.("change streams unavailable (the server is not a replica set); watches poll the change log", {
          error: String(err),
        });
        void stream?.close().catch(() => undefined);
        stream = null;
      });
      return () => {
        void stream?.close().catch(() => undefined);
        stream = null;
      };
    },
  };
}
