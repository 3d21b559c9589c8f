import type { ApiKeyRecord } from "../../../ports/api-key-repository.ts";
import type {
  ConversationRecord,
  StartTaskPlan,
  StartTaskRecord,
} from "../../../ports/conversation-repository.ts";
import type { SandboxRecord } from "../../../ports/sandbox-repository.ts";
import type { UserData, Versioned } from "../../../ports/user-data-repository.ts";

/**
 * `user_data` document. The value is kept as JSON text: it is opaque to storage (secrets inside are sealed) and
 * its keys are user-chosen (secret names, MCP env/header names) and may contain "." or a leading "$", which
 * MongoDB update operators refuse in field names.
 */
export interface UserDataDoc {
  _id: string;
  version: number;
  value: string;
}

/**
 * A repository record as a MongoDB document: the same fields, the record's `id` as `_id`. (Readers still default
 * fields that older documents may lack.)
 */
type DocOf<R extends { id: string }> = Omit<R, "id"> & { _id: string };

/** `api_keys` document (`_id` is the public key id). */
export type ApiKeyDoc = DocOf<ApiKeyRecord>;
/** `sandboxes` document. */
export type SandboxDoc = DocOf<SandboxRecord>;
/** `conversations` document. */
export type ConversationDoc = DocOf<ConversationRecord>;
/** `start_tasks` document. */
export type StartTaskDoc = DocOf<StartTaskRecord> & {
  /** The lease (see StartTaskRepository); absent on documents of older builds (claimable). */
  leaseOwner?: string | null;
  leaseExpiresAt?: Date;
  attempts?: number;
  plan?: StartTaskPlan;
};

export function toUserDataValue(value: UserData): string {
  return JSON.stringify(value);
}

export function fromUserDataDoc(doc: UserDataDoc): Versioned<UserData> {
  return { version: doc.version, value: JSON.parse(doc.value) as UserData };
}

export function toApiKeyDoc(r: ApiKeyRecord): ApiKeyDoc {
  return {
    _id: r.id,
    userId: r.userId,
    hash: r.hash,
    label: r.label,
    createdAt: r.createdAt,
    revokedAt: r.revokedAt,
  };
}

export function fromApiKeyDoc(d: ApiKeyDoc): ApiKeyRecord {
  return {
    id: d._id,
    userId: d.userId,
    hash: d.hash,
    label: d.label ?? null,
    createdAt: d.createdAt,
    revokedAt: d.revokedAt ?? null,
  };
}

export function toSandboxDoc(r: SandboxRecord): SandboxDoc {
  return {
    _id: r.id,
    ownerId: r.ownerId,
    specId: r.specId,
    runtime: r.runtime,
    handle: r.handle,
    sessionApiKey: r.sessionApiKey,
    status: r.status,
    createdAt: r.createdAt,
    updatedAt: r.updatedAt,
    ...(r.deleting === true ? { deleting: true as const } : {}),
  };
}

export function fromSandboxDoc(d: SandboxDoc): SandboxRecord {
  return {
    id: d._id,
    ownerId: d.ownerId,
    specId: d.specId,
    runtime: d.runtime,
    handle: d.handle ?? {},
    sessionApiKey: d.sessionApiKey,
    status: d.status,
    createdAt: d.createdAt,
    updatedAt: d.updatedAt,
    ...(d.deleting === true ? { deleting: true as const } : {}),
  };
}

export function toConversationDoc(r: ConversationRecord): ConversationDoc {
  return {
    _id: r.id,
    ownerId: r.ownerId,
    sandboxId: r.sandboxId,
    selectedRepository: r.selectedRepository,
    selectedBranch: r.selectedBranch,
    gitProvider: r.gitProvider,
    title: r.title,
    trigger: r.trigger,
    prNumber: r.prNumber,
    llmModel: r.llmModel,
    metrics: r.metrics,
    parentConversationId: r.parentConversationId,
    subConversationIds: r.subConversationIds,
    createdAt: r.createdAt,
    updatedAt: r.updatedAt,
  };
}

export function fromConversationDoc(d: ConversationDoc): ConversationRecord {
  return {
    id: d._id,
    ownerId: d.ownerId,
    sandboxId: d.sandboxId,
    selectedRepository: d.selectedRepository ?? null,
    selectedBranch: d.selectedBranch ?? null,
    gitProvider: d.gitProvider ?? null,
    title: d.title ?? null,
    trigger: d.trigger ?? null,
    prNumber: d.prNumber ?? [],
    llmModel: d.llmModel ?? null,
    metrics: d.metrics ?? null,
    parentConversationId: d.parentConversationId ?? null,
    subConversationIds: d.subConversationIds ?? [],
    createdAt: d.createdAt,
    updatedAt: d.updatedAt,
  };
}

export function toStartTaskDoc(r: StartTaskRecord): StartTaskDoc {
  return {
    _id: r.id,
    ownerId: r.ownerId,
    status: r.status,
    detail: r.detail,
    appConversationId: r.appConversationId,
    sandboxId: r.sandboxId,
    agentServerUrl: r.agentServerUrl,
    request: r.request,
    createdAt: r.createdAt,
    updatedAt: r.updatedAt,
  };
}

export function fromStartTaskDoc(d: StartTaskDoc): StartTaskRecord {
  return {
    id: d._id,
    ownerId: d.ownerId,
    status: d.status,
    detail: d.detail ?? null,
    appConversationId: d.appConversationId ?? null,
    sandboxId: d.sandboxId ?? null,
    agentServerUrl: d.agentServerUrl ?? null,
    request: d.request ?? {},
    createdAt: d.createdAt,
    updatedAt: d.updatedAt,
  };
}
