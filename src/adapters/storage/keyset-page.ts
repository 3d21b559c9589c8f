import type { Cursor, Page } from "../../ports/page.ts";

/**
 * Checks a page size given to a repository: a positive safe integer (services bound it further, e.g. 1..100).
 *
 * @throws RangeError for anything else, so that a bug never turns into an unbounded or empty read.
 */
export function checkPageLimit(limit: number): void {
  if (!Number.isSafeInteger(limit) || limit < 1) {
    throw new RangeError(`page limit must be a positive integer, got ${String(limit)}`);
  }
}

/**
 * Turns rows fetched in listing order with `LIMIT limit + 1` into a page: the first `limit` rows, and the cursor of
 * the last of them when the extra row proves that more items exist.
 */
export function toKeysetPage<T extends { createdAt: Date; id: string }>(rows: T[], limit: number): Page<T> {
  if (rows.length <= limit) return { items: rows, next: null };
  const items = rows.slice(0, limit);
  const last = items[items.length - 1];
  const next: Cursor | null = last ? { createdAt: new Date(last.createdAt.getTime()), id: last.id } : null;
  return { items, next };
}
