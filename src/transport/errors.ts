import { Code, ConnectError } from "@connectrpc/connect";

/**
 * The one error table of every transport: a code's HTTP status (REST and Connect answer the same) and its gRPC
 * status (the code itself: connect's codes are gRPC's numbers). Codes missing here are server faults (500).
 */
const HTTP_STATUS: Partial<Record<Code, number>> = {
  [Code.InvalidArgument]: 422,
  [Code.Unauthenticated]: 401,
  [Code.PermissionDenied]: 403,
  [Code.NotFound]: 404,
  [Code.AlreadyExists]: 400,
  [Code.FailedPrecondition]: 409,
  [Code.Aborted]: 409,
  [Code.OutOfRange]: 400,
  [Code.ResourceExhausted]: 429,
  [Code.Unavailable]: 503,
  [Code.DeadlineExceeded]: 504,
  [Code.Unimplemented]: 501,
  [Code.Canceled]: 499,
};

/**
 * The HTTP status of a code in the Connect protocol (its specification's table; REST's differs where the reference
 * answers otherwise, e.g. 422 for invalid arguments).
 */
const CONNECT_HTTP_STATUS: Record<Code, number> = {
  [Code.Canceled]: 499,
  [Code.Unknown]: 500,
  [Code.InvalidArgument]: 400,
  [Code.DeadlineExceeded]: 504,
  [Code.NotFound]: 404,
  [Code.AlreadyExists]: 409,
  [Code.PermissionDenied]: 403,
  [Code.ResourceExhausted]: 429,
  [Code.FailedPrecondition]: 400,
  [Code.Aborted]: 409,
  [Code.OutOfRange]: 400,
  [Code.Unimplemented]: 501,
  [Code.Internal]: 500,
  [Code.Unavailable]: 503,
  [Code.DataLoss]: 500,
  [Code.Unauthenticated]: 401,
};

/** What a client is told of an internal error, on every protocol (the cause goes to the log). */
export const INTERNAL_MESSAGE = "Internal Server Error";

/** The REST status of a code (500 for server faults). */
export function httpStatusOf(code: Code): number {
  return HTTP_STATUS[code] ?? 500;
}

/** The HTTP status of a code in the Connect protocol. */
export function connectHttpStatusOf(code: Code): number {
  return CONNECT_HTTP_STATUS[code] ?? 500;
}

/** The gRPC status number of a code. */
export function grpcStatusOf(code: Code): number {
  return code;
}

/** True when an error is a server fault: anything but a ConnectError with a client-facing code. */
export function isInternal(err: unknown): boolean {
  if (!(err instanceof ConnectError)) return true;
  return err.code === Code.Internal || err.code === Code.Unknown || err.code === Code.DataLoss;
}

/**
 * The error as every transport answers it: a ConnectError with a client-facing code passes through; anything else
 * becomes INTERNAL with a generic message (its cause kept for the log, never sent).
 */
export function publicError(err: unknown): ConnectError {
  if (!isInternal(err)) return err as ConnectError;
  return new ConnectError(INTERNAL_MESSAGE, Code.Internal, undefined, undefined, err);
}

/**
 * Error body dialects of the reference: the legacy /api handlers answer {"error": ...} (and {"message": ...} for
 * "already exists"), the V1 routes and auth answer FastAPI's {"detail": ...}.
 */
export type Dialect = "legacy" | "v1" | "git";

/** An error as REST answers it. */
export interface RestError {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
}

/**
 * A non-validation error in a REST dialect (the FastAPI 422 translator of validation errors is the REST edge's,
 * see rest-errors.ts). Internal errors are masked.
 */
export function restDialectError(err: unknown, dialect: Dialect, location: string): RestError {
  const ce = publicError(err);
  const status = httpStatusOf(ce.code);
  if (status === 500) return { status, body: { detail: INTERNAL_MESSAGE } };
  const message = ce.rawMessage;
  if (dialect === "git") return gitError(ce, status, location);
  if (ce.code === Code.ResourceExhausted) {
    return { status, body: { message }, headers: { "retry-after": "1" } };
  }
  if (ce.code === Code.InvalidArgument) {
    return {
      status,
      body: { detail: [{ type: "value_error", loc: [location], msg: message, input: null }] },
    };
  }
  if (dialect === "v1")
    return { status, body: { detail: ce.code === Code.NotFound ? "Not Found" : message } };
  if (ce.code === Code.AlreadyExists) return { status, body: { message } };
  return { status, body: { error: message } };
}

/**
 * The /api/user git routes: as the reference, a rejected or missing provider token is 401 and an unsupported
 * provider 400, with the message as a JSON string; provider rate limits (429, with Retry-After when the provider
 * said when) and unreachable providers (503) answer {"error": message}.
 */
function gitError(err: ConnectError, status: number, location: string): RestError {
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
    // The provider's wait when it said one; no made-up Retry-After otherwise.
    const retryAfter = err.metadata.get("retry-after");
    return {
      status,
      body: { error: message },
      ...(retryAfter === null ? {} : { headers: { "retry-after": retryAfter } }),
    };
  }
  return { status, body: { error: message } };
}
