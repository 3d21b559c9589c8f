/**
 * The container schemas of `src/core/model/`: `nullable`, `list`, `dict`, the pydantic model `object` with its
 * fields, and the unions (left-to-right `union`, discriminated `taggedUnion`).
 */

import type { FieldViolation } from "../errors.ts";
import { cloneJson } from "../json-clone.ts";
import {
  childLoc,
  INVALID,
  type Infer,
  type Invalid,
  isPlainObject,
  type Loc,
  MAX_ISSUES,
  plural,
  report,
  type Schema,
  setOwn,
  tooDeep,
  violation,
  withMeta,
} from "./schema.ts";

/** Defaults are JSON values: each use gets its own copy. */
const clone = cloneJson;

/** `T | None` (pydantic's nullable schema): `null` is accepted; other inputs go to the inner schema. */
export function nullable<T>(s: Schema<T>): Schema<T | null> {
  return {
    parse(input, loc, issues) {
      return input === null ? null : s.parse(input, loc, issues);
    },
    jsonSchema() {
      return { anyOf: [s.jsonSchema(), { type: "null" }] };
    },
  };
}

export interface ListOptions {
  minItems?: number;
  maxItems?: number;
  title?: string;
  description?: string;
}

function lengthViolation(
  loc: Loc,
  input: unknown,
  fieldType: "List" | "Dictionary",
  kind: "min" | "max",
  limit: number,
  actual: number,
): FieldViolation {
  const items = `item${plural(limit)} after validation, not ${actual}`;
  return kind === "max"
    ? violation(loc, "too_long", `${fieldType} should have at most ${limit} ${items}`, input, {
        field_type: fieldType,
        max_length: limit,
        actual_length: actual,
      })
    : violation(loc, "too_short", `${fieldType} should have at least ${limit} ${items}`, input, {
        field_type: fieldType,
        min_length: limit,
        actual_length: actual,
      });
}

/** `list[T]`: non-array → `list_type`; item errors at `[...loc, index]`; length checked before the items. */
export function list<T>(item: Schema<T>, opts: ListOptions = {}): Schema<T[]> {
  return {
    parse(input, loc, issues) {
      if (!Array.isArray(input)) {
        report(issues, violation(loc, "list_type", "Input should be a valid list", input));
        return INVALID;
      }
      if (opts.maxItems !== undefined && input.length > opts.maxItems) {
        report(issues, lengthViolation(loc, input, "List", "max", opts.maxItems, input.length));
        return INVALID;
      }
      if (tooDeep(loc, issues)) return INVALID;
      const out: T[] = [];
      let ok = true;
      const at = childLoc(loc, 0);
      for (let i = 0; i < input.length; i++) {
        if (issues.length >= MAX_ISSUES) return INVALID;
        at[loc.length] = i;
        const v = item.parse(input[i], at, issues);
        if (v === INVALID) ok = false;
        else out.push(v);
      }
      if (!ok) return INVALID;
      if (opts.minItems !== undefined && out.length < opts.minItems) {
        report(issues, lengthViolation(loc, input, "List", "min", opts.minItems, out.length));
        return INVALID;
      }
      return out;
    },
    jsonSchema() {
      const js: Record<string, unknown> = { type: "array", items: item.jsonSchema() };
      if (opts.minItems !== undefined) js.minItems = opts.minItems;
      if (opts.maxItems !== undefined) js.maxItems = opts.maxItems;
      return withMeta(js, opts);
    },
  };
}

export interface DictOptions {
  /** Validates (and may rewrite) each key; a key error is reported at `[...loc, key, "[key]"]` like pydantic. */
  key?: Schema<string>;
  maxProperties?: number;
  title?: string;
  description?: string;
}

