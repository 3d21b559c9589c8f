import type { JsonObject } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { list, object } from "../../core/model/containers.ts";
import { int } from "../../core/model/numbers.ts";
import { enumOf, str } from "../../core/model/scalars.ts";
import { validate } from "../../core/model/validate.ts";
import { dateTime, uuidHex } from "../../core/model-formats.ts";
import { type Event, EventService, EventSortOrder } from "../../gen/workspace/v1/event_pb.js";
import { type RestInput, type RestRoute, route } from "./rest-route.ts";
import { idsQuery, many, PAGE_QUERY, present, single } from "./route-kit.ts";
import type { RouteDocs } from "./schema-builder.ts";

const SORT_ORDERS = ["TIMESTAMP", "TIMESTAMP_DESC"] as const;

const eventQuery = object(
  {
    conversation_id__eq: { schema: uuidHex() },
    kind__eq: { schema: str() },
    timestamp__gte: { schema: dateTime() },
    timestamp__lt: { schema: dateTime() },
    sort_order: { schema: enumOf(SORT_ORDERS) },
    page_id: { schema: str() },
    limit: { schema: int() },
  },
  { title: "EventSearchQuery" },
);

/** The search (paged) or count query as the RPC request; count accepts sort_order and ignores it, as upstream. */
function bindEventQuery(query: RestInput["query"], paged: boolean) {
  const names = ["conversation_id__eq", "kind__eq", "timestamp__gte", "timestamp__lt", "sort_order"];
  if (paged) names.push("page_id", "limit");
  const q = validate(eventQuery, present(Object.fromEntries(names.map((n) => [n, single(query[n])]))), [
    "query",
  ]);
  return {
    ...(q.conversation_id__eq === undefined ? {} : { conversationIdEq: q.conversation_id__eq }),
    ...(q.kind__eq === undefined ? {} : { kindEq: q.kind__eq }),
    ...(q.timestamp__gte === undefined ? {} : { timestampGte: timestampFromDate(q.timestamp__gte) }),
    ...(q.timestamp__lt === undefined ? {} : { timestampLt: timestampFromDate(q.timestamp__lt) }),
    ...(paged && q.sort_order !== undefined ? { sortOrder: EventSortOrder[q.sort_order] } : {}),
    ...(q.page_id === undefined ? {} : { pageId: q.page_id }),
    ...(q.limit === undefined ? {} : { limit: q.limit }),
  };
}

/** An event as REST writes it: the event exactly as the agent server sent it. */
const shapeEvent = (e: Event): JsonObject => e.body ?? {};

const FILTERS: NonNullable<RouteDocs["query"]> = {
  conversation_id__eq: { schema: { type: "string" }, description: "Only this conversation's events (UUID)" },
  kind__eq: { schema: { type: "string" }, description: "Only events of this kind, e.g. MessageEvent" },
  timestamp__gte: { schema: { type: "string", format: "date-time" } },
  timestamp__lt: { schema: { type: "string", format: "date-time" } },
  sort_order: { schema: { type: "string", enum: [...SORT_ORDERS], default: "TIMESTAMP" } },
};
const eventJson = {
  type: "object",
  description: "The event as the agent server sent it (kind, id, timestamp, source, ...)",
};

/** /api/v1/events: search, count, batch get. */
export const eventRoutes: RestRoute[] = [
  route({
    method: "GET",
    url: "/api/v1/events/search",
    rpc: EventService.method.searchEvents,
    dialect: "v1",
    location: "query",
    summary: "List the caller's events, oldest first unless sort_order=TIMESTAMP_DESC",
    docs: {
      query: { ...FILTERS, ...PAGE_QUERY },
      response: () => ({
        type: "object",
        required: ["items", "next_page_id"],
        properties: {
          items: { type: "array", items: eventJson },
          next_page_id: { anyOf: [{ type: "string" }, { type: "null" }] },
        },
      }),
    },
    bind: ({ query }) => bindEventQuery(query, true),
    shape: (r) => ({
      items: r.items.map(shapeEvent),
      next_page_id: r.nextPageId ?? null,
    }),
  }),
  route({
    method: "GET",
    url: "/api/v1/events/count",
    rpc: EventService.method.countEvents,
    dialect: "v1",
    location: "query",
    summary: "Count the caller's events matching the search filters",
    docs: { query: FILTERS, response: () => ({ type: "integer", minimum: 0 }) },
    bind: ({ query }) => bindEventQuery(query, false),
    shape: (r: { count: bigint }) => Number(r.count),
  }),
  route({
    method: "GET",
    url: "/api/v1/events",
    rpc: EventService.method.batchGetEvents,
    dialect: "v1",
    location: "query",
    summary: "Get events by id (aligned, null when unknown or not owned)",
    docs: {
      query: idsQuery("id"),
      response: () => ({ type: "array", items: { anyOf: [eventJson, { type: "null" }] } }),
    },
    bind: ({ query }) => ({ id: validate(list(str()), many(query.id), ["query", "id"]) }),
    shape: (r) => r.items.map((i) => (i.event ? shapeEvent(i.event) : null)),
  }),
];
