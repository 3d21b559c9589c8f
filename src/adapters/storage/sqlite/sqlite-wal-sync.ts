import * as fs from "node:fs";
import { StorageUnavailableError } from "../../../core/errors.ts";

/** The file operations a WalSync uses (node:fs's; tests pass their own to watch or fail them). */
export interface WalFileOps {
  open(path: string, flags: string, cb: (err: NodeJS.ErrnoException | null, fd: number) => void): void;
  fdatasync(fd: number, cb: (err: NodeJS.ErrnoException | null) => void): void;
  close(fd: number, cb: (err: NodeJS.ErrnoException | null) => void): void;
}

/** Called once the commits made before {@link WalSync.whenDurable} are on disk, or with the reason they may not be. */
export type Durable = (error: Error | null) => void;

/**
 * Durability for commits made with `synchronous = NORMAL`, with the fsync off the event loop.
 *
 * With `synchronous = FULL`, SQLite fdatasyncs the WAL inside every COMMIT, on the thread that commits: with one
 * connection on the event loop, ~0.2 ms (~0.1 ms of it CPU) during which no request is served. In WAL mode,
 * NORMAL differs from FULL only in leaving out that one sync (the WAL is still synced before each checkpoint, and
 * its header when it is reused), so a commit made under NORMAL is exactly as durable as a FULL one once its WAL
 * frames are fdatasynced. This class does that sync on libuv's thread pool and calls back the commits it covers:
 * commits arriving while a sync runs wait for the next one, which covers all of them at once (group sync).
 *
 * The WAL file is opened on first use and kept open: while the connection is open its WAL stays the same file
 * (SQLite deletes the WAL only when the last connection closes, and leaving WAL mode needs exclusive access).
 * When there is no WAL file, everything committed is already in the synced database file. A failed sync reports
 * StorageUnavailableError to the commits it covered.
 */
export class WalSync {
  readonly #path: string | null;
  readonly #ops: WalFileOps;
  #fd: number | null = null;
  #running = false;
  #closed = false;
  /** Commits waiting for the next sync (made after the running one began). */
  #waiting: Durable[] = [];
  /** Called when the running sync ends (see whenSyncEnds). */
  #atEnd: (() => void)[] = [];

  /** `path`: the WAL file (`<database>-wal`), or null for a database without one (in-memory): nothing to sync. */
  constructor(path: string | null, ops: WalFileOps = fs) {
    this.#path = path;
    this.#ops = ops;
  }

  /** Calls `done` once everything committed before this call is on disk. */
  whenDurable(done: Durable): void {
    if (this.#path === null || this.#closed) {
      // No WAL, or the connection is closed: closing checkpointed and synced everything into the database file.
      done(null);
      return;
    }
    this.#waiting.push(done);
    if (!this.#running) this.#start();
  }

  /** Whether an fdatasync is running now: a commit made now is covered only by the next one. */
  get syncing(): boolean {
    return this.#running;
  }

  /**
   * Calls `fn` when the running sync ends, right after the commits it covered were called back, and before the
   * next sync starts: a commit made in `fn` is covered by that next sync, which it starts. A writer whose commit
   * would only wait for the next sync anyway can hold it back until then and commit everything held in one
   * transaction. Only while {@link syncing}; `fn` must not throw.
   */
  whenSyncEnds(fn: () => void): void {
    if (!this.#running) throw new Error("whenSyncEnds: no sync is running");
    this.#atEnd.push(fn);
  }

  /** Closes the WAL file once no sync is running; later calls of whenDurable are answered at once. */
  close(): void {
    this.#closed = true;
    if (!this.#running) this.#closeFd();
  }

  #start(): void {
    const group = this.#waiting;
    this.#waiting = [];
    this.#running = true;
    this.#sync((err) => {
      this.#running = false;
      const error = err === null ? null : new StorageUnavailableError(err);
      for (const done of group) done(error);
      const atEnd = this.#atEnd;
      this.#atEnd = [];
      for (const fn of atEnd) fn();
      // A commit made in an atEnd callback may have started the next sync already.
      if (!this.#running && this.#waiting.length > 0) {
        if (this.#closed) for (const done of this.#waiting.splice(0)) done(null);
        else this.#start();
      }
      if (this.#closed && !this.#running) this.#closeFd();
    });
  }

  /** fdatasync of the WAL file, opened on first use. */
  #sync(cb: (err: NodeJS.ErrnoException | null) => void): void {
    const fd = this.#fd;
    if (fd === null) this.#open(cb);
    else this.#ops.fdatasync(fd, cb);
  }

  #open(cb: (err: NodeJS.ErrnoException | null) => void): void {
    this.#ops.open(this.#path as string, "r+", (err, fd) => {
      if (err !== null) return cb(err.code === "ENOENT" ? null : err);
      this.#fd = fd;
      this.#ops.fdatasync(fd, cb);
    });
  }

  #closeFd(): void {
    const fd = this.#fd;
    if (fd === null) return;
    this.#fd = null;
    this.#ops.close(fd, () => {});
  }
}
