import type { FieldViolation } from "../../core/errors.ts";
import { str } from "../../core/model/scalars.ts";

/** Longest conversation title, in characters after trimming: one rule for start, rename, search and the agent. */
export const MAX_TITLE = 200;

/** The REST model of a title a client gives (start request, rename body): 1..MAX_TITLE characters. */
export const TITLE_MODEL = str({ minLength: 1, maxLength: MAX_TITLE });

/**
 * The violation of a title given by a client (start, rename, title search), or null: 1..MAX_TITLE characters after
 * trimming, in the FastAPI shapes the REST 422 carries.
 */
export function titleViolation(raw: string, loc: (string | number)[]): FieldViolation | null {
  const length = raw.trim().length;
  if (length < 1)
    return {
      type: "string_too_short",
      loc,
      msg: "String should have at least 1 character",
      input: raw,
      ctx: { min_length: 1 },
    };
  if (length > MAX_TITLE)
    return {
      type: "string_too_long",
      loc,
      msg: `String should have at most ${MAX_TITLE} characters`,
      input: raw,
      ctx: { max_length: MAX_TITLE },
    };
  return null;
}
