/**
 * The kernel of a small declarative schema library for request data (`src/core/model/`). It validates and coerces
 * JSON values the way FastAPI 0.116 + pydantic 2.11 (lax mode, JSON input) do, and reports problems in pydantic's
 * vocabulary (`type`, `msg`, `input`, `ctx`) so REST can answer 422 `{"detail":[...]}` exactly like the reference.
 * Every schema can also describe itself as JSON Schema (2020-12, the OpenAPI 3.1 dialect).
 *
 * This module holds what every part shares: the `Schema` interface, `INVALID`, the violation helpers and the loc
 * and output-object utilities. The parts: `scalars.ts` (str, bool, enums, any), `numbers.ts` (int, float),
 * `containers.ts` (nullable, list, dict, object, unions), `validators.ts` (refine, transform, before, annotate),
 * `well-formed.ts` (the well-formed Unicode rule), `py-text.ts` (Python string semantics) and `validate.ts` (the
 * entry points, `validate` and `parseModel`).
 *
 * Conventions:
 * - `parse` never throws for bad input; it pushes violations and returns `INVALID`. All problems are collected
 *   (fields in declaration order, then extra keys), up to `MAX_ISSUES`.
 * - Object fields absent from the input stay absent in the output unless the field says `fillDefaults`, so that
 *   callers can tell "absent" from "null" (merge semantics).
 * - Outputs are fresh plain objects whose keys are defined with `Object.defineProperty`, so keys such as
 *   `__proto__` or `constructor` are ordinary own data properties and never touch a prototype.
 */

import { type FieldViolation, ValidationError } from "../errors.ts";

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
/** Hard limit on the length of a `loc`, guarding recursive schemas used without `validate()`. */
const MAX_LOC_LENGTH = 200;

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
// Locs and output objects

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
export function childLoc(loc: Loc, key: string | number): Loc {
  const n = loc.length;
  const out = new Array<string | number>(n + 1);
  for (let i = 0; i < n; i++) out[i] = loc[i] as string | number;
  out[n] = key;
  return out;
}

/** Reports a loc longer than `MAX_LOC_LENGTH` (a recursive schema used without `validate()`). */
export function tooDeep(loc: Loc, issues: FieldViolation[]): boolean {
  if (loc.length <= MAX_LOC_LENGTH) return false;
  report(issues, valueError(loc, "Input is nested too deeply", null));
  return true;
}

/** The plural "s" of pydantic's messages. */
export function plural(n: number): string {
  return n === 1 ? "" : "s";
}

/** Sets a schema's JSON Schema `title` and `description` when given. */
export function withMeta(
  js: Record<string, unknown>,
  meta: { title?: string | undefined; description?: string | undefined },
): Record<string, unknown> {
  if (meta.title !== undefined) js.title = meta.title;
  if (meta.description !== undefined) js.description = meta.description;
  return js;
}
