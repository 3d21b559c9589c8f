/**
 * `GET /api/conversations/{id}/events/search` (and `/count`, which pages through it): a conversation's events
 * filtered by kind, source, time and text, in time order either way, a page at a time.
 */
import type { Json } from "./json.ts";
import { type AgentViolation, unprocessable } from "./replies.ts";

/** Most events per page, and the default. */
export const MAX_PAGE = 100;

/** A page of the events matching the query (`items`, `next_page_id`); 422 for a bad query. */
export function searchEvents(events: readonly Json[], q: URLSearchParams): Json {
  const violations: AgentViolation[] = [];
  const limitRaw = q.get("limit");
  let limit = MAX_PAGE;
  if (limitRaw !== null) {
    const n = Number(limitRaw);
    if (!Number.isInteger(n) || n < 1 || n > MAX_PAGE)
      violations.push({
        type: "int_range",
        loc: ["query", "limit"],
        msg: `Input should be an integer from 1 to ${MAX_PAGE}`,
        input: limitRaw,
      });
    else limit = n;
  }
  const order = q.get("sort_order") ?? "TIMESTAMP";
  if (order !== "TIMESTAMP" && order !== "TIMESTAMP_DESC")
    violations.push({
      type: "enum",
      loc: ["query", "sort_order"],
      msg: "Input should be 'TIMESTAMP' or 'TIMESTAMP_DESC'",
      input: order,
    });
  const gte = parseTime(q.get("timestamp__gte"), "timestamp__gte", violations);
  const lt = parseTime(q.get("timestamp__lt"), "timestamp__lt", violations);
  if (violations.length > 0) throw unprocessable(violations);
  const kind = q.get("kind");
  const source = q.get("source");
  const body = q.get("body")?.toLowerCase() ?? null;
  let list = events.filter((e) => {
    if (kind !== null && e.kind !== kind && !kind.endsWith(`.${String(e.kind)}`)) return false;
    if (source !== null && e.source !== source) return false;
    const t = Date.parse(`${String(e.timestamp)}Z`);
    if (gte !== null && t < gte) return false;
    if (lt !== null && t >= lt) return false;
    if (body !== null && !JSON.stringify(e).toLowerCase().includes(body)) return false;
    return true;
  });
  if (order === "TIMESTAMP_DESC") list = list.slice().reverse();
  const pageId = q.get("page_id");
  let from = 0;
  if (pageId !== null) {
    from = list.findIndex((e) => e.id === pageId);
    if (from < 0) from = list.length;
  }
  const items = list.slice(from, from + limit);
  const next = list[from + limit];
  return { items, next_page_id: next ? next.id : null };
}

function parseTime(raw: string | null, field: string, violations: AgentViolation[]): number | null {
  if (raw === null) return null;
  const hasOffset = /(Z|[+-]\d\d:?\d\d)$/i.test(raw);
  const t = Date.parse(hasOffset ? raw : `${raw}Z`);
  if (Number.isNaN(t)) {
    violations.push({
      type: "datetime_parsing",
      loc: ["query", field],
      msg: "Input should be a valid datetime",
      input: raw,
    });
    return null;
  }
  return t;
}
