import {
  type ContextKey,
  type ContextValues,
  createContextKey,
  type HandlerContext,
} from "@connectrpc/connect";
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

/**
 * The context values of an authenticated request: connect's ContextValues with the caller already set. One small
 * object per request, instead of createContextValues()'s object with three fresh closures plus a property
 * added under a symbol (a hidden-class change) by set().
 */
class CallerValues implements ContextValues {
  #caller: Caller | undefined;
  #others: Map<symbol, unknown> | undefined;

  constructor(caller: Caller) {
    this.#caller = caller;
  }

  get<T>(key: ContextKey<T>): T {
    if (key === callerKey) return this.#caller as T;
    const others = this.#others;
    return others?.has(key.id) === true ? (others.get(key.id) as T) : key.defaultValue;
  }

  set<T>(key: ContextKey<T>, value: T): this {
    if (key === callerKey) {
      this.#caller = value as Caller | undefined;
    } else {
      this.#others ??= new Map();
      this.#others.set(key.id, value);
    }
    return this;
  }

  delete(key: ContextKey<unknown>): this {
    if (key === callerKey) this.#caller = undefined;
    else this.#others?.delete(key.id);
    return this;
  }
}

export function callerValues(caller: Caller): ContextValues {
  return new CallerValues(caller);
}
