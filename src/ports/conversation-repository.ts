import type { Page, PageQuery } from "./page.ts";

/** Stored part of an app conversation (AppConversationInfo). Ids are 32 lower-case hex characters. */
export interface ConversationRecord {
  id: string;
  ownerId: string;
  sandboxId: string;
  selectedRepository: string | null;
  selectedBranch: string | null;
  gitProvider: string | null;
  title: string | null;
  trigger: string | null;
  prNumber: number[];
  llmModel: string | null;
  metrics: Record<string, unknown> | null;
  parentConversationId: string | null;
  subConversationIds: string[];
  createdAt: Date;
  updatedAt: Date;
}

export interface ConversationFilter {
  titleContains?: string;
  createdAtGte?: Date;
  createdAtLt?: Date;
  updatedAtGte?: Date;
  updatedAtLt?: Date;
  /** When false (default for search) conversations with a parent are excluded. */
  includeSubConversations?: boolean;
  /** Only conversations in this sandbox. */
  sandboxIdEq?: string;
  /** Only conversations started with this trigger (its lower-case name, e.g. "microagent_management"). */
  triggerEq?: string;
  /** Only conversations of exactly this repository ("owner/name"). */
  selectedRepositoryEq?: string;
}

/** The fields of a conversation that change after it was created. */
export type ConversationPatch = Partial<Pick<ConversationRecord, "title" | "llmModel" | "metrics">> & {
  updatedAt: Date;
};

/** What {@link ConversationRepository.finishDeletes} did. */
export interface FinishedDeletes {
  /** Conversations whose delete was cut short (its server died) and is now complete. */
  finished: number;
  /** Tombstones older than the retention, dropped. */
  pruned: number;
}

export interface ConversationRepository {
  /** Stores a new conversation (a tombstone of a deleted conversation with the same id is dropped). */
  insert(record: ConversationRecord): Promise<void>;
  get(id: string, ownerId: string): Promise<ConversationRecord | null>;
  getMany(ids: readonly string[], ownerId: string): Promise<ConversationRecord[]>;
  /** Appends a sub-conversation id to the parent's list; false when the parent does not exist. */
  addSubConversation(parentId: string, childId: string, updatedAt: Date): Promise<boolean>;
  /** Newest created first (createdAt desc, id desc). */
  search(ownerId: string, filter: ConversationFilter, page: PageQuery): Promise<Page<ConversationRecord>>;
  count(ownerId: string, filter: ConversationFilter): Promise<number>;
  /** Applies the patch to the owner's conversation; false when it does not exist (or is another owner's). */
  update(id: string, ownerId: string, patch: ConversationPatch): Promise<boolean>;
  /**
   * Deletes the owner's conversation with what belongs to it: its sub-conversations, the events of all of them,
   * and their finished (READY or ERROR) start tasks. Each deleted id leaves a tombstone, so that events reported
   * for it later are refused (EventRepository.append) and nothing outlives it. One transaction where the
   * store has them (SQLite); elsewhere the tombstones are written first and the conversation last, so that a delete
   * cut short is found and finished by {@link finishDeletes}. false when the conversation did not exist.
   */
  delete(id: string, ownerId: string): Promise<boolean>;
  /**
   * The sweep: completes the deletes a crash cut short (older than `graceBefore`: not in progress) and drops the
   * tombstones written before `tombstonesBefore`.
   */
  finishDeletes(graceBefore: Date, tombstonesBefore: Date): Promise<FinishedDeletes>;
}

export type StartTaskStatus =
  | "WORKING"
  | "WAITING_FOR_SANDBOX"
  | "PREPARING_REPOSITORY"
  | "RUNNING_SETUP_SCRIPT"
  | "SETTING_UP_GIT_HOOKS"
  | "SETTING_UP_SKILLS"
  | "STARTING_CONVERSATION"
  | "READY"
  | "ERROR";

