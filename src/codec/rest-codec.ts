import {
  type DescEnum,
  type DescField,
  type DescMessage,
  type JsonObject,
  type JsonValue,
  ScalarType,
} from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence, type Timestamp, timestampDate } from "@bufbuild/protobuf/wkt";
import { unprefixedName } from "../core/enum-names.ts";
import type { FieldViolation } from "../core/errors.ts";
import { fieldFacts } from "../core/field-behavior.ts";
import { dict, list, nullable, object } from "../core/model/containers.ts";
import { float, int } from "../core/model/numbers.ts";
import { anyValue, bool, enumOf, str } from "../core/model/scalars.ts";
import { INVALID, type Schema } from "../core/model/schema.ts";
import { dateTime } from "../core/model-formats.ts";

/**
 * One place where the reference's JSON for a field differs from what the codec derives from the field's type (see
 * `compileRestCodec`). Entries live in one table, REST_JSON_DIFFERENCES (rest-json.ts), keyed by the field's full
 * name (`workspace.v1.Settings.mcp_config`), each with its reason.
 */
export interface RestFieldDifference {
  /** Why the reference's JSON differs here. */
  reason: string;
  /** The REST model of the field's value (null excluded), instead of the one derived from its type. */
  model?: Schema<unknown>;
  /** A validated REST value (never null) → the field's protobuf JSON. */
  fromRest?: (value: never) => JsonValue;
  /** The field's value in the message (undefined when unset) → its REST JSON. */
  toRest?: (value: never) => unknown;
  /** A message field whose fields the REST object holds at top level, in its place. */
  flatten?: true;
  /** An enum field (or list of enums) whose values REST spells in lower case ("gui" for CONVERSATION_TRIGGER_GUI). */
  enumSpelling?: "lower";
  /**
   * The field's protobuf JSON when REST leaves it out (the reference model's default); an enum field whose value is
   * unset (0) is answered as this value too.
   */
  absent?: JsonValue;
}

export type RestJsonTable = Readonly<Record<string, RestFieldDifference>>;

/** The REST face of one message: its JSON model, both directions of conversion and its keys in answer order. */
export interface RestCodec {
  readonly desc: DescMessage;
  /** The REST keys, in the order answers write them (declaration order; flattened messages' keys in place). */
  readonly keys: readonly string[];
  /** The REST model of a body holding this message (FastAPI's validation, messages and OpenAPI schema). */
  readonly model: Schema<Record<string, unknown>>;
  /**
   * A REST object (as `model` returned it) → the message's protobuf JSON (proto field names), for `fromJson`.
   * Absent fields stay absent; the names of fields sent as JSON null are pushed onto `nulls`.
   */
  fromRest(rest: Readonly<Record<string, unknown>>, nulls?: string[]): JsonObject;
  /** The message → its REST object: every key present, unset fields null (or what the table says). */
  toRest(message: object | undefined): Record<string, unknown>;
  /**
   * A REST object this service wrote earlier (e.g. a stored echo) → the message's protobuf JSON, leniently: it is
   * validated with `model`, and a top-level field that fails validation is left out instead of failing the read.
   */
  fromStored(stored: Readonly<Record<string, unknown>>): JsonObject;
  /** Writes the message's REST fields into `out` (a parent that flattens this message). */
  writeInto(out: Record<string, unknown>, message: object | undefined): void;
}

/** What compileRestCodec needs besides the descriptor. */
export interface RestCodecOptions {
  /** Where the reference's JSON differs from the derived one. */
  table: RestJsonTable;
  /** Constraints beyond the proto type, by field name (the service's rules module): the field's REST model. */
  rules?: Readonly<Record<string, Schema<unknown>>>;
  /** Model title (OpenAPI component name) and unknown-key policy of the top-level object. */
  title?: string;
  extra?: "ignore" | "forbid";
}

interface CompiledField {
  name: string;
  local: string;
  absent: JsonValue | undefined;
  model: Schema<unknown> | null;
  fromRest: (value: unknown) => JsonValue;
  /** Writes the field's REST value(s) into `out`. */
  write: (out: Record<string, unknown>, value: unknown) => void;
  keys: readonly string[];
}

const INT32 = { ge: -2147483648, le: 2147483647 };
const UINT32 = { ge: 0, le: 4294967295 };
const SAFE = { ge: Number.MIN_SAFE_INTEGER, le: Number.MAX_SAFE_INTEGER };
const identity = (v: unknown): JsonValue => v as JsonValue;

