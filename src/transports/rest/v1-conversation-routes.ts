import { fromJson } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { START_TASK_SORT_ORDERS } from "../../codec/conversation-json.ts";
import { object } from "../../core/model/containers.ts";
import { int } from "../../core/model/numbers.ts";
import { bool, enumOf, str } from "../../core/model/scalars.ts";
import { validate } from "../../core/model/validate.ts";
import { dateTime, uuidHex } from "../../core/model-formats.ts";
import {
  conversationJson,
  startRequestCodec,
  startTaskCodec,
  startTaskJson,
} from "../../domain/conversations/conversation-codecs.ts";
import { MAX_TITLE, TITLE_MODEL } from "../../domain/conversations/title.ts";
import {
  AppConversationSchema,
  AppConversationService,
  type AppConversationStartRequest,
  AppConversationStartRequestSchema,
  AppConversationStartTaskSortOrder,
} from "../../gen/workspace/v1/app_conversation_pb.js";
import { type RestInput, type RestRoute, route } from "./rest-route.ts";
import { idsQuery, many, PAGE_QUERY, pathParam, present, single } from "./route-kit.ts";
import type { JsonSchema, RouteDocs, SchemaBuilder } from "./schema-builder.ts";

/** Body of POST /api/v1/app-conversations and /stream-start. */
export const startRequestBodySchema = startRequestCodec.model;

/** The JSON body as the RPC request message (null and absent both mean unset). */
export function bindStartRequest(body: unknown): { request: AppConversationStartRequest } {
  const b = validate(startRequestBodySchema, body, ["body"]);
  return { request: fromJson(AppConversationStartRequestSchema, startRequestCodec.fromRest(b)) };
}

const conversationQuery = object(
  {
    title__contains: { schema: str() },
    created_at__gte: { schema: dateTime() },
    created_at__lt: { schema: dateTime() },
    updated_at__gte: { schema: dateTime() },
    updated_at__lt: { schema: dateTime() },
    include_sub_conversations: { schema: bool() },
    sandbox_id__eq: { schema: str() },
    page_id: { schema: str() },
    limit: { schema: int() },
  },
  { title: "AppConversationSearchQuery" },
);

const q1 = (query: RestInput["query"], names: readonly string[]) =>
  present(Object.fromEntries(names.map((n) => [n, single(query[n])])));

const ts = (d: Date | undefined) => (d === undefined ? {} : timestampFromDate(d));

function bindConversationQuery(query: RestInput["query"], paged: boolean) {
  const names = [
    "title__contains",
    "created_at__gte",
    "created_at__lt",
    "updated_at__gte",
    "updated_at__lt",
    "include_sub_conversations",
    "sandbox_id__eq",
    ...(paged ? ["page_id", "limit"] : []),
  ];
  const q = validate(conversationQuery, q1(query, names), ["query"]);
  const time = (key: string, d: Date | undefined) => (d === undefined ? {} : { [key]: ts(d) });
  return {
    ...(q.title__contains === undefined ? {} : { titleContains: q.title__contains }),
    ...time("createdAtGte", q.created_at__gte),
    ...time("createdAtLt", q.created_at__lt),
    ...time("updatedAtGte", q.updated_at__gte),
    ...time("updatedAtLt", q.updated_at__lt),
    ...(q.include_sub_conversations === undefined
      ? {}
      : { includeSubConversations: q.include_sub_conversations }),
    ...(q.sandbox_id__eq === undefined ? {} : { sandboxIdEq: q.sandbox_id__eq }),
    ...(q.page_id === undefined ? {} : { pageId: q.page_id }),
    ...(q.limit === undefined ? {} : { limit: q.limit }),
  };
}

const startTaskQuery = object(
  {
    conversation_id__eq: { schema: uuidHex() },
    created_at__gte: { schema: dateTime() },
    sort_order: { schema: enumOf(START_TASK_SORT_ORDERS) },
    page_id: { schema: str() },
    limit: { schema: int() },
  },
  { title: "StartTaskSearchQuery" },
);

