import type { FastifyReply } from "fastify";
import { type FieldViolation, ValidationError } from "../../core/errors.ts";
import { type Dialect, type RestError, restDialectError } from "../kit/errors.ts";
import { DEFAULT_LIMITS } from "../kit/limits.ts";

export type { Dialect, RestError };

/** Reference headers on every API answer. */
export const NO_CACHE = {
  "cache-control": "no-cache, no-store, must-revalidate, max-age=0",
  pragma: "no-cache",
  expires: "0",
} as const;

const JSON_CONTENT_TYPE = "application/json; charset=utf-8";

/** Where a route bound service fields from when not `location` + the field name (e.g. a path parameter). */
export type FieldLocations = Readonly<Record<string, FieldViolation["loc"]>>;

/** loc of a service-level violation, prefixed with where the REST route bound that field from. */
function restLoc(
  loc: FieldViolation["loc"],
  location: "body" | "query" | "path",
  fields?: FieldLocations,
): FieldViolation["loc"] {
  const first = loc[0];
  if (first === "body" || first === "query" || first === "path") return loc;
  const bound = first === undefined ? undefined : fields?.[String(first)];
  return bound === undefined ? [location, ...loc] : [...bound, ...loc.slice(1)];
}

/** FastAPI's 422 body: every problem, in order. */
export function validationBody(
  violations: readonly FieldViolation[],
  location: "body" | "query" | "path" = "body",
  fields?: FieldLocations,
) {
  return {
    detail: violations.map((v) => {
      const item: Record<string, unknown> = {
        type: v.type,
        loc: restLoc(v.loc, location, fields),
        msg: v.msg,
        input: v.input,
      };
      if (v.ctx !== undefined) item.ctx = v.ctx;
      return item;
    }),
  };
}

/** Maps any error to the route's dialect. Unexpected errors become 500 {"detail":"Internal Server Error"}. */
export function toRestError(
  err: unknown,
  dialect: Dialect,
  location: "body" | "query" | "path" = "body",
  fields?: FieldLocations,
): RestError {
  if (err instanceof ValidationError)
    return { status: 422, body: validationBody(err.violations, location, fields) };
  return restDialectError(err, dialect, location);
}

/**
 * Errors Fastify raises before a handler runs (body over 1 MiB, a bad Content-Length, ...): 413 for an oversized
 * body, else the framework's own 4xx status with its message, always as JSON. null for anything else.
 */
export function frameworkError(
  err: unknown,
  maxBodyBytes: number = DEFAULT_LIMITS.maxMessageBytes,
): RestError | null {
  if ((err as { code?: unknown }).code === "FST_ERR_CTP_BODY_TOO_LARGE") {
    return { status: 413, body: { detail: `Request body too large (limit ${sizeText(maxBodyBytes)})` } };
  }
  const status = (err as { statusCode?: unknown }).statusCode;
  if (typeof status === "number" && status >= 400 && status < 500) {
    return { status, body: { detail: (err as Error).message } };
  }
  return null;
}

/** A byte count as people write it: "1 MiB", "512 KiB", "100 bytes". */
function sizeText(bytes: number): string {
  if (bytes % 1048576 === 0) return `${bytes / 1048576} MiB`;
  if (bytes % 1024 === 0) return `${bytes / 1024} KiB`;
  return `${bytes} bytes`;
}

/** How a REST error is answered where it was raised. */
export interface RestErrorOptions {
  dialect: Dialect;
  location?: "body" | "query" | "path";
  fields?: FieldLocations;
  /** The body limit, named in a 413. */
  maxBodyBytes?: number;
}

/**
 * Any error raised while serving a REST request → its answer: Fastify's own 4xx (413 for an oversized body), FastAPI's
 * 422 for field violations, the route's dialect for the rest, internal errors masked (error table: transport/errors.ts).
 */
export function restError(err: unknown, opts: RestErrorOptions = { dialect: "v1" }): RestError {
  return (
    frameworkError(err, opts.maxBodyBytes) ??
    toRestError(err, opts.dialect, opts.location ?? "body", opts.fields)
  );
}

/** Maps the error (see restError) and writes the answer. */
export function sendRestError(reply: FastifyReply, err: unknown, opts?: RestErrorOptions): FastifyReply {
  return writeRestError(reply, restError(err, opts));
}

/**
 * The one place REST writes an error answer: the status, the reference's no-cache headers and the error's own, the
 * body as JSON (a bare message too: the git routes answer JSON strings, as the reference). A reply already taken
 * over by a stream that has not begun its answer is written on the raw response.
 */
export function writeRestError(reply: FastifyReply, e: RestError): FastifyReply {
  const headers = { ...NO_CACHE, ...e.headers };
  if (reply.sent) {
    if (!reply.raw.headersSent)
      reply.raw
        .writeHead(e.status, { "content-type": "application/json", ...headers })
        .end(JSON.stringify(e.body));
    return reply;
  }
  reply.code(e.status).headers(headers);
  if (typeof e.body === "string")
    return reply.header("content-type", JSON_CONTENT_TYPE).send(JSON.stringify(e.body));
  return reply.send(e.body);
}
