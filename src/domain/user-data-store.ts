import { Code, ConnectError } from "@connectrpc/connect";
import { failedPrecondition, resourceExhausted } from "../core/errors.ts";
import { cloneJson } from "../core/json-clone.ts";
import { RateLimiter } from "../core/rate-limiter.ts";
import type { UserData, UserDataRepository, Versioned } from "../ports/user-data-repository.ts";

const EMPTY: UserData = { settings: null, providerTokens: {}, customSecrets: {} };

/** What one user may store (docs/quotas.md). */
export interface UserDataLimits {
  /** Custom secrets per user. */
  readonly maxSecrets: number;
  /** The user's whole document (settings, provider tokens, custom secrets; sealed values), as stored JSON. */
  readonly maxBytes: number;
  /** Writes of one user's document per second, sustained (0: no limit); beyond, RESOURCE_EXHAUSTED. */
  readonly writesPerSecond: number;
  /** Writes of one user's document at once above that rate. */
  readonly writesBurst: number;
}

/** The message of a write beyond the user's write rate (RESOURCE_EXHAUSTED). */
export const TOO_MANY_WRITES = "Too many changes to this user's settings and secrets; try again";

export const DEFAULT_USER_DATA_LIMITS: UserDataLimits = Object.freeze({
  maxSecrets: 500,
  maxBytes: 1024 * 1024,
  writesPerSecond: 10,
  writesBurst: 20,
});

/**
 * Read-modify-write of a user's document with optimistic concurrency: the mutation is re-run on a fresh copy
 * whenever another writer got in first, so concurrent updates never lose a write.
 */
export class UserDataStore {
  readonly #repo: UserDataRepository;
  readonly #limits: UserDataLimits;
  readonly #writes: RateLimiter;

  constructor(repo: UserDataRepository, limits: UserDataLimits = DEFAULT_USER_DATA_LIMITS) {
    this.#repo = repo;
    this.#limits = limits;
    this.#writes = new RateLimiter(limits.writesPerSecond, limits.writesBurst);
  }

  /** Whether a write of this user would be within its write rate now (see mutate; takes nothing). */
  canWrite(userId: string): boolean {
    return this.#writes.has(userId);
  }

  /**
   * Throws what `mutate` would throw for this user's write rate now (RESOURCE_EXHAUSTED), taking nothing: for a
   * transport to refuse a write before it decodes the request.
   */
  requireWrite(userId: string): void {
    if (!this.#writes.has(userId)) throw resourceExhausted(TOO_MANY_WRITES);
  }

  /** The limits writes are held to. */
  get limits(): UserDataLimits {
    return this.#limits;
  }

  /** See UserDataRepository.changeToken. */
  changeToken(): number {
    return this.#repo.changeToken();
  }

  read(userId: string): Promise<Versioned<UserData> | null> {
    return this.#repo.get(userId);
  }

  /**
   * Applies `mutate` to a copy of the current document and stores the result. `mutate` may throw (nothing is
   * stored) or return the value to pass back to the caller, which must not be a part of the document (the
   * document is handed to the repository, which may give it to the next writer). ABORTED after too many conflicting writers;
   * FAILED_PRECONDITION (nothing stored) when the result would hold more custom secrets than the limit, or be
   * larger than the size limit, and more or larger than before (a document above a limit, e.g. one stored before
   * the limit was lowered, can still shrink). RESOURCE_EXHAUSTED beyond the user's write rate.
   *
   * A write reads, parses, changes and serializes the user's whole document on the event loop every user shares:
   * one user's writes are therefore held to a rate of their own, so that they cannot take the loop from other
   * users' reads. Concurrent writes of one user are not queued here: the store chains them into one commit (SQLite's
   * group commit), where one after another would pay a durable commit each.
   */
  mutate<R>(userId: string, mutate: (data: UserData) => R | Promise<R>): Promise<R> {
    this.#writes.take(userId, 1, undefined, TOO_MANY_WRITES);
    return this.#mutate(userId, mutate);
  }

  async #mutate<R>(userId: string, mutate: (data: UserData) => R | Promise<R>): Promise<R> {
    for (let attempt = 0; attempt < 50; attempt++) {
      // The read for update is our own copy: the mutation edits it in place.
      const current = await this.#repo.get(userId, { forUpdate: true });
      const draft = current?.value ?? cloneJson(EMPTY);
      const secretsBefore = Object.keys(draft.customSecrets).length;
      const returned = mutate(draft);
      const result = returned instanceof Promise ? await returned : returned;
      // The document is serialized once: to measure it, and as what is stored. It is handed to the repository
      // with its JSON (compareAndSet's `serialized`): nothing here reads or changes it afterwards, and no mutation
      // returns a part of it.
      const json = JSON.stringify(draft);
      const within = this.#withinLimits(draft, json, secretsBefore);
      if (within !== true) await this.#checkShrinks(userId, within);
      if (await this.#repo.compareAndSet(userId, current?.version ?? 0, draft, json)) return result;
      await new Promise((r) => setTimeout(r, Math.random() * Math.min(50, 2 ** attempt)));
    }
    throw new ConnectError("too many concurrent updates, try again", Code.Aborted);
  }

  /**
   * Whether the document (`json` its serialization) is within the limits: true, or the byte size of one above the
   * size limit (which #checkShrinks allows only if it shrinks what is stored). Throws when it holds more custom
   * secrets than the limit and more than before.
   */
  #withinLimits(next: UserData, json: string, secretsBefore: number): true | number {
    const { maxSecrets, maxBytes } = this.#limits;
    const secrets = Object.keys(next.customSecrets).length;
    if (secrets > maxSecrets && secrets > secretsBefore)
      throw failedPrecondition(`A user may store at most ${maxSecrets} custom secrets`);
    // A string has at most 3 UTF-8 bytes per UTF-16 unit: most documents are known to be within without counting.
    if (json.length * 3 <= maxBytes) return true;
    const bytes = Buffer.byteLength(json);
    return bytes <= maxBytes ? true : bytes;
  }

  /** A document of `bytes` above the size limit: allowed only when it shrinks what is stored. */
  async #checkShrinks(userId: string, bytes: number): Promise<void> {
    // Read again: the draft was edited in place.
    const stored = await this.#repo.get(userId);
    const before = stored === null ? 0 : Buffer.byteLength(JSON.stringify(stored.value));
    if (bytes > before)
      throw failedPrecondition(
        `A user's settings and secrets may take at most ${this.#limits.maxBytes} bytes stored; this change would make ${bytes}`,
      );
  }
}
