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

export interface ConversationRepository {
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
  /** Deletes the owner's conversation; false when it did not exist. */
  delete(id: string, ownerId: string): Promise<boolean>;
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

export interface StartTaskRepository {
  insert(record: StartTaskRecord): Promise<void>;
  get(id: string, ownerId: string): Promise<StartTaskRecord | null>;
  getMany(ids: readonly string[], ownerId: string): Promise<StartTaskRecord[]>;
  /** Applies the patch; false when the task does not exist. */
  update(
    id: string,
    patch: Partial<
      Pick<
        StartTaskRecord,
        "status" | "detail" | "appConversationId" | "sandboxId" | "agentServerUrl" | "updatedAt"
      >
    >,
  ): Promise<boolean>;
  /** Ordered by createdAt (desc unless ascending is true), then id in the same direction. */
  search(
    ownerId: string,
    filter: StartTaskFilter,
    page: PageQuery,
    ascending: boolean,
  ): Promise<Page<StartTaskRecord>>;
  count(ownerId: string, filter: StartTaskFilter): Promise<number>;
  /** Tasks of every owner not in READY or ERROR (for restart recovery). */
  listUnfinished(): Promise<StartTaskRecord[]>;
}
