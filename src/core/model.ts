/**
 * A small declarative schema library for request data. It validates and coerces JSON values the way
 * FastAPI 0.116 + pydantic 2.11 (lax mode, JSON input) do, and reports problems in pydantic's vocabulary
 * (`type`, `msg`, `input`, `ctx`) so REST can answer 422 `{"detail":[...]}` exactly like the reference.
 * Every schema can also describe itself as JSON Schema (2020-12, the OpenAPI 3.1 dialect).
 *
 * Conventions:
 * - `parse` never throws for bad input; it pushes violations and returns `INVALID`. All problems are collected
 *   (fields in declaration order, then extra keys), up to `MAX_ISSUES`.
 * - Object fields absent from the input stay absent in the output unless the field says `fillDefaults`, so that
 *   callers can tell "absent" from "null" (merge semantics).
 * - Outputs are fresh plain objects whose keys are defined with `Object.defineProperty`, so keys such as
 *   `__proto__` or `constructor` are ordinary own data properties and never touch a prototype.
 */

import { type FieldViolation, ValidationError } from "./errors.ts";
import { cloneJson } from "./json-clone.ts";

export type Loc = (string | number)[];

export const INVALID: unique symbol = Symbol("INVALID");
export type Invalid = typeof INVALID;

export interface Schema<T> {
  /** Parses input at loc; pushes violations into issues; returns the value or INVALID. */
  parse(input: unknown, loc: Loc, issues: FieldViolation[]): T | Invalid;
  /** JSON Schema (2020-12 / OpenAPI 3.1 dialect) of the accepted input. */
  jsonSchema(): Record<string, unknown>;
}

/** The output type of a schema. */
export type Infer<S> = S extends Schema<infer T> ? T : never;

/** At most this many violations are reported for one input. */
export const MAX_ISSUES = 100;
/** Default nesting limit of `validate()` (containers inside containers). */
export const DEFAULT_MAX_DEPTH = 32;
/** Hard limit on the length of a `loc`, guarding recursive schemas used without `validate()`. */
const MAX_LOC_LENGTH = 200;
/** Containers visited by the depth check before the input is declared too complex (defends against shared refs). */
const MAX_CONTAINERS = 1_000_000;

/**
 * Thrown by validator callbacks (`before`, `transform`, `refine` checks may return a message instead) to report a
 * pydantic `ValueError`: becomes `{type:"value_error", msg:"Value error, <message>", ctx:{error:{}}}`.
 */
export class ValueError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ValueError";
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Violation helpers

/**
 * `e instanceof ValidationError` is always false: `ConnectError` defines a static `Symbol.hasInstance` (inherited by
 * subclasses) that only recognises plain ConnectErrors. Check the prototype chain instead.
 */
export function isValidationError(e: unknown): e is ValidationError {
  if (typeof e !== "object" || e === null) return false;
  for (let p: unknown = Object.getPrototypeOf(e); p !== null; p = Object.getPrototypeOf(p)) {
    if (p === ValidationError.prototype) return true;
  }
  return false;
}

export function violation(
  loc: Loc,
  type: string,
  msg: string,
  input: unknown,
  ctx?: Record<string, unknown>,
): FieldViolation {
  // A copy: schemas pass one loc array, rewritten field by field, to the children they parse (see childLoc).
  const at = loc.slice();
  return ctx === undefined ? { type, loc: at, msg, input } : { type, loc: at, msg, input, ctx };
}

/** Pushes a violation unless the cap is reached. */
export function report(issues: FieldViolation[], v: FieldViolation): void {
  if (issues.length < MAX_ISSUES) issues.push(v);
}

/** `{type:"value_error", msg:"Value error, <message>", ctx:{error:{}}}` as FastAPI serializes a ValueError. */
export function valueError(loc: Loc, message: string, input: unknown): FieldViolation {
  return violation(loc, "value_error", `Value error, ${message}`, input, { error: {} });
}

/** The 422 item FastAPI produces for a body that is not valid JSON. */
export function jsonInvalid(position: number, message?: string): FieldViolation {
  return violation(
    ["body", position],
    "json_invalid",
    "JSON decode error",
    {},
    { error: message ?? "Expecting value" },
  );
}

