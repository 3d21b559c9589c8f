import { startTaskChange } from "../../../src/ports/change-log.ts";
import type {
  ClaimedStartTask,
  ConversationFilter,
  ConversationPatch,
  ConversationRecord,
  ConversationRepository,
  FinishedDeletes,
  StartTaskFilter,
  StartTaskLease,
  StartTaskPatch,
  StartTaskPlan,
  StartTaskRecord,
  StartTaskRepository,
} from "../../../src/ports/conversation-repository.ts";
import type { Page, PageQuery } from "../../../src/ports/page.ts";
import type { InMemoryChangeLog } from "./change-log.ts";
import { byCreated, keysetPage } from "./keyset.ts";

function matches(r: ConversationRecord, f: ConversationFilter): boolean {
  if (f.includeSubConversations !== true && r.parentConversationId !== null) return false;
  if (f.sandboxIdEq !== undefined && r.sandboxId !== f.sandboxIdEq) return false;
  if (f.triggerEq !== undefined && r.trigger !== f.triggerEq) return false;
  if (f.selectedRepositoryEq !== undefined && r.selectedRepository !== f.selectedRepositoryEq) return false;
  if (f.titleContains !== undefined && !(r.title ?? "").toLowerCase().includes(f.titleContains.toLowerCase()))
    return false;
  const t = (d: Date) => d.getTime();
  if (f.createdAtGte !== undefined && t(r.createdAt) < t(f.createdAtGte)) return false;
  if (f.createdAtLt !== undefined && t(r.createdAt) >= t(f.createdAtLt)) return false;
  if (f.updatedAtGte !== undefined && t(r.updatedAt) < t(f.updatedAtGte)) return false;
  if (f.updatedAtLt !== undefined && t(r.updatedAt) >= t(f.updatedAtLt)) return false;
  return true;
}

/** In-memory ConversationRepository: owner-scoped, filters as the adapters apply them (title case-insensitive). */
export class InMemoryConversationRepository implements ConversationRepository {
  readonly #rows = new Map<string, ConversationRecord>();

