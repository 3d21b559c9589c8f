/** An API key of a user. Only the SHA-256 hash of the key is stored. */
export interface ApiKeyRecord {
  /** Short public identifier (shown by `keys list`, used by `keys revoke`). */
  id: string;
  userId: string;
  /** Lower-case hex SHA-256 of the full key. */
  hash: string;
  label: string | null;
  createdAt: Date;
  revokedAt: Date | null;
}

export interface ApiKeyRepository {
  insert(record: ApiKeyRecord): Promise<void>;
  /** The key with this hash, revoked or not; null when unknown. */
  findByHash(hash: string): Promise<ApiKeyRecord | null>;
  /** All keys (of one user when given), oldest first. */
  list(userId?: string): Promise<ApiKeyRecord[]>;
  /** Marks the key revoked; false when the id is unknown or already revoked. */
  revoke(id: string, at: Date): Promise<boolean>;
  /** Number of keys, revoked included. */
  count(): Promise<number>;
}
