import type { HandlerContext } from "@connectrpc/connect";
import { Code, ConnectError } from "@connectrpc/connect";
import { requireCaller } from "../../core/context.ts";
import { resourceExhausted } from "../../core/errors.ts";
import { type Authenticate, sessionKeyValue } from "./admission.ts";
import { withSignal } from "./handler-context.ts";
import type { ServiceBinding } from "./service-binding.ts";

export interface StreamLimitOptions {
  /** Open streams per API key. */
  perKey: number;
  /** Open streams on the whole server. */
  total: number;
  /** How often a running stream checks that its key is still valid (at most the key cache period). */
  recheckMs: number;
  authenticate: Authenticate;
}

type Method = (req: unknown, ctx: HandlerContext) => AsyncIterable<unknown>;

/**
 * Caps on server-streaming calls, the same on every protocol: at most `perKey` open streams per API key and
 * `total` on the server (RESOURCE_EXHAUSTED beyond), and a stream whose key is revoked is ended with
 * UNAUTHENTICATED at its next check. Applied to the service bindings, so every transport gets it.
 */
export class StreamLimits {
  readonly #options: StreamLimitOptions;
  readonly #perKey = new Map<string, number>();
  #total = 0;

  constructor(options: StreamLimitOptions) {
    this.#options = options;
  }

  /** Open streams (all keys). */
  get open(): number {
    return this.#total;
  }

  /** The binding with every server-streaming method guarded. */
  guard(binding: ServiceBinding): ServiceBinding {
    const streaming = binding.desc.methods.filter((m) => m.methodKind === "server_streaming");
    if (streaming.length === 0) return binding;
    const impl: Record<string, unknown> = {};
    for (const m of binding.desc.methods) {
      const method = binding.impl[m.localName] as Method | undefined;
      if (method === undefined) continue;
      const fn = method.bind(binding.impl);
      impl[m.localName] = streaming.includes(m)
        ? (req: unknown, ctx: HandlerContext) => this.#run(fn, req, ctx)
        : fn;
    }
    return { desc: binding.desc, impl: impl as ServiceBinding["impl"] };
  }

  async *#run(fn: Method, req: unknown, ctx: HandlerContext): AsyncIterable<unknown> {
    const { keyId } = requireCaller(ctx);
    const release = this.#acquire(keyId);
    const key = ctx.values.get(sessionKeyValue);
    const revoked = new AbortController();
    const timer = setInterval(() => {
      void Promise.resolve()
        .then(() => this.#options.authenticate(key))
        .then(
          (caller) => {
            if (caller === null || caller.keyId !== keyId)
              revoked.abort(new ConnectError("API key revoked", Code.Unauthenticated));
          },
          () => {}, // storage unreachable: the key stays valid until it can be checked
        );
    }, this.#options.recheckMs);
    timer.unref();
    try {
      for await (const message of fn(req, withSignal(ctx, AbortSignal.any([ctx.signal, revoked.signal])))) {
        if (revoked.signal.aborted) break;
        yield message;
      }
      if (revoked.signal.aborted) throw revoked.signal.reason;
    } catch (err) {
      throw revoked.signal.aborted ? revoked.signal.reason : err;
    } finally {
      clearInterval(timer);
      release();
    }
  }

  #acquire(keyId: string): () => void {
    const n = this.#perKey.get(keyId) ?? 0;
    if (n >= this.#options.perKey)
      throw resourceExhausted(`Too many open streams for this API key (limit ${this.#options.perKey})`);
    if (this.#total >= this.#options.total)
      throw resourceExhausted(`Too many open streams on the server (limit ${this.#options.total})`);
    this.#perKey.set(keyId, n + 1);
    this.#total++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#total--;
      const left = (this.#perKey.get(keyId) ?? 1) - 1;
      if (left === 0) this.#perKey.delete(keyId);
      else this.#perKey.set(keyId, left);
    };
  }
}