/** `dict[str, T]`: non-object → `dict_type`; value errors at `[...loc, key]`. */
export function dict<T>(value: Schema<T>, opts: DictOptions = {}): Schema<Record<string, T>> {
  return {
    parse(input, loc, issues) {
      if (!isPlainObject(input)) {
        report(issues, violation(loc, "dict_type", "Input should be a valid dictionary", input));
        return INVALID;
      }
      const keys = Object.keys(input);
      if (opts.maxProperties !== undefined && keys.length > opts.maxProperties) {
        report(issues, lengthViolation(loc, input, "Dictionary", "max", opts.maxProperties, keys.length));
        return INVALID;
      }
      if (tooDeep(loc, issues)) return INVALID;
      const out: Record<string, T> = {};
      let ok = true;
      const at = childLoc(loc, "");
      for (const key of keys) {
        if (issues.length >= MAX_ISSUES) return INVALID;
        let k: string | Invalid = key;
        if (opts.key !== undefined) k = opts.key.parse(key, [...loc, key, "[key]"], issues);
        at[loc.length] = key;
        const v = value.parse(input[key], at, issues);
        if (k === INVALID || v === INVALID) ok = false;
        else setOwn(out, k, v);
      }
      return ok ? out : INVALID;
    },
    jsonSchema() {
      const js: Record<string, unknown> = { type: "object", additionalProperties: value.jsonSchema() };
      if (opts.key !== undefined) js.propertyNames = opts.key.jsonSchema();
      if (opts.maxProperties !== undefined) js.maxProperties = opts.maxProperties;
      return withMeta(js, opts);
    },
  };
}

export interface Field<T> {
  readonly schema: Schema<T>;
  /** Absent → `{type:"missing", msg:"Field required", input:<the whole object>}`. */
  readonly required?: boolean;
  /** Documented in the JSON Schema; put in the output only with `fillDefaults`. */
  readonly default?: T;
  readonly defaultFactory?: () => T;
  /** When absent from the input, output the default (a fresh copy) instead of leaving the key absent. */
  readonly fillDefaults?: boolean;
  readonly title?: string;
  readonly description?: string;
}

type FieldValue<Fd> = Fd extends { readonly schema: Schema<infer T> } ? T : never;
type PresentKeys<F> = {
  [K in keyof F]: F[K] extends { readonly required: true }
    ? K
    : F[K] extends { readonly fillDefaults: true }
      ? K
      : never;
}[keyof F];
type Simplify<T> = { [K in keyof T]: T[K] } & {};
/** Output of `object(fields)`: required and default-filled fields are present, the others optional. */
export type ObjectOutput<F> = Simplify<
  { -readonly [K in PresentKeys<F>]: FieldValue<F[K]> } & {
    -readonly [K in Exclude<keyof F, PresentKeys<F>>]?: FieldValue<F[K]>;
  }
>;

export interface ObjectOptions {
  /** pydantic `extra`: "ignore" (default) drops unknown keys; "forbid" reports `extra_forbidden` for each. */
  extra?: "ignore" | "forbid";
  title?: string;
  description?: string;
}

/** `"api_key"` → `"Api Key"`, as pydantic titles properties. */
function titleCase(name: string): string {
  let out = "";
  let prevLetter = false;
  for (const ch of name.replaceAll("_", " ")) {
    const letter = ch.toLowerCase() !== ch.toUpperCase();
    out += letter ? (prevLetter ? ch.toLowerCase() : ch.toUpperCase()) : ch;
    prevLetter = letter;
  }
  return out;
}

/**
 * A pydantic model. Fields are validated in declaration order, then (with `extra:"forbid"`) unknown keys in input
 * order; every problem is reported. Non-object input → `model_attributes_type`.
 */
export function object<const F extends Record<string, Field<unknown>>>(
  fields: F,
  opts: ObjectOptions = {},
): Schema<ObjectOutput<F>> {
  const entries: [string, Field<unknown>][] = Object.entries(fields);
  const known = new Set(entries.map(([k]) => k));
  return {
    parse(input, loc, issues) {
      if (!isPlainObject(input)) {
        return notADictionary(loc, issues, input);
      }
      if (tooDeep(loc, issues)) return INVALID;
      const out: Record<string, unknown> = {};
      let ok = true;
      const at = childLoc(loc, "");
      for (const [key, f] of entries) {
        if (issues.length >= MAX_ISSUES) return INVALID;
        if (Object.hasOwn(input, key)) {
          at[loc.length] = key;
          const v = f.schema.parse(input[key], at, issues);
          if (v === INVALID) ok = false;
          else setOwn(out, key, v);
        } else if (f.required === true) {
          report(issues, violation([...loc, key], "missing", "Field required", input));
          ok = false;
        } else if (f.fillDefaults === true) {
          setOwn(out, key, f.defaultFactory !== undefined ? f.defaultFactory() : clone(f.default ?? null));
        }
      }
      if (opts.extra === "forbid") {
        for (const key of Object.keys(input)) {
          if (known.has(key)) continue;
          if (issues.length >= MAX_ISSUES) return INVALID;
          report(
            issues,
            violation([...loc, key], "extra_forbidden", "Extra inputs are not permitted", input[key]),
          );
          ok = false;
        }
      }
      return ok ? (out as ObjectOutput<F>) : INVALID;
    },
    jsonSchema() {
      const properties: Record<string, unknown> = {};
      const required: string[] = [];
      for (const [key, f] of entries) {
        const prop: Record<string, unknown> = { ...f.schema.jsonSchema() };
        prop.title ??= f.title ?? titleCase(key);
        if (f.description !== undefined) prop.description = f.description;
        if (f.required === true) required.push(key);
        else if (f.default !== undefined) prop.default = clone(f.default);
        else if (f.defaultFactory !== undefined) prop.default = f.defaultFactory();
        setOwn(properties, key, prop);
      }
      const js: Record<string, unknown> = { type: "object", properties };
      if (required.length > 0) js.required = required;
      if (opts.extra === "forbid") js.additionalProperties = false;
      return withMeta(js, opts);
    },
  };
}