/** The 422 item FastAPI produces for a required body that is absent. */
export function missingBody(): FieldViolation {
  return violation(["body"], "missing", "Field required", null);
}

// ---------------------------------------------------------------------------------------------------------------
// Well-formed Unicode: the one rule every string of a request obeys, whatever the protocol

/**
 * pydantic's `string_unicode` for a string that is not well-formed Unicode (a lone UTF-16 surrogate, which a JSON
 * `\ud800` escape can produce and no UTF-8 text can carry). The input is echoed with the bad code units replaced
 * by U+FFFD, so that the error itself is well-formed. Such a string is never stored: it could not be encoded as
 * protobuf or UTF-8 text afterwards.
 */
export function stringUnicode(loc: Loc, input: string): FieldViolation {
  return violation(
    wellFormedLoc(loc),
    "string_unicode",
    "Input should be a valid string, unable to parse raw data as a unicode string",
    input.toWellFormed(),
  );
}

/** A loc safe to echo: object keys in it that are not well-formed are shown with U+FFFD. */
function wellFormedLoc(loc: Loc): Loc {
  return loc.every((p) => typeof p === "number" || p.isWellFormed())
    ? loc
    : loc.map((p) => (typeof p === "number" ? p : p.toWellFormed()));
}

/**
 * Reports every string value and object key in a JSON value that is not well-formed Unicode (`string_unicode`,
 * a key at `[...loc, key, "[key]"]` as pydantic locates key errors); true when there was none. Iterative and
 * bounded by the value's size, so any parsed JSON can be checked.
 */
export function checkWellFormed(value: unknown, loc: Loc, issues: FieldViolation[]): boolean {
  if (typeof value === "string") {
    if (value.isWellFormed()) return true;
    report(issues, stringUnicode(loc, value));
    return false;
  }
  if (typeof value !== "object" || value === null) return true;
  let ok = true;
  const stack: { value: object; loc: Loc }[] = [{ value, loc }];
  for (let node = stack.pop(); node !== undefined; node = stack.pop()) {
    const isArray = Array.isArray(node.value);
    const keys = isArray ? undefined : Object.keys(node.value);
    const n = isArray ? (node.value as unknown[]).length : (keys as string[]).length;
    for (let i = 0; i < n; i++) {
      const key: string | number = isArray ? i : (keys as string[])[i]!;
      const child: unknown = (node.value as Record<string | number, unknown>)[key];
      if (typeof key === "string" && !key.isWellFormed()) {
        ok = false;
        report(issues, stringUnicode(childLoc(childLoc(node.loc, key), "[key]"), key));
      }
      if (typeof child === "string") {
        if (!child.isWellFormed()) {
          ok = false;
          report(issues, stringUnicode(childLoc(node.loc, key), child));
        }
      } else if (typeof child === "object" && child !== null) {
        stack.push({ value: child, loc: childLoc(node.loc, key) });
      }
      if (issues.length >= MAX_ISSUES) return false;
    }
  }
  return ok;
}

/**
 * A copy of a JSON value whose strings and keys are all well-formed (bad code units replaced by U+FFFD), or the
 * value itself when it already is: how data stored before the rule existed is shown.
 */
export function toWellFormedJson<T>(value: T): T {
  if (typeof value === "string") return (value.isWellFormed() ? value : value.toWellFormed()) as T;
  if (typeof value !== "object" || value === null) return value;
  if (Array.isArray(value)) {
    let out: unknown[] | undefined;
    for (let i = 0; i < value.length; i++) {
      const v: unknown = value[i];
      const w = toWellFormedJson(v);
      if (w !== v) out ??= value.slice();
      if (out !== undefined) out[i] = w;
    }
    return (out ?? value) as T;
  }
  let out: Record<string, unknown> | undefined;
  const entries = Object.entries(value as Record<string, unknown>);
  for (const [k, v] of entries) {
    const w = toWellFormedJson(v);
    if (w !== v || !k.isWellFormed()) {
      out = {};
      break;
    }
  }
  if (out === undefined) return value;
  for (const [k, v] of entries) setOwn(out, k.toWellFormed(), toWellFormedJson(v));
  return out as T;
}

// ---------------------------------------------------------------------------------------------------------------
// Small utilities (Python / Rust string semantics)

