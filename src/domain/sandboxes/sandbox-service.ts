import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { requireCaller } from "../../core/context.ts";
import { invalid, notFound } from "../../core/errors.ts";
import type { PageTokens } from "../../core/page-token.ts";
import type {
  BatchGetSandboxesRequest,
  BatchGetSandboxesResponse,
  DeleteSandboxRequest,
  DeleteSandboxResponse,
  PauseSandboxRequest,
  PauseSandboxResponse,
  ResumeSandboxRequest,
  ResumeSandboxResponse,
  SandboxInfo,
  SandboxService as SandboxServiceDesc,
  SearchSandboxesRequest,
  SearchSandboxesResponse,
  StartSandboxRequest,
  StartSandboxResponse,
  WatchSandboxesRequest,
  WatchSandboxesResponse,
} from "../../gen/workspace/v1/sandbox_pb.js";
import { parseSandboxChange } from "../../ports/change-log.ts";
import type { SandboxRecord, SandboxRepository, SandboxStatus } from "../../ports/sandbox-repository.ts";
import { type ChangeFeed, ChangeTooOldError } from "../change-feed.ts";
import { checkBatch, readPage } from "../paging.ts";
import type { AgentTarget, AgentTargets } from "./agent-targets.ts";
import type { SessionKeys } from "./ports.ts";
import type { SandboxInfos } from "./sandbox-info.ts";
import type { Lifecycle, SlotWait } from "./sandbox-lifecycle.ts";
import type { Reconciling } from "./sandbox-reconciler.ts";
import { handleOrNull, type LiveSandbox, type SandboxStateAccess } from "./sandbox-state.ts";

/** The collaborators of the sandbox service, one per job, composed by src/server/container.ts. */
export interface SandboxServiceParts {
  /** The sandbox registry, read by the RPC face (search, get, watch). */
  records: Pick<SandboxRepository, "list" | "listAll" | "get" | "getMany">;
  /** The store's change feed: watches follow it (every server's status changes). */
  changes: Pick<ChangeFeed, "head" | "follow">;
  tokens: PageTokens;
  keys: Pick<SessionKeys, "open">;
  /** Sandbox states: records observed against the runtime. */
  states: Pick<SandboxStateAccess, "observe">;
  /** Starting, pausing, resuming and deleting sandboxes within the user's slots. */
  lifecycle: Lifecycle;
  /** The reconciler of every recorded sandbox with the runtime. */
  reconciler: Reconciling;
  /** Sandboxes as the API shows them. */
  infos: SandboxInfos;
  /** Which sandbox a session key opens, for the agent proxy. */
  agentTargets: AgentTargets;
}

/**
 * The caller's sandboxes: a registry in storage, a runtime that runs them, and reconciliation of the two.
 * Ownership is checked on every operation: another user's sandbox behaves as if it did not exist.
 *
 * The store decides, the runtime follows. A record holds one of its owner's running slots while STARTING or
 * RUNNING; only {@link SandboxRepository.create} and {@link SandboxRepository.claim} put a record into a slot, and
 * they evict (set PAUSED) the owner's oldest holders in the same atomic step, so the running limit and the
 * per-user cap hold whatever the number of concurrent requests or servers. Whoever saw an evicted record's handle
 * pauses it in the runtime (the evicting call, or the starting call when the eviction came before the handle
 * was saved); the periodic {@link reconcileAll} pauses any PAUSED record still running.
 *
 * Reads (search, get, watch) reconcile with the runtime but write nothing: the status changes they observe are
 * persisted by {@link reconcileAll} (at start-up and periodically), always as compare-and-set transitions.
 *
 * This class is the RPC face and the reads; it delegates each other job to a collaborator it is given by name
 * ({@link SandboxServiceParts}, composed by createSandboxService in src/server/container.ts): lifecycle and slots
 * (SandboxLifecycle, which takes warm sandboxes through WarmClaims), the reconciler (SandboxReconciler), all sharing
 * the sandbox states (SandboxStates) and reading the one frozen SandboxLimits.
 */
export class SandboxService implements ServiceImpl<typeof SandboxServiceDesc> {
  readonly #p: SandboxServiceParts;

  constructor(parts: SandboxServiceParts) {
    this.#p = parts;
  }

