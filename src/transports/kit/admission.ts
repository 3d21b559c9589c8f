import type { DescMethod } from "@bufbuild/protobuf";
import { type ContextValues, createContextKey } from "@connectrpc/connect";
import { type Caller, callerValues } from "../../core/context.ts";
import { unauthenticated } from "../../core/errors.ts";

/** Resolves the caller of a session key (null: unknown or revoked); synchronously when no storage call is needed. */
export type Authenticate = (key: string | undefined) => Caller | null | Promise<Caller | null>;
/** Throws RESOURCE_EXHAUSTED when the caller is over its rate limit. */
export type Admit = (caller: Caller) => void;

/**
 * Per-method admission after the caller's (throws to refuse): e.g. the user's write rate for the methods that write
 * its user document, checked before the request message is read or decoded.
 */
export type MethodGate = (caller: Caller, method: DescMethod) => void;

/**
 * Authentication and admission of a request, the same for REST, Connect, gRPC-Web and gRPC: the caller of a
 * session key, UNAUTHENTICATED for a missing, unknown or revoked key, RESOURCE_EXHAUSTED over the rate limit, and,
 * given the method called, whatever its gate refuses (a transport that knows the method before the request message
 * is decoded passes it, so that a refused call is never decoded).
 * Synchronous when the key is cached, so the transports add no promise turn then.
 */
export type Admission = (key: string | undefined, method?: DescMethod) => Caller | Promise<Caller>;

export function createAdmission(authenticate: Authenticate, admit: Admit, gate?: MethodGate): Admission {
  const admitted = (caller: Caller | null, method: DescMethod | undefined): Caller => {
    if (caller === null) throw unauthenticated();
    admit(caller);
    if (method !== undefined) gate?.(caller, method);
    return caller;
  };
  return (key, method) => {
    const caller = authenticate(key);
    return caller instanceof Promise ? caller.then((c) => admitted(c, method)) : admitted(caller, method);
  };
}

/** The session key of a streaming call (streams re-check it while they run); set only for streaming methods. */
export const sessionKeyValue = createContextKey<string | undefined>(undefined, {
  description: "session key",
});

/** The context values of an admitted call: the caller, and for a streaming method its key. */
export function callValues(caller: Caller, key: string | undefined, streaming: boolean): ContextValues {
  const values = callerValues(caller);
  if (streaming) values.set(sessionKeyValue, key);
  return values;
}