const PY_WS =
  "\t\n\v\f\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000";
const RUST_WS =
  "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000";

function stripChars(s: string, chars: string): string {
  let start = 0;
  let end = s.length;
  while (start < end && chars.includes(s.charAt(start))) start++;
  while (end > start && chars.includes(s.charAt(end - 1))) end--;
  return s.slice(start, end);
}

/** Python's `str.strip()` (Python's notion of whitespace, which differs slightly from `String#trim`). */
export function pyStrip(s: string): string {
  return stripChars(s, PY_WS);
}

/** Rust's `str::trim()` (Unicode White_Space), as pydantic-core uses for numeric strings. */
function rustTrim(s: string): string {
  return stripChars(s, RUST_WS);
}

/** Length in code points, as Python's `len(str)`. */
function codePointLength(s: string): number {
  let n = 0;
  for (const _ of s) n++;
  return n;
}

/** Python's `repr()` of a string, as used in pydantic's enum/literal messages. */
export function pyRepr(s: string): string {
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of s) {
    const cp = ch.codePointAt(0) ?? 0;
    if (ch === "\\") out += "\\\\";
    else if (ch === quote) out += `\\${quote}`;
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0)) out += `\\x${cp.toString(16).padStart(2, "0")}`;
    else out += ch;
  }
  return out + quote;
}

/** `'a', 'b' or 'c'` — pydantic's list of expected values. */
export function expectedList(values: readonly string[]): string {
  const reprs = values.map(pyRepr);
  if (reprs.length <= 1) return reprs.join("");
  return `${reprs.slice(0, -1).join(", ")} or ${reprs[reprs.length - 1]}`;
}

/** A JSON object (plain or null-prototype), never an array or class instance. */
export function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== "object" || v === null || Array.isArray(v)) return false;
  const proto: unknown = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/** Defines an own enumerable data property without ever invoking a setter such as `__proto__`. */
export function setOwn(target: Record<string, unknown>, key: string, value: unknown): void {
  // Only `__proto__` has a setter on Object.prototype; every other key is a plain (much faster) assignment.
  if (key === "__proto__")
    Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
  else target[key] = value;
}

/**
 * `[...loc, key]`, the loc an object, list or dict hands to the schema of one of its entries. A parse makes one and
 * rewrites its last element entry by entry (one array per container instead of one per field: every request body
 * passes here): a schema may read the loc it is given during its parse, and whatever keeps it copies it
 * (`violation`, or childLoc for a deeper level).
 */
function childLoc(loc: Loc, key: string | number): Loc {
  const n = loc.length;
  const out = new Array<string | number>(n + 1);
  for (let i = 0; i < n; i++) out[i] = loc[i] as string | number;
  out[n] = key;
  return out;
}

/** Python truthiness of a JSON value (`v or default` in validators). */
export function pyFalsy(v: unknown): boolean {
  if (v === null || v === undefined || v === false || v === 0 || v === "") return true;
  if (Array.isArray(v)) return v.length === 0;
  if (isPlainObject(v)) return Object.keys(v).length === 0;
  return false;
}

function tooDeep(loc: Loc, issues: FieldViolation[]): boolean {
  if (loc.length <= MAX_LOC_LENGTH) return false;
  report(issues, valueError(loc, "Input is nested too deeply", null));
  return true;
}

function plural(n: number): string {
  return n === 1 ? "" : "s";
}

function num(n: number): string {
  return String(n);
}

/** Defaults are JSON values: each use gets its own copy. */
const clone = cloneJson;

// ---------------------------------------------------------------------------------------------------------------
// Primitive schemas

export interface StrOptions {
  /** Strip surrounding whitespace (Python semantics) before the length checks; the output is the stripped string. */
  trim?: boolean;
  minLength?: number;
  maxLength?: number;
  /** Search semantics like pydantic (`re.search`); must not use the `g` or `y` flags. */
  pattern?: RegExp;
  title?: string;
  description?: string;
}

