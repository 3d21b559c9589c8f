import { createContextKey, type HandlerContext } from "@connectrpc/connect";
import { unauthenticated } from "./errors.ts";

/** The authenticated caller of a request. */
export interface Caller {
  userId: string;
  /** Id of the API key used (for logs and rate limits; never the key itself). */
  keyId: string;
}

/** Set by the transports' auth step (REST hook, Connect interceptor, gRPC adapter) before a service runs. */
export const callerKey = createContextKey<Caller | undefined>(undefined, {
  description: "authenticated caller",
});

/** The caller of this request; UNAUTHENTICATED when the transport did not authenticate one. */
export function requireCaller(ctx: HandlerContext): Caller {
  const caller = ctx.values.get(callerKey);
  if (caller === undefined) throw unauthenticated();
  return caller;
}
