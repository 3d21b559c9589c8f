import type Database from "better-sqlite3";
import { toSqliteStorageError } from "./sqlite-errors.ts";
import type { WalSync } from "./sqlite-wal-sync.ts";

/** A queued write: settled with its own result once the batch holding it is durable, or rejected with the batch. */
export interface QueuedWrite<R> {
  resolve(result: R): void;
  reject(error: unknown): void;
}

/** A repository's queue of writes for the group commit (see {@link createCommitQueue}). */
export interface CommitQueue<W> {
  /** Queues a write; it is committed with the others queued in the same event-loop turn (or the same WAL sync). */
  push(write: W): void;
  /** Commits the queued writes now (before closing the connection, or before a write that must follow them). */
  flush(): void;
}

/**
 * Commits a batch of queued writes in one transaction (`commit`, a `db.transaction`) and settles each writer with
 * its result once the batch is durable. Given a WalSync, the COMMIT runs under `synchronous = NORMAL` and the
 * writers are answered after WalSync has fdatasynced the WAL (as durable as FULL, the fsync off the event loop);
 * without one, under the connection's FULL. A failed commit rejects every writer of the batch and keeps none of it.
 */
function createGroupCommit(db: Database.Database, walSync: WalSync | null) {
  const syncNormal = db.prepare("PRAGMA synchronous = NORMAL");
  const syncFull = db.prepare("PRAGMA synchronous = FULL");
  return <R, W extends QueuedWrite<R>>(batch: W[], commit: (batch: W[]) => R[]): void => {
    let results: R[];
    try {
      if (walSync === null) results = commit(batch);
      else {
        syncNormal.run();
        try {
          results = commit(batch);
        } finally {
          syncFull.run();
        }
      }
    } catch (error: unknown) {
      const mapped = toSqliteStorageError(error);
      for (const w of batch) w.reject(mapped);
      return;
    }
    const settle = (error: Error | null): void => {
      batch.forEach((w, i) => {
        if (error !== null) w.reject(error);
        else w.resolve(results[i] as R);
      });
    };
    if (walSync === null) settle(null);
    else walSync.whenDurable(settle);
  };
}

/**
 * A repository's writes, group-committed: the writes queued in one event-loop turn are committed in one
 * transaction (`commit`, called with them in the order they were queued) and each writer is answered with its
 * result once that commit is durable (see createGroupCommit). While the WAL syncs, a commit would only be covered
 * by the next sync anyway, so the writes queued meanwhile are held and committed together the moment the running
 * sync ends, which starts the next one (no writer is answered later than if each turn had committed).
 * `beforeCommit` runs as a batch leaves the queue, before its commit (a repository forgets there what it kept of
 * the queued writes).
 */
export function createCommitQueue<R, W extends QueuedWrite<R>>(
  db: Database.Database,
  walSync: WalSync | null,
  commit: (batch: W[]) => R[],
  beforeCommit: () => void = () => {},
): CommitQueue<W> {
  const groupCommit = createGroupCommit(db, walSync);
  let queue: W[] = [];
  const flush = (): void => {
    const batch = queue;
    if (batch.length === 0) return;
    queue = [];
    beforeCommit();
    groupCommit(batch, commit);
  };
  return {
    push: (write) => {
      if (queue.length === 0) {
        if (walSync?.syncing === true) walSync.whenSyncEnds(flush);
        else setImmediate(flush);
      }
      queue.push(write);
    },
    flush,
  };
}