/** `str`: only JSON strings are accepted (pydantic lax mode does not coerce numbers to strings). */
export function str(opts: StrOptions = {}): Schema<string> {
  return {
    parse(input, loc, issues) {
      if (typeof input !== "string") {
        report(issues, violation(loc, "string_type", "Input should be a valid string", input));
        return INVALID;
      }
      if (!input.isWellFormed()) {
        report(issues, stringUnicode(loc, input));
        return INVALID;
      }
      const s = opts.trim === true ? pyStrip(input) : input;
      if (opts.minLength !== undefined || opts.maxLength !== undefined) {
        const len = codePointLength(s);
        if (opts.minLength !== undefined && len < opts.minLength) {
          const n = opts.minLength;
          report(
            issues,
            violation(
              loc,
              "string_too_short",
              `String should have at least ${n} character${plural(n)}`,
              input,
              {
                min_length: n,
              },
            ),
          );
          return INVALID;
        }
        if (opts.maxLength !== undefined && len > opts.maxLength) {
          const n = opts.maxLength;
          report(
            issues,
            violation(
              loc,
              "string_too_long",
              `String should have at most ${n} character${plural(n)}`,
              input,
              {
                max_length: n,
              },
            ),
          );
          return INVALID;
        }
      }
      if (opts.pattern !== undefined && !opts.pattern.test(s)) {
        const p = opts.pattern.source;
        report(
          issues,
          violation(loc, "string_pattern_mismatch", `String should match pattern '${p}'`, input, {
            pattern: p,
          }),
        );
        return INVALID;
      }
      return s;
    },
    jsonSchema() {
      const js: Record<string, unknown> = { type: "string" };
      if (opts.minLength !== undefined) js.minLength = opts.minLength;
      if (opts.maxLength !== undefined) js.maxLength = opts.maxLength;
      if (opts.pattern !== undefined) js.pattern = opts.pattern.source;
      return withMeta(js, opts);
    },
  };
}

export interface NumberOptions {
  ge?: number;
  le?: number;
  gt?: number;
  lt?: number;
  title?: string;
  description?: string;
}

export interface IntOptions extends NumberOptions {
  /**
   * Representable range: 53 (default) = JavaScript safe integers, 32 = int32. Values outside are reported as
   * `greater_than_equal` / `less_than_equal` against the range's bound.
   */
  bits?: 32 | 53;
}

type NumResult = { ok: number } | { type: string; msg: string };

const INT_TYPE = { type: "int_type", msg: "Input should be a valid integer" };
const INT_PARSING = {
  type: "int_parsing",
  msg: "Input should be a valid integer, unable to parse string as an integer",
};
const INT_FROM_FLOAT = {
  type: "int_from_float",
  msg: "Input should be a valid integer, got a number with a fractional part",
};
const INT_PARSING_SIZE = {
  type: "int_parsing_size",
  msg: "Unable to parse input string as an integer, exceeded maximum size",
};
const FINITE_NUMBER = { type: "finite_number", msg: "Input should be a finite number" };
const FLOAT_TYPE = { type: "float_type", msg: "Input should be a valid number" };
const FLOAT_PARSING = {
  type: "float_parsing",
  msg: "Input should be a valid number, unable to parse string as a number",
};
const I64_LIMIT = 2 ** 63;

/** pydantic-core `clean_int_str` + parse: whitespace, `+`/`-`, leading zeros, `.000` suffix, `1_000`. */
function strAsInt(raw: string): NumResult {
  if (raw.length > 4300) return INT_PARSING_SIZE;
  let s = rustTrim(raw);
  if (s.startsWith("+")) {
    if (s.startsWith("+-")) return INT_PARSING;
    s = s.slice(1);
  }
  let negative = false;
  if (s.startsWith("-")) {
    if (s.startsWith("--") || s.startsWith("-+")) return INT_PARSING;
    negative = true;
    s = s.slice(1);
  }
  const dot = s.indexOf(".");
  if (dot >= 0) {
    const decimals = s.slice(dot + 1);
    if (decimals.length === 0 || !/^0+$/.test(decimals)) return INT_PARSING;
    s = s.slice(0, dot);
  }
  if (s.includes("_")) {
    if (s.startsWith("_") || s.endsWith("_") || s.includes("__")) return INT_PARSING;
    s = s.replaceAll("_", "");
  }
  if (!/^[0-9]+$/.test(s)) return INT_PARSING;
  const n = Number(s);
  return { ok: negative && n !== 0 ? -n : n };
}

