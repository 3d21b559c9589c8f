import { EventEmitter, on } from "node:events";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { requireCaller } from "../../core/context.ts";
import { notFound } from "../../core/errors.ts";
import { base62 } from "../../core/ids.ts";
import type { PageTokens } from "../../core/page-token.ts";
import type { SecretBox } from "../../core/secret-box.ts";
import {
  type BatchGetSandboxesRequest,
  type BatchGetSandboxesResponse,
  type DeleteSandboxRequest,
  type DeleteSandboxResponse,
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
import type { SandboxRecord, SandboxRepository, SandboxStatus } from "../../ports/sandbox-repository.ts";
import type { RuntimeHandle, RuntimeState, SandboxRuntime } from "../../ports/sandbox-runtime.ts";
import { checkBatch, readPage } from "../paging.ts";
import type { SandboxSpecService } from "./sandbox-spec-service.ts";

const PB_STATUS: Record<SandboxStatus, PbStatus> = {
  STARTING: PbStatus.STARTING,
  RUNNING: PbStatus.RUNNING,
  PAUSED: PbStatus.PAUSED,
  ERROR: PbStatus.ERROR,
  MISSING: PbStatus.MISSING,
};
const FROM_RUNTIME: Record<RuntimeState, SandboxStatus> = {
  starting: "STARTING",
  running: "RUNNING",
  paused: "PAUSED",
  error: "ERROR",
  missing: "MISSING",
};

export interface SandboxServiceOptions {
  repo: SandboxRepository;
  runtime: SandboxRuntime;
  specs: SandboxSpecService;
  box: SecretBox;
  tokens: PageTokens;
  /** Running sandboxes per user before the oldest is paused (default 5). */
  maxRunning?: number;
  /** How long start/resume wait inline for the agent before answering STARTING (default 2000 ms). */
  inlineWaitMs?: number;
  /** How long a background start may take before the sandbox is ERROR (default 120 s). */
  startTimeoutMs?: number;
  log?: (msg: string, data?: Record<string, unknown>) => void;
}

/** A sandbox as the service sees it: the record plus its reconciled status. */
export interface LiveSandbox {
  record: SandboxRecord;
  status: SandboxStatus;
  handle: RuntimeHandle | null;
}

/**
 * The caller's sandboxes: a registry in storage, a runtime that runs them, and reconciliation of the two on
 * every read (a vanished process or container is MISSING, a crashed one ERROR). Ownership is checked on every
 * operation: another user's sandbox behaves as if it did not exist.
 */
export class SandboxService implements ServiceImpl<typeof SandboxServiceDesc> {
  readonly #o: Required<Omit<SandboxServiceOptions, "log">> & Pick<SandboxServiceOptions, "log">;
  readonly #events = new EventEmitter({ captureRejections: false });
  readonly #starting = new Map<string, Promise<void>>();

  constructor(options: SandboxServiceOptions) {
    this.#o = { maxRunning: 5, inlineWaitMs: 2_000, startTimeoutMs: 120_000, ...options };
    this.#events.setMaxListeners(0);
  }

  async searchSandboxes(req: SearchSandboxesRequest, ctx: HandlerContext): Promise<SearchSandboxesResponse> {
    const { userId } = requireCaller(ctx);
    const scope = `sandboxes:${userId}`;
    const page = readPage(this.#o.tokens, scope, req.pageId, req.limit);
    const result = await this.#o.repo.list(userId, page);
    const live = await Promise.all(result.items.map((r) => this.#reconcile(r)));
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
    const records = await this.#o.repo.getMany(req.id, userId);
    const byId = new Map(
      await Promise.all(records.map(async (r) => [r.id, await this.#reconcile(r)] as const)),
    );
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
    const handle = handleOrNull(record);
    if (handle !== null) await this.#o.runtime.remove(handle);
    await this.#o.repo.delete(record.id);
    this.#emit(record, "MISSING");
    return { $typeName: "workspace.v1.DeleteSandboxResponse", success: true };
  }

  /** The current state of the caller's sandboxes (or of `id` only), then each status change, until cancelled. */
  async *watchSandboxes(
    req: WatchSandboxesRequest,
    ctx: HandlerContext,
  ): AsyncGenerator<WatchSandboxesResponse> {
    const { userId } = requireCaller(ctx);
    const filter = req.id.length > 0 ? new Set(req.id) : null;
    const changes = on(this.#events, `user:${userId}`, { signal: ctx.signal });
    const initial = filter
      ? await this.#o.repo.getMany([...filter], userId)
      : await this.#o.repo.listAll(userId);
    for (const r of initial)
      yield {
        $typeName: "workspace.v1.WatchSandboxesResponse",
        sandbox: this.toInfo(await this.#reconcile(r)),
      };
    try {
      for await (const [live] of changes as AsyncIterable<[LiveSandbox]>) {
        if (filter && !filter.has(live.record.id)) continue;
        yield { $typeName: "workspace.v1.WatchSandboxesResponse", sandbox: this.toInfo(live) };
      }
    } catch (err) {
      if ((err as { name?: string }).name !== "AbortError") throw err;
    }
  }

  // ---- domain operations (also used by the conversation service) ----

  /** Starts a sandbox for the user; waits up to inlineWaitMs for it to be healthy. */
  async start(userId: string, specId: string | undefined): Promise<LiveSandbox> {
    const spec = this.#o.specs.resolve(specId);
    this.#o.runtime.admit?.(userId);
    await this.#makeRoom(userId, null);
    const now = new Date();
    const sessionApiKey = base62(43);
    const record: SandboxRecord = {
      id: base62(22),
      ownerId: userId,
      specId: spec.id,
      runtime: this.#o.runtime.kind,
      handle: {},
      sessionApiKey: this.#o.box.seal(sessionApiKey, `${userId}:sandbox`),
      status: "STARTING",
      createdAt: now,
      updatedAt: now,
    };
    await this.#o.repo.insert(record);
    let handle: RuntimeHandle;
    try {
      handle = await this.#o.runtime.start({ sandboxId: record.id, spec, sessionApiKey, ownerId: userId });
    } catch (err) {
      this.#o.log?.("sandbox failed to start", { sandboxId: record.id, error: String(err) });
      await this.#setStatus(record, "ERROR");
      return { record: { ...record, status: "ERROR" }, status: "ERROR", handle: null };
    }
    record.handle = handle as unknown as Record<string, unknown>;
    await this.#o.repo.update(record.id, { handle: record.handle, updatedAt: new Date() });
    return this.#awaitHealthy(record, handle);
  }

  async pause(userId: string, id: string): Promise<void> {
    const record = await this.#owned(userId, id);
    const live = await this.#reconcile(record);
    if (live.status === "PAUSED" || live.status === "MISSING" || live.handle === null) return;
    await this.#o.runtime.pause(live.handle);
    await this.#setStatus(record, "PAUSED");
  }

  /** Resumes (idempotent); waits up to inlineWaitMs for health. */
  async resume(userId: string, id: string): Promise<LiveSandbox> {
    const record = await this.#owned(userId, id);
    const live = await this.#reconcile(record);
    if (
      live.status === "RUNNING" ||
      live.status === "STARTING" ||
      live.status === "MISSING" ||
      live.handle === null
    ) {
      return live;
    }
    await this.#makeRoom(userId, record.id);
    const handle = await this.#o.runtime.resume(live.handle);
    record.handle = handle as unknown as Record<string, unknown>;
    await this.#o.repo.update(record.id, { handle: record.handle, updatedAt: new Date() });
    return this.#awaitHealthy(record, handle);
  }

  /** The reconciled sandbox if the user owns it, else null. */
  async get(userId: string, id: string): Promise<LiveSandbox | null> {
    const record = await this.#o.repo.get(id, userId);
    return record === null ? null : this.#reconcile(record);
  }

  /** Reconciled sandboxes by id (owned by the user), for live conversation status. */
  async getMany(userId: string, ids: readonly string[]): Promise<Map<string, LiveSandbox>> {
    const records = await this.#o.repo.getMany(ids, userId);
    return new Map(await Promise.all(records.map(async (r) => [r.id, await this.#reconcile(r)] as const)));
  }

  /** Waits for a STARTING sandbox to leave that state (bounded); returns its reconciled state. */
  async waitUntilSettled(userId: string, id: string, timeoutMs: number): Promise<LiveSandbox | null> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const pending = this.#starting.get(id);
      if (pending)
        await Promise.race([pending, new Promise((r) => setTimeout(r, Math.max(0, deadline - Date.now())))]);
      const live = await this.get(userId, id);
      if (live === null || live.status !== "STARTING" || Date.now() >= deadline) return live;
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** The plaintext session key of a sandbox. */
  sessionKey(record: SandboxRecord): string {
    return this.#o.box.open(record.sessionApiKey, `${record.ownerId}:sandbox`);
  }

  /** Start-up: reconciles every recorded sandbox with the runtime, so nothing is reported RUNNING that is not. */
  async reconcileAll(): Promise<Record<SandboxStatus, number>> {
    const counts: Record<SandboxStatus, number> = {
      STARTING: 0,
      RUNNING: 0,
      PAUSED: 0,
      ERROR: 0,
      MISSING: 0,
    };
    for (const r of await this.#o.repo.listAll()) {
      let live = await this.#reconcile(r);
      if (live.status === "STARTING" && live.handle !== null && !this.#starting.has(r.id)) {
        live = await this.#awaitHealthy(r, live.handle);
      }
      counts[live.status]++;
    }
    return counts;
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
      exposedUrls:
        running && l.handle
          ? [
              {
                $typeName: "workspace.v1.ExposedUrl",
                name: "AGENT_SERVER",
                url: l.handle.agentUrl,
                port: l.handle.port,
              },
            ]
          : [],
      createdAt: timestampFromDate(l.record.createdAt),
    };
  }

  // ---- internals ----

  async #awaitHealthy(record: SandboxRecord, handle: RuntimeHandle): Promise<LiveSandbox> {
    const wait = this.#o.runtime.waitHealthy(handle, this.#o.startTimeoutMs);
    const settle = wait.then(
      async (ok) => {
        const state = ok ? "RUNNING" : "ERROR";
        if (!ok) this.#o.log?.("sandbox did not become healthy", { sandboxId: record.id });
        if ((await this.#o.repo.get(record.id)) !== null) await this.#setStatus(record, state);
      },
      async () => {
        await this.#setStatus(record, "ERROR");
      },
    );
    const done = settle.finally(() => this.#starting.delete(record.id));
    this.#starting.set(record.id, done);
    const inline = await Promise.race([
      done.then(() => true),
      new Promise<boolean>((r) => setTimeout(() => r(false), this.#o.inlineWaitMs).unref()),
    ]);
    if (!inline) return { record, status: "STARTING", handle };
    return { record, status: record.status, handle };
  }

  async #owned(userId: string, id: string): Promise<SandboxRecord> {
    const record = id === "" ? null : await this.#o.repo.get(id, userId);
    if (record === null) throw notFound();
    return record;
  }

  async #reconcile(record: SandboxRecord): Promise<LiveSandbox> {
    const handle = handleOrNull(record);
    if (handle === null) {
      const status =
        this.#starting.has(record.id) || record.status === "STARTING" ? record.status : "MISSING";
      return { record, status, handle };
    }
    let status: SandboxStatus;
    try {
      status = FROM_RUNTIME[await this.#o.runtime.inspect(handle)];
    } catch {
      status = "ERROR";
    }
    if (status === "STARTING" && record.status === "RUNNING" && !this.#starting.has(record.id))
      status = "ERROR";
    if (status !== record.status) await this.#setStatus(record, status);
    return { record, status, handle };
  }

  async #setStatus(record: SandboxRecord, status: SandboxStatus): Promise<void> {
    const changed = record.status !== status;
    record.status = status;
    record.updatedAt = new Date();
    await this.#o.repo.update(record.id, { status, updatedAt: record.updatedAt });
    if (changed) this.#emit(record, status);
  }

  #emit(record: SandboxRecord, status: SandboxStatus): void {
    const handle = handleOrNull(record);
    this.#events.emit(`user:${record.ownerId}`, {
      record: { ...record, status },
      status,
      handle,
    } satisfies LiveSandbox);
  }

  /** Pauses the user's oldest running sandboxes so that one more can run. */
  async #makeRoom(userId: string, except: string | null): Promise<void> {
    const all = await this.#o.repo.listAll(userId);
    const running: SandboxRecord[] = [];
    for (const r of all) {
      if (r.id === except) continue;
      const live = await this.#reconcile(r);
      if ((live.status === "RUNNING" || live.status === "STARTING") && live.handle !== null) running.push(r);
    }
    // Ids compared by code unit, not localeCompare: the order must not depend on a locale, and ICU's collation
    // data costs ~10 MiB of resident memory the first time it is touched.
    running.sort(
      (a, b) => a.createdAt.getTime() - b.createdAt.getTime() || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0),
    );
    const excess = running.length - (this.#o.maxRunning - 1);
    for (const r of running.slice(0, Math.max(0, excess))) {
      this.#o.log?.("pausing oldest running sandbox to stay within the limit", { sandboxId: r.id, userId });
      const handle = handleOrNull(r);
      if (handle !== null) await this.#o.runtime.pause(handle);
      await this.#setStatus(r, "PAUSED");
    }
  }
}

function handleOrNull(record: SandboxRecord): RuntimeHandle | null {
  const h = record.handle as Partial<RuntimeHandle>;
  return typeof h.agentUrl === "string" &&
    typeof h.port === "number" &&
    typeof h.data === "object" &&
    h.data !== null
    ? (h as RuntimeHandle)
    : null;
}
