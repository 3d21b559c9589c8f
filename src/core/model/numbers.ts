/**
 * The numeric schemas of `src/core/model/`: `int` and `float` in pydantic's lax mode (integral floats, booleans,
 * numeric strings), with pydantic-core's lexing and bound checks and their messages.
 */

import type { FieldViolation } from "../errors.ts";
import { rustTrim } from "./py-text.ts";
import { INVALID, type Loc, report, type Schema, violation, withMeta } from "./schema.ts";

function num(n: number): string {
  return String(n);
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