function lexInt(input: unknown): NumResult {
  if (typeof input === "boolean") return { ok: input ? 1 : 0 };
  if (typeof input === "number") {
    if (!Number.isFinite(input)) return FINITE_NUMBER;
    if (!Number.isInteger(input)) return INT_FROM_FLOAT;
    if (Math.abs(input) >= I64_LIMIT) return INT_PARSING_SIZE;
    return { ok: input === 0 ? 0 : input };
  }
  if (typeof input === "string") return strAsInt(input);
  return INT_TYPE;
}

const FLOAT_RE = /^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$/;
const INF_NAN_RE = /^[+-]?(?:inf|infinity|nan)$/i;

/** Rust's `f64::from_str`. */
function rustParseFloat(s: string): number | undefined {
  if (FLOAT_RE.test(s)) return Number(s);
  if (INF_NAN_RE.test(s)) {
    if (/nan$/i.test(s)) return Number.NaN;
    return s.startsWith("-") ? Number.NEGATIVE_INFINITY : Number.POSITIVE_INFINITY;
  }
  return undefined;
}

function lexFloat(input: unknown): NumResult {
  if (typeof input === "boolean") return { ok: input ? 1 : 0 };
  if (typeof input === "number") return Number.isFinite(input) ? { ok: input } : FINITE_NUMBER;
  if (typeof input === "string") {
    let f = rustParseFloat(rustTrim(input));
    if (f === undefined && input.includes("_")) {
      // pydantic-core retries the *untrimmed* string with underscores removed (Python's `1_000.5`)
      if (!input.startsWith("_") && !input.endsWith("_") && !input.includes("__")) {
        f = rustParseFloat(input.replaceAll("_", ""));
      }
    }
    if (f === undefined) return FLOAT_PARSING;
    return Number.isFinite(f) ? { ok: f } : FINITE_NUMBER;
  }
  return FLOAT_TYPE;
}

/** pydantic's order: le, lt, ge, gt; only the first failure is reported. */
function checkBounds(
  v: number,
  opts: NumberOptions,
  loc: Loc,
  input: unknown,
  issues: FieldViolation[],
): boolean {
  const fail = (type: string, msg: string, ctx: Record<string, unknown>): false => {
    report(issues, violation(loc, type, msg, input, ctx));
    return false;
  };
  if (opts.le !== undefined && !(v <= opts.le))
    return fail("less_than_equal", `Input should be less than or equal to ${num(opts.le)}`, { le: opts.le });
  if (opts.lt !== undefined && !(v < opts.lt))
    return fail("less_than", `Input should be less than ${num(opts.lt)}`, { lt: opts.lt });
  if (opts.ge !== undefined && !(v >= opts.ge))
    return fail("greater_than_equal", `Input should be greater than or equal to ${num(opts.ge)}`, {
      ge: opts.ge,
    });
  if (opts.gt !== undefined && !(v > opts.gt))
    return fail("greater_than", `Input should be greater than ${num(opts.gt)}`, { gt: opts.gt });
  return true;
}

function numberJsonSchema(type: string, opts: NumberOptions): Record<string, unknown> {
  const js: Record<string, unknown> = { type };
  if (opts.ge !== undefined) js.minimum = opts.ge;
  if (opts.gt !== undefined) js.exclusiveMinimum = opts.gt;
  if (opts.le !== undefined) js.maximum = opts.le;
  if (opts.lt !== undefined) js.exclusiveMaximum = opts.lt;
  return withMeta(js, opts);
}

/**
 * `int` (lax): integers, integral floats (`1.0`), booleans (`true` → 1), integer strings (`" 7 "`, `"+3"`,
 * `"1_000"`, `"10.00"`). Strings with a fraction → `int_parsing`; numbers with a fraction → `int_from_float`.
 */
export function int(opts: IntOptions = {}): Schema<number> {
  const max = opts.bits === 32 ? 2 ** 31 - 1 : Number.MAX_SAFE_INTEGER;
  const min = opts.bits === 32 ? -(2 ** 31) : Number.MIN_SAFE_INTEGER;
  return {
    parse(input, loc, issues) {
      const r = lexInt(input);
      if (!("ok" in r)) {
        report(issues, violation(loc, r.type, r.msg, input));
        return INVALID;
      }
      if (!checkBounds(r.ok, opts, loc, input, issues)) return INVALID;
      if (!checkBounds(r.ok, { le: max, ge: min }, loc, input, issues)) return INVALID;
      return r.ok;
    },
    jsonSchema() {
      const js = numberJsonSchema("integer", opts);
      if (opts.bits === 32) js.format = "int32";
      return js;
    },
  };
}

