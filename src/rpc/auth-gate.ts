import type { HandlerContext } from "@connectrpc/connect";
import { type Caller, callerKey } from "../core/context.ts";
import { unauthenticated } from "../core/errors.ts";

/** Resolves the caller of a session key (null: unknown or revoked); synchronously when no storage call is needed. */
export type Authenticate = (key: string | undefined) => Caller | null | Promise<Caller | null>;
/** Throws RESOURCE_EXHAUSTED when the caller is over its rate limit. */
export type Admit = (caller: Caller) => void;

/**
 * Connect / gRPC-Web auth as connect's request gate: header x-session-api-key → caller in the context values,
 * before the request body is read (a rejected call is never parsed), synchronously for a cached key.
 */
export function createAuthGate(
  authenticate: Authenticate,
  admit: Admit,
): (ctx: HandlerContext) => void | Promise<void> {
  const admitted = (ctx: HandlerContext, caller: Caller | null): void => {
    if (caller === null) throw unauthenticated();
    admit(caller);
    ctx.values.set(callerKey, caller);
  };
  return (ctx) => {
    const caller = authenticate(ctx.requestHeader.get("x-session-api-key") ?? undefined);
    if (caller instanceof Promise) return caller.then((c) => admitted(ctx, c));
    admitted(ctx, caller);
  };
}
