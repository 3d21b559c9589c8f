import type { JsonObject } from "@bufbuild/protobuf";
import { type FieldViolation, ValidationError } from "../../core/errors.ts";
import type { Event } from "../../gen/workspace/v1/event_pb.js";
import type { EventRecord } from "../../ports/event-repository.ts";

/** An event of a webhook batch, checked: what storage indexes, and the event as JSON text. */
export interface IncomingEvent {
  id: string;
  kind: string;
  source: string;
  timestampUs: number;
  json: string;
}

const KIND = /^[A-Za-z_][A-Za-z0-9_]{0,99}$/;
const SOURCES = new Set(["agent", "user", "environment"]);
/** ISO-8601 date-time; the offset is optional (the agent SDK writes local time without one, read as UTC). */
const ISO =
  /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?(?:([Zz])|([+-])(\d{2}):?(\d{2}))?$/;
/** At most this many events in one webhook call. */
export const MAX_EVENTS_PER_CALL = 1000;

/** Microseconds since the epoch of an ISO-8601 date-time, or null when it is not one. */
export function parseTimestampUs(text: string): number | null {
  const m = ISO.exec(text);
  if (m === null) return null;
  const [, y, mo, d, h, mi, s, frac, , sign, oh, om] = m;
  const month = Number(mo);
  const day = Number(d);
  const hour = Number(h);
  const minute = Number(mi);
  const second = Number(s ?? 0);
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 59) return null;
  const ms = Date.UTC(Number(y), month - 1, day, hour, minute, second);
  if (Number.isNaN(ms) || new Date(ms).getUTCDate() !== day) return null;
  const micros = Number((frac ?? "").padEnd(6, "0").slice(0, 6));
  const offsetMin = sign === undefined ? 0 : (sign === "-" ? -1 : 1) * (Number(oh) * 60 + Number(om));
  return (ms - offsetMin * 60_000) * 1000 + micros;
}

/** Microseconds of a protobuf Timestamp. */
export function timestampUsOf(t: { seconds: bigint; nanos: number }): number {
  return Number(t.seconds) * 1_000_000 + Math.floor(t.nanos / 1000);
}

const violation = (loc: (string | number)[], type: string, msg: string, input: unknown): FieldViolation => ({
  loc,
  type,
  msg,
  input,
});

/**
 * The body of an events webhook: a JSON array of agent events, each an object with a string `id`, a `kind` (the
 * event class), a `source` (agent, user or environment) and an ISO-8601 `timestamp`; other fields are kept as they
 * are. INVALID_ARGUMENT listing every problem (nothing is stored then).
 */
export function checkEventBatch(body: unknown): IncomingEvent[] {
  if (!Array.isArray(body))
    throw new ValidationError([violation(["body"], "list_type", "Input should be a valid list", body)]);
  if (body.length > MAX_EVENTS_PER_CALL)
    throw new ValidationError([
      violation(
        ["body"],
        "too_long",
        `List should have at most ${MAX_EVENTS_PER_CALL} items after validation, not ${body.length}`,
        null,
      ),
    ]);
  const issues: FieldViolation[] = [];
  const out: IncomingEvent[] = [];
  body.forEach((e: unknown, i) => {
    if (typeof e !== "object" || e === null || Array.isArray(e)) {
      issues.push(
        violation(["body", i], "model_attributes_type", "Input should be a valid dictionary or object", e),
      );
      return;
    }
    const ev = e as Record<string, unknown>;
    const before = issues.length;
    const { id, kind, source, timestamp } = ev;
    if (typeof id !== "string" || id === "" || id.length > 200)
      issues.push(
        id === undefined
          ? violation(["body", i, "id"], "missing", "Field required", ev)
          : violation(
              ["body", i, "id"],
              "string_type",
              "Input should be a string of 1 to 200 characters",
              id,
            ),
      );
    if (typeof kind !== "string" || !KIND.test(kind))
      issues.push(
        kind === undefined
          ? violation(["body", i, "kind"], "missing", "Field required", ev)
          : violation(
              ["body", i, "kind"],
              "value_error",
              "Value error, kind must be an event class name",
              kind,
            ),
      );
    if (typeof source !== "string" || !SOURCES.has(source))
      issues.push(
        source === undefined
          ? violation(["body", i, "source"], "missing", "Field required", ev)
          : violation(
              ["body", i, "source"],
              "literal_error",
              "Input should be 'agent', 'user' or 'environment'",
              source,
            ),
      );
    const us = typeof timestamp === "string" ? parseTimestampUs(timestamp) : null;
    if (us === null)
      issues.push(
        timestamp === undefined
          ? violation(["body", i, "timestamp"], "missing", "Field required", ev)
          : violation(
              ["body", i, "timestamp"],
              "datetime_from_date_parsing",
              "Input should be a valid datetime",
              timestamp,
            ),
      );
    if (issues.length === before)
      out.push({
        id: id as string,
        kind: kind as string,
        source: source as string,
        timestampUs: us as number,
        json: JSON.stringify(ev),
      });
  });
  if (issues.length > 0) throw new ValidationError(issues);
  return out;
}

/** A stored event as a message; `body` is the event as received. */
export function eventFromRecord(r: EventRecord): Event {
  const seconds = Math.floor(r.timestampUs / 1_000_000);
  return {
    $typeName: "workspace.v1.Event",
    id: r.id,
    conversationId: r.conversationId,
    kind: r.kind,
    timestamp: {
      $typeName: "google.protobuf.Timestamp",
      seconds: BigInt(seconds),
      nanos: (r.timestampUs - seconds * 1_000_000) * 1000,
    },
    body: JSON.parse(r.body) as JsonObject,
  };
}

/** The text of a MessageEvent (its llm_message's text parts), or null. */
export function messageText(json: string): string | null {
  try {
    const e = JSON.parse(json) as { llm_message?: { content?: unknown } };
    const content = e.llm_message?.content;
    if (!Array.isArray(content)) return null;
    const parts = content
      .filter((c): c is { type: string; text: string } => typeof c?.text === "string" && c?.type === "text")
      .map((c) => c.text);
    return parts.length > 0 ? parts.join(" ") : null;
  } catch {
    return null;
  }
}

/** The `source` of an event (agent, user, environment), or null. */
export function eventSource(json: string): string | null {
  try {
    const source = (JSON.parse(json) as { source?: unknown }).source;
    return typeof source === "string" ? source : null;
  } catch {
    return null;
  }
}
