/**
 * Lifecycle and slots: one job of the sandbox service. Starting (warm or cold), starting again, pausing, resuming and
 * deleting a user's sandboxes, within the user's running slots and sandbox cap, which the store holds atomically
 * (see SandboxService); the health waits and the in-progress work of this server. It depends on small interfaces:
 * the store, the runtime, the spec catalog, warm claims, sandbox states and the sandboxes' session keys.
 */
import { failedPrecondition, notFound } from "../../core/errors.ts";
import { base62, newSessionKey } from "../../core/ids.ts";
import {
  ACTIVE_STATUSES,
  type SandboxRecord,
  type SandboxRepository,
} from "../../ports/sandbox-repository.ts";
import type { RuntimeHandle, RuntimeSpec, SandboxRuntime } from "../../ports/sandbox-runtime.ts";
import type { SessionKeys, SpecCatalog } from "./ports.ts";
import type { SandboxLimits } from "./sandbox-limits.ts";
import type { ReconcileLifecycle } from "./sandbox-reconciler.ts";
import type { SandboxSpec } from "./sandbox-spec-service.ts";
import {
  type ChangeSignal,
  definiteEnd,
  handleOrNull,
  type LiveSandbox,
  type SandboxStateAccess,
  unanswered,
} from "./sandbox-state.ts";
import type { WarmClaiming } from "./warm-claims.ts";

/** A new sandbox id (22 base62 characters). */
export const newSandboxId = (): string => base62(22);

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

/** The lifecycle's limits (see SandboxLimitSettings). */
export type LifecycleLimits = Pick<
  SandboxLimits,
  "maxRunning" | "maxPerUser" | "inlineWaitMs" | "startTimeoutMs" | "slotWaitMs"
>;

export interface SandboxLifecycleOptions {
  repo: Pick<
    SandboxRepository,
    "create" | "claim" | "get" | "transition" | "setHandle" | "listAll" | "delete"
  >;
  runtime: SandboxRuntime;
  specs: SpecCatalog;
  warm: WarmClaiming;
  states: SandboxStateAccess;
  changes: ChangeSignal;
  keys: SessionKeys;
  limits: LifecycleLimits;
  /** The user's sandboxes in use by a conversation start that has not ended (see SandboxServiceDeps in src/server/container.ts). */
  inUseByStarts: (userId: string) => Promise<readonly string[]>;
  /** Base URL of this service as sandboxes reach it (see SandboxServiceDeps in src/server/container.ts). */
  webhookBaseUrl?: (() => string | undefined) | undefined;
  log?: ((msg: string, data?: Record<string, unknown>) => void) | undefined;
}

/** What the RPC face and the conversation service need of the lifecycle. */
export interface Lifecycle extends ReconcileLifecycle {
  startWarmPool(): Promise<void>;
  newSandboxId(userId: string, specId?: string): Promise<string>;
  start(userId: string, specId: string | undefined, id?: string, wait?: SlotWait): Promise<LiveSandbox>;
  restartUnstarted(userId: string, id: string): Promise<LiveSandbox>;
  pause(userId: string, id: string): Promise<void>;
  resume(userId: string, id: string, wait?: SlotWait): Promise<LiveSandbox>;
  delete(record: SandboxRecord): Promise<void>;
  waitUntilSettled(userId: string, id: string, timeoutMs: number): Promise<LiveSandbox | null>;
}

export class SandboxLifecycle implements Lifecycle {
  readonly #o: SandboxLifecycleOptions;
  /** Health waits in progress here (start or resume), by sandbox id. */
  readonly #starting = new Map<string, Promise<void>>();
  /** Sandboxes this server is starting or resuming (before their health wait). */
  readonly #busy = new Set<string>();
  /** Sandboxes this server is deleting. */
  readonly #deleting = new Set<string>();

  constructor(options: SandboxLifecycleOptions) {
    this.#o = options;
  }

