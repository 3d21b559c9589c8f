/**
 * String formats of the V1 models on top of `model/`: UUIDs (pydantic's `uuid_parsing`) and datetimes
 * (pydantic's `datetime_from_date_parsing`), with the reference's messages.
 */
import type { FieldViolation } from "./errors.ts";
import { parseHexId } from "./ids.ts";
import { INVALID, type Loc, report, type Schema, violation } from "./model/schema.ts";

/** Why a string is not a UUID, in the words of the `uuid` crate that pydantic-core uses. */
function uuidProblem(input: string): string {
  const s = input.startsWith("urn:uuid:") ? input.slice("urn:uuid:".length) : input;
  const offset = input.length - s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charAt(i);
    if (!/[0-9a-fA-F-]/.test(c))
      return `invalid character: expected an optional prefix of \`urn:uuid:\` followed by [0-9a-fA-F-], found \`${c}\` at ${offset + i + 1}`;
  }
  if (!s.includes("-")) return `invalid length: expected length 32 for simple format, found ${s.length}`;
  const groups = s.split("-");
  if (groups.length !== 5) return `invalid group count: expected 5, found ${groups.length}`;
  const expected = [8, 4, 4, 4, 12];
  for (let g = 0; g < 5; g++) {
    const len = groups[g]?.length ?? 0;
    if (len !== expected[g])
      return `invalid group length in group ${g}: expected ${expected[g]}, found ${len}`;
  }
  return "invalid format";
}

/** The `uuid_parsing` violation of a string that is not a UUID. */
export function uuidViolation(loc: Loc, input: string): FieldViolation {
  const error = uuidProblem(input);
  return violation(loc, "uuid_parsing", `Input should be a valid UUID, ${error}`, input, { error });
}

/**
 * A UUID given with or without dashes (any case, optional `urn:uuid:` or braces), output as 32 lower-case hex
 * characters. Not a string → `uuid_type`; not a UUID → `uuid_parsing`.
 */
export function uuidHex(): Schema<string> {
  return {
    parse(input, loc, issues) {
      if (typeof input !== "string") {
        report(
          issues,
          violation(loc, "uuid_type", "UUID input should be a string, bytes or UUID object", input),
        );
        return INVALID;
      }
      const id = parseHexId(input);
      if (id === null) {
        report(issues, uuidViolation(loc, input));
        return INVALID;
      }
      return id;
    },
    jsonSchema: () => ({
      type: "string",
      pattern: "^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$",
      description: "UUID, with or without dashes",
    }),
  };
}

const DATE = /^(\d{4})-(\d{2})-(\d{2})/;
const TIME = /^[Tt _](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?/;
const ZONE = /^(?:([Zz])|([+-])(\d{2}):?(\d{2}))$/;
const UNIX = /^[+-]?\d+(?:\.\d+)?$/;

/** speedate's first complaint about a malformed datetime, as pydantic words it. */
function dateProblem(s: string): string {
  if (s.length < 10) return "input is too short";
  if (!/^\d{4}/.test(s)) return "invalid character in year";
  if (s[4] !== "-") return "invalid date separator, expected `-`";
  if (!/^\d{2}$/.test(s.slice(5, 7))) return "invalid character in month";
  if (s[7] !== "-") return "invalid date separator, expected `-`";
  if (!/^\d{2}$/.test(s.slice(8, 10))) return "invalid character in day";
  return "unexpected extra characters at the end of the input";
}

/** Parses an ISO-8601 datetime or date (a naive one is taken as UTC) or a Unix timestamp; a message on failure. */
export function parseDateTime(raw: string): Date | string {
  const s = raw.trim();
  if (UNIX.test(s)) {
    const n = Number(s);
    // pydantic: numbers above 2e10 are milliseconds.
    const ms = Math.abs(n) > 2e10 ? n : n * 1000;
    const d = new Date(ms);
    return Number.isNaN(d.getTime()) ? "input is too long" : d;
  }
  const date = DATE.exec(s);
  if (date === null) return dateProblem(s);
  const [, y, mo, da] = date.map(Number) as [number, number, number, number];
  if (mo < 1 || mo > 12) return "month value is outside expected range of 1-12";
  const daysInMonth = new Date(Date.UTC(y, mo, 0)).getUTCDate();
  if (da < 1 || da > daysInMonth) return "day value is outside expected range";
  let rest = s.slice(10);
  let h = 0;
  let mi = 0;
  let sec = 0;
  let frac = 0;
  if (rest.length > 0) {
    const time = TIME.exec(rest);
    if (time === null) return /^[Tt _]/.test(rest) ? "invalid character in hour" : dateProblem(s);
    h = Number(time[1]);
    mi = Number(time[2]);
    sec = Number(time[3] ?? 0);
    frac = Number(`0.${time[4] ?? "0"}`);
    if (h > 23) return "hour value is outside expected range of 0-23";
    if (mi > 59) return "minute value is outside expected range of 0-59";
    if (sec > 59) return "second value is outside expected range of 0-59";
    rest = rest.slice(time[0].length);
  }
  let offsetMinutes = 0;
  if (rest.length > 0) {
    const zone = ZONE.exec(rest);
    if (zone === null) return "invalid timezone sign";
    if (zone[1] === undefined) {
      const oh = Number(zone[3]);
      const om = Number(zone[4]);
      if (oh > 23 || om > 59) return "timezone offset is outside expected range";
      offsetMinutes = (zone[2] === "-" ? -1 : 1) * (oh * 60 + om);
    }
  }
  const ms = Date.UTC(y, mo - 1, da, h, mi, sec) + Math.round(frac * 1000) - offsetMinutes * 60_000;
  return new Date(ms);
}

/** A datetime (pydantic lax): ISO-8601 datetimes or dates, Unix timestamps; else `datetime_from_date_parsing`. */
export function dateTime(): Schema<Date> {
  return {
    parse(input, loc, issues) {
      if (typeof input !== "string" && typeof input !== "number") {
        report(issues, violation(loc, "datetime_type", "Input should be a valid datetime", input));
        return INVALID;
      }
      const out = parseDateTime(String(input));
      if (typeof out === "string") {
        report(
          issues,
          violation(
            loc,
            "datetime_from_date_parsing",
            `Input should be a valid datetime or date, ${out}`,
            input,
            {
              error: out,
            },
          ),
        );
        return INVALID;
      }
      return out;
    },
    jsonSchema: () => ({ type: "string", format: "date-time" }),
  };
}
