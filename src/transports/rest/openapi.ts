/** The OpenAPI document of the REST route tables (served at /openapi.json and /docs). */
import type { RestRoute } from "./rest-route.ts";
import { type JsonSchema, SchemaBuilder } from "./schema-builder.ts";

const VALIDATION_ERROR: JsonSchema = {
  type: "object",
  required: ["detail"],
  properties: {
    detail: {
      type: "array",
      items: {
        type: "object",
        required: ["type", "loc", "msg"],
        properties: {
          type: { type: "string" },
          loc: { type: "array", items: { type: ["string", "integer"] } },
          msg: { type: "string" },
          input: {},
          ctx: { type: "object" },
        },
      },
    },
  },
};
const ERROR_BODY: JsonSchema = {
  type: "object",
  description:
    'Legacy routes: {"error": ...} ({"message": ...} for "already exists"); V1 routes: {"detail": ...}',
  properties: { error: { type: "string" }, message: { type: "string" }, detail: { type: "string" } },
};

/** A route url as an OpenAPI path template: `:name` and FastAPI's `{name:path}` become `{name}`. */
export function openApiPath(url: string): string {
  return url.replace(/\{([A-Za-z_]+):path\}/g, "{$1}").replace(/:([A-Za-z_]+)/g, "{$1}");
}

/**
 * The OpenAPI 3.1 document of the REST routes: request bodies and query parameters from the models the gateway
 * validates with, responses from the proto messages the services return.
 */
export function buildOpenApi(
  routes: readonly RestRoute[],
  info: { title: string; version: string },
): JsonSchema {
  const s = new SchemaBuilder();
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of routes) {
    const path = openApiPath(r.url);
    const method = r.rpc;
    const docs = r.docs ?? {};
    const response = docs.response ? docs.response(s) : method ? s.message(method.output) : {};
    const parameters = [
      ...[...path.matchAll(/\{([A-Za-z_]+)\}/g)].map((m) => ({
        name: m[1],
        in: "path",
        required: true,
        schema: { type: "string" },
        ...(r.url.includes(`{${m[1]}:path}`) ? { description: "May span several path segments" } : {}),
      })),
      ...Object.entries(docs.query ?? {}).map(([name, q]) => ({
        name,
        in: "query",
        required: q.required === true,
        schema: q.schema,
        ...(q.schema.type === "array" ? { style: "form", explode: true } : {}),
        ...(q.description ? { description: q.description } : {}),
      })),
    ];
    const success = String(r.successStatus ?? 200);
    const pathItem = paths[path] ?? {};
    paths[path] = pathItem;
    pathItem[r.method.toLowerCase()] = {
      summary: r.summary,
      operationId: method.localName,
      tags: [method.parent.name],
      "x-rpc": `${method.parent.typeName}/${method.name}`,
      security: [{ SessionApiKey: [] }],
      ...(parameters.length > 0 ? { parameters } : {}),
      ...(docs.body
        ? {
            requestBody: {
              required: r.bodyRequired === true,
              content: { "application/json": { schema: docs.body.jsonSchema() } },
            },
          }
        : {}),
      responses: {
        [success]: {
          description: r.stream ? "A JSON array streamed element by element" : "Success",
          content: { "application/json": { schema: r.stream ? s.array(response) : response } },
        },
        "401": {
          description: "Missing or unknown X-Session-API-Key",
          content: { "application/json": { schema: ERROR_BODY } },
        },
        "422": {
          description: "Validation error: every problem at once",
          content: { "application/json": { schema: VALIDATION_ERROR } },
        },
        "4XX": {
          description: "Other client errors",
          content: { "application/json": { schema: ERROR_BODY } },
        },
      },
    };
  }
  return {
    openapi: "3.1.0",
    info: {
      ...info,
      description:
        "REST face of the Agent Workspace Service (wire-compatible with the OpenHands app server API).",
    },
    paths,
    components: {
      schemas: s.components,
      securitySchemes: { SessionApiKey: { type: "apiKey", in: "header", name: "X-Session-API-Key" } },
    },
  };
}
