/**
 * The REST JSON Schema of proto messages (SchemaBuilder, collecting them as reusable components) and what a route
 * documents beyond its table entry (RouteDocs): what the route tables use to describe their bodies, apart from the
 * OpenAPI document itself (openapi.ts), which reads the route tables.
 */
import { type DescEnum, type DescField, type DescMessage, ScalarType } from "@bufbuild/protobuf";
import type { Schema } from "../../core/model/schema.ts";

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
