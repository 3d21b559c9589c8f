/**
 * The sandbox service's limits: the settings the composition root (src/server/container.ts) reads from its
 * configuration, and the one frozen object with their defaults applied that it hands to each job of the service
 * (lifecycle, reconciler, states, warm claims), each reading the ones it needs.
 */

/** The sandbox service's limit settings, each optional (its default when undefined). */
export interface SandboxLimitSettings {
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
   * being started by this server, before the reconciler treats it as left by a crash: whatever the runtime runs for
   * it is removed and it becomes ERROR (default: startTimeoutMs).
   */
  orphanGraceMs?: number;
  /**
   * How long a delete may take: a record marked deleting (status MISSING) for longer, not being deleted by this
   * server, was left by a delete that did not finish, and the reconciler finishes it (default: 15 s, at most
   * orphanGraceMs).
   */
  deleteGraceMs?: number;
  /** How long start/resume wait for a running slot when every slot holder is starting (default 30 s). */
  slotWaitMs?: number;
  /**
   * How long a RUNNING sandbox whose process is alive may fail its health probe (a loaded machine, a probe timing
   * out) and still be reported RUNNING; past it, while it keeps failing, it reads ERROR (default 15 s). A process
   * that ended reads ERROR at once whatever this says.
   */
  unansweredGraceMs?: number;
}

/** The sandbox service's limits, with their defaults applied (see {@link SandboxLimitSettings} for each), frozen. */
export interface SandboxLimits {
  readonly maxRunning: number;
  readonly maxPerUser: number;
  readonly warmClaimsPerMinute: number;
  readonly inlineWaitMs: number;
  readonly startTimeoutMs: number;
  readonly orphanGraceMs: number;
  readonly deleteGraceMs: number;
  readonly slotWaitMs: number;
  readonly unansweredGraceMs: number;
}

/** The limits of `settings` with their defaults, frozen. */
export function sandboxLimits(settings: SandboxLimitSettings = {}): SandboxLimits {
  const startTimeoutMs = settings.startTimeoutMs ?? 120_000;
  // Spread as the settings always were: a limit passed as undefined stays undefined (the store's own default then).
  const o = {
    maxRunning: 5,
    maxPerUser: 20,
    warmClaimsPerMinute: 0,
    inlineWaitMs: 2_000,
    orphanGraceMs: startTimeoutMs,
    slotWaitMs: 30_000,
    unansweredGraceMs: 15_000,
    deleteGraceMs: Math.min(15_000, settings.orphanGraceMs ?? startTimeoutMs),
    ...settings,
    startTimeoutMs,
  };
  return Object.freeze({
    maxRunning: o.maxRunning,
    maxPerUser: o.maxPerUser,
    warmClaimsPerMinute: settings.warmClaimsPerMinute ?? 0,
    inlineWaitMs: o.inlineWaitMs,
    startTimeoutMs: o.startTimeoutMs,
    orphanGraceMs: o.orphanGraceMs,
    deleteGraceMs: o.deleteGraceMs,
    slotWaitMs: o.slotWaitMs,
    unansweredGraceMs: o.unansweredGraceMs,
  });
}