/** A start task (AppConversationStartTask). `request` is the echoed start request as JSON. */
export interface StartTaskRecord {
  id: string;
  ownerId: string;
  status: StartTaskStatus;
  detail: string | null;
  appConversationId: string | null;
  sandboxId: string | null;
  agentServerUrl: string | null;
  request: Record<string, unknown>;
  createdAt: Date;
  updatedAt: Date;
}

export interface StartTaskFilter {
  conversationIdEq?: string;
  createdAtGte?: Date;
}

/** Who runs a start task, until when (see {@link StartTaskRepository}). */
export interface StartTaskLease {
  owner: string;
  expiresAt: Date;
}

/** Ids a start chose before using them, so that a server resuming it uses the same ones (no second sandbox). */
export interface StartTaskPlan {
  sandboxId?: string;
  conversationId?: string;
}

/** An unfinished task a server took over (see {@link StartTaskRepository.claimExpired}). */
export interface ClaimedStartTask {
  task: StartTaskRecord;
  plan: StartTaskPlan;
  /** How many servers have taken it over so far, this one included. */
  attempts: number;
}

/** The fields of a start task that change while it runs. */
export type StartTaskPatch = Partial<
  Pick<
    StartTaskRecord,
    "status" | "detail" | "appConversationId" | "sandboxId" | "agentServerUrl" | "updatedAt"
  >
> & { plan?: StartTaskPlan };

/**
 * Start tasks. An unfinished task is leased to the server running it, which renews the lease while it works;
 * once a lease expires (its server died or was cut off), any server may claim the task and resume it. Every
 * write of a running start names its lease owner, so a server that lost its lease cannot overwrite the work of
 * the one that took over.
 */
export interface StartTaskRepository {
  /** Stores a new task, leased to `lease.owner` (claimable at once without a lease), with its plan. */
  insert(record: StartTaskRecord, lease?: StartTaskLease, plan?: StartTaskPlan): Promise<void>;
  /**
   * The owner's newest task that planned this conversation id and is not READY (a start that named its
   * conversation and has not created it yet, or failed to); null when there is none.
   */
  findPending(ownerId: string, conversationId: string): Promise<StartTaskRecord | null>;
  get(id: string, ownerId: string): Promise<StartTaskRecord | null>;
  getMany(ids: readonly string[], ownerId: string): Promise<StartTaskRecord[]>;
  /**
   * Applies the patch; false when the task does not exist or, with `leaseOwner`, when its lease belongs to
   * another server (compare-and-set on the lease owner).
   */
  update(id: string, patch: StartTaskPatch, leaseOwner?: string): Promise<boolean>;
  /** Ordered by createdAt (desc unless ascending is true), then id in the same direction. */
  search(
    ownerId: string,
    filter: StartTaskFilter,
    page: PageQuery,
    ascending: boolean,
  ): Promise<Page<StartTaskRecord>>;
  count(ownerId: string, filter: StartTaskFilter): Promise<number>;
  /** Tasks of every owner not in READY or ERROR (metrics, tests). */
  listUnfinished(): Promise<StartTaskRecord[]>;
  /**
   * The sandboxes the owner's unfinished tasks use or planned to use (the task's sandbox, else its plan's): the
   * running limit does not pause them while their starts run.
   */
  sandboxesInUse(ownerId: string): Promise<string[]>;
  /** Deletes the finished (READY or ERROR) tasks last updated before `before` (retention); returns how many. */
  pruneFinished(before: Date): Promise<number>;
  /** Extends the leases `owner` still holds on these unfinished tasks; returns the ids it still holds. */
  renewLeases(owner: string, ids: readonly string[], expiresAt: Date): Promise<string[]>;
  /** Lets the leases `owner` holds on these tasks expire now (a graceful shutdown hands them over). */
  releaseLeases(owner: string, ids: readonly string[]): Promise<void>;
  /**
   * Takes over, in one compare-and-set per task, up to `limit` unfinished tasks whose lease expired before `now`
   * (oldest lease first): each becomes leased to `owner` until `expiresAt` and its attempts grow by one. Two
   * servers claiming at once never both get the same task.
   */
  claimExpired(owner: string, now: Date, expiresAt: Date, limit: number): Promise<ClaimedStartTask[]>;
}
