import { createHash, timingSafeEqual } from "node:crypto";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { requireCaller } from "../../core/context.ts";
import { failedPrecondition, invalid, notFound } from "../../core/errors.ts";
import { base62, newSessionKey, sandboxIdOfSessionKey } from "../../core/ids.ts";
import type { PageTokens } from "../../core/page-token.ts";
import type { SecretBox } from "../../core/secret-box.ts";
import {
  type BatchGetSandboxesRequest,
  type BatchGetSandboxesResponse,
  type DeleteSandboxRequest,
  type DeleteSandboxResponse,
  type ExposedUrl,
  type PauseSandboxRequest,
  type PauseSandboxResponse,
  SandboxStatus as PbStatus,
  type ResumeSandboxRequest,
  type ResumeSandboxResponse,
  type SandboxInfo,
  type SandboxService as SandboxServiceDesc,
  type SearchSandboxesRequest,
  type SearchSandboxesResponse,
  type StartSandboxRequest,
  type StartSandboxResponse,
  type WatchSandboxesRequest,
  type WatchSandboxesResponse,
} from "../../gen/workspace/v1/sandbox_pb.js";
import { parseSandboxChange } from "../../ports/change-log.ts";
import {
  ACTIVE_STATUSES,
  type SandboxRecord,
  type SandboxRepository,
  type SandboxStatus,
} from "../../ports/sandbox-repository.ts";
import type { RuntimeHandle, RuntimeSpec, SandboxRuntime } from "../../ports/sandbox-runtime.ts";
import { type ChangeFeed, ChangeTooOldError } from "../change-feed.ts";
import { checkBatch, readPage } from "../paging.ts";
import type { SpecCatalog } from "./ports.ts";
import { type Reconciling, SandboxReconciler } from "./sandbox-reconciler.ts";
import type { SandboxSpec } from "./sandbox-spec-service.ts";
import { definiteEnd, handleOrNull, type LiveSandbox, SandboxStates, unanswered } from "./sandbox-state.ts";
import { type WarmClaiming, WarmClaims } from "./warm-claims.ts";

export type { LiveSandbox } from "./sandbox-state.ts";

/** A new sandbox id (22 base62 characters). */
export const newSandboxId = (): string => base62(22);

const PB_STATUS: Record<SandboxStatus, PbStatus> = {
  STARTING: PbStatus.STARTING,
  RUNNING: PbStatus.RUNNING,
  PAUSED: PbStatus.PAUSED,
  ERROR: PbStatus.ERROR,
  MISSING: PbStatus.MISSING,
};

