import type { ChangeLog, ChangeRecord } from "../ports/change-log.ts";

/** Options of {@link ChangeFeed}. */
export interface ChangeFeedOptions {
  /** How often the log is read while someone watches (default 10 ms); writes made here are read at once. */
  pollMs?: number;
  /** Entries read per round trip (default 500). */
  batch?: number;
  log?: (msg: string, data?: Record<string, unknown>) => void;
}

/** A change watchers may not read any more: pruned from the log. */
export class ChangeTooOldError extends Error {
  readonly after: number;
  readonly floor: number;
  constructor(after: number, floor: number) {
    super(`changes after ${after} are no longer kept (the log starts after ${floor})`);
    this.after = after;
    this.floor = floor;
  }
}

interface Subscriber {
  /** Sequence number of the last entry given to this subscriber. */
  pos: number;
  /** Fed by the shared reader (true once the subscriber caught up with it). */
  live: boolean;
  filter: (c: ChangeRecord) => boolean;
  queue: ChangeRecord[];
  wake: (() => void) | null;
  error: unknown;
}

/**
 * Follows the store's change log for this server's watchers: one shared reader reads every new entry once and
 * hands it to the subscribers whose filter takes it, so a thousand open watches cost one read per poll. The
 * reader runs only while someone watches; it is woken at once after writes made through this server
 * ({@link poke}) and by the store's push where it has one (MongoDB change streams), and polls for the rest
 * (writes of other servers). The entries themselves are written by the storage adapters with the changes.
 *
 * A subscriber starting from an older position (a client resuming) first reads the log itself up to the shared
 * reader's position, then joins it: no entry is missed or given twice.
 */
export class ChangeFeed {
  readonly #log: ChangeLog;
  readonly #pollMs: number;
  readonly #batch: number;
  readonly #warn: (msg: string, data?: Record<string, unknown>) => void;
  readonly #subs = new Set<Subscriber>();
  /** Last sequence number the shared reader read (null while nobody watches). */
  #cursor: number | null = null;
  #running: Promise<void> | null = null;
  #kick: (() => void) | null = null;
  #kicked = false;
  #unsubscribe: (() => void) | null = null;
  #closed = false;

  constructor(log: ChangeLog, options: ChangeFeedOptions = {}) {
    this.#log = log;
    this.#pollMs = options.pollMs ?? 10;
    this.#batch = options.batch ?? 500;
    this.#warn = options.log ?? (() => {});
  }

  /** Wakes the shared reader now: something was just written through this server (and logged with it). */
  poke(): void {
    this.#wake();
  }

  /** The latest sequence number: a watch that reads the current state after taking it misses nothing. */
  head(): Promise<number> {
    return this.#log.head();
  }

  /**
   * The entries after `after` that `filter` takes, in order, until `signal` aborts (the iteration then ends).
   * Rejects with {@link ChangeTooOldError} when entries after `after` were pruned.
   */
  async *follow(
    after: number,
    filter: (c: ChangeRecord) => boolean,
    signal: AbortSignal,
  ): AsyncGenerator<ChangeRecord> {
    const floor = await this.#log.floor();
    if (after < floor) throw new ChangeTooOldError(after, floor);
    const sub: Subscriber = { pos: after, live: false, filter, queue: [], wake: null, error: null };
    const onAbort = () => sub.wake?.();
    signal.addEventListener("abort", onAbort, { once: true });
    this.#subs.add(sub);
    this.#ensureRunning();
    try {
      // Catch up alone until the shared reader's position, then let it feed this subscriber.
      while (!sub.live && !signal.aborted && !this.#closed) {
        const cursor = this.#cursor ?? (await this.#startCursor());
        if (sub.pos >= cursor) {
          sub.live = true;
          break;
        }
        const rows = await this.#log.read(sub.pos, Math.min(this.#batch, cursor - sub.pos));
        if (rows.length === 0) {
          // A number not stored yet (MongoDB): wait for the shared reader, which waits for it too.
          await new Promise((r) => setTimeout(r, this.#pollMs));
          continue;
        }
        for (const row of rows) {
          sub.pos = row.seq;
          if (filter(row)) yield row;
          if (signal.aborted) return;
        }
      }
      while (!signal.aborted && !this.#closed) {
        const next = sub.queue.shift();
        if (next !== undefined) {
          yield next;
          continue;
        }
        if (sub.error !== null) throw sub.error;
        await new Promise<void>((resolve) => {
          sub.wake = resolve;
        });
        sub.wake = null;
      }
    } finally {
      signal.removeEventListener("abort", onAbort);
      this.#subs.delete(sub);
    }
  }

  /** Stops the shared reader and ends every follow (the server is shutting down). */
  close(): void {
    this.#closed = true;
    this.#wake();
    for (const sub of this.#subs) sub.wake?.();
  }

  /** Deletes the log's entries older than `before` and beyond the newest `keep` (the sweep); returns how many. */
  prune(before: Date, keep?: number): Promise<number> {
    return this.#log.prune(before, keep);
  }

  async #startCursor(): Promise<number> {
    // Several subscribers may ask at once; the first answer wins.
    const head = await this.#log.head();
    this.#cursor ??= head;
    return this.#cursor;
  }

  #wake(): void {
    this.#kicked = true;
    this.#kick?.();
  }

  #ensureRunning(): void {
    if (this.#running !== null || this.#closed) return;
    this.#unsubscribe = this.#log.subscribe?.(() => this.#wake()) ?? null;
    this.#running = this.#run().finally(() => {
      this.#running = null;
      // Kept while anyone follows: a subscriber that joined as the reader stopped counts on it.
      if (this.#subs.size === 0) this.#cursor = null;
      this.#unsubscribe?.();
      this.#unsubscribe = null;
      if (this.#subs.size > 0 && !this.#closed) this.#ensureRunning();
    });
  }

  async #run(): Promise<void> {
    let failures = 0;
    while (this.#subs.size > 0 && !this.#closed) {
      let full = false;
      try {
        const cursor = this.#cursor ?? (await this.#startCursor());
        this.#kicked = false;
        const rows = await this.#log.read(cursor, this.#batch);
        failures = 0;
        for (const row of rows) {
          this.#cursor = row.seq;
          for (const sub of this.#subs) {
            if (!sub.live || row.seq <= sub.pos) continue;
            sub.pos = row.seq;
            if (!sub.filter(row)) continue;
            sub.queue.push(row);
            sub.wake?.();
          }
        }
        full = rows.length === this.#batch;
      } catch (err) {
        if (failures++ === 0)
          this.#warn("the change log cannot be read; watches wait", { error: String(err) });
      }
      if (full || this.#kicked) continue;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(
          done,
          failures > 0 ? Math.min(5000, this.#pollMs * 2 ** failures) : this.#pollMs,
        );
        function done() {
          clearTimeout(timer);
          resolve();
        }
        this.#kick = done;
      });
      this.#kick = null;
    }
  }
}
