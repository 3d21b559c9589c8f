import { createServer as createNetServer } from "node:net";
import {
  create,
  type DescMessage,
  type DescMethod,
  type DescService,
  fromBinary,
  isMessage,
  toBinary,
} from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import type { Caller } from "../../core/context.ts";
import { type Admission, callValues } from "../kit/admission.ts";
import { type AnswerObserver, type CallObserver, codeName } from "../kit/call-metrics.ts";
import type { ConnectionGuard } from "../kit/connection-guard.ts";
import { grpcStatusOf, isInternal, publicError } from "../kit/errors.ts";
import { lazyHandlerContext } from "../kit/handler-context.ts";
import type { ServiceBinding } from "../kit/service-binding.ts";
import { encodeErrorDetails } from "./error-details.ts";
import { GrpcCallTiming } from "./grpc-call-timing.ts";

export interface GrpcServerOptions {
  bindings: readonly ServiceBinding[];
  admission: Admission;
  /** Largest request message accepted (RESOURCE_EXHAUSTED beyond). */
  maxMessageBytes: number;
  /**
   * Called for every finished call (metrics), with its time from the request headers to the status sent (see
   * GrpcCallTiming; from the handler to its answer where Node does not publish its http2 stream channels).
   */
  onCall?: CallObserver;
  /**
   * Called for every unary call answered OK (AnswerObserver), from its admission to its message encoded, before
   * grpc-js writes its response headers and the message into the HTTP/2 stream (and, after them, the status).
   */
  onAnswer?: AnswerObserver;
  /** Called with the cause of every internal error (clients get a generic message). */
  onError?: (err: unknown, method: string) => void;
  /**
   * Called when a call starts with its peer (`address:port`, naming its connection); the returned function is
   * called when the call ends. The listener's connection guard counts calls in flight per connection with it.
   */
  onCallStart?: (peer: string) => () => void;
  /**
   * A connection with no call in flight for this long is closed (a GOAWAY, then the close), also after calls: the
   * connection guard times only a connection's first call. Default: never.
   */
  maxConnectionIdleMs?: number;
}

/** Accepts a message or its init shape (plain object), as grpc-js clients pass either. */
const serializer =
  (schema: DescMessage) =>
  (message: never): Buffer =>
    Buffer.from(toBinary(schema, isMessage(message, schema) ? message : create(schema, message)));
/** As serializer, and an answer the handler encoded itself (a Buffer) goes out as it is. */
const responseSerializer = (schema: DescMessage) => {
  const encode = serializer(schema);
  return (message: never): Buffer => (Buffer.isBuffer(message) ? message : encode(message));
};
const deserializer =
  (schema: DescMessage) =>
  (bytes: Buffer): unknown =>
    fromBinary(schema, bytes);

/**
 * Serves Connect service implementations with @grpc/grpc-js's own HTTP/2 server, which measured ~3× faster than
 * connect-node's HTTP/2 path on this machine. Service definitions are built from the protobuf-es descriptors,
 * so the proto stays the only source of truth; auth and errors follow the same rules as the other transports.
 */
export function createGrpcServer(options: GrpcServerOptions): grpc.Server {
  const timing = new GrpcCallTiming(
    options.bindings.flatMap(({ desc }) => desc.methods.map((m) => `${desc.typeName}/${m.name}`)),
    (method, code, seconds) => options.onCall?.(method, code, seconds),
  );
  // The handlers time a call only when the listener's stream timing does not.
  const handlerOptions: GrpcServerOptions = {
    ...options,
    onCall: (method, code, seconds) => {
      if (!timing.active) options.onCall?.(method, code, seconds);
    },
  };
  const server = new grpc.Server({
    "grpc.max_receive_message_length": options.maxMessageBytes,
    "grpc.keepalive_permit_without_calls": 1,
    ...(options.maxConnectionIdleMs === undefined
      ? {}
      : { "grpc.max_connection_idle_ms": options.maxConnectionIdleMs }),
  });
  for (const { desc, impl } of options.bindings) {
    const handlers: grpc.UntypedServiceImplementation = {};
    for (const method of desc.methods) {
      if (method.methodKind !== "unary" && method.methodKind !== "server_streaming") continue;
      const fn = (impl[method.localName] as (req: unknown, ctx: unknown) => unknown).bind(impl);
      handlers[method.name] =
        method.methodKind === "unary"
          ? unaryHandler(method, fn, handlerOptions)
          : streamHandler(method, fn, handlerOptions);
    }
    // Request messages reach the handlers undecoded: they are decoded once the call is admitted (key, rate limit,
    // the method's gate such as the user's write rate), so that a refused call costs no decode.
    server.addService(grpcServiceDefinition(desc, { decodeRequests: false }), handlers);
  }
  callTimings.set(server, timing);
  return server;
}