  /** Deletes the sandbox: its record MISSING and marked deleting first, then what the runtime has, then the record. */
  async delete(record: SandboxRecord): Promise<void> {
    this.#deleting.add(record.id);
    try {
      // MISSING and marked deleting first: no server's sweep pauses it again while it is being removed, a start
      // in progress removes what it started, and a sweep finishes the delete if this server dies before the end.
      await this.#o.states.transition(
        record,
        ["STARTING", "RUNNING", "PAUSED", "ERROR", "MISSING"],
        "MISSING",
        {
          deleting: true,
        },
      );
      await this.removeAll(record);
    } finally {
      this.#deleting.delete(record.id);
      this.#o.states.forget(record.id);
    }
  }

  deleting(id: string): boolean {
    return this.#deleting.has(id);
  }

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
    const claim = await this.#o.warm.claim(spec, userId);
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
        ? await this.#o.warm.claim(spec, userId)
        : await this.#o.warm.claimed(id).catch(() => null);
    const sandboxId = claimed?.sandboxId ?? id ?? newSandboxId();
    const sessionApiKey = claimed?.sessionApiKey ?? newSessionKey(sandboxId);
    // A warm sandbox taken for a start that does not happen goes: it is never given to another user.
    const release = async (): Promise<void> => {
      this.#o.warm.settled(userId, claimed);
      if (claimed !== null) await this.#o.runtime.removeBySandboxId(sandboxId).catch(() => undefined);
    };
    const sealed = this.#o.keys.seal(userId, sessionApiKey);
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
        maxPerUser: this.#o.limits.maxPerUser,
        maxRunning: this.#o.limits.maxRunning,
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
        `Sandbox limit reached: you have ${outcome.count} sandboxes and a user may have at most ${this.#o.limits.maxPerUser}; delete one to start another`,
      );
    }
    this.#o.warm.settled(userId, claimed);
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
    if (record.status !== "STARTING" || handleOrNull(record) !== null || this.inFlight(id))
      return this.#o.states.observe(record);
    this.#busy.add(id);
    try {
      // Still STARTING, and fresh again: the crash-leftover sweep of any server leaves it alone while it starts.
      if (!(await this.#o.repo.transition(id, ["STARTING"], "STARTING", new Date())))
        return this.#o.states.observe(await this.#owned(userId, id));
      const removed = await this.#o.runtime.removeBySandboxId(id);
      this.#o.log?.("starting again a sandbox whose start was cut off", { sandboxId: id, removed });
      const spec = this.#o.specs.resolve(record.specId);
      return await this.#run(record, spec, this.#o.keys.open(record));
    } finally {
      this.#busy.delete(id);
    }
  }

  /** Pauses (idempotent): the record first, then the runtime. */
  async pause(userId: string, id: string): Promise<void> {
    const record = await this.#owned(userId, id);
    if (!(await this.#o.states.transition(record, ACTIVE_STATUSES, "PAUSED"))) return;
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
    if (handle === null || record.status === "MISSING") return this.#o.states.observe(record);
    let live = await this.#o.states.observe(record);
    if (ACTIVE_STATUSES.includes(record.status)) {
      // Holds its slot: nothing to do, unless its agent ended while RUNNING and no sweep recorded it yet: the end
      // is recorded (compare-and-set: a concurrent resume or start wins), then it is started again below.
      if (record.status !== "RUNNING" || this.inFlight(id) || live.runtime !== "ERROR") return live;
      if (!(await this.#o.states.transition(record, ["RUNNING"], "ERROR", { ifUpdatedAt: record.updatedAt })))
        return this.#o.states.observe(await this.#owned(userId, id));
      live = { ...live, status: "ERROR" };
    }
    if (live.status === "MISSING") return live;
    // Its agent ended (crashed, killed by its memory limit, the host restarted): a runtime that can start it again
    // on the same workspace does, instead of resuming a process that no longer exists.
    const restart = live.runtime === "ERROR" ? this.#o.runtime.restart?.bind(this.#o.runtime) : undefined;
    const claim = await this.#untilSlot(userId, wait, async (protect) => {
      const c = await this.#o.repo.claim(id, userId, this.#o.limits.maxRunning, new Date(), protect);
      return c?.busy ? { busy: this.#o.limits.maxRunning } : c;
    });
    if (claim === null) throw notFound();
    if (!claim.claimed) {
      await this.#pauseEvicted(claim.evicted);
      return this.#o.states.observe(claim.record);
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
            sessionApiKey: this.#o.keys.open(record),
            ownerId: record.ownerId,
          });
        }
      } catch (err) {
        await this.#o.states.transition(claimed, ["STARTING"], live.status).catch(() => undefined);
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
    const deadline = Date.now() + (wait.waitMs ?? this.#o.limits.slotWaitMs);
    let told = false;
    for (;;) {
      wait.signal?.throwIfAborted();
      await this.#settleSlots(userId);
      const protect = await this.#o.inUseByStarts(userId);
      const outcome = await attempt(protect);
      if (outcome === null || typeof outcome !== "object" || !("busy" in outcome)) return outcome as T;
      const detail = `Waiting for a running slot: all ${outcome.busy} of your running sandboxes are starting or in use by a conversation start, and at most ${this.#o.limits.maxRunning} run at once`;
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
      const live = await this.#get(userId, id);
      if (live === null || !(live.status === "STARTING" || unanswered(live)) || Date.now() >= deadline)
        return live;
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** Removes what the runtime has of a sandbox marked deleting (by its handle and by its id), then its record. */
  async removeAll(record: SandboxRecord): Promise<void> {
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
      await this.#o.states.transition(record, ["STARTING"], "ERROR").catch(() => undefined);
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
      return this.#o.states.observe(saved);
    }
    return this.awaitHealthy(record, handle);
  }

  /** Waits (in the background) for health, then RUNNING or ERROR; answers after at most `inlineMs`. */
  async awaitHealthy(
    record: SandboxRecord,
    handle: RuntimeHandle,
    inlineMs = this.#o.limits.inlineWaitMs,
  ): Promise<LiveSandbox> {
    const running = this.#starting.get(record.id);
    const done =
      running ??
      this.#o.runtime
        .waitHealthy(handle, this.#o.limits.startTimeoutMs)
        .then(
          (ok) => {
            if (!ok) this.#o.log?.("sandbox did not become healthy", { sandboxId: record.id });
            return ok;
          },
          () => false,
        )
        .then((ok) => this.#o.states.transition(record, ["STARTING"], ok ? "RUNNING" : "ERROR"))
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
    return this.#o.states.observe({ ...record });
  }

  inFlight(id: string): boolean {
    return this.#busy.has(id) || this.#starting.has(id);
  }

  /**
   * Before a claim: persists the end of the user's slot holders whose process ended or was paused behind our
   * back, so that a crashed sandbox does not keep a slot (and cause a needless eviction).
   */
  async #settleSlots(userId: string): Promise<void> {
    const holders = (await this.#o.repo.listAll(userId)).filter(
      (r) => ACTIVE_STATUSES.includes(r.status) && handleOrNull(r) !== null && !this.inFlight(r.id),
    );
    await Promise.all(
      holders.map(async (r) => {
        // Only an end matters here, which the runtime tells without asking the agents (a probe each).
        const ended = definiteEnd(r.status, (await this.#o.states.observe(r, false)).runtime);
        if (ended !== null)
          await this.#o.states.transition(r, [r.status], ended, { ifUpdatedAt: r.updatedAt });
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

  async #owned(userId: string, id: string): Promise<SandboxRecord> {
    const record = id === "" ? null : await this.#o.repo.get(id, userId);
    if (record === null) throw notFound();
    return record;
  }

  /** The reconciled sandbox if the user owns it, else null. */
  async #get(userId: string, id: string): Promise<LiveSandbox | null> {
    const record = await this.#o.repo.get(id, userId);
    return record === null ? null : this.#o.states.observe(record);
  }
}
