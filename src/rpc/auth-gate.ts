import type { HandlerContext } from "@connectrpc/connect";
import { type Caller, callerKey } from "../core/context.ts";
import { unauthenticated } from "../core/errors.ts";
import { headerKeyOf, type KeyOf } from "../transport/browser-session.ts";

/** Resolves the caller of a session key (null: unknown or revoked); synchronously when no storage call is needed. */
export type Authenticate = (key: string | undefined) => Caller | null | Promise<Caller | null>;
/** Throws RESOURCE_EXHAUSTED when the caller is over its rate limit. */
export type Admit = (caller: Caller) => void;

/**
 * The admitted caller of a session key: UNAUTHENTICATED for a missing, unknown or revoked key, RESOURCE_EXHAUSTED
 * over the rate limit. Synchronous when the key is cached, so the transports add no promise turn then.
 */
export function admittedCaller(
  authenticate: Authenticate,
  admit: Admit,
  key: string | undefined,
): Caller | Promise<Caller> {
  const admitted = (caller: Caller | null): Caller => {
    if (caller === null) throw unauthenticated();
    admit(caller);
    return caller;
  };
  const caller = authenticate(key);
  return caller instanceof Promise ? caller.then(admitted) : admitted(caller);
}

/**
 * Connect / gRPC-Web auth as connect's request gate: header x-session-api-key (or a browser session) → caller in
 * the context values,
 * before the request body is read (a rejected call is never parsed).
 */
export function createAuthGate(
  authenticate: Authenticate,
  admit: Admit,
  keyOf: KeyOf = headerKeyOf,
): (ctx: HandlerContext) => void | Promise<void> {
  return (ctx) => {
    const caller = admittedCaller(
      authenticate,
      admit,
      keyOf(ctx.requestMethod, (name) => ctx.requestHeader.get(name) ?? undefined),
    );
    if (caller instanceof Promise)
      return caller.then((c) => {
        ctx.values.set(callerKey, c);
      });
    ctx.values.set(callerKey, caller);
  };
}