export interface UnionMember<T> {
  /** The loc segment pydantic inserts for this member's errors (e.g. `"str"`, `"list[str]"`). */
  readonly tag: string;
  readonly schema: Schema<T>;
}

/**
 * A left-to-right union: the first member that accepts the input wins. When none does, every member's errors
 * are reported with the member's tag inserted after loc, as pydantic reports union failures.
 */
export function union<const M extends readonly UnionMember<unknown>[]>(
  members: M,
): Schema<FieldValue<M[number]>> {
  type Out = FieldValue<M[number]>;
  return {
    parse(input, loc, issues) {
      const collected: FieldViolation[] = [];
      for (const m of members) {
        const local: FieldViolation[] = [];
        const v = m.schema.parse(input, childLoc(loc, m.tag), local);
        if (v !== INVALID) return v as Out;
        collected.push(...local);
      }
      for (const v of collected) report(issues, v);
      return INVALID;
    },
    jsonSchema() {
      return { anyOf: members.map((m) => m.schema.jsonSchema()) };
    },
  };
}

/**
 * pydantic's discriminated union: the member is chosen by the string at `field` (errors inside it are reported under
 * [...loc, tag]); a missing tag is `union_tag_not_found`, an unknown one `union_tag_invalid`. The value comes back
 * as {kind: tag, value}.
 */
export function taggedUnion<const M extends Record<string, Schema<unknown>>>(
  field: string,
  members: M,
): Schema<{ [K in keyof M & string]: { kind: K; value: Infer<M[K]> } }[keyof M & string]> {
  type Out = { [K in keyof M & string]: { kind: K; value: Infer<M[K]> } }[keyof M & string];
  const tags = Object.keys(members);
  const expected = tags.map((t) => `'${t}'`).join(", ");
  return {
    parse(input, loc, issues) {
      if (!isPlainObject(input)) {
        return notADictionary(loc, issues, input);
      }
      const tag = input[field];
      const member = typeof tag === "string" && Object.hasOwn(members, tag) ? members[tag] : undefined;
      if (member !== undefined) {
        const v = member.parse(input, childLoc(loc, tag as string), issues);
        return v === INVALID ? INVALID : ({ kind: tag, value: v } as Out);
      }
      if (tag === undefined) {
        report(
          issues,
          violation(
            loc,
            "union_tag_not_found",
            `Unable to extract tag using discriminator '${field}'`,
            input,
            {
              discriminator: `'${field}'`,
            },
          ),
        );
      } else {
        report(
          issues,
          violation(
            loc,
            "union_tag_invalid",
            `Input tag '${String(tag)}' found using '${field}' does not match any of the expected tags: ${expected}`,
            input,
            { discriminator: `'${field}'`, expected_tags: expected, tag: String(tag) },
          ),
        );
      }
      return INVALID;
    },
    jsonSchema: () => ({
      oneOf: Object.values(members).map((m) => m.jsonSchema()),
      discriminator: { propertyName: field },
    }),
  };
}

/** pydantic's report for a model given something that is not an object. */
function notADictionary(loc: Loc, issues: FieldViolation[], input: unknown): Invalid {
  report(
    issues,
    violation(
      loc,
      "model_attributes_type",
      "Input should be a valid dictionary or object to extract fields from",
      input,
    ),
  );
  return INVALID;
}
