/**
 * The JSON faces of the app-conversation messages, compiled once from their descriptors (src/codec/rest-codec.ts)
 * with the one table of the reference's differences (REST_JSON_DIFFERENCES) and the start request's rules. The
 * service stores a start task's request in this JSON and the REST routes answer with it, so both write the same
 * JSON and a field added to the proto reaches both without code here.
 */
import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import { compileRestCodec } from "../../codec/rest-codec.ts";
import { REST_JSON_DIFFERENCES } from "../../codec/rest-json.ts";
import {
  type AppConversation,
  AppConversationSchema,
  type AppConversationStartRequest,
  AppConversationStartRequestSchema,
  type AppConversationStartTask,
  AppConversationStartTaskSchema,
} from "../../gen/workspace/v1/app_conversation_pb.js";
import { START_REQUEST_RULES } from "./conversation-rules.ts";

/**
 * A conversation start request: the body model of POST /api/v1/app-conversations and /stream-start (every field
 * optional; unknown keys ignored), body → message, and the echo in a start task (every field, null where unset).
 */
export const startRequestCodec = compileRestCodec(AppConversationStartRequestSchema, {
  table: REST_JSON_DIFFERENCES,
  rules: START_REQUEST_RULES,
  title: "AppConversationStartRequest",
});

/** An AppConversation (stored part + live fields) as the reference writes it. */
export const conversationCodec = compileRestCodec(AppConversationSchema, {
  table: REST_JSON_DIFFERENCES,
  title: "AppConversation",
});

/** A start task as the reference writes it, its request echoed as above. */
export const startTaskCodec = compileRestCodec(AppConversationStartTaskSchema, {
  table: REST_JSON_DIFFERENCES,
  title: "AppConversationStartTask",
});

/** The start request as the reference echoes it in a start task (and as the service stores it). */
export const startRequestJson = (r: AppConversationStartRequest): JsonObject =>
  startRequestCodec.toRest(r) as JsonObject;

/** The stored echo back as a message (lenient: a stored field that no longer validates is left out). */
export const startRequestFromJson = (j: Record<string, unknown>): AppConversationStartRequest =>
  fromJson(AppConversationStartRequestSchema, startRequestCodec.fromStored(j));

/** An AppConversation as REST answers it. */
export const conversationJson = (c: AppConversation): Record<string, unknown> => conversationCodec.toRest(c);

/** An AppConversationStartTask as REST answers it. */
export const startTaskJson = (t: AppConversationStartTask): Record<string, unknown> =>
  startTaskCodec.toRest(t);
