/**
 * Python and Rust string semantics the schemas of `src/core/model/` reproduce: Python's whitespace and `repr()`,
 * Rust's trim (pydantic-core's numeric strings), code point lengths and Python truthiness.
 */

import { isPlainObject } from "./schema.ts";

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
export function rustTrim(s: string): string {
  return stripChars(s, RUST_WS);
}

/** Length in code points, as Python's `len(str)`. */
export function codePointLength(s: string): number {
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

/** Python truthiness of a JSON value (`v or default` in validators). */
export function pyFalsy(v: unknown): boolean {
  if (v === null || v === undefined || v === false || v === 0 || v === "") return true;
  if (Array.isArray(v)) return v.length === 0;
  if (isPlainObject(v)) return Object.keys(v).length === 0;
  return false;
}
