/**
 * Conversation values the reference spells its own way: enum names of stored records and the agent SDK's message
 * JSON (used by the table of differences and the agent request). The messages' JSON faces themselves are compiled
 * from the descriptors (conversation-codecs.ts).
 */
import { create, type JsonObject } from "@bufbuild/protobuf";
import { enumNames } from "../core/enum-names.ts";
import {
  AppConversationStartTaskSortOrderSchema,
  AppConversationStartTaskStatus,
  ConversationExecutionStatus,
  ConversationTrigger,
  type MessageContent,
  MessageRole,
  MessageRoleSchema,
  type MetricsSnapshot,
  MetricsSnapshotSchema,
  type SendMessageRequest,
} from "../gen/workspace/v1/app_conversation_pb.js";
import { ProviderType } from "../gen/workspace/v1/provider_pb.js";
import type { StartTaskStatus } from "../ports/conversation-repository.ts";

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
export const ROLE_NAMES = enumNames(MessageRoleSchema, "lower");
export const START_TASK_SORT_ORDERS = enumNames(AppConversationStartTaskSortOrderSchema, "upper");

export const providerName = (v: ProviderType | undefined): string | null => lowerName(ProviderType, v);
export const providerFromName = (n: unknown): ProviderType | undefined => fromName(ProviderType, n);
export const triggerName = (v: ConversationTrigger | undefined): string | null =>
  lowerName(ConversationTrigger, v);
export const triggerFromName = (n: unknown): ConversationTrigger | undefined =>
  fromName(ConversationTrigger, n);
export const executionStatusFromName = (n: unknown): ConversationExecutionStatus | undefined =>
  fromName(ConversationExecutionStatus, n);

/** The message enum of a stored status (the names are the same). */
export const toPbTaskStatus = (s: StartTaskStatus): AppConversationStartTaskStatus =>
  AppConversationStartTaskStatus[s];

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

const str = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);
const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);
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
