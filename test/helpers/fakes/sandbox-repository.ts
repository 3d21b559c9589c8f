import { sandboxChange } from "../../../src/ports/change-log.ts";
import type { Page, PageQuery } from "../../../src/ports/page.ts";
import {
  ACTIVE_STATUSES,
  type SandboxClaimOutcome,
  type SandboxCreateOutcome,
  type SandboxLimits,
  type SandboxRecord,
  type SandboxRepository,
  type SandboxStatus,
  type TransitionOptions,
} from "../../../src/ports/sandbox-repository.ts";
import type { InMemoryChangeLog } from "./change-log.ts";
import { byCreated, keysetPage } from "./keyset.ts";

const copy = (r: SandboxRecord): SandboxRecord => structuredClone(r);

/**
 * In-memory SandboxRepository: owner-scoped reads, newest-first keyset listings, copies in and out. create and claim
 * decide and write without an await in between, so they are atomic as the port requires.
 */
export class InMemorySandboxRepository implements SandboxRepository {
  readonly #rows = new Map<string, SandboxRecord>();
  readonly #changes: InMemoryChangeLog | undefined;

  /** `changes`: where status changes are logged with the change, as the storage adapters do. */
  constructor(changes?: InMemoryChangeLog) {
    this.#changes = changes;
  }

  #log(...records: SandboxRecord[]): void {
    this.#changes?.record(records.map(sandboxChange));
  }

  async insert(record: SandboxRecord): Promise<void> {
    if (this.#rows.has(record.id)) throw new Error(`duplicate sandbox ${record.id}`);
    this.#rows.set(record.id, copy(record));
  }

  async create(record: SandboxRecord, limits: SandboxLimits): Promise<SandboxCreateOutcome> {
    const count = [...this.#rows.values()].filter((r) => r.ownerId === record.ownerId).length;
    if (count >= limits.maxPerUser) return { created: false, count };
    if (this.#rows.has(record.id)) throw new Error(`duplicate sandbox ${record.id}`);
    const chosen = this.#toEvict(record.ownerId, record.id, limits.maxRunning - 1, limits.protect);
    if (!Array.isArray(chosen)) return { created: false, busy: true, holders: chosen.holders };
    const evicted = this.#evict(chosen, record.createdAt);
    this.#rows.set(record.id, copy({ ...record, status: "STARTING" }));
    this.#log({ ...record, status: "STARTING" });
    return { created: true, evicted };
  }

  async claim(
    id: string,
    ownerId: string,
    maxRunning: number,
    updatedAt: Date,
    protect?: readonly string[],
  ): Promise<SandboxClaimOutcome | null> {
    const r = this.#rows.get(id);
    if (r === undefined || r.ownerId !== ownerId) return null;
    if (ACTIVE_STATUSES.includes(r.status)) return { record: copy(r), claimed: false, evicted: [] };
    const chosen = this.#toEvict(ownerId, id, maxRunning - 1, protect);
    if (!Array.isArray(chosen)) return { record: copy(r), claimed: false, evicted: [], busy: true };
    const evicted = this.#evict(chosen, updatedAt);
    const next = { ...r, status: "STARTING" as const, updatedAt };
    this.#rows.set(id, copy(next));
    this.#log(next);
    return { record: copy(next), claimed: true, evicted };
  }

  async setHandle(
    id: string,
    handle: Record<string, unknown>,
    updatedAt: Date,
  ): Promise<SandboxRecord | null> {
    const r = this.#rows.get(id);
    if (r === undefined) return null;
    const next = copy({ ...r, handle, updatedAt });
    this.#rows.set(id, next);
    return copy(next);
  }

  async transition(
    id: string,
    from: readonly SandboxStatus[],
    to: SandboxStatus,
    updatedAt: Date,
    options?: TransitionOptions,
  ): Promise<boolean> {
    const r = this.#rows.get(id);
    if (r === undefined || !from.includes(r.status)) return false;
    if (options?.ifUpdatedAt !== undefined && r.updatedAt.getTime() !== options.ifUpdatedAt.getTime())
      return false;
    const next: SandboxRecord = {
      ...r,
      status: to,
      updatedAt,
      ...(options?.deleting === true ? { deleting: true as const } : {}),
    };
    this.#rows.set(id, copy(next));
    this.#log(next);
    return true;
  }

  /** The owner's oldest RUNNING, unprotected holders beyond `keep` (other than `except`), or busy. */
  #toEvict(
    ownerId: string,
    except: string,
    keep: number,
    protect: readonly string[] = [],
  ): SandboxRecord[] | { holders: number } {
    const holders = [...this.#rows.values()]
      .filter((r) => r.ownerId === ownerId && r.id !== except && ACTIVE_STATUSES.includes(r.status))
      .sort(byCreated(true));
    const need = holders.length - keep;
    if (need <= 0) return [];
    const evictable = holders.filter((r) => r.status === "RUNNING" && !protect.includes(r.id));
    return evictable.length < need ? { holders: holders.length } : evictable.slice(0, need);
  }

  /** Pauses the records `#toEvict` chose; returns them as they were. */
  #evict(evicted: readonly SandboxRecord[], at: Date): SandboxRecord[] {
    for (const r of evicted) {
      this.#rows.set(r.id, copy({ ...r, status: "PAUSED", updatedAt: at }));
      this.#log({ ...r, status: "PAUSED", updatedAt: at });
    }
    return evicted.map(copy);
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
    if (patch.status !== undefined) this.#log({ ...r, ...patch });
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
    const r = this.#rows.get(id);
    if (r !== undefined && r.status !== "MISSING")
      this.#log({ ...r, status: "MISSING", updatedAt: new Date() });
    return this.#rows.delete(id);
  }

  /** Test access: the stored record (a copy) or undefined. */
  peek(id: string): SandboxRecord | undefined {
    const r = this.#rows.get(id);
    return r === undefined ? undefined : copy(r);
  }
}