export interface SandboxServiceOptions {
  repo: SandboxRepository;
  /** The store's change feed: status changes are published there and watches follow it (every server's). */
  changes: ChangeFeed;
  runtime: SandboxRuntime;
  /** The configured specs (the SandboxSpecService). */
  specs: SpecCatalog;
  box: SecretBox;
  tokens: PageTokens;
  /** Running sandboxes per user before the oldest is paused (default 5). */
  maxRunning?: number;
  /** Sandboxes (any status) a user may have; one more is refused with FAILED_PRECONDITION (default 20). */
  maxPerUser?: number;
  /**
   * Warm sandboxes one user may take per minute, and at most that many at once (default 0: no limit; the server
   * sets SANDBOX_WARM_CLAIMS_PER_MINUTE): a start past that starts cold, so that one user's start/delete loop
   * cannot keep the pool empty for everyone.
   */
  warmClaimsPerMinute?: number;
  /** How long start/resume wait inline for the agent before answering STARTING (default 2000 ms). */
  inlineWaitMs?: number;
  /** How long a background start may take before the sandbox is ERROR (default 120 s). */
  startTimeoutMs?: number;
  /**
   * How old (since its last recorded change) a STARTING or PAUSED record without a runtime handle must be, and not
   * being started by this server, before {@link SandboxService.reconcileAll} treats it as left by a crash: whatever
   * the runtime runs for it is removed and it becomes ERROR (default: startTimeoutMs).
   */
  orphanGraceMs?: number;
  /**
   * How long a delete may take: a record marked deleting (status MISSING) for longer, not being deleted by this
   * server, was left by a delete that did not finish, and {@link SandboxService.reconcileAll} finishes it
   * (default: 15 s, at most orphanGraceMs).
   */
  deleteGraceMs?: number;
  log?: (msg: string, data?: Record<string, unknown>) => void;
  /**
   * Base URL of this service as sandboxes reach it (e.g. http://127.0.0.1:3000), read at each start; when set,
   * the agent gets OH_WEBHOOKS_0_BASE_URL = <base>/api/v1/webhooks/<sandbox id> to report its events.
   */
  webhookBaseUrl?: () => string | undefined;
  /**
   * The user's sandboxes in use by a conversation start that has not ended (any server's): the running limit
   * never pauses them, as it never pauses a STARTING one. Default: none.
   */
  inUseByStarts?: (userId: string) => Promise<readonly string[]>;
  /** How long start/resume wait for a running slot when every slot holder is starting (default 30 s). */
  slotWaitMs?: number;
  /**
   * How long a RUNNING sandbox whose process is alive may fail its health probe (a loaded machine, a probe timing
   * out) and still be reported RUNNING; past it, while it keeps failing, it reads ERROR (default 15 s). A process
   * that ended reads ERROR at once whatever this says.
   */
  unansweredGraceMs?: number;
  /**
   * How sandbox JSON names the agent (docs/agent-proxy.md). `proxied` (the default): a sandbox whose session key
   * names it is reached through this service's own origin, so its AGENT_SERVER URL is `publicUrl` (or `/`, the
   * origin the client used) and its direct loopback URL is AGENT_SERVER_DIRECT; false: the direct URL only. The
   * proxied entry's port is the one its URL reaches: `publicUrl`'s (explicit, else 443 or 80), else
   * `servicePort()`, this service's listening port (0 while it has none).
   */
  agentUrls?: {
    proxied: boolean;
    publicUrl?: string | undefined;
    servicePort?: (() => number | undefined) | undefined;
  };
}

/** Where the agent proxy sends a call made with a sandbox's session key (see {@link SandboxService.agentTarget}). */
export interface AgentTarget {
  sandboxId: string;
  ownerId: string;
  status: SandboxStatus;
  /** The agent's base URL as the runtime recorded it; null when the sandbox has no running handle. */
  agentUrl: string | null;
}

/** How a start or resume waits when all of the user's running slots are held by sandboxes that are starting. */
export interface SlotWait {
  /** Called once, when it starts waiting, with a sentence saying why. */
  onWait?: (detail: string) => Promise<void> | void;
  /** How long to wait before FAILED_PRECONDITION (default: the service's slotWaitMs). */
  waitMs?: number;
  /** Stops the wait (the promise rejects with the signal's reason). */
  signal?: AbortSignal;
}

/** How often a start waiting for a running slot tries again. */
const SLOT_POLL_MS = 200;

type Options = Required<Omit<SandboxServiceOptions, "log" | "webhookBaseUrl" | "warmClaimsPerMinute">> &
  Pick<SandboxServiceOptions, "log" | "webhookBaseUrl">;

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
 */
export class SandboxService implements ServiceImpl<typeof SandboxServiceDesc> {
  readonly #o: Options;
  /** Health waits in progress here (start or resume), by sandbox id. */
  readonly #starting = new Map<string, Promise<void>>();
  /** Sandboxes this server is starting or resuming (before their health wait). */
  readonly #busy = new Set<string>();
  /** Sandboxes this server is deleting. */
  readonly #deleting = new Set<string>();
  /** Sandbox states: records observed against the runtime, compare-and-set status changes. */
  readonly #states: SandboxStates;
  /** The reconciler of every recorded sandbox with the runtime. */
  readonly #reconciler: Reconciling;
  /** SHA-256 of each sandbox's session key, by its sealed form (see agentTarget). */
  readonly #keyDigests = new Map<string, Buffer>();
  /** Warm sandboxes taken for starts, within each user's cap and claim rate. */
  readonly #warm: WarmClaiming;