/**
 * Compiles the REST codec of a message from its descriptor, once (at start: module load): field list and order,
 * value models (scalars by type with proto ranges, enums by unprefixed name, nested messages, lists and maps,
 * timestamps as ISO 8601 strings, Struct/Value as plain JSON), write-only
 * secrets (`(behavior).secret`: always null in answers) and presence (optional and message fields accept and
 * answer null). A field the table names takes its model and conversions from the table; a field type with no REST
 * form (bytes) fails here, at start, unless the table says how it is written.
 */
export function compileRestCodec(desc: DescMessage, opts: RestCodecOptions): RestCodec {
  const fields = desc.fields.map((f) => compileField(f, opts));
  const keys = fields.flatMap((f) => f.keys);
  const modelFields: Record<string, { schema: Schema<unknown> }> = {};
  for (const f of fields) if (f.model !== null) modelFields[f.name] = { schema: f.model };
  const model = object(modelFields, {
    ...(opts.title === undefined ? {} : { title: opts.title }),
    extra: opts.extra ?? "ignore",
  }) as Schema<Record<string, unknown>>;
  // Every answer starts as a copy of this object and only assigns existing keys, so answers keep its fast shape (an
  // object built key by key past ~20 keys becomes a hash table that JSON.stringify walks about 2x slower).
  const template: Readonly<Record<string, unknown>> = Object.fromEntries(keys.map((k) => [k, null]));
  const writeInto = (out: Record<string, unknown>, message: object | undefined): void => {
    const m = message as Record<string, unknown> | undefined;
    for (const f of fields) f.write(out, m?.[f.local]);
  };
  const fromRest = (rest: Readonly<Record<string, unknown>>, nulls?: string[]): JsonObject => {
    const json: JsonObject = {};
    for (const f of fields) {
      const v = rest[f.name];
      if (v === undefined) {
        if (f.absent !== undefined) json[f.name] = f.absent;
        continue;
      }
      if (v === null) nulls?.push(f.name);
      else json[f.name] = f.fromRest(v);
    }
    return json;
  };
  return {
    desc,
    keys,
    model,
    fromRest,
    fromStored(stored) {
      const issues: FieldViolation[] = [];
      const parsed = model.parse(stored, [], issues);
      if (parsed !== INVALID) return fromRest(parsed);
      const bad = new Set(issues.map((i) => i.loc[0]));
      const kept = Object.fromEntries(Object.entries(stored).filter(([k]) => !bad.has(k)));
      const reparsed = model.parse(kept, [], []);
      return reparsed === INVALID ? {} : fromRest(reparsed);
    },
    toRest(message) {
      const out = { ...template };
      writeInto(out, message);
      return out;
    },
    writeInto,
  };
}

function compileField(f: DescField, opts: RestCodecOptions): CompiledField {
  const diff = opts.table[`${f.parent.typeName}.${f.name}`];
  const name = f.name;
  const local = f.localName;
  if (diff?.flatten === true) {
    if (f.fieldKind !== "message") throw new Error(`${name}: only a message field can be flattened`);
    const inner = compileRestCodec(f.message, { table: opts.table });
    return {
      name,
      local,
      absent: undefined,
      model: null,
      fromRest: (v) => inner.fromRest(v as Record<string, unknown>),
      write: (out, v) => inner.writeInto(out, v as object | undefined),
      keys: inner.keys,
    };
  }
  if (f.oneof !== undefined && diff === undefined)
    throw new Error(
      `${f.parent.typeName}.${name}: a oneof member has no derived REST form; declare it in the table`,
    );
  // Derived from the field's type only where the table does not say it all.
  let d: DerivedValue | undefined;
  const derived = (): DerivedValue => {
    d ??= deriveValue(f, opts, diff?.enumSpelling === "lower");
    return d;
  };
  const nullableField = f.fieldKind === "message" || f.presence !== FeatureSet_FieldPresence.IMPLICIT;
  const valueModel = opts.rules?.[name] ?? diff?.model ?? derived().model;
  const toRest = diff?.toRest as ((v: unknown) => unknown) | undefined;
  let write: CompiledField["write"];
  if (fieldFacts(f).secret) {
    write = () => {}; // write-only: the template's null stays
  } else if (toRest !== undefined) {
    write = (out, v) => {
      out[name] = toRest(v);
    };
  } else {
    const convert = derived().toRest;
    // An enum whose REST form has a default answers an unset value (0) as that default.
    const unset =
      f.fieldKind === "enum" && diff?.absent !== undefined
        ? convert(f.enum.values.find((e) => e.name === diff.absent)?.number ?? 0)
        : null;
    write =
      unset === null
        ? (out, v) => {
            out[name] = v === undefined ? null : convert(v);
          }
        : (out, v) => {
            out[name] = v === undefined || v === 0 ? unset : convert(v);
          };
  }
  return {
    name,
    local,
    absent: diff?.absent,
    model: nullableField ? nullable(valueModel) : valueModel,
    fromRest: (diff?.fromRest as ((v: unknown) => JsonValue) | undefined) ?? derived().fromRest,
    write,
    keys: [name],
  };
}

