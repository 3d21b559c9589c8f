/**
 * Validators around a schema of `src/core/model/`, as pydantic's field validators: `refine` (after), `transform`,
 * `before`, and `annotate`, which changes only the JSON Schema a schema describes.
 */

import type { FieldViolation } from "../errors.ts";
import { INVALID, type Invalid, type Loc, report, type Schema, ValueError, valueError } from "./schema.ts";

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
