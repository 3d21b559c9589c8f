import { Code, ConnectError } from "@connectrpc/connect";

/**
 * The one error table of every transport: for each code, the HTTP status REST answers (the reference's, e.g. 422 for
 * invalid arguments) and the one the Connect protocol answers (its specification's). The gRPC status is the code
 * itself (connect's codes are gRPC's numbers). A REST status of 500 marks a server fault.
 */
const ERROR_TABLE: Readonly<Record<Code, { rest: number; connect: number }>> = {
  [Code.Canceled]: { rest: 499, connect: 499 },
  [Code.Unknown]: { rest: 500, connect: 500 },
  [Code.InvalidArgument]: { rest: 422, connect: 400 },
  [Code.DeadlineExceeded]: { rest: 504, connect: 504 },
  [Code.NotFound]: { rest: 404, connect: 404 },
  [Code.AlreadyExists]: { rest: 400, connect: 409 },
  [Code.PermissionDenied]: { rest: 403, connect: 403 },
  [Code.ResourceExhausted]: { rest: 429, connect: 429 },
  [Code.FailedPrecondition]: { rest: 409, connect: 400 },
  [Code.Aborted]: { rest: 409, connect: 409 },
  [Code.OutOfRange]: { rest: 400, connect: 400 },
  [Code.Unimplemented]: { rest: 501, connect: 501 },
  [Code.Internal]: { rest: 500, connect: 500 },
  [Code.Unavailable]: { rest: 503, connect: 503 },
  [Code.DataLoss]: { rest: 500, connect: 500 },
  [Code.Unauthenticated]: { rest: 401, connect: 401 },
};

/** What a client is told of an internal error, on every protocol (the cause goes to the log). */
export const INTERNAL_MESSAGE = "Internal Server Error";

/** The REST status of a code (500 for server faults). */
export function httpStatusOf(code: Code): number {
  return ERROR_TABLE[code]?.rest ?? 500;
}

/** The HTTP status of a code in the Connect protocol. */
export function connectHttpStatusOf(code: Code): number {
  return ERROR_TABLE[code]?.connect ?? 500;
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
