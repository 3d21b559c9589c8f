import { StorageUnavailableError } from "../../../core/errors.ts";

// Codes meaning "the database cannot be used right now" rather than "this request is wrong".
const UNAVAILABLE = /^SQLITE_(BUSY|LOCKED|CANTOPEN|IOERR|FULL|READONLY)/;

/** Maps SQLite errors that mean the database cannot be used (busy, I/O, closed) to StorageUnavailableError. */
export function toSqliteStorageError(error: unknown): unknown {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    if (typeof code === "string" && UNAVAILABLE.test(code)) return new StorageUnavailableError(error);
    if (error instanceof TypeError && /database connection is not open/i.test(error.message)) {
      return new StorageUnavailableError(error);
    }
  }
  return error;
}

/**
 * Runs synchronous database work at once and returns its outcome as a promise, errors mapped by
 * {@link toSqliteStorageError}. Running at call time (not after an await) keeps every repository call usable
 * inside a better-sqlite3 transaction.
 */
export function attempt<T>(work: () => T): Promise<T> {
  try {
    return Promise.resolve(work());
  } catch (error: unknown) {
    return Promise.reject(toSqliteStorageError(error));
  }
}
