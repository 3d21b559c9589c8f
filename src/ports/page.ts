import type { Cursor } from "../core/page-token.ts";

export type { Cursor };

export interface PageQuery {
  limit: number;
  after: Cursor | null;
}

export interface Page<T> {
  items: T[];
  /** Cursor of the last item when more items exist, else null. */
  next: Cursor | null;
}
