import type Database from "better-sqlite3";
import { toSqliteStorageError } from "./sqlite-errors.ts";
import type { WalSync } from "./sqlite-wal-sync.ts";

/** A queued write: settled with its own result once the batch holding it is durable, or rejected with the batch. */
export interface QueuedWrite<R> {
  resolve(result: R): void;
  reject(error: unknown): void;
}

/**
 * Commits a batch of queued writes in one transaction (`commit`, a `db.transaction`) and settles each writer with
 * its result once the batch is durable. Given a WalSync, the COMMIT runs under `synchronous = NORMAL` and the
 * writers are answered after WalSync has fdatasynced the WAL (as durable as FULL, the fsync off the event loop);
 * without one, under the connection's FULL. A failed commit rejects every writer of the batch and keeps none of it.
 */
export function createGroupCommit(db: Database.Database, walSync: WalSync | null) {
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