function bindStartTaskQuery(query: RestInput["query"], paged: boolean) {
  const names = [
    "conversation_id__eq",
    "created_at__gte",
    ...(paged ? ["sort_order", "page_id", "limit"] : []),
  ];
  const q = validate(startTaskQuery, q1(query, names), ["query"]);
  return {
    ...(q.conversation_id__eq === undefined ? {} : { conversationIdEq: q.conversation_id__eq }),
    ...(q.created_at__gte === undefined ? {} : { createdAtGte: ts(q.created_at__gte) }),
    // The model accepts the enum's own (unprefixed) value names only.
    ...(q.sort_order === undefined
      ? {}
      : {
          sortOrder:
            AppConversationStartTaskSortOrder[q.sort_order as keyof typeof AppConversationStartTaskSortOrder],
        }),
    ...(q.page_id === undefined ? {} : { pageId: q.page_id }),
    ...(q.limit === undefined ? {} : { limit: q.limit }),
  };
}

/** `ids` as given (repeatable); the service validates them as UUIDs and the 1..100 count. */
const bindIds = ({ query }: RestInput) => ({ ids: many(query.ids) });

/** An AppConversationStartTask as the reference writes it (compiled from its descriptor). */
export const shapeTask = startTaskJson;

/** An AppConversation (stored part + live fields) as the reference writes it (compiled from its descriptor). */
export const shapeConversation = conversationJson;

const count = (r: { count: bigint }) => Number(r.count);

// ---- OpenAPI ----

const str$ = { type: "string" };
const nullStr = { anyOf: [str$, { type: "null" }] };
const dateTime$ = { type: "string", format: "date-time" };

/** The task as REST writes it: the JSON schema of its compiled codec (conversation-codecs.ts). */
function taskSchema(s: SchemaBuilder): JsonSchema {
  const name = "AppConversationStartTaskJson";
  s.components[name] ??= startTaskCodec.model.jsonSchema() as JsonSchema;
  return { $ref: `#/components/schemas/${name}` };
}

const CONVERSATION_FILTERS: NonNullable<RouteDocs["query"]> = {
  title__contains: { schema: str$, description: "Case-insensitive substring of the title" },
  created_at__gte: { schema: dateTime$ },
  created_at__lt: { schema: dateTime$ },
  updated_at__gte: { schema: dateTime$ },
  updated_at__lt: { schema: dateTime$ },
  include_sub_conversations: { schema: { type: "boolean", default: false } },
  sandbox_id__eq: { schema: str$, description: "Only conversations in this sandbox" },
};
const START_TASK_FILTERS: NonNullable<RouteDocs["query"]> = {
  conversation_id__eq: { schema: str$, description: "Only tasks that produced this conversation (UUID)" },
  created_at__gte: { schema: dateTime$ },
};
const integer = () => ({ type: "integer", minimum: 0 });

/** Body of PATCH /api/v1/app-conversations/{id} and PATCH /api/conversations/{id}. */
export const updateConversationBodySchema = object(
  { title: { schema: TITLE_MODEL, required: true } },
  { title: "UpdateConversationRequest", extra: "forbid" },
);

/** The PATCH body and path as the RPC request. */
export function bindUpdateConversation({ body, params }: RestInput) {
  const id = validate(uuidHex(), pathParam(params.conversation_id, "conversation_id"), [
    "path",
    "conversation_id",
  ]);
  const b = validate(updateConversationBodySchema, body, ["body"]);
  return { id, title: b.title };
}

