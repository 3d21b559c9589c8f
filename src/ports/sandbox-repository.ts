import type { Page, PageQuery } from "./page.ts";

export type SandboxStatus = "STARTING" | "RUNNING" | "PAUSED" | "ERROR" | "MISSING";

/** Statuses that hold one of the owner's running slots (see {@link SandboxRepository.create}). */
export const ACTIVE_STATUSES: readonly SandboxStatus[] = ["STARTING", "RUNNING"];

/** A sandbox in the registry. */
export interface SandboxRecord {
  id: string;
  ownerId: string;
  specId: string;
  /** Which runtime owns it ("process" or "docker"). */
  runtime: string;
  /** Runtime-specific handle (pid, port, container id, ...); JSON-compatible; `{}` until the runtime made it. */
  handle: Record<string, unknown>;
  /** Sealed session key of the sandbox's agent server. */
  sessionApiKey: string;
  /** Last status recorded (the live status is reconciled with the runtime on read). */
  status: SandboxStatus;
  createdAt: Date;
  /**
   * When the record last changed; every write sets it, so together with the status it is the version that the
   * background decisions compare and set on ({@link TransitionOptions.ifUpdatedAt}).
   */
  updatedAt: Date;
  /**
   * Set (with status MISSING) by a delete before it removes the runtime objects and the record: a record still
   * marked so after the delete's grace was left by a delete that did not finish, and the sweep finishes it.
   */
  deleting?: true;
}

/** Conditions and marks of {@link SandboxRepository.transition} beyond the status. */
export interface TransitionOptions {
  /**
   * Compare-and-set on the version read too: the write happens only while the record's `updatedAt` is still this
   * (no other write since it was read). Background decisions pass it, so that a user's action landing between
   * their read and their write wins.
   */
  ifUpdatedAt?: Date;
  /** Marks the record as being deleted ({@link SandboxRecord.deleting}) in the same write. */
  deleting?: true;
}

/** Per-owner limits applied atomically by {@link SandboxRepository.create} and {@link SandboxRepository.claim}. */
export interface SandboxLimits {
  /** Records an owner may have (any status). */
  maxPerUser: number;
  /** Records of an owner that may hold a running slot (status STARTING or RUNNING) at once. */
  maxRunning: number;
  /**
   * RUNNING records that must not be evicted either (sandboxes in use by a conversation start). STARTING records
   * are never evicted: a start in progress is never paused by another.
   */
  protect?: readonly string[];
}

/** What {@link SandboxRepository.create} did. */
export type SandboxCreateOutcome =
  /** Inserted; `evicted` are the owner's records this call set PAUSED, as they were just before. */
  | { created: true; evicted: SandboxRecord[] }
  /** Refused: the owner already has `count` records (at least maxPerUser); nothing was written. */
  | { created: false; count: number }
  /**
   * Refused: the owner's slots are all held by records that may not be evicted (starting, or protected); nothing
   * was written. `holders` is how many hold a slot.
   */
  | { created: false; busy: true; holders: number };

/** What {@link SandboxRepository.claim} did. */
export interface SandboxClaimOutcome {
  /** The record after the call. */
  record: SandboxRecord;
  /** True when this call moved it into STARTING (false: it already held a slot, so nothing changed). */
  claimed: boolean;
  /** The owner's records this call set PAUSED, as they were just before (handle included). */
  evicted: SandboxRecord[];
  /** Set when the record could not be claimed because no slot holder may be evicted (nothing was written). */
  busy?: true;
}

/**
 * The sandbox registry. Every decision that must hold for all servers sharing the store is made here in one
 * atomic step: `create` and `claim` are serialised per owner (a transaction, or a per-owner lock in the store), so
 * that N concurrent starts leave at most `maxRunning` records holding a slot and each evicted record is evicted
 * by exactly one caller; `setHandle` and `transition` are single-record compare-and-set writes.
 */
export interface SandboxRepository {
  insert(record: SandboxRecord): Promise<void>;
  /**
   * Inserts `record` (its status is stored as STARTING) unless its owner already has `limits.maxPerUser` records.
   * In the same atomic step, the owner's oldest RUNNING records not in `limits.protect` (createdAt, then id) are
   * set PAUSED so that at most `limits.maxRunning` hold one, the new record included; when too few of those exist,
   * nothing is written and the outcome is `busy`.
   */
  create(record: SandboxRecord, limits: SandboxLimits): Promise<SandboxCreateOutcome>;
  /**
   * Claims a running slot for an existing record of `ownerId`: one not holding a slot is set STARTING and, in the
   * same atomic step, the owner's oldest other RUNNING records not in `protect` are set PAUSED so that at most
   * `maxRunning` hold one (`busy`, and nothing written, when too few of those exist). A record already holding a
   * slot is returned unchanged. null when there is no such record.
   */
  claim(
    id: string,
    ownerId: string,
    maxRunning: number,
    updatedAt: Date,
    protect?: readonly string[],
  ): Promise<SandboxClaimOutcome | null>;
  /**
   * Saves the runtime handle whatever the status, and returns the record as this write left it (its status tells
   * whether a claim evicted it meanwhile: linearisable with the evictions of create/claim); null when deleted.
   */
  setHandle(id: string, handle: Record<string, unknown>, updatedAt: Date): Promise<SandboxRecord | null>;
  /**
   * Sets `to` only when the current status is one of `from` (and, with `options.ifUpdatedAt`, the record was not
   * written since): compare-and-set; false otherwise or when deleted.
   */
  transition(
    id: string,
    from: readonly SandboxStatus[],
    to: SandboxStatus,
    updatedAt: Date,
    options?: TransitionOptions,
  ): Promise<boolean>;
  /** The sandbox if it exists and (when ownerId is given) belongs to that owner. */
  get(id: string, ownerId?: string): Promise<SandboxRecord | null>;
  /** Records with these ids owned by ownerId, in any order. */
  getMany(ids: readonly string[], ownerId: string): Promise<SandboxRecord[]>;
  /** Applies the patch; false when the sandbox does not exist. */
  update(
    id: string,
    patch: Partial<Pick<SandboxRecord, "handle" | "status" | "updatedAt">>,
  ): Promise<boolean>;
  /** Newest first (createdAt desc, id desc). */
  list(ownerId: string, page: PageQuery): Promise<Page<SandboxRecord>>;
  /** Every record of one owner (or of everyone), newest first; used for reconciliation and limits. */
  listAll(ownerId?: string): Promise<SandboxRecord[]>;
  /** false when it did not exist. */
  delete(id: string): Promise<boolean>;
}