  constructor(options: SandboxServiceOptions) {
    const startTimeoutMs = options.startTimeoutMs ?? 120_000;
    this.#o = {
      maxRunning: 5,
      maxPerUser: 20,
      inlineWaitMs: 2_000,
      orphanGraceMs: startTimeoutMs,
      inUseByStarts: async () => [],
      slotWaitMs: 30_000,
      unansweredGraceMs: 15_000,
      agentUrls: { proxied: true },
      deleteGraceMs: Math.min(15_000, options.orphanGraceMs ?? startTimeoutMs),
      ...options,
      startTimeoutMs,
    };
    this.#states = new SandboxStates({
      repo: options.repo,
      runtime: options.runtime,
      changes: options.changes,
      unansweredGraceMs: this.#o.unansweredGraceMs,
      log: options.log,
    });
    this.#reconciler = new SandboxReconciler({
      repo: options.repo,
      runtime: options.runtime,
      states: this.#states,
      lifecycle: {
        inFlight: (id) => this.#inFlight(id),
        deleting: (id) => this.#deleting.has(id),
        awaitHealthy: (record, handle, inlineMs) => this.#awaitHealthy(record, handle, inlineMs),
        removeAll: (record) => this.#removeAll(record),
      },
      limits: { orphanGraceMs: this.#o.orphanGraceMs, deleteGraceMs: this.#o.deleteGraceMs },
      log: options.log,
    });
    this.#warm = new WarmClaims({
      pool: options.runtime,
      records: options.repo,
      maxPerUser: this.#o.maxPerUser,
      perMinute: options.warmClaimsPerMinute ?? 0,
      log: options.log,
    });
  }

  async searchSandboxes(req: SearchSandboxesRequest, ctx: HandlerContext): Promise<SearchSandboxesResponse> {
    const { userId } = requireCaller(ctx);
    const scope = `sandboxes:${userId}`;
    const page = readPage(this.#o.tokens, scope, req.pageId, req.limit);
    const result = await this.#o.repo.list(userId, page);
    const live = await Promise.all(result.items.map((r) => this.#states.observe(r)));
    return {
      $typeName: "workspace.v1.SearchSandboxesResponse",
      items: live.map((l) => this.toInfo(l)),
      ...(result.next ? { nextPageId: this.#o.tokens.encode(result.next, scope) } : {}),
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
    const record = await this.#owned(userId, req.sandboxId);
    this.#deleting.add(record.id);
    try {
      // MISSING and marked deleting first: no server's sweep pauses it again while it is being removed, a start
      // in progress removes what it started, and a sweep finishes the delete if this server dies before the end.
      await this.#states.transition(
        record,
        ["STARTING", "RUNNING", "PAUSED", "ERROR", "MISSING"],
        "MISSING",
        {
          deleting: true,
        },
      );
      await this.#removeAll(record);
    } finally {
      this.#deleting.delete(record.id);
      this.#states.forget(record.id);
    }
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
      from = await this.#o.changes.head();
      const initial = filter
        ? await this.#o.repo.getMany([...filter], userId)
        : await this.#o.repo.listAll(userId);
      for (const r of initial) yield wrap(await this.#states.observe(r), from);
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
      for await (const c of this.#o.changes.follow(
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
  async startWarmPool(): Promise<void> {
    await this.#o.runtime.warm?.({
      specs: this.#o.specs.all(),
      prepare: (spec, sandboxId) => this.#prepare(spec, sandboxId),
    });
  }

  /**
   * The id of a new sandbox of the spec, for a caller that saves it before it calls {@link start} (a conversation
   * start): the id of a warm sandbox taken for it when the runtime has one ready, else a new id.
   */
  async newSandboxId(userId: string, specId?: string): Promise<string> {
    const spec = this.#o.specs.resolve(specId);
    const claim = await this.#warm.claim(spec, userId);
    return claim?.sandboxId ?? newSandboxId();
  }

  /**
   * Starts a sandbox for the user; waits up to inlineWaitMs for it to be healthy. The record is created and the
   * user's oldest running sandboxes evicted in one atomic store operation; FAILED_PRECONDITION when the user
   * already has maxPerUser sandboxes. Without an id it is a warm sandbox of the runtime when one is ready (its id
   * and session key are the ones it was started with); with an id from {@link newSandboxId}, the warm sandbox
   * taken under that id.
   */
  async start(
    userId: string,
    specId: string | undefined,
    id?: string,
    wait: SlotWait = {},
  ): Promise<LiveSandbox> {
    const spec = this.#o.specs.resolve(specId);
    this.#o.runtime.admit?.(userId);
    const claimed =
      id === undefined
        ? await this.#warm.claim(spec, userId)
        : await this.#warm.claimed(id).catch(() => null);
    const sandboxId = claimed?.sandboxId ?? id ?? newSandboxId();
    const sessionApiKey = claimed?.sessionApiKey ?? newSessionKey(sandboxId);
    // A warm sandbox taken for a start that does not happen goes: it is never given to another user.
    const release = async (): Promise<void> => {
      this.#warm.settled(userId, claimed);
      if (claimed !== null) await this.#o.runtime.removeBySandboxId(sandboxId).catch(() => undefined);
    };
    const sealed = this.#o.box.seal(sessionApiKey, `${userId}:sandbox`);
    let record = {} as SandboxRecord; // set by each attempt below
    const outcome = await this.#untilSlot(userId, wait, async (protect) => {
      const now = new Date();
      record = {
        id: sandboxId,
        ownerId: userId,
        specId: spec.id,
        runtime: this.#o.runtime.kind,
        handle: {},
        sessionApiKey: sealed,
        status: "STARTING",
        createdAt: now,
        updatedAt: now,
      };
      const created = await this.#o.repo.create(record, {
        maxPerUser: this.#o.maxPerUser,
        maxRunning: this.#o.maxRunning,
        protect,
      });
      return "busy" in created ? { busy: created.holders } : created;
    }).catch(async (err: unknown) => {
      await release();
      throw err;
    });
    if (!outcome.created) {
      await release();
      throw failedPrecondition(
        `Sandbox limit reached: you have ${outcome.count} sandboxes and a user may have at most ${this.#o.maxPerUser}; delete one to start another`,
      );
    }
    this.#warm.settled(userId, claimed);
    this.#o.changes.poke();
    this.#busy.add(record.id);
    try {
      await this.#pauseEvicted(outcome.evicted);
      return await this.#run(record, spec, sessionApiKey);
    } finally {
      this.#busy.delete(record.id);
    }
  }

  /**
   * Starts again a sandbox whose record is STARTING without a runtime handle because the server starting it died
   * (the caller knows: it took over that start's lease). Whatever the runtime runs under its id is removed first,
   * so the sandbox never runs twice. A record in any other state is returned as it is.
   */
  async restartUnstarted(userId: string, id: string): Promise<LiveSandbox> {
    const record = await this.#owned(userId, id);
    if (record.status !== "STARTING" || handleOrNull(record) !== null || this.#inFlight(id))
      return this.#states.observe(record);
    this.#busy.add(id);
    try {
      // Still STARTING, and fresh again: the crash-leftover sweep of any server leaves it alone while it starts.
      if (!(await this.#o.repo.transition(id, ["STARTING"], "STARTING", new Date())))
        return this.#states.observe(await this.#owned(userId, id));
      const removed = await this.#o.runtime.removeBySandboxId(id);
      this.#o.log?.("starting again a sandbox whose start was cut off", { sandboxId: id, removed });
      const spec = this.#o.specs.resolve(record.specId);
      return await this.#run(record, spec, this.sessionKey(record));
    } finally {
      this.#busy.delete(id);
    }
  }

  /** Pauses (idempotent): the record first, then the runtime. */
  async pause(userId: string, id: string): Promise<void> {
    const record = await this.#owned(userId, id);
    if (!(await this.#states.transition(record, ACTIVE_STATUSES, "PAUSED"))) return;
    const handle = handleOrNull(record);
    // Without a handle the start in progress sees PAUSED when it saves the handle, and pauses the process itself.
    if (handle !== null)
      await this.#o.runtime.pause(handle).catch((err: unknown) => {
        this.#o.log?.("sandbox could not be paused", { sandboxId: id, error: String(err) });
      });
  }

  /**
   * Resumes (idempotent); claims a running slot first (waiting for one, see {@link SlotWait}, when every slot
   * holder is starting); waits up to inlineWaitMs for health.
   */
  async resume(userId: string, id: string, wait: SlotWait = {}): Promise<LiveSandbox> {
    const record = await this.#owned(userId, id);
    const handle = handleOrNull(record);
    if (handle === null || record.status === "MISSING") return this.#states.observe(record);
    let live = await this.#states.observe(record);
    if (ACTIVE_STATUSES.includes(record.status)) {
      // Holds its slot: nothing to do, unless its agent ended while RUNNING and no sweep recorded it yet: the end
      // is recorded (compare-and-set: a concurrent resume or start wins), then it is started again below.
      if (record.status !== "RUNNING" || this.#inFlight(id) || live.runtime !== "ERROR") return live;
      if (!(await this.#states.transition(record, ["RUNNING"], "ERROR", { ifUpdatedAt: record.updatedAt })))
        return this.#states.observe(await this.#owned(userId, id));
      live = { ...live, status: "ERROR" };
    }
    if (live.status === "MISSING") return live;
    // Its agent ended (crashed, killed by its memory limit, the host restarted): a runtime that can start it again
    // on the same workspace does, instead of resuming a process that no longer exists.
    const restart = live.runtime === "ERROR" ? this.#o.runtime.restart?.bind(this.#o.runtime) : undefined;
    const claim = await this.#untilSlot(userId, wait, async (protect) => {
      const c = await this.#o.repo.claim(id, userId, this.#o.maxRunning, new Date(), protect);
      return c?.busy ? { busy: this.#o.maxRunning } : c;
    });
    if (claim === null) throw notFound();
    if (!claim.claimed) {
      await this.#pauseEvicted(claim.evicted);
      return this.#states.observe(claim.record);
    }
    const claimed = claim.record;
    this.#o.changes.poke();
    this.#busy.add(id);
    try {
      await this.#pauseEvicted(claim.evicted);
      let resumed: RuntimeHandle;
      try {
        if (restart === undefined) resumed = await this.#o.runtime.resume(handle);
        else {
          this.#o.log?.("starting again a sandbox whose agent ended", {
            sandboxId: id,
            reason: live.reason ?? "its process ended",
          });
          const spec = this.#prepare(this.#o.specs.resolve(record.specId), id);
          resumed = await restart(handle, {
            sandboxId: id,
            spec,
            sessionApiKey: this.sessionKey(record),
            ownerId: record.ownerId,
          });
        }
      } catch (err) {
        await this.#states.transition(claimed, ["STARTING"], live.status).catch(() => undefined);
        throw err;
      }
      return await this.#saveHandle(claimed, resumed);
    } finally {
      this.#busy.delete(id);
    }
  }

  /**
   * Runs `attempt` (a create or claim) until it is not refused as busy: each try first settles the user's slots
   * (ended sandboxes give theirs back) and reads which sandboxes conversation starts use. Waits at most
   * `wait.waitMs`, then FAILED_PRECONDITION saying why.
   */
  async #untilSlot<T>(
    userId: string,
    wait: SlotWait,
    attempt: (protect: readonly string[]) => Promise<T | { busy: number }>,
  ): Promise<T> {
    const deadline = Date.now() + (wait.waitMs ?? this.#o.slotWaitMs);
    let told = false;
    for (;;) {
      wait.signal?.throwIfAborted();
      await this.#settleSlots(userId);
      const protect = await this.#o.inUseByStarts(userId);
      const outcome = await attempt(protect);
      if (outcome === null || typeof outcome !== "object" || !("busy" in outcome)) return outcome as T;
      const detail = `Waiting for a running slot: all ${outcome.busy} of your running sandboxes are starting or in use by a conversation start, and at most ${this.#o.maxRunning} run at once`;
      if (Date.now() >= deadline)
        throw failedPrecondition(`${detail}; try again once one of them is running`);
      if (!told) {
        told = true;
        this.#o.log?.("start waits for a running slot", { userId, holders: outcome.busy });
        await wait.onWait?.(detail);
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, SLOT_POLL_MS);
        wait.signal?.addEventListener("abort", () => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /** The status recorded in the store (no runtime check) if the user owns the sandbox, else null. */
  async recordedStatus(userId: string, id: string): Promise<SandboxStatus | null> {
    return (await this.#o.repo.get(id, userId))?.status ?? null;
  }

  /** The reconciled sandbox if the user owns it, else null. */
  async get(userId: string, id: string): Promise<LiveSandbox | null> {
    const record = await this.#o.repo.get(id, userId);
    return record === null ? null : this.#states.observe(record);
  }

  /** Reconciled sandboxes by id (owned by the user), for live conversation status. */
  async getMany(userId: string, ids: readonly string[]): Promise<Map<string, LiveSandbox>> {
    const records = await this.#o.repo.getMany(ids, userId);
    return new Map(
      await Promise.all(records.map(async (r) => [r.id, await this.#states.observe(r)] as const)),
    );
  }

  /**
   * Waits for a STARTING sandbox to leave that state (bounded), and for one holding its running slot whose agent
   * does not answer its health probe (a loaded machine) to answer again; returns its reconciled state.
   */
  async waitUntilSettled(userId: string, id: string, timeoutMs: number): Promise<LiveSandbox | null> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const pending = this.#starting.get(id);
      if (pending)
        await Promise.race([pending, new Promise((r) => setTimeout(r, Math.max(0, deadline - Date.now())))]);
      const live = await this.get(userId, id);
      if (live === null || !(live.status === "STARTING" || unanswered(live)) || Date.now() >= deadline)
        return live;
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /**
   * The sandbox a session key opens, for the agent proxy: the key names the sandbox's id and must equal the key
   * sealed in its record (compared in constant time). Null for any other string, an unknown or deleted sandbox, or
   * a wrong key; the record's status and runtime handle are returned as stored (no probe of the agent).
   */
  async agentTarget(key: string): Promise<AgentTarget | null> {
    const id = sandboxIdOfSessionKey(key);
    if (id === null) return null;
    const record = await this.#o.repo.get(id);
    if (record === null || record.deleting === true) return null;
    // The stored key's digest, by its sealed form (which never changes for a sandbox): opened once, not per call.
    let expected = this.#keyDigests.get(record.sessionApiKey);
    if (expected === undefined) {
      try {
        expected = createHash("sha256").update(this.sessionKey(record)).digest();
      } catch {
        return null;
      }
      if (this.#keyDigests.size >= 10_000) this.#keyDigests.clear();
      this.#keyDigests.set(record.sessionApiKey, expected);
    }
    if (!timingSafeEqual(expected, createHash("sha256").update(key).digest())) return null;
    const handle = handleOrNull(record);
    return {
      sandboxId: record.id,
      ownerId: record.ownerId,
      status: record.status,
      agentUrl: handle?.agentUrl ?? null,
    };
  }

  /** The plaintext session key of a sandbox. */
  sessionKey(record: SandboxRecord): string {
    return this.#o.box.open(record.sessionApiKey, `${record.ownerId}:sandbox`);
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
    return this.#reconciler.reconcileAll();
  }

  toInfo(l: LiveSandbox): SandboxInfo {
    const running = l.status === "RUNNING" && l.handle !== null;
    return {
      $typeName: "workspace.v1.SandboxInfo",
      id: l.record.id,
      createdByUserId: l.record.ownerId,
      sandboxSpecId: l.record.specId,
      status: PB_STATUS[l.status],
      ...(running ? { sessionApiKey: this.sessionKey(l.record) } : {}),
      exposedUrls: running && l.handle ? this.#exposedUrls(l.record, l.handle) : [],
      createdAt: timestampFromDate(l.record.createdAt),
    };
  }

  // ---- internals ----

  /**
   * The agent's URL, then the other published ports as the reference names them; VS Code's URL carries the
   * session key and the folder to open (`/?tkn=…&folder=…`), as the reference's.
   */
  #exposedUrls(record: SandboxRecord, handle: RuntimeHandle): ExposedUrl[] {
    const origin = new URL(handle.agentUrl).origin.replace(/:\d+$/, "");
    const direct = {
      $typeName: "workspace.v1.ExposedUrl",
      name: "AGENT_SERVER",
      url: handle.agentUrl,
      port: handle.port,
    } as const;
    const urls: ExposedUrl[] = [direct];
    const proxy = this.#o.agentUrls;
    if (proxy.proxied && sandboxIdOfSessionKey(this.sessionKey(record)) === record.id)
      urls.splice(
        0,
        1,
        { ...direct, url: proxy.publicUrl ?? "/", port: proxiedPort(proxy) },
        { ...direct, name: "AGENT_SERVER_DIRECT" },
      );
    for (const { name, port } of handle.exposedPorts ?? []) {
      let url = `${origin}:${port}`;
      if (name === "VSCODE") url += `/?tkn=${this.sessionKey(record)}&folder=${handle.workingDir ?? ""}`;
      urls.push({ $typeName: "workspace.v1.ExposedUrl", name, url, port });
    }
    return urls;
  }

  /** Removes what the runtime has of a sandbox marked deleting (by its handle and by its id), then its record. */
  async #removeAll(record: SandboxRecord): Promise<void> {
    const handle = handleOrNull(record);
    if (handle !== null) await this.#o.runtime.remove(handle);
    // Also whatever carries the sandbox's id without the record knowing it (a handle never saved).
    await this.#o.runtime.removeBySandboxId(record.id);
    await this.#o.repo.delete(record.id);
    this.#o.changes.poke();
  }

  /** Runs the record's sandbox in the runtime and saves its handle; ERROR when the runtime cannot start it. */
  async #run(record: SandboxRecord, spec: SandboxSpec, sessionApiKey: string): Promise<LiveSandbox> {
    const withHook = this.#prepare(spec, record.id);
    let handle: RuntimeHandle;
    try {
      handle = await this.#o.runtime.start({
        sandboxId: record.id,
        spec: withHook,
        sessionApiKey,
        ownerId: record.ownerId,
      });
    } catch (err) {
      this.#o.log?.("sandbox failed to start", { sandboxId: record.id, error: String(err) });
      await this.#states.transition(record, ["STARTING"], "ERROR").catch(() => undefined);
      return { record: { ...record, status: "ERROR" }, status: "ERROR", handle: null };
    }
    return this.#saveHandle(record, handle);
  }

  /** The spec a sandbox of this id runs: with its webhook URL when the service has one. */
  #prepare<S extends RuntimeSpec>(spec: S, sandboxId: string): S {
    const webhookBase = this.#o.webhookBaseUrl?.();
    if (webhookBase === undefined) return spec;
    return {
      ...spec,
      initialEnv: {
        ...spec.initialEnv,
        OH_WEBHOOKS_0_BASE_URL: `${webhookBase.replace(/\/+$/, "")}/api/v1/webhooks/${sandboxId}`,
        // The agent-server posts events in batches of five or after this many seconds (its default: 30): half a
        // second, as the built-in agent's default, so that searches, counts and titles follow the conversation.
        // Only beside the URL: the agent-server refuses a webhook without one.
        OH_WEBHOOKS_0_FLUSH_DELAY: spec.initialEnv.OH_WEBHOOKS_0_FLUSH_DELAY ?? "0.5",
      },
    };
  }

  /** Saves the handle of a started or resumed sandbox; pauses it when a concurrent claim evicted it meanwhile. */
  async #saveHandle(record: SandboxRecord, handle: RuntimeHandle): Promise<LiveSandbox> {
    let saved: SandboxRecord | null;
    try {
      saved = await this.#o.repo.setHandle(
        record.id,
        handle as unknown as Record<string, unknown>,
        new Date(),
      );
    } catch (err) {
      // Nothing could find this process through the record: stop it (reconciliation settles the record).
      await this.#o.runtime.remove(handle).catch(() => undefined);
      throw err;
    }
    if (saved === null || saved.status === "MISSING") {
      await this.#o.runtime.remove(handle); // deleted while it started
      return { record, status: "MISSING", handle: null };
    }
    record.handle = saved.handle;
    if (saved.status !== "STARTING") {
      // Evicted (or paused) before its handle was saved: the evicting call could not pause it, so this one does.
      await this.#o.runtime.pause(handle).catch(() => undefined);
      return this.#states.observe(saved);
    }
    return this.#awaitHealthy(record, handle);
  }

  /** Waits (in the background) for health, then RUNNING or ERROR; answers after at most `inlineMs`. */
  async #awaitHealthy(
    record: SandboxRecord,
    handle: RuntimeHandle,
    inlineMs = this.#o.inlineWaitMs,
  ): Promise<LiveSandbox> {
    const running = this.#starting.get(record.id);
    const done =
      running ??
      this.#o.runtime
        .waitHealthy(handle, this.#o.startTimeoutMs)
        .then(
          (ok) => {
            if (!ok) this.#o.log?.("sandbox did not become healthy", { sandboxId: record.id });
            return ok;
          },
          () => false,
        )
        .then((ok) => this.#states.transition(record, ["STARTING"], ok ? "RUNNING" : "ERROR"))
        .then(
          () => undefined,
          (err: unknown) =>
            // Reconciliation saves it later (it finds the record STARTING and waits again).
            this.#o.log?.("could not save the sandbox's status", {
              sandboxId: record.id,
              error: String(err),
            }),
        )
        .finally(() => this.#starting.delete(record.id));
    if (running === undefined) this.#starting.set(record.id, done);
    const inline = await Promise.race([
      done.then(() => true),
      new Promise<boolean>((r) => setTimeout(() => r(false), inlineMs).unref()),
    ]);
    if (!inline) return { record, status: "STARTING", handle };
    // This call's own health wait saw it answer and recorded RUNNING a moment ago: no need to ask again.
    if (running === undefined && record.status === "RUNNING")
      return { record: { ...record }, status: "RUNNING", handle };
    return this.#states.observe({ ...record });
  }

  async #owned(userId: string, id: string): Promise<SandboxRecord> {
    const record = id === "" ? null : await this.#o.repo.get(id, userId);
    if (record === null) throw notFound();
    return record;
  }

  #inFlight(id: string): boolean {
    return this.#busy.has(id) || this.#starting.has(id);
  }

  /**
   * Before a claim: persists the end of the user's slot holders whose process ended or was paused behind our
   * back, so that a crashed sandbox does not keep a slot (and cause a needless eviction).
   */
  async #settleSlots(userId: string): Promise<void> {
    const holders = (await this.#o.repo.listAll(userId)).filter(
      (r) => ACTIVE_STATUSES.includes(r.status) && handleOrNull(r) !== null && !this.#inFlight(r.id),
    );
    await Promise.all(
      holders.map(async (r) => {
        // Only an end matters here, which the runtime tells without asking the agents (a probe each).
        const ended = definiteEnd(r.status, (await this.#states.observe(r, false)).runtime);
        if (ended !== null) await this.#states.transition(r, [r.status], ended, { ifUpdatedAt: r.updatedAt });
      }),
    );
  }

  /** Pauses in the runtime the records a claim evicted (those with a handle; see SandboxRepository.setHandle). */
  async #pauseEvicted(evicted: readonly SandboxRecord[]): Promise<void> {
    await Promise.all(
      evicted.map(async (r) => {
        this.#o.log?.("pausing oldest running sandbox to stay within the limit", {
          sandboxId: r.id,
          userId: r.ownerId,
        });
        const handle = handleOrNull(r);
        if (handle !== null)
          await this.#o.runtime.pause(handle).catch((err: unknown) => {
            this.#o.log?.("evicted sandbox could not be paused", { sandboxId: r.id, error: String(err) });
          });
      }),
    );
  }
}

/** The port the proxied AGENT_SERVER URL reaches (see SandboxServiceOptions.agentUrls). */
function proxiedPort(urls: NonNullable<SandboxServiceOptions["agentUrls"]>): number {
  if (urls.publicUrl !== undefined) {
    const u = new URL(urls.publicUrl);
    return u.port !== "" ? Number(u.port) : u.protocol === "https:" ? 443 : 80;
  }
  return urls.servicePort?.() ?? 0;
}
