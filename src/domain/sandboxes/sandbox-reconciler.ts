/**
 * The reconciler: one job of the sandbox service. It persists what the runtime says of every recorded sandbox (at
 * start-up and periodically), finishes deletes and settles starts a crash left, pauses what runs without a slot, and
 * sweeps the runtime's warm pool. It depends on small interfaces only: the store, the runtime's removal and pause,
 * the sandbox states (observe, transition) and what it needs of the lifecycle.
 */
import type {
  SandboxRecord,
  SandboxRepository,
  SandboxStatus,
  TransitionOptions,
} from "../../ports/sandbox-repository.ts";
import { ACTIVE_STATUSES } from "../../ports/sandbox-repository.ts";
import type { RuntimeHandle, SandboxRuntime } from "../../ports/sandbox-runtime.ts";
import type { SandboxLimits } from "./sandbox-limits.ts";
import {
  definiteEnd,
  handleOrNull,
  type LiveSandbox,
  type Observed,
  type SandboxStateAccess,
} from "./sandbox-state.ts";

/** What the reconciler needs of the lifecycle of this server's sandboxes. */
export interface ReconcileLifecycle {
  /** Whether this server is starting or resuming the sandbox (its state is the start's to settle). */
  inFlight(id: string): boolean;
  /** Whether this server is deleting the sandbox. */
  deleting(id: string): boolean;
  /** Waits (in the background) for a STARTING sandbox's health, then records RUNNING or ERROR. */
  awaitHealthy(record: SandboxRecord, handle: RuntimeHandle, inlineMs: number): Promise<LiveSandbox>;
  /** Removes what the runtime has of a sandbox marked deleting, then its record. */
  removeAll(record: SandboxRecord): Promise<void>;
}

/** The reconciler's limits (see SandboxLimitSettings.orphanGraceMs and deleteGraceMs). */
export type ReconcileLimits = Pick<SandboxLimits, "orphanGraceMs" | "deleteGraceMs">;

export interface SandboxReconcilerOptions {
  repo: Pick<SandboxRepository, "listAll" | "get" | "transition">;
  runtime: Pick<SandboxRuntime, "remove" | "removeBySandboxId" | "pause" | "resume" | "sweepWarm">;
  states: SandboxStateAccess;
  lifecycle: ReconcileLifecycle;
  limits: ReconcileLimits;
  log?: ((msg: string, data?: Record<string, unknown>) => void) | undefined;
}

/** Reconciling every recorded sandbox with the runtime. */
export interface Reconciling {
  reconcileAll(): Promise<Record<SandboxStatus, number>>;
}

export class SandboxReconciler implements Reconciling {
  readonly #o: SandboxReconcilerOptions;
  #sweeping: Promise<Record<SandboxStatus, number>> | null = null;