/** /api/v1/app-conversations: start (plain and streamed), search, count, batch get; start tasks likewise. */
export const v1ConversationRoutes: RestRoute[] = [
  route({
    method: "POST",
    url: "/api/v1/app-conversations",
    rpc: AppConversationService.method.startAppConversation,
    dialect: "v1",
    location: "body",
    bodyRequired: true,
    summary: "Start a conversation: returns the start task (WORKING) at once; poll start-tasks for READY",
    docs: { body: startRequestBodySchema, response: taskSchema },
    bind: ({ body }) => bindStartRequest(body),
    shape: (r) => (r.task ? shapeTask(r.task) : null),
  }),
  route({
    method: "POST",
    url: "/api/v1/app-conversations/stream-start",
    rpc: AppConversationService.method.streamStartAppConversation,
    dialect: "v1",
    location: "body",
    bodyRequired: true,
    stream: true,
    summary: "Start a conversation and stream each state of its start task as one JSON array",
    docs: { body: startRequestBodySchema, response: taskSchema },
    bind: ({ body }) => bindStartRequest(body),
    shape: (r) => (r.task ? shapeTask(r.task) : null),
  }),
  route({
    method: "GET",
    url: "/api/v1/app-conversations/search",
    rpc: AppConversationService.method.searchAppConversations,
    dialect: "v1",
    location: "query",
    summary: "List the caller's conversations, newest first (sub-conversations only when asked for)",
    docs: { query: { ...CONVERSATION_FILTERS, ...PAGE_QUERY } },
    bind: ({ query }) => bindConversationQuery(query, true),
    shape: (r) => ({
      items: r.items.map(shapeConversation),
      next_page_id: r.nextPageId ?? null,
    }),
  }),
  route({
    method: "GET",
    url: "/api/v1/app-conversations/count",
    rpc: AppConversationService.method.countAppConversations,
    dialect: "v1",
    location: "query",
    summary: "Count the caller's conversations matching the search filters",
    docs: { query: CONVERSATION_FILTERS, response: integer },
    bind: ({ query }) => bindConversationQuery(query, false),
    shape: count,
  }),
  route({
    method: "GET",
    url: "/api/v1/app-conversations",
    rpc: AppConversationService.method.batchGetAppConversations,
    dialect: "v1",
    location: "query",
    summary: "Get conversations by id (aligned, null when unknown or not owned)",
    docs: { query: idsQuery("ids"), response: (s) => s.array(s.nullable(s.message(AppConversationSchema))) },
    bind: bindIds,
    shape: (r) => r.items.map((i) => (i.conversation ? shapeConversation(i.conversation) : null)),
  }),
  route({
    method: "PATCH",
    url: "/api/v1/app-conversations/:conversation_id",
    rpc: AppConversationService.method.updateAppConversation,
    dialect: "v1",
    location: "body",
    bodyRequired: true,
    summary: `Rename a conversation (title, 1..${MAX_TITLE} characters); 404 for an unknown id`,
    docs: { body: updateConversationBodySchema, response: (s) => s.message(AppConversationSchema) },
    bind: bindUpdateConversation,
    shape: (r) => (r.conversation ? shapeConversation(r.conversation) : null),
  }),
  route({
    method: "GET",
    url: "/api/v1/app-conversations/start-tasks/search",
    rpc: AppConversationService.method.searchStartTasks,
    dialect: "v1",
    location: "query",
    summary: "List the caller's start tasks (sort_order, default CREATED_AT_DESC)",
    docs: {
      query: {
        ...START_TASK_FILTERS,
        sort_order: {
          schema: { type: "string", enum: [...START_TASK_SORT_ORDERS], default: "CREATED_AT_DESC" },
        },
        ...PAGE_QUERY,
      },
      response: (s) => ({
        type: "object",
        required: ["items", "next_page_id"],
        properties: { items: s.array(taskSchema(s)), next_page_id: nullStr },
      }),
    },
    bind: ({ query }) => bindStartTaskQuery(query, true),
    shape: (r) => ({
      items: r.items.map(shapeTask),
      next_page_id: r.nextPageId ?? null,
    }),
  }),
  route({
    method: "GET",
    url: "/api/v1/app-conversations/start-tasks/count",
    rpc: AppConversationService.method.countStartTasks,
    dialect: "v1",
    location: "query",
    summary: "Count the caller's start tasks matching the search filters",
    docs: { query: START_TASK_FILTERS, response: integer },
    bind: ({ query }) => bindStartTaskQuery(query, false),
    shape: count,
  }),
  route({
    method: "GET",
    url: "/api/v1/app-conversations/start-tasks",
    rpc: AppConversationService.method.batchGetStartTasks,
    dialect: "v1",
    location: "query",
    summary: "Get start tasks by id (aligned, null when unknown or not owned)",
    docs: { query: idsQuery("ids"), response: (s) => s.array(s.nullable(taskSchema(s))) },
    bind: bindIds,
    shape: (r) => r.items.map((i) => (i.task ? shapeTask(i.task) : null)),
  }),
];
