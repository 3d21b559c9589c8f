import { chmodSync, closeSync, openSync } from "node:fs";
import { hostname } from "node:os";
import { resolve } from "node:path";
import Database from "better-sqlite3";
import { StorageUnavailableError } from "../../../core/errors.ts";
import type { Storage } from "../../../ports/storage.ts";
import { createSqliteApiKeyRepository } from "./sqlite-api-key-repository.ts";
import { createSqliteChangeLog } from "./sqlite-change-log.ts";
import { createSqliteConversationRepository } from "./sqlite-conversation-repository.ts";
import { attempt, toSqliteStorageError } from "./sqlite-errors.ts";
import { createSqliteEventRepository } from "./sqlite-event-repository.ts";
import { createSqliteSandboxRepository } from "./sqlite-sandbox-repository.ts";
import { migrateSqliteSchema } from "./sqlite-schema.ts";
import { createSqliteStartTaskRepository } from "./sqlite-start-task-repository.ts";
import { createSqliteUserDataRepository } from "./sqlite-user-data-repository.ts";
import { type WalFileOps, WalSync } from "./sqlite-wal-sync.ts";

/** Options of {@link createSqliteStorage}. */
export interface SqliteStorageOptions {
  /** Database file (created when missing), or ":memory:" for a private in-memory database. */
  path: string;
  /** File operations of the WAL sync (tests); node:fs by default. */
  walFileOps?: WalFileOps;
}

/** How long a statement waits for another connection's write lock before failing with SQLITE_BUSY. */
const BUSY_TIMEOUT_MS = 5000;

const databases = new WeakMap<Storage, Database.Database>();

/**
 * Makes the database file readable by its owner only (0600) before SQLite opens it, creating it so if new; SQLite
 * gives its -wal and -shm files the database file's mode. Existing files of an older install are tightened too.
 */
function restrictFileModes(path: string): void {
  if (path === "" || path === ":memory:" || path.startsWith("file:")) return;
  for (const suffix of ["", "-wal", "-shm"]) {
    try {
      chmodSync(`${path}${suffix}`, 0o600);
    } catch (error: unknown) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
    }
  }
  closeSync(openSync(path, "a", 0o600));
}

/**
 * Opens (creating or migrating as needed) the embedded SQLite storage.
 *
 * The connection runs in WAL mode with `synchronous = FULL`, so a write is durable once its promise resolves, and
 * waits up to 5 s for a competing writer. User-data writes, event appends and conversation updates of one
 * event-loop turn share one commit per repository (group commit), made durable by a WAL fdatasync on the thread
 * pool rather than inside the COMMIT on the event loop (see createCommitQueue and WalSync). Statements are prepared once. All work is synchronous inside each
 * call; operations are exposed as promises to satisfy the storage ports.
 *
 * @throws StorageUnavailableError when the file cannot be opened (missing directory, permissions, locked).
 * @throws Error when the file holds a schema newer than this build understands.
 */
