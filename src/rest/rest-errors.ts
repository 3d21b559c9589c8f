import { Code, ConnectError } from "@connectrpc/connect";
import { type FieldViolation, ValidationError } from "../core/errors.ts";

/**
 * Error body dialects of the reference: the legacy /api handlers answer {"error": ...} (and {"message": ...} for
 * "already exists"), the V1 routes and auth answer FastAPI's {"detail": ...}.
 */
export type Dialect = "legacy" | "v1" | "git";

export interface RestError {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
}

const STATUS: Partial<Record<Code, number>> = {
  [Code.InvalidArgument]: 422,
  [Code.Unauthenticated]: 401,
  [Code.PermissionDenied]: 403,
  [Code.NotFound]: 404,
  [Code.AlreadyExists]: 400,
  [Code.FailedPrecondition]: 409,
  [Code.Aborted]: 409,
  [Code.ResourceExhausted]: 429,
  [Code.Unavailable]: 503,
  [Code.DeadlineExceeded]: 504,
  [Code.Unimplemented]: 501,
  [Code.Canceled]: 499,
};

/** loc of a service-level violation, prefixed with where the REST route bound that field from. */
function restLoc(loc: FieldViolation["loc"], location: "body" | "query" | "path"): FieldViolation["loc"] {
  const first = loc[0];
  return first === "body" || first === "query" || first === "path" ? loc : [location, ...loc];
}

/** FastAPI's 422 body: every problem, in order. */
export function validationBody(
  violations: readonly FieldViolation[],
  location: "body" | "query" | "path" = "body",
) {
  return {
    detail: violations.map((v) => {
      const item: Record<string, unknown> = {
        type: v.type,
        loc: restLoc(v.loc, location),
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
): RestError {
  if (err instanceof ValidationError) return { status: 422, body: validationBody(err.violations, location) };
  if (!(err instanceof ConnectError)) return { status: 500, body: { detail: "Internal Server Error" } };
  const status = STATUS[err.code] ?? 500;
  if (status === 500) return { status, body: { detail: "Internal Server Error" } };
  const message = err.rawMessage;
  if (dialect === "git") return gitError(err, status, location);
  if (err.code === Code.ResourceExhausted) {
    return { status, body: { message: "Too many requests" }, headers: { "retry-after": "1" } };
  }
  if (err.code === Code.InvalidArgument) {
    return {
      status,
      body: { detail: [{ type: "value_error", loc: [location], msg: message, input: null }] },
    };
  }
  if (dialect === "v1") {
    return { status, body: { detail: err.code === Code.NotFound ? "Not Found" : message } };
  }
  if (err.code === Code.AlreadyExists) return { status, body: { message } };
  return { status, body: { error: message } };
}

/**
 * The /api/user git routes: as the reference, a rejected or missing provider token is 401 and an unsupported
 * provider 400, with the message as a JSON string; rate limits (429, Retry-After from the provider) and
 * unreachable providers (503) answer {"error": message}.
 */
function gitError(err: ConnectError, status: number, location: "body" | "query" | "path"): RestError {
  const message = err.rawMessage;
  if (err.code === Code.Unauthenticated) return { status, body: message };
  if (err.code === Code.InvalidArgument) {
    if (err.details.length === 0) return { status: 400, body: message };
    return {
      status: 422,
      body: { detail: [{ type: "value_error", loc: [location], msg: message, input: null }] },
    };
  }
  if (err.code === Code.ResourceExhausted) {
    return {
      status,
      body: { error: message },
      headers: { "retry-after": err.metadata.get("retry-after") ?? "1" },
    };
  }
  return { status, body: { error: message } };
}

/**
 * Errors Fastify raises before a handler runs (body over 1 MiB, a bad Content-Length, ...): 413 for an oversized
 * body, else the framework's own 4xx status with its message, always as JSON. null for anything else.
 */
export function frameworkError(err: unknown): RestError | null {
  if ((err as { code?: unknown }).code === "FST_ERR_CTP_BODY_TOO_LARGE") {
    return { status: 413, body: { detail: "Request body too large (limit 1 MiB)" } };
  }
  const status = (err as { statusCode?: unknown }).statusCode;
  if (typeof status === "number" && status >= 400 && status < 500) {
    return { status, body: { detail: (err as Error).message } };
  }
  return null;
}
