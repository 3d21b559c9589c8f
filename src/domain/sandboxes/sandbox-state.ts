/**
 * A sandbox's state as the service sees it: its record reconciled with the runtime (observe, writing nothing) and
 * compare-and-set changes of its recorded status (transition). Shared by the sandbox service's jobs: the RPC face
 * and lifecycle read and change states through it, the reconciler persists what it observes through it.
 */
import type {
  SandboxRecord,
  SandboxRepository,
  SandboxStatus,
  TransitionOptions,
} from "../../ports/sandbox-repository.ts";
import { ACTIVE_STATUSES } from "../../ports/sandbox-repository.ts";
import type { RuntimeHandle, RuntimeState, SandboxRuntime } from "../../ports/sandbox-runtime.ts";
import type { SandboxLimits } from "./sandbox-limits.ts";

/** A sandbox as the service sees it: the record plus its reconciled status. */
export interface LiveSandbox {
  record: SandboxRecord;
  status: SandboxStatus;
  handle: RuntimeHandle | null;
  /** Why it is ERROR, when the runtime knows (e.g. killed by its memory limit). */
  reason?: string;
}

/** What reconciliation saw: the live status plus the runtime's own state (null without a handle). */
export interface Observed extends LiveSandbox {
  runtime: SandboxStatus | null;
}

/** Reading a sandbox's live state and changing its recorded status: what each job of the service needs of states. */
export interface SandboxStateAccess {
  /** The live status of a record from the runtime's state; writes nothing. */
  observe(record: SandboxRecord, probe?: boolean): Promise<Observed>;
  /** Compare-and-set of the record's status (logged by the store); on success updates `record`, wakes watches. */
  transition(
    record: SandboxRecord,
    from: readonly SandboxStatus[],
    to: SandboxStatus,
    options?: TransitionOptions,
  ): Promise<boolean>;
  /** Forgets what was observed of a sandbox (it was deleted). */
  forget(id: string): void;
}

/** Where a changed status is told: the store's change feed, which wakes every server's watches. */
export interface ChangeSignal {
  poke(): void;
}

export interface SandboxStatesOptions {
  repo: Pick<SandboxRepository, "transition">;
  runtime: Pick<SandboxRuntime, "inspect" | "failureReason">;
  changes: ChangeSignal;
  /** How long a RUNNING sandbox whose process is alive may fail its health probe and still read RUNNING. */
  limits: Pick<SandboxLimits, "unansweredGraceMs">;
  log?: ((msg: string, data?: Record<string, unknown>) => void) | undefined;
}

const FROM_RUNTIME: Record<RuntimeState, SandboxStatus> = {
  starting: "STARTING",
  running: "RUNNING",
  paused: "PAUSED",
  error: "ERROR",
  missing: "MISSING",
};

/** Sandbox states: observing records against the runtime and compare-and-set transitions of their status. */
export class SandboxStates implements SandboxStateAccess {
  readonly #o: SandboxStatesOptions;
  /** RUNNING sandboxes whose live process failed its health probe: since when, without a probe answered since. */
  readonly #unanswered = new Map<string, number>();

  constructor(options: SandboxStatesOptions) {
    this.#o = options;
  }

  forget(id: string): void {
    this.#unanswered.delete(id);
  }

  async observe(record: SandboxRecord, probe = true): Promise<Observed> {
    const handle = handleOrNull(record);
    if (handle === null) {
      const status = record.status === "RUNNING" || record.status === "MISSING" ? "MISSING" : record.status;
      return { record, status, handle, runtime: null };
    }
    let runtime: SandboxStatus;
    try {
      runtime = FROM_RUNTIME[await this.#o.runtime.inspect(handle, { probe })];
    } catch {
      runtime = "ERROR";
    }
    let status: SandboxStatus;
    switch (record.status) {
      case "STARTING":
      case "RUNNING":
        // Healthy once and now not answering: it hangs, or a loaded machine made the probe time out. Its process is alive (an ended one reads ERROR from the runtime): RUNNING for a grace
        // period, so that one slow probe does not hide its URL from the UI; ERROR once it keeps failing.
        if (runtime === "STARTING" && record.status === "RUNNING") {
          const since = this.#unanswered.get(record.id) ?? Date.now();
          this.#unanswered.set(record.id, since);
          status = Date.now() - since < this.#o.limits.unansweredGraceMs ? "RUNNING" : "ERROR";
        } else {
          if (runtime !== "STARTING" && probe) this.#unanswered.delete(record.id);
          status = runtime;
        }
        break;
      case "PAUSED":
        // The store decided: a PAUSED record still running is being paused (reconciliation makes sure of it).
        status = runtime === "RUNNING" || runtime === "STARTING" ? "PAUSED" : runtime;
        break;
      case "ERROR":
        status = runtime === "MISSING" ? "MISSING" : "ERROR";
        break;
      default:
        status = "MISSING";
    }
    const reason = status === "ERROR" ? this.#o.runtime.failureReason?.(handle) : null;
    return reason ? { record, status, handle, runtime, reason } : { record, status, handle, runtime };
  }

  async transition(
    record: SandboxRecord,
    from: readonly SandboxStatus[],
    to: SandboxStatus,
    options?: TransitionOptions,
  ): Promise<boolean> {
    // A conditional write moves the version even within the millisecond of the one it compares with.
    const updatedAt = new Date(Math.max(Date.now(), (options?.ifUpdatedAt?.getTime() ?? 0) + 1));
    if (!(await this.#o.repo.transition(record.id, from, to, updatedAt, options))) return false;
    if (to === "ERROR") {
      const handle = handleOrNull(record);
      const reason = handle && this.#o.runtime.failureReason?.(handle);
      this.#o.log?.("sandbox failed", {
        sandboxId: record.id,
        reason: reason ?? "its process ended or stopped answering",
      });
    }
    record.status = to;
    record.updatedAt = updatedAt;
    this.#o.changes.poke();
    return true;
  }
}

/**
 * The status to persist for a record whose runtime object is known to have stopped running (paused behind our
 * back, crashed, gone), else null. An agent that only fails a health probe (a loaded machine) is not an end: it
 * keeps its slot and its process, and is only reported ERROR while it does not answer.
 */
export function definiteEnd(recorded: SandboxStatus, runtime: SandboxStatus | null): SandboxStatus | null {
  if (runtime === null || runtime === recorded) return null;
  switch (recorded) {
    case "STARTING":
    case "RUNNING":
      return runtime === "PAUSED" || runtime === "ERROR" || runtime === "MISSING" ? runtime : null;
    case "PAUSED":
      return runtime === "ERROR" || runtime === "MISSING" ? runtime : null;
    case "ERROR":
      return runtime === "MISSING" ? runtime : null;
    default:
      return null;
  }
}

/** Holds its running slot, but its agent does not answer (observed ERROR): may still answer, it is not an end. */
export function unanswered(l: LiveSandbox): boolean {
  return l.status === "ERROR" && ACTIVE_STATUSES.includes(l.record.status);
}

/** The record's runtime handle, or null when it has none (never saved, or not of this shape). */
export function handleOrNull(record: SandboxRecord): RuntimeHandle | null {
  const h = record.handle as Partial<RuntimeHandle>;
  return typeof h.agentUrl === "string" &&
    typeof h.port === "number" &&
    typeof h.data === "object" &&
    h.data !== null
    ? (h as RuntimeHandle)
    : null;
}
