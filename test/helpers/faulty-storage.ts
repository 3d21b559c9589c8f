import { StorageUnavailableError } from "../../src/core/errors.ts";
import type { Storage } from "../../src/ports/storage.ts";

/** Repository methods that only read; every other method (and checkWritable) counts as a write. */
const READS = new Set([
  "get",
  "getMany",
  "list",
  "listAll",
  "search",
  "count",
  "findByHash",
  "listUnfinished",
  "sandboxesInUse",
  "changeToken",
  "read",
  "head",
  "floor",
  "subscribe",
]);

/** Which writes fail: none (null), all, or those a predicate picks (repository name, method name). */
export interface WriteFaults {
  fail: ((repository: string, method: string) => boolean) | null;
  /** How many writes failed so far. */
  failed: number;
  /** Which writes failed, in order: "<repository>.<method>". */
  log: string[];
}

/**
 * Storage that rejects chosen writes with StorageUnavailableError, as a full disk or a read-only database does
 * (the SQLite adapter maps SQLITE_FULL and SQLITE_READONLY to that error); reads always pass through.
 */
export function withWriteFaults(storage: Storage): { storage: Storage; faults: WriteFaults } {
  const faults: WriteFaults = { fail: null, failed: 0, log: [] };
  const guard = <T extends object>(name: string, repo: T): T => {
    const out: Record<string, unknown> = {};
    for (const key of Object.keys(repo)) {
      const value = (repo as Record<string, unknown>)[key];
      if (typeof value !== "function") continue;
      const method = value as (...args: unknown[]) => unknown;
      out[key] = (...args: unknown[]) => {
        if (!READS.has(key) && faults.fail?.(name, key)) {
          faults.failed++;
          faults.log.push(`${name}.${key}`);
          return Promise.reject(
            new StorageUnavailableError(new Error("SQLITE_FULL: database or disk is full")),
          );
        }
        return method.apply(repo, args);
      };
    }
    return out as T;
  };
  return {
    faults,
    storage: {
      kind: storage.kind,
      userData: guard("userData", storage.userData),
      apiKeys: guard("apiKeys", storage.apiKeys),
      sandboxes: guard("sandboxes", storage.sandboxes),
      conversations: guard("conversations", storage.conversations),
      startTasks: guard("startTasks", storage.startTasks),
      events: guard("events", storage.events),
      changes: guard("changes", storage.changes),
      ping: () => storage.ping(),
      checkWritable: () =>
        faults.fail?.("storage", "checkWritable")
          ? Promise.reject(new StorageUnavailableError(new Error("SQLITE_FULL: database or disk is full")))
          : storage.checkWritable(),
      compact: () => storage.compact(),
      close: () => storage.close(),
    },
  };
}
