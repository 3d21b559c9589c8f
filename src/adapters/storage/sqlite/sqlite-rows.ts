import type { ApiKeyRecord } from "../../../ports/api-key-repository.ts";
import type {
  ConversationRecord,
  StartTaskRecord,
  StartTaskStatus,
} from "../../../ports/conversation-repository.ts";
import type { SandboxRecord, SandboxStatus } from "../../../ports/sandbox-repository.ts";

/** Row of `api_keys`. */
export interface ApiKeyRow {
  id: string;
  user_id: string;
  hash: string;
  label: string | null;
  created_at: number;
  revoked_at: number | null;
}

/** Row of `sandboxes`; `handle` is JSON. */
export interface SandboxRow {
  id: string;
  owner_id: string;
  spec_id: string;
  runtime: string;
  handle: string;
  session_api_key: string;
  status: string;
  created_at: number;
  updated_at: number;
  /** 1 while a delete removes it. */
  deleting: number;
}

/** Row of `conversations`; `pr_number`, `metrics` and `sub_conversation_ids` are JSON. */
export interface ConversationRow {
  id: string;
  owner_id: string;
  sandbox_id: string;
  selected_repository: string | null;
  selected_branch: string | null;
  git_provider: string | null;
  title: string | null;
  conversation_trigger: string | null;
  pr_number: string;
  llm_model: string | null;
  metrics: string | null;
  parent_conversation_id: string | null;
  sub_conversation_ids: string;
  created_at: number;
  updated_at: number;
}

/** Row of `start_tasks`; `request` is JSON. */
export interface StartTaskRow {
  id: string;
  owner_id: string;
  status: string;
  detail: string | null;
  app_conversation_id: string | null;
  sandbox_id: string | null;
  agent_server_url: string | null;
  request: string;
  created_at: number;
  updated_at: number;
}

const ms = (date: Date): number => date.getTime();
const msOrNull = (date: Date | null): number | null => (date === null ? null : date.getTime());
const dateOrNull = (value: number | null): Date | null => (value === null ? null : new Date(value));

export function toApiKeyRow(r: ApiKeyRecord): ApiKeyRow {
  return {
    id: r.id,
    user_id: r.userId,
    hash: r.hash,
    label: r.label,
    created_at: ms(r.createdAt),
    revoked_at: msOrNull(r.revokedAt),
  };
}

export function fromApiKeyRow(row: ApiKeyRow): ApiKeyRecord {
  return {
    id: row.id,
    userId: row.user_id,
    hash: row.hash,
    label: row.label,
    createdAt: new Date(row.created_at),
    revokedAt: dateOrNull(row.revoked_at),
  };
}

export function toSandboxRow(r: SandboxRecord): SandboxRow {
  return {
    id: r.id,
    owner_id: r.ownerId,
    spec_id: r.specId,
    runtime: r.runtime,
    handle: JSON.stringify(r.handle),
    session_api_key: r.sessionApiKey,
    status: r.status,
    created_at: ms(r.createdAt),
    updated_at: ms(r.updatedAt),
    deleting: r.deleting === true ? 1 : 0,
  };
}

export function fromSandboxRow(row: SandboxRow): SandboxRecord {
  return {
    id: row.id,
    ownerId: row.owner_id,
    specId: row.spec_id,
    runtime: row.runtime,
    handle: JSON.parse(row.handle) as Record<string, unknown>,
    sessionApiKey: row.session_api_key,
    status: row.status as SandboxStatus,
    createdAt: new Date(row.created_at),
    updatedAt: new Date(row.updated_at),
    ...(row.deleting === 1 ? { deleting: true as const } : {}),
  };
}

export function toConversationRow(r: ConversationRecord): ConversationRow {
  return {
    id: r.id,
    owner_id: r.ownerId,
    sandbox_id: r.sandboxId,
    selected_repository: r.selectedRepository,
    selected_branch: r.selectedBranch,
    git_provider: r.gitProvider,
    title: r.title,
    conversation_trigger: r.trigger,
    pr_number: JSON.stringify(r.prNumber),
    llm_model: r.llmModel,
    metrics: r.metrics === null ? null : JSON.stringify(r.metrics),
    parent_conversation_id: r.parentConversationId,
    sub_conversation_ids: JSON.stringify(r.subConversationIds),
    created_at: ms(r.createdAt),
    updated_at: ms(r.updatedAt),
  };
}

export function fromConversationRow(row: ConversationRow): ConversationRecord {
  return {
    id: row.id,
    ownerId: row.owner_id,
    sandboxId: row.sandbox_id,
    selectedRepository: row.selected_repository,
    selectedBranch: row.selected_branch,
    gitProvider: row.git_provider,
    title: row.title,
    trigger: row.conversation_trigger,
    prNumber: JSON.parse(row.pr_number) as number[],
    llmModel: row.llm_model,
    metrics: row.metrics === null ? null : (JSON.parse(row.metrics) as Record<string, unknown>),
    parentConversationId: row.parent_conversation_id,
    subConversationIds: JSON.parse(row.sub_conversation_ids) as string[],
    createdAt: new Date(row.created_at),
    updatedAt: new Date(row.updated_at),
  };
}

export function toStartTaskRow(r: StartTaskRecord): StartTaskRow {
  return {
    id: r.id,
    owner_id: r.ownerId,
    status: r.status,
    detail: r.detail,
    app_conversation_id: r.appConversationId,
    sandbox_id: r.sandboxId,
    agent_server_url: r.agentServerUrl,
    request: JSON.stringify(r.request),
    created_at: ms(r.createdAt),
    updated_at: ms(r.updatedAt),
  };
}

export function fromStartTaskRow(row: StartTaskRow): StartTaskRecord {
  return {
    id: row.id,
    ownerId: row.owner_id,
    status: row.status as StartTaskStatus,
    detail: row.detail,
    appConversationId: row.app_conversation_id,
    sandboxId: row.sandbox_id,
    agentServerUrl: row.agent_server_url,
    request: JSON.parse(row.request) as Record<string, unknown>,
    createdAt: new Date(row.created_at),
    updatedAt: new Date(row.updated_at),
  };
}

/** A LIKE pattern matching `text` as a literal substring (escape character `\`). */
export function likeSubstring(text: string): string {
  return `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}
