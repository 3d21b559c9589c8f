import { type FieldViolation, ValidationError } from "../core/errors.ts";
import type { PageTokens } from "../core/page-token.ts";
import type { Cursor } from "../ports/page.ts";

export const MAX_LIMIT = 100;
export const MAX_BATCH = 100;

/**
 * Validates paging parameters of a search (limit 1..100, default 100; a page_id this server issued for this
 * listing) and returns the keyset cursor. INVALID_ARGUMENT on ["query","limit"] / ["query","page_id"].
 */
export function readPage(
  tokens: PageTokens,
  scope: string,
  pageId: string | undefined,
  limit: number | undefined,
): { limit: number; after: Cursor | null } {
  const issues: FieldViolation[] = [];
  const l = limit ?? MAX_LIMIT;
  if (l < 1)
    issues.push({
      type: "greater_than_equal",
      loc: ["query", "limit"],
      msg: "Input should be greater than or equal to 1",
      input: String(l),
      ctx: { ge: 1 },
    });
  else if (l > MAX_LIMIT)
    issues.push({
      type: "less_than_equal",
      loc: ["query", "limit"],
      msg: `Input should be less than or equal to ${MAX_LIMIT}`,
      input: String(l),
      ctx: { le: MAX_LIMIT },
    });
  let after: Cursor | null = null;
  if (pageId !== undefined && pageId !== "") {
    after = tokens.decode(pageId, scope);
    if (after === null)
      issues.push({
        type: "value_error",
        loc: ["query", "page_id"],
        msg: "Value error, page_id was not issued by this server for this listing",
        input: pageId,
        ctx: { error: {} },
      });
  }
  if (issues.length > 0) throw new ValidationError(issues);
  return { limit: l, after };
}

/** INVALID_ARGUMENT when a batch get names more than 100 ids or none. */
export function checkBatch(ids: readonly string[], param: string): void {
  if (ids.length === 0)
    throw new ValidationError([
      { type: "missing", loc: ["query", param], msg: "Field required", input: null },
    ]);
  if (ids.length > MAX_BATCH) {
    throw new ValidationError([
      {
        type: "too_long",
        loc: ["query", param],
        msg: `List should have at most ${MAX_BATCH} items after validation, not ${ids.length}`,
        input: ids,
        ctx: { field_type: "List", max_length: MAX_BATCH, actual_length: ids.length },
      },
    ]);
  }
}