  async searchSandboxes(req: SearchSandboxesRequest, ctx: HandlerContext): Promise<SearchSandboxesResponse> {
    const { userId } = requireCaller(ctx);
    const scope = `sandboxes:${userId}`;
    const page = readPage(this.#p.tokens, scope, req.pageId, req.limit);
    const result = await this.#p.records.list(userId, page);
    const live = await Promise.all(result.items.map((r) => this.#p.states.observe(r)));
    return {
      $typeName: "workspace.v1.SearchSandboxesResponse",
      items: live.map((l) => this.toInfo(l)),
      ...(result.next ? { nextPageId: this.#p.tokens.encode(result.next, scope) } : {}),
    };
  }

  async batchGetSandboxes(
    req: BatchGetSandboxesRequest,
    ctx: HandlerContext,
  ): Promise<BatchGetSandboxesResponse> {
    const { userId } = requireCaller(ctx);
    checkBatch(req.id, "id");
    const byId = await this.getMany(userId, req.id);
    return {
      $typeName: "workspace.v1.BatchGetSandboxesResponse",
      items: req.id.map((id) => {
        const l = byId.get(id);
        return { $typeName: "workspace.v1.SandboxSlot", ...(l ? { sandbox: this.toInfo(l) } : {}) };
      }),
    };
  }

  async startSandbox(req: StartSandboxRequest, ctx: HandlerContext): Promise<StartSandboxResponse> {
    const { userId } = requireCaller(ctx);
    const live = await this.start(userId, req.sandboxSpecId);
    return { $typeName: "workspace.v1.StartSandboxResponse", sandbox: this.toInfo(live) };
  }

  async pauseSandbox(req: PauseSandboxRequest, ctx: HandlerContext): Promise<PauseSandboxResponse> {
    const { userId } = requireCaller(ctx);
    await this.pause(userId, req.sandboxId);
    return { $typeName: "workspace.v1.PauseSandboxResponse", success: true };
  }

  async resumeSandbox(req: ResumeSandboxRequest, ctx: HandlerContext): Promise<ResumeSandboxResponse> {
    const { userId } = requireCaller(ctx);
    await this.resume(userId, req.sandboxId);
    return { $typeName: "workspace.v1.ResumeSandboxResponse", success: true };
  }

  async deleteSandbox(req: DeleteSandboxRequest, ctx: HandlerContext): Promise<DeleteSandboxResponse> {
    const { userId } = requireCaller(ctx);
    await this.delete(userId, req.sandboxId);
    return { $typeName: "workspace.v1.DeleteSandboxResponse", success: true };
  }

  /**
   * The current state of the caller's sandboxes (or of `id` only), then each status change made by any server
   * sharing the store, until cancelled. Each answer carries its revision in the store's change log; a client
   * passing the last one back as `after_revision` gets only the changes after it (OUT_OF_RANGE when the log no
   * longer holds them).
   */
  async *watchSandboxes(
    req: WatchSandboxesRequest,
    ctx: HandlerContext,
  ): AsyncGenerator<WatchSandboxesResponse> {
    const { userId } = requireCaller(ctx);
    const filter = req.id.length > 0 ? new Set(req.id) : null;
    const wrap = (live: LiveSandbox, revision: number): WatchSandboxesResponse => ({
      $typeName: "workspace.v1.WatchSandboxesResponse",
      sandbox: this.toInfo(live),
      revision: BigInt(revision),
    });
    let from: number;
    if (req.afterRevision === undefined) {
      // The log position first, then the state: a change made in between is sent (again) rather than missed.
      from = await this.#p.changes.head();
      const initial = filter
        ? await this.#p.records.getMany([...filter], userId)
        : await this.#p.records.listAll(userId);
      for (const r of initial) yield wrap(await this.#p.states.observe(r), from);
    } else {
      if (req.afterRevision < 0n || req.afterRevision > BigInt(Number.MAX_SAFE_INTEGER))
        throw invalid(
          ["after_revision"],
          "Value error, must be a revision received from this watch",
          "value_error",
          String(req.afterRevision),
        );
      from = Number(req.afterRevision);
    }
    /** Per sandbox, when the change last sent was made: an older change arriving later is left out. */
    const sent = new Map<string, number>();
    try {
      for await (const c of this.#p.changes.follow(
        from,
        (c) => c.topic === "sandbox" && c.ownerId === userId && (filter === null || filter.has(c.key)),
        ctx.signal,
      )) {
        const change = parseSandboxChange(c.body);
        if (change === null || (sent.get(c.key) ?? 0) > change.changedAt) continue;
        sent.set(c.key, change.changedAt);
        const { record } = change;
        yield wrap({ record, status: record.status, handle: handleOrNull(record) }, c.seq);
      }
    } catch (err) {
      if (err instanceof ChangeTooOldError)
        throw new ConnectError(
          `${err.message}; watch again without after_revision to get the current state`,
          Code.OutOfRange,
        );
      if ((err as { name?: string }).name !== "AbortError") throw err;
    }
  }

  // ---- domain operations (also used by the conversation service) ----

  /**
   * Starts keeping sandboxes of every spec started ahead of need, when the runtime has a warm pool (once this
   * server's webhook URL is known: a warm sandbox is started with it). Resolves once what an earlier server left
   * was adopted or removed; the pool fills in the background.
   */
  startWarmPool(): Promise<void> {
    return this.#p.lifecycle.startWarmPool();
  }

  /**
   * The id of a new sandbox of the spec, for a caller that saves it before it calls {@link start} (a conversation
   * start): the id of a warm sandbox taken for it when the runtime has one ready, else a new id.
   */
  newSandboxId(userId: string, specId?: string): Promise<string> {
    return this.#p.lifecycle.newSandboxId(userId, specId);
  }

  /** Starts a sandbox for the user (see {@link SandboxLifecycle.start}). */
  start(userId: string, specId: string | undefined, id?: string, wait: SlotWait = {}): Promise<LiveSandbox> {
    return this.#p.lifecycle.start(userId, specId, id, wait);
  }

  /** Starts again a sandbox whose start was cut off (see {@link SandboxLifecycle.restartUnstarted}). */
  restartUnstarted(userId: string, id: string): Promise<LiveSandbox> {
    return this.#p.lifecycle.restartUnstarted(userId, id);
  }

  /** Pauses (idempotent): the record first, then the runtime. */
  pause(userId: string, id: string): Promise<void> {
    return this.#p.lifecycle.pause(userId, id);
  }

  /** Resumes (idempotent) within the user's running slots (see {@link SandboxLifecycle.resume}). */
  resume(userId: string, id: string, wait: SlotWait = {}): Promise<LiveSandbox> {
    return this.#p.lifecycle.resume(userId, id, wait);
  }

  /** Deletes the user's sandbox (see {@link SandboxLifecycle.delete}); NOT_FOUND when the user has none of that id. */
  async delete(userId: string, id: string): Promise<void> {
    await this.#p.lifecycle.delete(await this.#owned(userId, id));
  }

  /**
   * Waits for a STARTING sandbox to leave that state (bounded), and for one holding its running slot whose agent
   * does not answer its health probe (a loaded machine) to answer again; returns its reconciled state.
   */
  waitUntilSettled(userId: string, id: string, timeoutMs: number): Promise<LiveSandbox | null> {
    return this.#p.lifecycle.waitUntilSettled(userId, id, timeoutMs);
  }

  /** The status recorded in the store (no runtime check) if the user owns the sandbox, else null. */
  async recordedStatus(userId: string, id: string): Promise<SandboxStatus | null> {
    return (await this.#p.records.get(id, userId))?.status ?? null;
  }

  /** The reconciled sandbox if the user owns it, else null. */
  async get(userId: string, id: string): Promise<LiveSandbox | null> {
    const record = await this.#p.records.get(id, userId);
    return record === null ? null : this.#p.states.observe(record);
  }

  /** Reconciled sandboxes by id (owned by the user), for live conversation status. */
  async getMany(userId: string, ids: readonly string[]): Promise<Map<string, LiveSandbox>> {
    const records = await this.#p.records.getMany(ids, userId);
    return new Map(
      await Promise.all(records.map(async (r) => [r.id, await this.#p.states.observe(r)] as const)),
    );
  }

  /**
   * The sandbox a session key opens, for the agent proxy: the key names the sandbox's id and must equal the key
   * sealed in its record (compared in constant time). Null for any other string, an unknown or deleted sandbox, or
   * a wrong key; the record's status and runtime handle are returned as stored (no probe of the agent).
   */
  agentTarget(key: string): Promise<AgentTarget | null> {
    return this.#p.agentTargets.target(key);
  }

  /** The plaintext session key of a sandbox. */
  sessionKey(record: SandboxRecord): string {
    return this.#p.keys.open(record);
  }

  /**
   * Reconciles every recorded sandbox with the runtime and persists what changed (at start-up and periodically):
   * ended processes become ERROR/MISSING (freeing their slot), STARTING ones whose health wait was lost get a new
   * one, PAUSED ones found running are paused again, and records left STARTING or PAUSED without a handle by a
   * crash (older than orphanGraceMs, not being started here) have whatever carries their id removed and become
   * ERROR. Every write is a compare-and-set on the status read, so a concurrent start, pause or eviction wins.
   * Returns the resulting live statuses; concurrent calls share one run.
   */
  reconcileAll(): Promise<Record<SandboxStatus, number>> {
    return this.#p.reconciler.reconcileAll();
  }

  toInfo(l: LiveSandbox): SandboxInfo {
    return this.#p.infos.toInfo(l);
  }

  // ---- internals ----

  async #owned(userId: string, id: string): Promise<SandboxRecord> {
    const record = id === "" ? null : await this.#p.records.get(id, userId);
    if (record === null) throw notFound();
    return record;
  }
}