/**
 * `float` (lax): numbers, booleans, numeric strings (`" 1.5 "`, `"1e3"`). Only finite values are accepted:
 * `"nan"`, `"inf"` (and overflowing strings) → `finite_number`.
 */
export function float(opts: NumberOptions = {}): Schema<number> {
  return {
    parse(input, loc, issues) {
      const r = lexFloat(input);
      if (!("ok" in r)) {
        report(issues, violation(loc, r.type, r.msg, input));
        return INVALID;
      }
      if (!checkBounds(r.ok, opts, loc, input, issues)) return INVALID;
      return r.ok;
    },
    jsonSchema() {
      return numberJsonSchema("number", opts);
    },
  };
}

const BOOL_FALSE = new Set(["0", "off", "f", "false", "n", "no"]);
const BOOL_TRUE = new Set(["1", "on", "t", "true", "y", "yes"]);

/**
 * `bool` (lax): `true`/`false`, `0`/`1` (also `0.0`/`1.0`), and the strings `0 off f false n no` /
 * `1 on t true y yes` (ASCII case-insensitive, not trimmed — as pydantic-core). Other strings and other
 * integers → `bool_parsing`; anything else (null, fractions, lists, objects) → `bool_type`.
 */
export function bool(opts: { title?: string; description?: string } = {}): Schema<boolean> {
  return {
    parse(input, loc, issues) {
      if (typeof input === "boolean") return input;
      let parsing = false;
      if (typeof input === "string") {
        const lower = input.replace(/[A-Z]/g, (c) => c.toLowerCase());
        if (BOOL_FALSE.has(lower)) return false;
        if (BOOL_TRUE.has(lower)) return true;
        parsing = true;
      } else if (typeof input === "number" && Number.isInteger(input)) {
        if (input === 0) return false;
        if (input === 1) return true;
        parsing = true;
      }
      report(
        issues,
        parsing
          ? violation(
              loc,
              "bool_parsing",
              "Input should be a valid boolean, unable to interpret input",
              input,
            )
          : violation(loc, "bool_type", "Input should be a valid boolean", input),
      );
      return INVALID;
    },
    jsonSchema() {
      return withMeta({ type: "boolean" }, opts);
    },
  };
}