/** The call timing of each server made by createGrpcServer, attached by listenGrpc to the port it listens on. */
const callTimings = new WeakMap<grpc.Server, GrpcCallTiming>();

/** grpc-js service definition (paths, (de)serializers) built from a protobuf-es descriptor. */
export function grpcServiceDefinition(
  desc: DescService,
  { decodeRequests = true }: { decodeRequests?: boolean } = {},
): grpc.ServiceDefinition {
  const definition: Record<string, grpc.MethodDefinition<unknown, unknown>> = {};
  for (const method of desc.methods) {
    if (method.methodKind !== "unary" && method.methodKind !== "server_streaming") continue;
    definition[method.name] = {
      path: `/${desc.typeName}/${method.name}`,
      requestStream: false,
      responseStream: method.methodKind === "server_streaming",
      requestSerialize: serializer(method.input),
      requestDeserialize: decodeRequests ? deserializer(method.input) : (bytes: Buffer) => bytes,
      responseSerialize: responseSerializer(method.output),
      responseDeserialize: deserializer(method.output),
      originalName: method.localName,
    } as grpc.MethodDefinition<unknown, unknown>;
  }
  return definition as grpc.ServiceDefinition;
}

type Call = grpc.ServerUnaryCall<unknown, unknown> | grpc.ServerWritableStream<unknown, unknown>;

/**
 * The handler context of an authenticated call: synchronously when the key is cached (no promise turn on the hot
 * path), as a promise when storage must be asked. Throws / rejects UNAUTHENTICATED or RESOURCE_EXHAUSTED.
 */
function contextFor(
  call: Call,
  method: DescMethod,
  options: GrpcServerOptions,
  signal: AbortSignal | (() => AbortSignal),
): HandlerContext | Promise<HandlerContext> {
  const raw = call.metadata.get("x-session-api-key")[0];
  const key = typeof raw === "string" ? raw : undefined;
  const caller = options.admission(key, method);
  const streaming = method.methodKind === "server_streaming";
  const make = (c: Caller): HandlerContext =>
    lazyHandlerContext({
      service: method.parent,
      method,
      protocolName: "grpc",
      requestMethod: "POST",
      url: `/${method.parent.typeName}/${method.name}`,
      signal,
      values: callValues(c, key, streaming),
      requestHeader: () => {
        const header = new Headers();
        for (const [k, v] of Object.entries(call.metadata.getMap()))
          if (typeof v === "string") header.set(k, v);
        return header;
      },
    });
  return caller instanceof Promise ? caller.then(make) : make(caller);
}

/** The call's request message, decoded after its admission; INVALID_ARGUMENT when it is not one. */
function requestOf(call: Call, method: DescMethod): unknown {
  try {
    return fromBinary(method.input, call.request as Uint8Array);
  } catch (err) {
    throw new ConnectError(
      `malformed ${method.input.typeName} message`,
      Code.InvalidArgument,
      undefined,
      undefined,
      err,
    );
  }
}

/** An AbortSignal that fires when the client cancels the call; made only when a service asks for it. */
function cancelSignal(call: Call): () => AbortSignal {
  return () => {
    const abort = new AbortController();
    if (call.cancelled) abort.abort();
    else call.once("cancelled", () => abort.abort());
    return abort.signal;
  };
}

/** Trailers grpc-js writes itself or that would break the protocol. */
const RESERVED_TRAILER = /^(grpc-|:|content-type$|te$|user-agent$)|-bin$/i;

function toServiceError(err: unknown, method: string, options: GrpcServerOptions): grpc.ServiceError {
  if (isInternal(err)) options.onError?.(err, method);
  const ce = publicError(err);
  const metadata = new grpc.Metadata();
  // What the service attached to the error (e.g. retry-after of a rate limit) goes out as trailers, as
  // Connect and gRPC-Web send it; internal errors carry nothing of their cause.
  if (!isInternal(err)) for (const [k, v] of ce.metadata) if (!RESERVED_TRAILER.test(k)) metadata.set(k, v);
  const details = encodeErrorDetails(ce);
  if (details !== null) metadata.set("grpc-status-details-bin", details);
  return Object.assign(new Error(ce.rawMessage), {
    code: grpcStatusOf(ce.code),
    details: ce.rawMessage,
    metadata,
  });
}

