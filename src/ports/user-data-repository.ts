/**
 * Per-user document holding settings, provider tokens and custom secrets.
 *
 * Secret values inside it are already sealed (encrypted) by the services before they reach a repository, so
 * adapters store the document as opaque JSON. Updates are compare-and-set on `version` so that concurrent
 * read-modify-write cycles on one user's data never lose a write.
 */
export interface UserData {
  /** The settings record in REST field names; null until the user first stores settings. */
  settings: StoredSettings | null;
  /** Keyed by lower-case provider name. */
  providerTokens: Record<string, StoredProviderToken>;
  /** Keyed by secret name. */
  customSecrets: Record<string, StoredCustomSecret>;
}

/** JSON-compatible settings document (field names as in REST). Secret fields hold sealed strings. */
export type StoredSettings = Record<string, unknown>;

export interface StoredProviderToken {
  /** Sealed token; null when none is stored. */
  token: string | null;
  host: string | null;
  userId: string | null;
}

export interface StoredCustomSecret {
  /** Sealed value. */
  secret: string;
  description: string;
}

export interface Versioned<T> {
  value: T;
  /** Starts at 1 for the first write; 0 means "absent" when passed as expected version. */
  version: number;
}

export interface UserDataRepository {
  /**
   * The user's document, or null when nothing was ever stored. With `forUpdate` (the read of a
   * read-modify-write) an adapter that commits writes in groups may also answer with writes still waiting for
   * their commit: the compare-and-set that follows is acknowledged only once durable, and reports a conflict if a
   * write it built on was not stored. Without it, only committed state is reported (an adapter that syncs
   * commits off the request path may report one whose sync is still running; its writer is not answered yet).
   * A plain read may answer a shared, frozen object; a read for update answers the caller's own copy, which it
   * may change and pass to compareAndSet.
   */
  get(userId: string, options?: { forUpdate?: boolean }): Promise<Versioned<UserData> | null>;
  /**
   * Writes `next` if the stored version equals `expectedVersion` (0: no document yet). Returns false on a
   * version conflict (the caller re-reads and retries); the write is durable when true is returned. `serialized`,
   * when given, is `JSON.stringify(next)` as the caller already made it (to measure it): an adapter storing JSON
   * text stores it instead of serializing the document again. A caller giving it also hands `next` over: it
   * neither reads nor changes `next` after the call, and an adapter may answer it to the next read for update
   * as that reader's own copy (instead of parsing the text again).
   */
  compareAndSet(
    userId: string,
    expectedVersion: number,
    next: UserData,
    serialized?: string,
  ): Promise<boolean>;
  /**
   * A number that changes whenever a user document of this store may have changed: after every write of this
   * repository, and after other processes' writes as far as the adapter can tell. An answer computed from a read
   * stays valid while the token is the one taken before that read. An adapter that cannot tell answers a new
   * number on every call (every read then asks the store). Synchronous and cheap: it is taken on every read.
   */
  changeToken(): number;
}
