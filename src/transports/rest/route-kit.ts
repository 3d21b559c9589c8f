/**
 * What the REST route tables share besides `route()` (rest-route.ts): reading query and path parameters as
 * FastAPI does, the OpenAPI docs of paged searches and batch gets, and timestamps as the reference writes them.
 */
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { invalid } from "../../core/errors.ts";
import type { RouteDocs } from "./schema-builder.ts";

/** Query parameters of every search. */
export const PAGE_QUERY: NonNullable<RouteDocs["query"]> = {
  page_id: { schema: { type: "string" }, description: "Opaque cursor from a previous next_page_id" },
  limit: { schema: { type: "integer", minimum: 1, maximum: 100, default: 100 } },
};

/** A required, repeatable id parameter of a batch get (at most 100). */
export const idsQuery = (name: string): NonNullable<RouteDocs["query"]> => ({
  [name]: { schema: { type: "array", items: { type: "string" }, maxItems: 100 }, required: true },
});

/** The entries whose value is not undefined (absent query parameters must stay absent for the model). */
export function present<T extends Record<string, unknown>>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** A query parameter that may be repeated: always a list. */
export function many(value: string | string[] | undefined): string[] {
  if (value === undefined) return [];
  return Array.isArray(value) ? value : [value];
}

/** A single-valued query parameter: the last one wins (as FastAPI). */
export function single(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value.at(-1) : value;
}

/** A path parameter; 422 "Field required" at ["path", name] when it is empty. */
export function pathParam(value: string | undefined, name: string): string {
  if (value === undefined || value.length === 0)
    throw invalid(["path", name], "Field required", "missing", null);
  return value;
}

/** ISO-8601 with a trailing Z, as pydantic writes UTC. */
export const iso = (t: { seconds: bigint; nanos: number } | undefined): string | null =>
  t === undefined ? null : timestampDate(t as never).toISOString();
