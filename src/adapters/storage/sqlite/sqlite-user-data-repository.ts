import type Database from "better-sqlite3";
import type { UserData, UserDataRepository, Versioned } from "../../../ports/user-data-repository.ts";
import { attempt } from "./sqlite-errors.ts";
import { createCommitQueue } from "./sqlite-group-commit.ts";
import type { WalSync } from "./sqlite-wal-sync.ts";

interface UserDataRow {
  version: number;
  value: string;
}

/**
 * Where a user's queued writes lead: the version and the JSON text, and the document itself while no reader has
 * taken it (a writer that serialized it hands it over; the first read for update gets it as its own copy, later
 * ones parse the text).
 */
interface QueuedState extends UserDataRow {
  doc: UserData | null;
}

interface QueuedWrite {
  userId: string;
  expected: number;
  value: string;
  /** Already known to conflict with a queued write: reported (false) with the batch, never written. */
  conflict: boolean;
  resolve: (stored: boolean) => void;
  reject: (error: unknown) => void;
}

/** The user-data repository plus what the storage needs to close it. */
export interface SqliteUserDataRepository extends UserDataRepository {
  /** Commits the queued writes now (before closing the connection). */
  flush(): void;
}

/**
 * User data on SQLite: one row per user, the document as JSON text, compare-and-set on `version`.
 *
 * Group commit: with `synchronous = FULL` every commit costs a WAL fsync (~0.2 ms here), which capped durable
 * writes at ~2,500/s when each compare-and-set committed on its own. Writes are therefore queued and the writes
 * of one event-loop turn (or of one WAL sync, below) are committed together in one transaction; each promise
 * resolves only after that commit is durable and rejects when it fails (nothing of the batch is kept). The write
 * lock is held only during that synchronous commit, never across turns.
 *
 * Durable off the event loop: given a WalSync (WAL mode on a file), a batch commits under `synchronous = NORMAL`
 * (no fsync in the COMMIT) and its promises are settled once WalSync has fdatasynced the WAL on libuv's thread
 * pool, which makes it exactly as durable as a FULL commit. The event loop serves requests while the disk syncs.
 * Writes queued while a sync runs would only be covered by the next sync, so they are held and committed together
 * when it ends (one transaction per sync rather than one per event-loop turn; no writer is answered later than if
 * each turn had committed). A committed batch is visible to reads at once, before its sync completes (its writers
 * are not answered yet): after a power loss or OS crash in that window, a read may have shown a write that was
 * never acknowledged and is gone. Without a WalSync, batches commit under FULL.
 *
 * Reads answer committed state only, except `get(…, {forUpdate: true})` (the read of a read-modify-write), which
 * also sees the queued writes, so that concurrent read-modify-writes of one user chain within one batch instead of
 * conflicting: a chained write is stored only if the write it was based on was, otherwise it reports a conflict
 * and the caller re-reads and retries, as with any compare-and-set conflict.
 *
 * Inside a transaction of the caller's own (bulk loads through `sqliteDatabaseOf`) writes run at once, in it.
 *
 * Reads are not cached: every read asks SQLite (one statement by primary key) and parses the stored JSON, so each
 * reader gets its own copy and sees commits of other connections (the CLI, a second server on the same file) at
 * once. What is worth keeping of a read is kept above the port (the settings service's answer per user version),
 * checked against `changeToken()`: it changes when this repository commits, and when `PRAGMA data_version` shows
 * that another connection committed. The pragma is asked at most once per event-loop turn (its read transaction
 * costs two file-lock system calls, as a read does), so all requests of one turn share one check; a commit of
 * another process is seen from the next turn on.
 */