export function createSqliteStorage(options: SqliteStorageOptions): Storage {
  let db: Database.Database;
  try {
    restrictFileModes(options.path);
    db = new Database(options.path, { timeout: BUSY_TIMEOUT_MS });
  } catch (error: unknown) {
    throw new StorageUnavailableError(error);
  }
  try {
    useIncrementalVacuum(db);
    db.pragma("journal_mode = WAL");
    // A WAL that grew past this (a long reader held its checkpoints back) is cut back to it once checkpointed, so
    // the files return to their size after a burst; SQLite's auto-checkpoint keeps it near 4 MiB otherwise.
    db.pragma(`journal_size_limit = ${WAL_SIZE_LIMIT_BYTES}`);
    db.pragma("synchronous = FULL");
    db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
    migrateSqliteSchema(db);
  } catch (error: unknown) {
    db.close();
    throw toSqliteStorageError(error);
  }

  const ping = db.prepare("SELECT 1");
  // The file shrinks when the vacuum's pages are checkpointed; PASSIVE waits for no reader or writer.
  const checkpoint = db.prepare("PRAGMA wal_checkpoint(PASSIVE)");
  const heartbeat = db.prepare<{ serverId: string; at: number }>(
    "INSERT INTO heartbeats (server_id, at) VALUES (@serverId, @at) ON CONFLICT (server_id) DO UPDATE SET at = @at",
  );
  const serverId = serverIdentity();
  // Only a file database in WAL mode has a WAL to sync (SQLite falls back to a rollback journal where WAL cannot
  // work, e.g. some network file systems): otherwise every commit stays FULL, synced inline.
  const wal = !db.memory && db.pragma("journal_mode", { simple: true }) === "wal";
  const walSync = wal ? new WalSync(`${resolve(db.name)}-wal`, options.walFileOps) : null;
  const changes = createSqliteChangeLog(db);
  const userData = createSqliteUserDataRepository(db, walSync);
  const events = createSqliteEventRepository(db, walSync, changes.record);
  const conversations = createSqliteConversationRepository(db, walSync);
  const storage: Storage = {
    kind: "sqlite",
    userData,
    apiKeys: createSqliteApiKeyRepository(db),
    sandboxes: createSqliteSandboxRepository(db, changes.record),
    conversations,
    startTasks: createSqliteStartTaskRepository(db, changes.record),
    events,
    changes,
    ping: () =>
      attempt(() => {
        ping.get();
      }),
    checkWritable: () =>
      attempt(() => {
        heartbeat.run({ serverId, at: Date.now() });
      }),
    compact: () =>
      attempt(() => {
        // exec, not a prepared statement's run(): each step of this pragma frees one page, exec steps to the end.
        db.exec(`PRAGMA incremental_vacuum(${VACUUM_PAGES_PER_CALL})`);
        if (wal) checkpoint.all();
      }),
    close: () =>
      attempt(() => {
        if (!db.open) return;
        userData.flush();
        events.flush();
        conversations.flush();
        walSync?.close();
        try {
          // Keeps planner statistics fresh for long-lived files; cheap when nothing changed.
          db.pragma("optimize");
        } finally {
          db.close();
        }
      }),
  };
  databases.set(storage, db);
  return storage;
}

/**
 * The better-sqlite3 connection behind a storage made by {@link createSqliteStorage}, for tests and maintenance
 * tools only (query plans, bulk loads inside `db.transaction`: every repository call of this adapter runs its
 * SQL synchronously when called, so calls made inside a transaction function belong to that transaction).
 *
 * @throws TypeError when the storage was not made by {@link createSqliteStorage}.
 */
export function sqliteDatabaseOf(storage: Storage): Database.Database {
  const db = databases.get(storage);
  if (db === undefined) throw new TypeError("not a storage made by createSqliteStorage");
  return db;
}

/** See the journal_size_limit pragma at open. */
const WAL_SIZE_LIMIT_BYTES = 4 * 1024 * 1024;

/** Free pages {@link Storage.compact} gives back per call (4 KiB each by default: 16 MiB). */
const VACUUM_PAGES_PER_CALL = 4096;

/**
 * Puts the database in `auto_vacuum = INCREMENTAL` mode, so that pages freed by deletes can be given back to the
 * file system (`PRAGMA incremental_vacuum`, see Storage.compact) instead of the file only ever growing. A new file
 * takes the mode at once; an existing file of an older build needs one VACUUM to rebuild it, done here once. When
 * another connection holds the database meanwhile (SQLITE_BUSY), the VACUUM is left for a later start.
 */
function useIncrementalVacuum(db: Database.Database): void {
  if (Number(db.pragma("auto_vacuum", { simple: true })) === 2) return;
  db.pragma("auto_vacuum = INCREMENTAL");
  if (Number(db.pragma("auto_vacuum", { simple: true })) === 2) return; // a new file
  try {
    db.exec("VACUUM");
  } catch (error: unknown) {
    if ((error as { code?: string }).code !== "SQLITE_BUSY") throw error;
  }
}

/** Names this server process in heartbeat records: host and pid. */
function serverIdentity(): string {
  return `${hostname()}:${process.pid}`;
}
