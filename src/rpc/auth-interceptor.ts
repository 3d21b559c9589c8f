import type { Interceptor } from "@connectrpc/connect";
import { type Caller, callerKey } from "../core/context.ts";
import { unauthenticated } from "../core/errors.ts";

/** Resolves the caller of a session key (null: unknown or revoked); synchronously when no storage call is needed. */
export type Authenticate = (key: string | undefined) => Caller | null | Promise<Caller | null>;
/** Throws RESOURCE_EXHAUSTED when the caller is over its rate limit. */
export type Admit = (caller: Caller) => void;

/** Connect / gRPC-Web auth: header x-session-api-key → caller in the context values. */
export function createAuthInterceptor(authenticate: Authenticate, admit: Admit): Interceptor {
  return (next) => async (req) => {
    const caller = await authenticate(req.header.get("x-session-api-key") ?? undefined);
    if (caller === null) throw unauthenticated();
    admit(caller);
    req.contextValues.set(callerKey, caller);
    return next(req);
  };
}
