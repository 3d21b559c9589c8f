import type { DescMethod, DescService } from "@bufbuild/protobuf";
import type { ContextValues, HandlerContext } from "@connectrpc/connect";

export interface LazyHandlerContextInit {
  service: DescService;
  method: DescMethod;
  protocolName: string;
  requestMethod: string;
  url: string;
  values: ContextValues;
  /** The request's cancellation signal, or a function making it on first use. */
  signal: AbortSignal | (() => AbortSignal);
  /** The request headers, made on first use (most methods never read them). */
  requestHeader?: () => Headers;
}

/**
 * A HandlerContext for the transports that call service methods directly (REST gateway, grpc-js server).
 *
 * connect's createHandlerContext makes, per call, a deadline AbortController linked to the request signal through
 * event listeners and three Headers objects, ~6 µs that showed up in the REST and gRPC profiles although these
 * transports set no deadline and never read what a service writes into response headers or trailers. Here the
 * headers and, where the transport allows, the signal are made only when a service uses them. No deadline:
 * `timeoutMs()` is undefined, as it was with createHandlerContext given no timeout.
 */
export function lazyHandlerContext(init: LazyHandlerContextInit): HandlerContext {
  let signal = typeof init.signal === "function" ? undefined : init.signal;
  const makeSignal = typeof init.signal === "function" ? init.signal : undefined;
  let requestHeader: Headers | undefined;
  let responseHeader: Headers | undefined;
  let responseTrailer: Headers | undefined;
  return {
    service: init.service,
    method: init.method,
    protocolName: init.protocolName,
    requestMethod: init.requestMethod,
    url: init.url,
    values: init.values,
    timeoutMs: () => undefined,
    get signal(): AbortSignal {
      signal ??= (makeSignal as () => AbortSignal)();
      return signal;
    },
    get requestHeader(): Headers {
      requestHeader ??= init.requestHeader?.() ?? new Headers();
      return requestHeader;
    },
    get responseHeader(): Headers {
      responseHeader ??= new Headers();
      return responseHeader;
    },
    get responseTrailer(): Headers {
      responseTrailer ??= new Headers();
      return responseTrailer;
    },
  };
}
