/**
 * Keyset cursor for newest-first listings: the (createdAt, id) of the last item of the previous page.
 * Listings are ordered by createdAt descending, then id descending, so paging is stable under inserts.
 */
export interface Cursor {
  createdAt: Date;
  id: string;
}

export interface PageQuery {
  limit: number;
  after: Cursor | null;
}

export interface Page<T> {
  items: T[];
  /** Cursor of the last item when more items exist, else null. */
  next: Cursor | null;
}
