import { Code, ConnectError } from "@connectrpc/connect";
import { BadRequestSchema } from "../gen/google/rpc/error_details_pb.js";

/**
 * One validation problem, in the vocabulary of the reference (FastAPI/pydantic) so that REST can answer
 * 422 {"detail":[{loc,msg,type,input,ctx?}]} and RPC can answer INVALID_ARGUMENT with field violations.
 */
export interface FieldViolation {
  /** JSON path, starting with "body", "query" or "path" for REST-bound requests. */
  loc: (string | number)[];
  msg: string;
  type: string;
  input: unknown;
  ctx?: Record<string, unknown>;
}

/** INVALID_ARGUMENT carrying every problem found at once. */
export class ValidationError extends ConnectError {
  readonly violations: readonly FieldViolation[];
  constructor(violations: readonly FieldViolation[]) {
    super(
      violations.map((v) => `${fieldPath(v.loc)}: ${v.msg}`).join("; "),
      Code.InvalidArgument,
      undefined,
      [
        {
          desc: BadRequestSchema,
          value: {
            fieldViolations: violations.map((v) => ({
              field: fieldPath(v.loc),
              description: v.msg,
              reason: v.type,
            })),
          },
        },
      ],
    );
    this.violations = violations;
  }

  // ConnectError's own Symbol.hasInstance accepts any error shaped like a ConnectError; keep instanceof exact
  // for this subclass by checking the prototype chain.
  static override [Symbol.hasInstance](v: unknown): boolean {
    return (
      typeof v === "object" && v !== null && Object.prototype.isPrototypeOf.call(ValidationError.prototype, v)
    );
  }
}

/** The violation's path as a proto field path, without the REST location prefix: `mcp_config.stdio_servers[0].name`. */
export function fieldPath(loc: readonly (string | number)[]): string {
  const parts = loc[0] === "body" || loc[0] === "query" || loc[0] === "path" ? loc.slice(1) : loc;
  let out = "";
  for (const p of parts) out += typeof p === "number" ? `[${p}]` : out === "" ? p : `.${p}`;
  return out;
}

export function invalid(
  loc: (string | number)[],
  msg: string,
  type: string,
  input: unknown,
  ctx?: Record<string, unknown>,
): ValidationError {
  return new ValidationError([ctx ? { loc, msg, type, input, ctx } : { loc, msg, type, input }]);
}

export const notFound = (message = "Not Found"): ConnectError => new ConnectError(message, Code.NotFound);
export const alreadyExists = (message: string): ConnectError => new ConnectError(message, Code.AlreadyExists);
export const unauthenticated = (message = "Unauthorized"): ConnectError =>
  new ConnectError(message, Code.Unauthenticated);
export const unavailable = (message: string): ConnectError => new ConnectError(message, Code.Unavailable);
export const failedPrecondition = (message: string): ConnectError =>
  new ConnectError(message, Code.FailedPrecondition);
export const resourceExhausted = (message: string): ConnectError =>
  new ConnectError(message, Code.ResourceExhausted);

/** Raised by storage adapters when the database cannot be reached; maps to UNAVAILABLE / 503. */
export class StorageUnavailableError extends ConnectError {
  constructor(cause: unknown) {
    super("Storage unavailable", Code.Unavailable, undefined, undefined, cause);
  }

  static override [Symbol.hasInstance](v: unknown): boolean {
    return (
      typeof v === "object" &&
      v !== null &&
      Object.prototype.isPrototypeOf.call(StorageUnavailableError.prototype, v)
    );
  }
}