/** Any JSON value, passed through unchanged (use for fields whose content is discarded or opaque). */
export function anyValue(): Schema<unknown> {
  return {
    parse(input) {
      return input;
    },
    jsonSchema() {
      return {};
    },
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Enumerations

function choice<const V extends string>(
  values: readonly V[],
  type: "enum" | "literal_error",
  opts: { title?: string; description?: string },
): Schema<V> {
  const allowed = new Set<string>(values);
  const expected = expectedList(values);
  return {
    parse(input, loc, issues) {
      if (typeof input === "string" && allowed.has(input)) return input as V;
      report(issues, violation(loc, type, `Input should be ${expected}`, input, { expected }));
      return INVALID;
    },
    jsonSchema() {
      if (type === "literal_error" && values.length === 1)
        return withMeta({ const: values[0], type: "string" }, opts);
      return withMeta({ type: "string", enum: [...values] }, opts);
    },
  };
}

/** A string `Enum` class: unknown value → `{type:"enum", msg:"Input should be 'a', 'b' or 'c'", ctx:{expected}}`. */
export function enumOf<const V extends string>(
  values: readonly V[],
  opts: { title?: string; description?: string } = {},
): Schema<V> {
  return choice(values, "enum", opts);
}

/** A `Literal[...]` of strings: same message as `enumOf` but `type:"literal_error"`. */
export function literal<const V extends string>(
  values: readonly V[],
  opts: { title?: string; description?: string } = {},
): Schema<V> {
  return choice(values, "literal_error", opts);
}

// ---------------------------------------------------------------------------------------------------------------
// Combinators

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

/** Runs a callback that may throw `ValueError`; reports it as `value_error` at loc with the given input. */
function guarded<U>(fn: () => U, loc: Loc, input: unknown, issues: FieldViolation[]): U | Invalid {
  try {
    return fn();
  } catch (e) {
    if (e instanceof ValueError) {
      report(issues, valueError(loc, e.message, input));
      return INVALID;
    }
    throw e;
  }
}

/**
 * An after-validator: `check` returns an error message (→ `value_error`, `"Value error, <message>"`,
 * `ctx:{error:{}}`, input = the field's original input) or null.
 */
export function refine<T>(s: Schema<T>, check: (v: T) => string | null): Schema<T> {
  return {
    parse(input, loc, issues) {
      const v = s.parse(input, loc, issues);
      if (v === INVALID) return INVALID;
      const message = guarded(() => check(v), loc, input, issues);
      if (message === INVALID) return INVALID;
      if (message !== null) {
        report(issues, valueError(loc, message, input));
        return INVALID;
      }
      return v;
    },
    jsonSchema: () => s.jsonSchema(),
  };
}

/** Maps the parsed value; `fn` may throw `ValueError` (→ `value_error`). */
export function transform<T, U>(s: Schema<T>, fn: (v: T) => U): Schema<U> {
  return {
    parse(input, loc, issues) {
      const v = s.parse(input, loc, issues);
      if (v === INVALID) return INVALID;
      return guarded(() => fn(v), loc, input, issues);
    },
    jsonSchema: () => s.jsonSchema(),
  };
}

/**
 * A before-validator (pydantic `mode="before"`): `fn` preprocesses the raw input and may throw `ValueError`
 * (→ `value_error` with the raw input). `jsonSchema` describes the wider accepted input if given.
 */
export function before<T>(
  fn: (input: unknown) => unknown,
  s: Schema<T>,
  opts: { jsonSchema?: () => Record<string, unknown> } = {},
): Schema<T> {
  return {
    parse(input, loc, issues) {
      const pre = guarded(() => fn(input), loc, input, issues);
      if (pre === INVALID) return INVALID;
      return s.parse(pre, loc, issues);
    },
    jsonSchema: opts.jsonSchema ?? (() => s.jsonSchema()),
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

/** Adds or overrides JSON Schema keywords (title, description, examples, format...) without changing parsing. */
export function annotate<T>(
  s: Schema<T>,
  extra: Record<string, unknown> | ((inner: Record<string, unknown>) => Record<string, unknown>),
): Schema<T> {
  return {
    parse: (input, loc, issues) => s.parse(input, loc, issues),
    jsonSchema() {
      const inner = s.jsonSchema();
      return typeof extra === "function" ? extra(inner) : { ...inner, ...extra };
    },
  };
}

function withMeta(
  js: Record<string, unknown>,
  meta: { title?: string | undefined; description?: string | undefined },
): Record<string, unknown> {
  if (meta.title !== undefined) js.title = meta.title;
  if (meta.description !== undefined) js.description = meta.description;
  return js;
}

// ---------------------------------------------------------------------------------------------------------------
// Entry point

/**
 * Path (relative to the input) of the first container nested deeper than maxDepth, or undefined. The check recurses
 * at most maxDepth deep and the path search is iterative, so a hostile input cannot overflow the stack here; shared
 * references are bounded by a visit budget.
 */
function findTooDeep(input: unknown, maxDepth: number): Loc | undefined {
  if (typeof input !== "object" || input === null) return undefined;
  containerBudget = MAX_CONTAINERS;
  // The common case (nothing too deep) without allocating; the path is worked out only for an input that fails.
  // (A maxDepth too large to recurse into safely goes straight to the iterative search.)
  return maxDepth <= MAX_RECURSIVE_DEPTH && withinDepth(input, 1, maxDepth)
    ? undefined
    : pathTooDeep(input, maxDepth);
}

const MAX_RECURSIVE_DEPTH = 1000;

/** Containers withinDepth may still visit in the current check (single-threaded, reset by findTooDeep). */
let containerBudget = 0;

/** Whether no container in `value` is nested deeper than maxDepth (recursion is bounded by maxDepth). */
function withinDepth(value: object, depth: number, maxDepth: number): boolean {
  if (depth > maxDepth || --containerBudget < 0) return false;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const child: unknown = value[i];
      if (typeof child === "object" && child !== null && !withinDepth(child, depth + 1, maxDepth))
        return false;
    }
    return true;
  }
  for (const key of Object.keys(value)) {
    const child: unknown = (value as Record<string, unknown>)[key];
    if (typeof child === "object" && child !== null && !withinDepth(child, depth + 1, maxDepth)) return false;
  }
  return true;
}

/** findTooDeep's answer for an input known to fail: the path of the first offending container, iteratively. */
function pathTooDeep(input: object, maxDepth: number): Loc | undefined {
  interface Node {
    value: object;
    depth: number;
    parent: Node | undefined;
    key: string | number;
  }
  const pathOf = (n: Node): Loc => {
    const path: Loc = [];
    for (let c: Node | undefined = n; c?.parent !== undefined; c = c.parent) path.push(c.key);
    return path.reverse();
  };
  const stack: Node[] = [{ value: input, depth: 1, parent: undefined, key: "" }];
  let visited = 0;
  for (let node = stack.pop(); node !== undefined; node = stack.pop()) {
    if (node.depth > maxDepth || ++visited > MAX_CONTAINERS) return pathOf(node);
    const children: [string | number, unknown][] = Array.isArray(node.value)
      ? node.value.map((v, i): [number, unknown] => [i, v])
      : Object.entries(node.value);
    for (let i = children.length - 1; i >= 0; i--) {
      const [key, child] = children[i]!;
      if (typeof child === "object" && child !== null) {
        stack.push({ value: child, depth: node.depth + 1, parent: node, key });
      }
    }
  }
  return undefined;
}

export interface ValidateOptions {
  /** Containers nested deeper than this are rejected before validation (default 32). */
  maxDepth?: number;
}

/** validate()'s core: depth pre-check, then parse; exceptions other than ValidationError become a violation. */
function run<T>(
  schema: Schema<T>,
  input: unknown,
  loc: Loc,
  issues: FieldViolation[],
  opts: ValidateOptions,
): T | Invalid {
  const maxDepth = opts.maxDepth ?? DEFAULT_MAX_DEPTH;
  const deep = findTooDeep(input, maxDepth);
  if (deep !== undefined) {
    report(
      issues,
      valueError([...loc, ...deep], `Input is nested too deeply (more than ${maxDepth} levels)`, null),
    );
    return INVALID;
  }
  const before = issues.length;
  // Every string and key of the input, including those a schema passes through unread (`anyValue`, dict keys).
  if (!checkWellFormed(input, loc, issues)) return INVALID;
  let out: T | Invalid;
  try {
    out = schema.parse(input, loc, issues);
  } catch (e) {
    if (isValidationError(e)) for (const v of e.violations) report(issues, v);
    out = INVALID;
  }
  if (out === INVALID || issues.length > before) {
    if (issues.length === before) report(issues, valueError(loc, "Input could not be validated", null));
    return INVALID;
  }
  return out;
}

/**
 * Parses input into an existing issues list (to combine several parts of one request into one report) with the
 * same protections as `validate()`: returns the value, or undefined when anything was reported.
 */
export function parseModel<T>(
  schema: Schema<T>,
  input: unknown,
  loc: Loc,
  issues: FieldViolation[],
  opts: ValidateOptions = {},
): T | undefined {
  const out = run(schema, input, loc, issues, opts);
  return out === INVALID ? undefined : out;
}

/**
 * Validates input against schema and returns the output, or throws `ValidationError` carrying every violation
 * (at most `MAX_ISSUES`). Never throws anything else: an input nested deeper than `maxDepth` is one
 * `value_error`, and an unexpected failure inside a validator becomes a generic `value_error` at loc.
 */
export function validate<T>(schema: Schema<T>, input: unknown, loc: Loc, opts: ValidateOptions = {}): T {
  const issues: FieldViolation[] = [];
  const out = run(schema, input, loc, issues, opts);
  if (out === INVALID) {
    if (issues.length === 0) issues.push(valueError(loc, "Input could not be validated", null));
    throw new ValidationError(issues.slice(0, MAX_ISSUES));
  }
  return out;
}