function unaryHandler(
  method: DescMethod,
  fn: (req: unknown, ctx: unknown) => unknown,
  options: GrpcServerOptions,
) {
  const name = `${method.parent.typeName}/${method.name}`;
  return (call: grpc.ServerUnaryCall<unknown, unknown>, callback: grpc.sendUnaryData<unknown>): void => {
    const started = performance.now();
    // When the call was admitted: its answer is timed from there, as REST's and Connect's are (their admission
    // comes before their handlers).
    let admitted = started;
    const end = options.onCallStart?.(call.getPeer());
    const done = (res: unknown): void => {
      end?.();
      // Encoded here rather than by grpc-js (responseSerializer passes it on), so that the answer is timed once it
      // is encoded, as on the other protocols, before grpc-js's response headers and write.
      let bytes: Buffer;
      try {
        bytes = Buffer.from(toBinary(method.output, create(method.output, res as never)));
      } catch (err) {
        failed(err);
        return;
      }
      options.onAnswer?.(name, (performance.now() - admitted) / 1000);
      // grpc-js writes the message to the stream in this call; the status follows once that write completed.
      callback(null, bytes as never);
      options.onCall?.(name, "OK", (performance.now() - started) / 1000);
    };
    const failed = (err: unknown): void => {
      end?.();
      const e = toServiceError(err, name, options);
      options.onCall?.(name, codeName(Number(e.code) as Code), (performance.now() - started) / 1000);
      callback(e);
    };
    let result: unknown;
    try {
      const ctx = contextFor(call, method, options, cancelSignal(call));
      if (ctx instanceof Promise)
        result = ctx.then((c) => {
          admitted = performance.now();
          return fn(requestOf(call, method), c);
        });
      else {
        admitted = performance.now();
        result = fn(requestOf(call, method), ctx);
      }
    } catch (err) {
      failed(err);
      return;
    }
    if (result instanceof Promise) result.then(done, failed);
    else done(result);
  };
}

function streamHandler(
  method: DescMethod,
  fn: (req: unknown, ctx: unknown) => unknown,
  options: GrpcServerOptions,
) {
  const name = `${method.parent.typeName}/${method.name}`;
  return (call: grpc.ServerWritableStream<unknown, unknown>): void => {
    const started = performance.now();
    const abort = new AbortController();
    const end = options.onCallStart?.(call.getPeer());
    call.on("cancelled", () => abort.abort());
    void (async () => {
      try {
        const ctx = await contextFor(call, method, options, abort.signal);
        for await (const message of fn(requestOf(call, method), ctx) as AsyncIterable<unknown>) {
          if (abort.signal.aborted) break;
          if (!call.write(create(method.output, message as never))) {
            await new Promise((r) => call.once("drain", r));
          }
        }
        options.onCall?.(name, "OK", (performance.now() - started) / 1000);
        call.end();
      } catch (err) {
        if (abort.signal.aborted) return;
        const e = toServiceError(err, name, options);
        options.onCall?.(name, codeName(Number(e.code) as Code), (performance.now() - started) / 1000);
        // The stream's error handler ends the call with this status (destroy() would drop it).
        call.emit("error", e);
      } finally {
        end?.();
      }
    })();
  };
}

/** A gRPC listener: a TCP server with a connection cap handing its connections to a grpc-js server. */
export interface GrpcListener {
  readonly port: number;
  /** Stops accepting, lets calls finish for up to `graceMs`, then cuts the rest. */
  close(graceMs: number): Promise<void>;
}

/**
 * Listens for gRPC on host:port, HTTP/2 cleartext or, with `tls` (PEM certificate chain and key), HTTP/2 over TLS,
 * the connections served by `server` through grpc-js's connection injector (which does the TLS handshake).
 * `guard` admits them: a connection with no call within its timeout (no preface, or a preface and no stream; no
 * TLS handshake either) is closed, and at its cap the longest idle connection makes room for a new one. The guard
 * must see the server's calls: create the server with `onCallStart: (peer) => guard.beginPeer(peer)`.
 */
export async function listenGrpc(
  server: grpc.Server,
  host: string,
  port: number,
  guard: ConnectionGuard,
  tls?: { cert: Buffer; key: Buffer },
): Promise<GrpcListener> {
  const credentials =
    tls === undefined
      ? grpc.ServerCredentials.createInsecure()
      : grpc.ServerCredentials.createSsl(null, [{ cert_chain: tls.cert, private_key: tls.key }], false);
  const injector = server.createConnectionInjector(credentials);
  const tcp = createNetServer((socket) => {
    if (guard.admit(socket)) injector.injectConnection(socket);
  });
  await new Promise<void>((resolve, reject) => {
    tcp.once("error", reject);
    tcp.listen(port, host, () => {
      tcp.off("error", reject);
      resolve();
    });
  });
  const address = tcp.address();
  const listening = typeof address === "object" && address !== null ? address.port : port;
  const detach = callTimings.get(server)?.attach(listening);
  return {
    port: listening,
    async close(graceMs) {
      const closed = new Promise<void>((resolve) => tcp.close(() => resolve()));
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, graceMs);
        injector.drain(graceMs);
        server.tryShutdown(() => {
          clearTimeout(timer);
          resolve();
        });
      });
      injector.destroy();
      detach?.();
      await closed;
    },
  };
}