interface DerivedValue {
  model: Schema<unknown>;
  fromRest: (value: unknown) => JsonValue;
  toRest: (value: unknown) => unknown;
}

function deriveValue(f: DescField, opts: RestCodecOptions, lower: boolean): DerivedValue {
  switch (f.fieldKind) {
    case "scalar":
      return scalarValue(f.scalar, f.name);
    case "enum":
      return enumValue(f.enum, lower);
    case "message":
      return messageValue(f.message, opts);
    case "list": {
      const item =
        f.listKind === "scalar"
          ? scalarValue(f.scalar, f.name)
          : f.listKind === "enum"
            ? enumValue(f.enum, lower)
            : messageValue(f.message, opts);
      return {
        model: list(item.model),
        fromRest: (v) => (v as unknown[]).map(item.fromRest),
        toRest: (v) => (v as unknown[]).map(item.toRest),
      };
    }
    case "map": {
      const value =
        f.mapKind === "scalar"
          ? scalarValue(f.scalar, f.name)
          : f.mapKind === "enum"
            ? enumValue(f.enum, lower)
            : messageValue(f.message, opts);
      const mapOver = (o: unknown, fn: (v: unknown) => unknown) =>
        Object.fromEntries(Object.entries(o as Record<string, unknown>).map(([k, v]) => [k, fn(v)]));
      return {
        model: dict(value.model),
        fromRest: (v) => mapOver(v, value.fromRest) as JsonValue,
        toRest: (v) => mapOver(v, value.toRest),
      };
    }
  }
}

function scalarValue(t: ScalarType, name: string): DerivedValue {
  switch (t) {
    case ScalarType.STRING:
      return { model: str(), fromRest: identity, toRest: (v) => v };
    case ScalarType.BOOL:
      return { model: bool(), fromRest: identity, toRest: (v) => v };
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return { model: float(), fromRest: identity, toRest: (v) => v };
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return { model: int(INT32), fromRest: identity, toRest: (v) => v };
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return { model: int(UINT32), fromRest: identity, toRest: (v) => v };
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      // REST numbers are JSON numbers: 64-bit fields hold what a double holds exactly.
      return { model: int(SAFE), fromRest: identity, toRest: (v) => Number(v) };
    case ScalarType.BYTES:
      throw new Error(`${name}: bytes have no REST form; declare it in REST_JSON_DIFFERENCES`);
  }
}

/**
 * Enums by their value names without the shared prefix (`SANDBOX_STATUS_RUNNING` ↔ `"RUNNING"`, or `"running"` where
 * the table says lower case); 0 (`*_UNSPECIFIED`) is null.
 */
function enumValue(e: DescEnum, lower: boolean): DerivedValue {
  const named = e.values.filter((v) => v.number !== 0);
  const spell = (v: (typeof named)[number]) =>
    lower ? unprefixedName(e, v).toLowerCase() : unprefixedName(e, v);
  const byName = new Map(named.map((v) => [spell(v), v]));
  const byNumber = new Map(named.map((v) => [v.number, spell(v)]));
  return {
    model: enumOf([...byName.keys()]),
    fromRest: (v) => byName.get(v as string)?.name ?? null,
    toRest: (v) => byNumber.get(v as number) ?? null,
  };
}

/** JSON values held as they are: protobuf-es holds these well-known types as plain JSON in a message. */
const JSON_TYPES: ReadonlySet<string> = new Set([
  "google.protobuf.Struct",
  "google.protobuf.Value",
  "google.protobuf.ListValue",
]);

function messageValue(m: DescMessage, opts: RestCodecOptions): DerivedValue {
  if (m.typeName === "google.protobuf.Timestamp")
    return {
      model: dateTime(),
      fromRest: (v) => (v as Date).toISOString(),
      toRest: (v) => timestampDate(v as Timestamp).toISOString(),
    };
  if (JSON_TYPES.has(m.typeName))
    return {
      model: m.typeName === "google.protobuf.Struct" ? dict(anyValue()) : anyValue(),
      fromRest: identity,
      toRest: (v) => v,
    };
  const codec = compileRestCodec(m, { table: opts.table, title: m.name });
  return {
    model: codec.model,
    fromRest: (v) => codec.fromRest(v as Record<string, unknown>),
    toRest: (v) => codec.toRest(v as object),
  };
}
