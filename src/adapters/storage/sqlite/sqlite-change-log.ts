import type Database from "better-sqlite3";
import type { ChangeEntry, ChangeLog, ChangeRecord } from "../../../ports/change-log.ts";
import { attempt } from "./sqlite-errors.ts";

interface ChangeRow {
  seq: number;
  owner_id: string;
  topic: ChangeRecord["topic"];
  key: string;
  body: string;
  at: number;
}

/**
 * The change log on SQLite. Writers are serialised by the database, so sequence numbers become visible in order:
 * a reader never sees a number before a lower one. The repositories insert the entries of their changes inside
 * the transactions that make them ({@link record}); `append` commits entries on their own.
 */
export function createSqliteChangeLog(db: Database.Database): ChangeLog & {
  /**
   * Inserts the entries now, synchronously: called by the repositories inside the transaction of the change the
   * entries describe, so that both are committed together or not at all.
   */
  record(entries: readonly ChangeEntry[]): void;
} {
  const insert = db.prepare<[string, string, string, string, number]>(
    "INSERT INTO changes (owner_id, topic, key, body, at) VALUES (?, ?, ?, ?, ?)",
  );
  const after = db.prepare<[number, number], ChangeRow>(
    "SELECT seq, owner_id, topic, key, body, at FROM changes WHERE seq > ? ORDER BY seq LIMIT ?",
  );
  const head = db.prepare<[], { seq: number | null }>(
    "SELECT seq FROM sqlite_sequence WHERE name = 'changes'",
  );
  const oldest = db.prepare<[], { seq: number | null }>("SELECT min(seq) AS seq FROM changes");
  const prune = db.prepare<[number]>("DELETE FROM changes WHERE at < ?");
  // Sequence numbers are dense here (one writer at a time), so the newest `keep` are those above head - keep.
  const pruneBeyond = db.prepare<[number]>("DELETE FROM changes WHERE seq <= ?");
  const pruneBoth = db.transaction((before: number, keep: number | undefined): number => {
    let n = prune.run(before).changes;
    if (keep !== undefined) n += pruneBeyond.run(headSeq() - Math.max(0, keep)).changes;
    return n;
  });

  const write = (entries: readonly ChangeEntry[]): number[] => {
    const at = Date.now();
    return entries.map((e) => Number(insert.run(e.ownerId, e.topic, e.key, e.body, at).lastInsertRowid));
  };
  const appendAll = db.transaction(write);
  const headSeq = (): number => head.get()?.seq ?? 0;

  return {
    append: (entries) => attempt(() => appendAll(entries)),
    read: (afterSeq, limit) =>
      attempt(() =>
        after.all(afterSeq, limit).map((r) => ({
          seq: r.seq,
          ownerId: r.owner_id,
          topic: r.topic,
          key: r.key,
          body: r.body,
          at: new Date(r.at),
        })),
      ),
    head: () => attempt(headSeq),
    floor: () =>
      attempt(() => {
        const min = oldest.get()?.seq ?? null;
        return min === null ? headSeq() : min - 1;
      }),
    prune: (before, keep) => attempt(() => pruneBoth(before.getTime(), keep)),
    record: (entries) => {
      write(entries);
    },
  };
}
