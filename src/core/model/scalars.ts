/**
 * The string-like and boolean schemas of `src/core/model/`: `str` (with pydantic's length and pattern checks),
 * `bool` (lax), `anyValue`, and the enumerations `enumOf` and `literal`.
 */

import { codePointLength, expectedList, pyStrip } from "./py-text.ts";
import { INVALID, plural, report, type Schema, violation, withMeta } from "./schema.ts";
import { stringUnicode } from "./well-formed.ts";

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
