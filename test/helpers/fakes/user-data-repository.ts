import type { UserData, UserDataRepository, Versioned } from "../../../src/ports/user-data-repository.ts";

/**
 * In-memory UserDataRepository with the port's compare-and-set semantics: a write succeeds only when the stored
 * version equals the expected one (0: nothing stored yet) and bumps it by one. Every read answers a copy, so a
 * caller can never change what is stored without compareAndSet.
 */
export class InMemoryUserDataRepository implements UserDataRepository {
  readonly #docs = new Map<string, Versioned<UserData>>();
  /** Successful writes and conflicts seen, for assertions. */
  writes = 0;
  conflicts = 0;
  /** Runs once before the next compareAndSet is decided (e.g. to slip in a competing write). */
  beforeNextCompareAndSet: (() => void) | null = null;

  #token = 0;
  /** Reads answered, for assertions. */
  reads = 0;

  changeToken(): number {
    return this.#token;
  }

  async get(userId: string): Promise<Versioned<UserData> | null> {
    this.reads++;
    const doc = this.#docs.get(userId);
    return doc === undefined ? null : structuredClone(doc);
  }

  async compareAndSet(userId: string, expectedVersion: number, next: UserData): Promise<boolean> {
    const hook = this.beforeNextCompareAndSet;
    this.beforeNextCompareAndSet = null;
    hook?.();
    const current = this.#docs.get(userId)?.version ?? 0;
    if (current !== expectedVersion) {
      this.conflicts++;
      return false;
    }
    this.#docs.set(userId, { value: structuredClone(next), version: current + 1 });
    this.#token++;
    this.writes++;
    return true;
  }

  /** Test access: the stored document as is (a copy), or undefined. */
  peek(userId: string): Versioned<UserData> | undefined {
    const doc = this.#docs.get(userId);
    return doc === undefined ? undefined : structuredClone(doc);
  }

  /** Test access: stores a document directly, bumping the version as a write would. */
  put(userId: string, value: UserData): void {
    const version = (this.#docs.get(userId)?.version ?? 0) + 1;
    this.#docs.set(userId, { value: structuredClone(value), version });
    this.#token++;
  }
}
