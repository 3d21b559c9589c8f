import type { ApiKeyRecord, ApiKeyRepository } from "../../../src/ports/api-key-repository.ts";

/** In-memory ApiKeyRepository; counts hash look-ups so tests can see the service's cache at work. */
export class InMemoryApiKeyRepository implements ApiKeyRepository {
  readonly records: ApiKeyRecord[] = [];
  lookUps = 0;

  async insert(record: ApiKeyRecord): Promise<void> {
    if (this.records.some((r) => r.id === record.id || r.hash === record.hash))
      throw new Error("duplicate api key");
    this.records.push({ ...record });
  }

  async findByHash(hash: string): Promise<ApiKeyRecord | null> {
    this.lookUps++;
    const r = this.records.find((k) => k.hash === hash);
    return r === undefined ? null : { ...r };
  }

  async list(userId?: string): Promise<ApiKeyRecord[]> {
    return this.records
      .filter((r) => userId === undefined || r.userId === userId)
      .sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime())
      .map((r) => ({ ...r }));
  }

  async revoke(id: string, at: Date): Promise<boolean> {
    const r = this.records.find((k) => k.id === id);
    if (r === undefined || r.revokedAt !== null) return false;
    r.revokedAt = at;
    return true;
  }

  async count(): Promise<number> {
    return this.records.length;
  }
}