  constructor(options: SandboxReconcilerOptions) {
    this.#o = options;
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
    this.#sweeping ??= this.#run().finally(() => {
      this.#sweeping = null;
    });
    return this.#sweeping;
  }

  async #run(): Promise<Record<SandboxStatus, number>> {
    const counts: Record<SandboxStatus, number> = {
      STARTING: 0,
      RUNNING: 0,
      PAUSED: 0,
      ERROR: 0,
      MISSING: 0,
    };
    const now = Date.now();
    const orphanBefore = now - this.#o.limits.orphanGraceMs;
    const deleteBefore = now - this.#o.limits.deleteGraceMs;
    for (const r of await this.#o.repo.listAll()) {
      let status: SandboxStatus;
      try {
        if (r.deleting === true) {
          if (r.updatedAt.getTime() < deleteBefore && !this.#o.lifecycle.deleting(r.id))
            await this.#finishDelete(r);
          continue;
        }
        status = await this.#persist(await this.#o.states.observe(r), orphanBefore);
      } catch (err) {
        this.#o.log?.("sandbox could not be reconciled", { sandboxId: r.id, error: String(err) });
        status = r.status;
      }
      counts[status]++;
    }
    // Warm sandboxes that died, and those taken for a start that never came (no record): removed.
    await this.#o.runtime
      .sweepWarm?.(async (id) => (await this.#o.repo.get(id)) !== null)
      .catch((err: unknown) => this.#o.log?.("warm sandboxes could not be swept", { error: String(err) }));
    return counts;
  }

  /**
   * Finishes a delete that its server did not (it died between marking the record and removing it): the runtime
   * objects, the workspace or volume, then the record.
   */
  async #finishDelete(r: SandboxRecord): Promise<void> {
    this.#o.log?.("sandbox left by a delete that did not finish: removing it", { sandboxId: r.id });
    await this.#o.lifecycle.removeAll(r);
  }

  /**
   * Persists what `o` observed (see reconcileAll); returns the resulting live status. Every write is a
   * compare-and-set on the record as read (status and updatedAt), so that a user's action landing meanwhile wins.
   */
  async #persist(o: Observed, orphanBefore: number): Promise<SandboxStatus> {
    const r = o.record;
    if (this.#o.lifecycle.inFlight(r.id)) return o.status;
    const asRead: TransitionOptions = { ifUpdatedAt: r.updatedAt };
    const stale = r.updatedAt.getTime() < orphanBefore;
    if (r.status === "MISSING") {
      // Set MISSING by a delete that did not finish (its server died): whatever still runs under it goes.
      if (stale && (o.handle === null || (o.runtime !== null && o.runtime !== "MISSING"))) {
        const removed =
          o.handle === null
            ? await this.#o.runtime.removeBySandboxId(r.id)
            : await this.#o.runtime.remove(o.handle).then(() => 1);
        if (removed > 0)
          this.#o.log?.("sandbox left running by a delete that did not finish: removed", { sandboxId: r.id });
      }
      return o.status;
    }
    if (o.handle === null) {
      if ((r.status === "STARTING" || r.status === "PAUSED") && stale) {
        // The record first (a start taken over meanwhile wins), then whatever runs under its id.
        if (!(await this.#o.states.transition(r, [r.status], "ERROR", asRead))) return o.status;
        const removed = await this.#o.runtime.removeBySandboxId(r.id);
        this.#o.log?.("sandbox left without a runtime handle (a crash while it started): set ERROR", {
          sandboxId: r.id,
          removedRuntimeObjects: removed,
        });
        return "ERROR";
      }
      return o.status;
    }
    const alive = o.runtime === "RUNNING" || o.runtime === "STARTING";
    if ((r.status === "PAUSED" || r.status === "ERROR") && alive) {
      // Holds no slot, so it must not run: paused (a crash between an eviction and its pause, a start that never
      // became healthy); resuming it claims a slot again.
      await this.#pauseUnslotted(r, o.handle);
      return o.status;
    }
    if (r.status === "STARTING" && o.runtime === "STARTING") {
      // Its health wait was lost (a restart, a failed write): wait again, in the background.
      return (await this.#o.lifecycle.awaitHealthy(r, o.handle, 0)).status;
    }
    const ended = definiteEnd(r.status, o.runtime);
    if (ended !== null) await this.#o.states.transition(r, [r.status], ended, asRead);
    else if (r.status === "STARTING" && o.runtime === "RUNNING")
      await this.#o.states.transition(r, ["STARTING"], "RUNNING", asRead);
    return o.status;
  }

  /**
   * Pauses in the runtime a sandbox whose record (as read by the sweep) holds no slot but runs. The decision is a
   * compare-and-set on the record as read: a resume (or any write) since then wins and nothing is paused. The
   * write also moves the record's version, so that a resume claiming it between this write and the pause is
   * seen afterwards: its sandbox is then resumed again (whichever of the two signals came last), and the user's
   * action stands.
   */
  async #pauseUnslotted(r: SandboxRecord, handle: RuntimeHandle): Promise<void> {
    const decided = new Date(Math.max(Date.now(), r.updatedAt.getTime() + 1));
    if (!(await this.#o.repo.transition(r.id, [r.status], r.status, decided, { ifUpdatedAt: r.updatedAt })))
      return;
    this.#o.log?.("sandbox without a running slot found running: pausing it", {
      sandboxId: r.id,
      status: r.status,
    });
    await this.#o.runtime.pause(handle);
    const now = await this.#o.repo.get(r.id);
    if (now === null || !ACTIVE_STATUSES.includes(now.status)) return;
    this.#o.log?.("sandbox resumed by a user while the sweep paused it: resuming it again", {
      sandboxId: r.id,
    });
    // Already running again when the user's own resume came after this pause (a runtime may refuse then).
    await this.#o.runtime.resume(handleOrNull(now) ?? handle).catch((err: unknown) => {
      this.#o.log?.("sandbox could not be resumed again", { sandboxId: r.id, error: String(err) });
    });
  }
}