  async insert(record: ConversationRecord): Promise<void> {
    if (this.#rows.has(record.id)) throw new Error(`duplicate conversation ${record.id}`);
    this.#rows.set(record.id, structuredClone(record));
  }

  async get(id: string, ownerId: string): Promise<ConversationRecord | null> {
    const r = this.#rows.get(id);
    return r === undefined || r.ownerId !== ownerId ? null : structuredClone(r);
  }

  async getMany(ids: readonly string[], ownerId: string): Promise<ConversationRecord[]> {
    const out: ConversationRecord[] = [];
    for (const id of new Set(ids)) {
      const r = await this.get(id, ownerId);
      if (r !== null) out.push(r);
    }
    return out;
  }

  async addSubConversation(parentId: string, childId: string, updatedAt: Date): Promise<boolean> {
    const r = this.#rows.get(parentId);
    if (r === undefined) return false;
    r.subConversationIds.push(childId);
    r.updatedAt = updatedAt;
    return true;
  }

  async search(
    ownerId: string,
    filter: ConversationFilter,
    page: PageQuery,
  ): Promise<Page<ConversationRecord>> {
    return keysetPage(this.#matching(ownerId, filter), page);
  }

  async count(ownerId: string, filter: ConversationFilter): Promise<number> {
    return this.#matching(ownerId, filter).length;
  }

  async update(id: string, ownerId: string, patch: ConversationPatch): Promise<boolean> {
    const r = this.#rows.get(id);
    if (r === undefined || r.ownerId !== ownerId) return false;
    this.#rows.set(id, structuredClone({ ...r, ...patch }));
    return true;
  }

  /** With its sub-conversations, as the adapters do (events and start tasks live in other fakes here). */
  async delete(id: string, ownerId: string): Promise<boolean> {
    const r = this.#rows.get(id);
    for (const c of [...this.#rows.values()])
      if (c.ownerId === ownerId && (c.parentConversationId === id || r?.subConversationIds.includes(c.id)))
        this.#rows.delete(c.id);
    if (r === undefined || r.ownerId !== ownerId) return false;
    return this.#rows.delete(id);
  }

  async finishDeletes(): Promise<FinishedDeletes> {
    return { finished: 0, pruned: 0 };
  }

  #matching(ownerId: string, filter: ConversationFilter): ConversationRecord[] {
    return [...this.#rows.values()]
      .filter((r) => r.ownerId === ownerId && matches(r, filter))
      .sort(byCreated(false))
      .map((r) => structuredClone(r));
  }
}

/** In-memory StartTaskRepository; records every saved status in `history` (per task id, in order). */
export class InMemoryStartTaskRepository implements StartTaskRepository {
  readonly #rows = new Map<string, StartTaskRecord>();
  readonly #leases = new Map<
    string,
    { owner: string | null; expiresAt: number; attempts: number; plan: StartTaskPlan }
  >();
  readonly history = new Map<string, string[]>();
  readonly #changes: InMemoryChangeLog | undefined;

  /** `changes`: where task states are logged with the change, as the storage adapters do. */
  constructor(changes?: InMemoryChangeLog) {
    this.#changes = changes;
  }

  async insert(record: StartTaskRecord, lease?: StartTaskLease, plan?: StartTaskPlan): Promise<void> {
    if (this.#rows.has(record.id)) throw new Error(`duplicate task ${record.id}`);
    this.#rows.set(record.id, structuredClone(record));
    this.#leases.set(record.id, {
      owner: lease?.owner ?? null,
      expiresAt: lease?.expiresAt.getTime() ?? 0,
      attempts: 0,
      plan: structuredClone(plan ?? {}),
    });
    this.history.set(record.id, [record.status]);
    this.#changes?.record([startTaskChange(record)]);
  }

  async get(id: string, ownerId: string): Promise<StartTaskRecord | null> {
    const r = this.#rows.get(id);
    return r === undefined || r.ownerId !== ownerId ? null : structuredClone(r);
  }

  async getMany(ids: readonly string[], ownerId: string): Promise<StartTaskRecord[]> {
    const out: StartTaskRecord[] = [];
    for (const id of new Set(ids)) {
      const r = await this.get(id, ownerId);
      if (r !== null) out.push(r);
    }
    return out;
  }

  async update(id: string, patch: StartTaskPatch, leaseOwner?: string): Promise<boolean> {
    const r = this.#rows.get(id);
    const lease = this.#leases.get(id);
    if (r === undefined || lease === undefined) return false;
    if (leaseOwner !== undefined && lease.owner !== leaseOwner) return false;
    const { plan, ...fields } = patch;
    if (plan !== undefined) lease.plan = structuredClone(plan);
    this.#rows.set(id, structuredClone({ ...r, ...fields }));
    if (Object.keys(fields).some((k) => k !== "updatedAt"))
      this.#changes?.record([startTaskChange({ ...r, ...fields })]);
    if (patch.status !== undefined && patch.status !== r.status) this.history.get(id)?.push(patch.status);
    return true;
  }

  async search(
    ownerId: string,
    filter: StartTaskFilter,
    page: PageQuery,
    ascending: boolean,
  ): Promise<Page<StartTaskRecord>> {
    return keysetPage(this.#matching(ownerId, filter).sort(byCreated(ascending)), page, ascending);
  }

  async count(ownerId: string, filter: StartTaskFilter): Promise<number> {
    return this.#matching(ownerId, filter).length;
  }

  async pruneFinished(before: Date): Promise<number> {
    let n = 0;
    for (const r of [...this.#rows.values()])
      if ((r.status === "READY" || r.status === "ERROR") && r.updatedAt < before && this.#rows.delete(r.id))
        n++;
    return n;
  }

  async listUnfinished(): Promise<StartTaskRecord[]> {
    return [...this.#rows.values()]
      .filter((r) => r.status !== "READY" && r.status !== "ERROR")
      .map((r) => structuredClone(r));
  }

  async sandboxesInUse(ownerId: string): Promise<string[]> {
    return [...this.#rows.values()].flatMap((r) => {
      if (r.ownerId !== ownerId || r.status === "READY" || r.status === "ERROR") return [];
      const id = r.sandboxId ?? this.#leases.get(r.id)?.plan.sandboxId;
      return id ? [id] : [];
    });
  }

  async findPending(ownerId: string, conversationId: string): Promise<StartTaskRecord | null> {
    const found = [...this.#rows.values()]
      .filter(
        (r) =>
          r.ownerId === ownerId &&
          r.status !== "READY" &&
          this.#leases.get(r.id)?.plan.conversationId === conversationId,
      )
      .sort(byCreated(false));
    return found[0] === undefined ? null : structuredClone(found[0]);
  }

  async renewLeases(owner: string, ids: readonly string[], expiresAt: Date): Promise<string[]> {
    return ids.filter((id) => {
      const lease = this.#leases.get(id);
      const r = this.#rows.get(id);
      if (lease?.owner !== owner || r === undefined || r.status === "READY" || r.status === "ERROR")
        return false;
      lease.expiresAt = expiresAt.getTime();
      return true;
    });
  }

  async releaseLeases(owner: string, ids: readonly string[]): Promise<void> {
    for (const id of ids) {
      const lease = this.#leases.get(id);
      if (lease?.owner === owner) lease.expiresAt = 0;
    }
  }

  async claimExpired(owner: string, now: Date, expiresAt: Date, limit: number): Promise<ClaimedStartTask[]> {
    const out: ClaimedStartTask[] = [];
    for (const r of await this.listUnfinished()) {
      const lease = this.#leases.get(r.id);
      if (lease === undefined || lease.expiresAt >= now.getTime() || out.length >= limit) continue;
      lease.owner = owner;
      lease.expiresAt = expiresAt.getTime();
      lease.attempts++;
      out.push({ task: r, plan: structuredClone(lease.plan), attempts: lease.attempts });
    }
    return out;
  }

  #matching(ownerId: string, f: StartTaskFilter): StartTaskRecord[] {
    return [...this.#rows.values()]
      .filter(
        (r) =>
          r.ownerId === ownerId &&
          (f.conversationIdEq === undefined || r.appConversationId === f.conversationIdEq) &&
          (f.createdAtGte === undefined || r.createdAt.getTime() >= f.createdAtGte.getTime()),
      )
      .map((r) => structuredClone(r));
  }
}
