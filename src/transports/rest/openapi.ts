import { type DescEnum, type DescField, type DescMessage, ScalarType } from "@bufbuild/protobuf";
import type { Schema } from "../../core/model/schema.ts";
import type { RestRoute } from "./rest-route.ts";

export type JsonSchema = Record<string, unknown>;

/** Documentation of a route beyond what the route table already says. */
export interface RouteDocs {
  /** The model the binder validates the body with. */
  body?: Schema<unknown>;
  /** Query parameters: JSON Schema of each (repeated ones as arrays). */
  query?: Record<string, { schema: JsonSchema; required?: boolean; description?: string }>;
  /** The 2xx body, when the shaper changes the RPC output's JSON form (unwraps, flattens, aligns with nulls). */
  response?: (s: SchemaBuilder) => JsonSchema;
}

const NULL = { type: "null" };
const nullable = (s: JsonSchema): JsonSchema => ({ anyOf: [s, NULL] });

/** REST JSON schemas of proto messages, collected as reusable components. */
export class SchemaBuilder {
  readonly components: Record<string, JsonSchema> = {};

  /** $ref to the REST JSON form of a message (snake_case names, enums by unprefixed name, Timestamps as ISO). */
  message(desc: DescMessage): JsonSchema {
    if (desc.typeName === "google.protobuf.Timestamp") return { type: "string", format: "date-time" };
    if (desc.typeName === "google.protobuf.Struct") return { type: "object" };
    if (desc.typeName === "google.protobuf.Value") return {};
    const name = desc.typeName.replace(/^workspace\.v1\./, "");
    if (!(name in this.components)) {
      this.components[name] = {}; // placeholder: recursion-safe
      const properties: Record<string, JsonSchema> = {};
      const required: string[] = [];
      for (const f of desc.fields) {
        properties[f.name] = this.#field(f);
        if (f.fieldKind === "scalar" && !f.proto.proto3Optional) required.push(f.name);
        if (f.fieldKind === "enum" && !f.proto.proto3Optional) required.push(f.name);
      }
      this.components[name] = { type: "object", properties, ...(required.length > 0 ? { required } : {}) };
    }
    return { $ref: `#/components/schemas/${name}` };
  }

  nullable = nullable;

  array(items: JsonSchema): JsonSchema {
    return { type: "array", items };
  }

  #field(f: DescField): JsonSchema {
    switch (f.fieldKind) {
      case "scalar":
        return f.proto.proto3Optional ? nullable(scalar(f.scalar)) : scalar(f.scalar);
      case "enum":
        return f.proto.proto3Optional ? nullable(enumSchema(f.enum)) : enumSchema(f.enum);
      case "message":
        return nullable(this.message(f.message));
      case "list": {
        const item =
          f.listKind === "scalar"
            ? scalar(f.scalar)
            : f.listKind === "enum"
              ? enumSchema(f.enum)
              : this.message(f.message);
        return nullable({ type: "array", items: item });
      }
      case "map": {
        const value =
          f.mapKind === "scalar"
            ? scalar(f.scalar)
            : f.mapKind === "enum"
              ? enumSchema(f.enum)
              : this.message(f.message);
        return nullable({ type: "object", additionalProperties: nullable(value) });
      }
    }
  }
}

function scalar(t: ScalarType): JsonSchema {
  switch (t) {
    case ScalarType.STRING:
      return { type: "string" };
    case ScalarType.BOOL:
      return { type: "boolean" };
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return { type: "number" };
    case ScalarType.BYTES:
      return { type: "string", contentEncoding: "base64" };
    default:
      return { type: "integer" };
  }
}

/** Enum values as REST writes them: the name without the enum's prefix, upper case (statuses) or lower case. */
function enumSchema(e: DescEnum): JsonSchema {
  const names = e.values.filter((v) => v.number !== 0).map((v) => v.localName);
  return { type: "string", enum: [...new Set([...names, ...names.map((n) => n.toLowerCase())])] };
}

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
