/**
 * Well-formed Unicode: the one rule every string of a request obeys, whatever the protocol. `validate` checks every
 * string and key of its input with it; the other protocols' request walk (`src/core/well-formed-request.ts`) reports
 * with the same violation.
 */

import type { FieldViolation } from "../errors.ts";
import { childLoc, type Loc, MAX_ISSUES, report, setOwn, violation } from "./schema.ts";

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
