/**
 * The app-conversation messages in the reference's JSON (field names as in the proto, enums by their reference
 * names): used to store the echoed start request and by the REST shapers, so both write the same JSON.
 */
import { create, type JsonObject } from "@bufbuild/protobuf";
import { enumNames } from "../../core/enum-names.ts";
import {
  AgentType,
  AgentTypeSchema,
  type AppConversationStartRequest,
  AppConversationStartRequestSchema,
  AppConversationStartTaskSortOrderSchema,
  AppConversationStartTaskStatus,
  ConversationExecutionStatus,
  ConversationTrigger,
  ConversationTriggerSchema,
  type MessageContent,
  MessageRole,
  MessageRoleSchema,
  type MetricsSnapshot,
  MetricsSnapshotSchema,
  type SendMessageRequest,
} from "../../gen/workspace/v1/app_conversation_pb.js";
import { ProviderType } from "../../gen/workspace/v1/provider_pb.js";
import type { StartTaskStatus } from "../../ports/conversation-repository.ts";

/** A protobuf-es enum object: name → number and number → name. */
type PbEnum = Record<string, string | number>;

/** Lower-case reference name of an enum value; null for UNSPECIFIED or unknown numbers. */
function lowerName(e: PbEnum, value: number | undefined): string | null {
  if (value === undefined || value === 0) return null;
  const name = e[value];
  return typeof name === "string" ? name.toLowerCase() : null;
}

/** The enum value of a reference name (any case); undefined when unknown. */
function fromName<E extends number>(e: PbEnum, name: unknown): E | undefined {
  if (typeof name !== "string" || name === "") return undefined;
  const v = e[name.toUpperCase()];
  return typeof v === "number" && v !== 0 ? (v as E) : undefined;
}

/** The REST spellings of the enums, from their descriptors (the reference writes these lower-case). */
export const TRIGGER_NAMES = enumNames(ConversationTriggerSchema, "lower");
export const AGENT_TYPE_NAMES = enumNames(AgentTypeSchema, "lower");
export const ROLE_NAMES = enumNames(MessageRoleSchema, "lower");
export const START_TASK_SORT_ORDERS = enumNames(AppConversationStartTaskSortOrderSchema, "upper");

export const providerName = (v: ProviderType | undefined): string | null => lowerName(ProviderType, v);
export const providerFromName = (n: unknown): ProviderType | undefined => fromName(ProviderType, n);
export const triggerName = (v: ConversationTrigger | undefined): string | null =>
  lowerName(ConversationTrigger, v);
export const triggerFromName = (n: unknown): ConversationTrigger | undefined =>
  fromName(ConversationTrigger, n);
export const agentTypeName = (v: AgentType): string => lowerName(AgentType, v) ?? "default";
export const agentTypeFromName = (n: unknown): AgentType => fromName(AgentType, n) ?? AgentType.DEFAULT;
export const roleFromName = (n: unknown): MessageRole => fromName(MessageRole, n) ?? MessageRole.USER;
export const executionStatusName = (v: ConversationExecutionStatus | undefined): string | null =>
  lowerName(ConversationExecutionStatus, v);
export const executionStatusFromName = (n: unknown): ConversationExecutionStatus | undefined =>
  fromName(ConversationExecutionStatus, n);

/** The message enum of a stored status (the names are the same). */
export const toPbTaskStatus = (s: StartTaskStatus): AppConversationStartTaskStatus =>
  AppConversationStartTaskStatus[s];
export const taskStatusName = (s: AppConversationStartTaskStatus): string =>
  AppConversationStartTaskStatus[s] ?? "ERROR";

/** 32 hex → 8-4-4-4-12 (how the reference writes a plain `UUID` field). */
export function dashedUuid(hex: string): string {
  return hex.length === 32
    ? `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`
    : hex;
}

function contentJson(c: MessageContent): JsonObject | null {
  switch (c.content.case) {
    case "text":
      return { type: "text", text: c.content.value.text, cache_prompt: c.content.value.cachePrompt ?? false };
    case "image":
      return {
        type: "image",
        image_urls: [...c.content.value.imageUrls],
        cache_prompt: c.content.value.cachePrompt ?? false,
      };
    default:
      return null;
  }
}

export function messageJson(m: SendMessageRequest): JsonObject {
  return {
    role: lowerName(MessageRole, m.role) ?? "user",
    content: m.content.map(contentJson).filter((c): c is JsonObject => c !== null),
    run: m.run,
  };
}

/**
 * The start request as the reference echoes it in a start task: every field, null where unset, enums by name,
 * `conversation_id` with dashes (a plain UUID field upstream), `parent_conversation_id` as 32 hex.
 */
export function startRequestJson(r: AppConversationStartRequest): JsonObject {
  return {
    sandbox_id: r.sandboxId ?? null,
    conversation_id: r.conversationId === undefined ? null : dashedUuid(r.conversationId),
    initial_message: r.initialMessage ? messageJson(r.initialMessage) : null,
    system_message_suffix: r.systemMessageSuffix ?? null,
    processors: r.processors.length > 0 ? r.processors : null,
    llm_model: r.llmModel ?? null,
    selected_repository: r.selectedRepository ?? null,
    selected_branch: r.selectedBranch ?? null,
    git_provider: providerName(r.gitProvider),
    title: r.title ?? null,
    trigger: triggerName(r.trigger),
    pr_number: [...r.prNumber],
    parent_conversation_id: r.parentConversationId ?? null,
    agent_type: agentTypeName(r.agentType),
  };
}

