import type { Page, PageQuery } from "../../../src/ports/page.ts";

/** Ordering of every listing port: createdAt, then id (code-unit order), descending unless `ascending`. */
export function byCreated<T extends { createdAt: Date; id: string }>(ascending: boolean) {
  const dir = ascending ? 1 : -1;
  return (a: T, b: T): number =>
    dir * (a.createdAt.getTime() - b.createdAt.getTime() || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/** One keyset page of `sorted` (already in listing order), as the storage adapters page. */
export function keysetPage<T extends { createdAt: Date; id: string }>(
  sorted: readonly T[],
  page: PageQuery,
  ascending = false,
): Page<T> {
  const compare = byCreated<T>(ascending);
  const after = page.after;
  const rest =
    after === null
      ? sorted
      : sorted.filter((r) => compare(r, { ...r, createdAt: after.createdAt, id: after.id }) > 0);
  const items = rest.slice(0, page.limit);
  const last = items.at(-1);
  const next =
    rest.length > page.limit && last !== undefined ? { createdAt: last.createdAt, id: last.id } : null;
  return { items, next };
}
