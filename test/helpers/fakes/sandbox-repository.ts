import type { Page, PageQuery } from "../../../src/ports/page.ts";
import type { SandboxRecord, SandboxRepository } from "../../../src/ports/sandbox-repository.ts";
import { byCreated, keysetPage } from "./keyset.ts";

const copy = (r: SandboxRecord): SandboxRecord => structuredClone(r);

/** In-memory SandboxRepository: owner-scoped reads, newest-first keyset listings, copies in and out. */
export class InMemorySandboxRepository implements SandboxRepository {
  readonly #rows = new Map<string, SandboxRecord>();

  async insert(record: SandboxRecord): Promise<void> {
    if (this.#rows.has(record.id)) throw new Error(`duplicate sandbox ${record.id}`);
    this.#rows.set(record.id, copy(record));
  }

  async get(id: string, ownerId?: string): Promise<SandboxRecord | null> {
    const r = this.#rows.get(id);
    return r === undefined || (ownerId !== undefined && r.ownerId !== ownerId) ? null : copy(r);
  }

  async getMany(ids: readonly string[], ownerId: string): Promise<SandboxRecord[]> {
    const out: SandboxRecord[] = [];
    for (const id of new Set(ids)) {
      const r = await this.get(id, ownerId);
      if (r !== null) out.push(r);
    }
    return out;
  }

  async update(
    id: string,
    patch: Partial<Pick<SandboxRecord, "handle" | "status" | "updatedAt">>,
  ): Promise<boolean> {
    const r = this.#rows.get(id);
    if (r === undefined) return false;
    this.#rows.set(id, copy({ ...r, ...patch }));
    return true;
  }

  async list(ownerId: string, page: PageQuery): Promise<Page<SandboxRecord>> {
    return keysetPage(await this.listAll(ownerId), page);
  }

  async listAll(ownerId?: string): Promise<SandboxRecord[]> {
    return [...this.#rows.values()]
      .filter((r) => ownerId === undefined || r.ownerId === ownerId)
      .sort(byCreated(false))
      .map(copy);
  }

  async delete(id: string): Promise<boolean> {
    return this.#rows.delete(id);
  }

  /** Test access: the stored record (a copy) or undefined. */
  peek(id: string): SandboxRecord | undefined {
    const r = this.#rows.get(id);
    return r === undefined ? undefined : copy(r);
  }
}
