import type { Cursor } from "../../../ports/page.ts";

/** Sort of newest-first listings (createdAt desc, id desc). */
export const NEWEST_FIRST = { createdAt: -1, _id: -1 } as const;
/** Sort of oldest-first listings. */
export const OLDEST_FIRST = { createdAt: 1, _id: 1 } as const;

/** Filter part selecting items strictly after `cursor` in (createdAt, _id) order, descending unless `ascending`. */
export function keysetAfter(
  cursor: Cursor,
  ascending: boolean,
): {
  $or: [
    { createdAt: { $lt: Date } | { $gt: Date } },
    { createdAt: Date; _id: { $lt: string } | { $gt: string } },
  ];
} {
  return ascending
    ? {
        $or: [
          { createdAt: { $gt: cursor.createdAt } },
          { createdAt: cursor.createdAt, _id: { $gt: cursor.id } },
        ],
      }
    : {
        $or: [
          { createdAt: { $lt: cursor.createdAt } },
          { createdAt: cursor.createdAt, _id: { $lt: cursor.id } },
        ],
      };
}