export function createSqliteUserDataRepository(
  db: Database.Database,
  walSync: WalSync | null = null,
): SqliteUserDataRepository {
  const select = db.prepare<[string], UserDataRow>("SELECT version, value FROM user_data WHERE user_id = ?");
  // Positional parameters: binding named ones from an object costs a property lookup per parameter (~1 µs a write).
  const insert = db.prepare<[userId: string, value: string]>(
    "INSERT INTO user_data (user_id, version, value) VALUES (?, 1, ?) ON CONFLICT (user_id) DO NOTHING",
  );
  const update = db.prepare<[value: string, userId: string, expected: number]>(
    "UPDATE user_data SET value = ?, version = version + 1 WHERE user_id = ? AND version = ?",
  );
  // A user's writes chained within one batch are stored with one statement: the last value, the version the
  // chain leads to, checked against the version the first was based on.
  const insertAt = db.prepare<[userId: string, version: number, value: string]>(
    "INSERT INTO user_data (user_id, version, value) VALUES (?, ?, ?) ON CONFLICT (user_id) DO NOTHING",
  );
  const updateTo = db.prepare<[value: string, version: number, userId: string, expected: number]>(
    "UPDATE user_data SET value = ?, version = ? WHERE user_id = ? AND version = ?",
  );
  /** Bumped by every commit of this repository and when another connection's commit is seen. */
  let token = 0;
  const write = (userId: string, expected: number, value: string): boolean => {
    token++;
    return (expected === 0 ? insert.run(userId, value) : update.run(value, userId, expected)).changes === 1;
  };
  /** `writes` chained writes stored as one: from version `expected` to `expected + writes`, holding `value`. */
  const writeChain = (userId: string, expected: number, writes: number, value: string): boolean => {
    if (writes === 1) return write(userId, expected, value);
    token++;
    const version = expected + writes;
    return (
      (expected === 0 ? insertAt.run(userId, version, value) : updateTo.run(value, version, userId, expected))
        .changes === 1
    );
  };

  const dataVersion = db.prepare<[], number>("PRAGMA data_version").pluck();
  let seenDataVersion = -1;
  let probedThisTurn = false;
  const endOfTurn = (): void => {
    probedThisTurn = false;
  };
  const changeToken = (): number => {
    if (!probedThisTurn) {
      probedThisTurn = true;
      setImmediate(endOfTurn);
      let v: number;
      try {
        v = dataVersion.get() as number;
      } catch {
        // Unknown (the database is busy or closed): a new token sends the caller to a read, which reports it.
        probedThisTurn = false;
        return ++token;
      }
      if (v !== seenDataVersion) {
        seenDataVersion = v;
        token++;
      }
    }
    return token;
  };

  /** The state each user's queued writes lead to (what a read-for-update sees). */
  const queuedState = new Map<string, QueuedState>();

  /**
   * One transaction for the batch. The writes of one user that are not known conflicts form one chain (each based
   * on the one before, see compareAndSet), which leads from the version the first was based on to the last one's
   * value: the states in between are never seen outside the transaction, so the chain is stored with one
   * statement, and all of it is stored or none (its first write's compare-and-set decides, as it decided each
   * later one when they were written one by one).
   */
  const commitBatch = db.transaction((batch: QueuedWrite[]): boolean[] => {
    const results = new Array<boolean>(batch.length);
    // The chain of each user: where it starts, how many writes, its last value, and the writes' positions.
    const chains = new Map<string, { expected: number; writes: number; value: string; at: number[] }>();
    for (let i = 0; i < batch.length; i++) {
      const w = batch[i] as QueuedWrite;
      // A write chained on a write of this batch that was not stored is based on state that never existed.
      results[i] = false;
      if (w.conflict) continue;
      const chain = chains.get(w.userId);
      if (chain === undefined)
        chains.set(w.userId, { expected: w.expected, writes: 1, value: w.value, at: [i] });
      else {
        chain.writes++;
        chain.value = w.value;
        chain.at.push(i);
      }
    }
    for (const [userId, chain] of chains) {
      if (!writeChain(userId, chain.expected, chain.writes, chain.value)) continue;
      for (const i of chain.at) results[i] = true;
    }
    return results;
  });
  // Queued, not yet committed writes, in order; queuedState describes them, so it is cleared as they go to commit.
  const queue = createCommitQueue(db, walSync, commitBatch, () => queuedState.clear());

  /** The committed state of a user. */
  const durable = (userId: string): UserDataRow | null => select.get(userId) ?? null;

  return {
    changeToken,
    get: (userId, options) =>
      attempt((): Versioned<UserData> | null => {
        // A read for update also sees the writes queued for the user (see above).
        const queued = options?.forUpdate === true ? queuedState.get(userId) : undefined;
        if (queued?.doc != null) {
          // The queued document itself, handed over once: the reader edits it into the next write of the chain.
          const value = queued.doc;
          queued.doc = null;
          return { version: queued.version, value };
        }
        const state = queued ?? durable(userId);
        return state === null ? null : { version: state.version, value: JSON.parse(state.value) as UserData };
      }),
    compareAndSet: (userId, expectedVersion, next, serialized) => {
      // Serialized now (or by the caller, who measured its size): the caller may change `next` once this returns.
      const value = serialized ?? JSON.stringify(next);
      if (db.inTransaction) return attempt(() => write(userId, expectedVersion, value));
      const queued = queuedState.get(userId);
      // A conflict with a queued write is reported with the batch too: a caller retrying at once then reads the
      // committed state instead of spinning on the same conflict.
      const conflict = queued !== undefined && queued.version !== expectedVersion;
      if (!conflict)
        queuedState.set(userId, {
          version: expectedVersion + 1,
          value,
          // Given `serialized`, the caller handed `next` over (see the port).
          doc: serialized === undefined ? null : next,
        });
      return new Promise<boolean>((resolve, reject) =>
        queue.push({ userId, expected: expectedVersion, value, conflict, resolve, reject }),
      );
    },
    flush: queue.flush,
  };
}