const str = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);
const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

function messageFromJson(v: unknown): SendMessageRequest | undefined {
  if (!isObject(v)) return undefined;
  const content: MessageContent[] = [];
  for (const c of Array.isArray(v.content) ? v.content : []) {
    if (!isObject(c)) continue;
    const cachePrompt = c.cache_prompt === true;
    if (c.type === "image") {
      const urls = Array.isArray(c.image_urls) ? c.image_urls.filter((u) => typeof u === "string") : [];
      content.push({
        $typeName: "workspace.v1.MessageContent",
        content: {
          case: "image",
          value: { $typeName: "workspace.v1.ImageContent", imageUrls: urls, cachePrompt },
        },
      });
    } else {
      content.push({
        $typeName: "workspace.v1.MessageContent",
        content: {
          case: "text",
          value: { $typeName: "workspace.v1.TextContent", text: str(c.text) ?? "", cachePrompt },
        },
      });
    }
  }
  return {
    $typeName: "workspace.v1.SendMessageRequest",
    role: roleFromName(v.role),
    content,
    run: v.run === true,
  };
}

/** Inverse of {@link startRequestJson} (lenient: it reads what this service stored). */
export function startRequestFromJson(j: Record<string, unknown>): AppConversationStartRequest {
  const conversationId = str(j.conversation_id)?.replaceAll("-", "");
  const initialMessage = messageFromJson(j.initial_message);
  const gitProvider = providerFromName(j.git_provider);
  const trigger = triggerFromName(j.trigger);
  const opt = <K extends string>(key: K, v: string | undefined) => (v === undefined ? {} : { [key]: v });
  return create(AppConversationStartRequestSchema, {
    ...opt("sandboxId", str(j.sandbox_id)),
    ...opt("conversationId", conversationId),
    ...(initialMessage ? { initialMessage } : {}),
    ...opt("systemMessageSuffix", str(j.system_message_suffix)),
    processors: Array.isArray(j.processors) ? (j.processors.filter(isObject) as JsonObject[]) : [],
    ...opt("llmModel", str(j.llm_model)),
    ...opt("selectedRepository", str(j.selected_repository)),
    ...opt("selectedBranch", str(j.selected_branch)),
    ...(gitProvider === undefined ? {} : { gitProvider }),
    ...opt("title", str(j.title)),
    ...(trigger === undefined ? {} : { trigger }),
    prNumber: Array.isArray(j.pr_number) ? j.pr_number.filter((n) => typeof n === "number") : [],
    ...opt("parentConversationId", str(j.parent_conversation_id)),
    agentType: agentTypeFromName(j.agent_type),
  });
}

const num = (v: unknown): number => (typeof v === "number" && Number.isFinite(v) ? v : 0);
const int = (v: unknown): bigint => BigInt(Math.trunc(num(v)));

/** A stored metrics document (the SDK's MetricsSnapshot JSON) as a message; undefined when absent. */
export function metricsFromJson(m: Record<string, unknown> | null): MetricsSnapshot | undefined {
  if (m === null) return undefined;
  const u = m.accumulated_token_usage;
  return create(MetricsSnapshotSchema, {
    modelName: str(m.model_name) ?? "default",
    accumulatedCost: num(m.accumulated_cost),
    ...(typeof m.max_budget_per_task === "number" ? { maxBudgetPerTask: m.max_budget_per_task } : {}),
    ...(isObject(u)
      ? {
          accumulatedTokenUsage: {
            model: str(u.model) ?? "",
            promptTokens: int(u.prompt_tokens),
            completionTokens: int(u.completion_tokens),
            cacheReadTokens: int(u.cache_read_tokens),
            cacheWriteTokens: int(u.cache_write_tokens),
            reasoningTokens: int(u.reasoning_tokens),
            contextWindow: int(u.context_window),
            perTurnToken: int(u.per_turn_token),
            responseId: str(u.response_id) ?? "",
          },
        }
      : {}),
  });
}

/** MetricsSnapshot as the reference writes it. */
export function metricsJson(m: MetricsSnapshot): JsonObject {
  const u = m.accumulatedTokenUsage;
  return {
    model_name: m.modelName,
    accumulated_cost: m.accumulatedCost,
    max_budget_per_task: m.maxBudgetPerTask ?? null,
    accumulated_token_usage: u
      ? {
          model: u.model,
          prompt_tokens: Number(u.promptTokens),
          completion_tokens: Number(u.completionTokens),
          cache_read_tokens: Number(u.cacheReadTokens),
          cache_write_tokens: Number(u.cacheWriteTokens),
          reasoning_tokens: Number(u.reasoningTokens),
          context_window: Number(u.contextWindow),
          per_turn_token: Number(u.perTurnToken),
          response_id: u.responseId,
        }
      : null,
  };
}
