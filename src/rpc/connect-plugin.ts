import type { OutgoingHttpHeaders, ServerResponse } from "node:http";
import type { DescMethod } from "@bufbuild/protobuf";
import { MethodOptions_IdempotencyLevel } from "@bufbuild/protobuf/wkt";
import {
  Code,
  ConnectError,
  createConnectRouter,
  type HandlerContext,
  type Interceptor,
  type StreamResponse,
  type UnaryResponse,
} from "@connectrpc/connect";
import type { UniversalHandler } from "@connectrpc/connect/protocol";
import { fastifyConnectPlugin } from "@connectrpc/connect-fastify";
import {
  compressionBrotli,
  compressionGzip,
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
} from "@connectrpc/connect-node";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { type Caller, callerKey } from "../core/context.ts";
import { type Admission, sessionKeyValue } from "../transport/admission.ts";
import type { KeyOf } from "../transport/browser-session.ts";
import { type CallObserver, errorCodeName } from "../transport/call-metrics.ts";
import { INTERNAL_MESSAGE, isInternal, publicError } from "../transport/errors.ts";
import type { ServiceBinding } from "../transport/service-binding.ts";
import { closeIfBodyUnread } from "../transport/unread-body.ts";
import { fastConnectUnary, type UnaryMethod, unaryMethod } from "./connect-unary.ts";

export interface ConnectPluginOptions {
  bindings: readonly ServiceBinding[];
  admission: Admission;
  /** The request's session key: the header, or a browser session's. */
  keyOf: KeyOf;
  /** Largest request message accepted, after decompression (RESOURCE_EXHAUSTED beyond). */
  maxMessageBytes: number;
  /** Called for every finished call, rejected ones included. */
  onCall: CallObserver;
  /** Called with the cause of every internal error (clients get a generic message). */
  onError: (err: unknown, method: string) => void;
  /** How long streams may run on after the server starts closing. */
  shutdownTimeoutMs: number;
}

/**
 * Connect, gRPC-Web and Connect GET on the HTTP port, in an encapsulated Fastify plugin: streaming methods through
 * connect-fastify; unary methods through connect-node's universal handler (as connect-fastify runs it), but for
 * the everyday Connect unary call, which takes the fast path of connect-unary.ts. Requests get the server's request
 * ids, access lines and HTTP metrics like REST routes do. Around connect-node:
 * the transport kit's admission as its request gate (before the body is read), call metrics and internal errors
 * masked as interceptors, and JSON Connect errors for the requests connect-node answers with an empty body
 * (a wrong HTTP method or content type) or with INTERNAL (a corrupt compressed body).
 */
export function connectPlugin(options: ConnectPluginOptions) {
  return async (app: FastifyInstance): Promise<void> => {
    const methods = new Map<string, DescMethod>();
    for (const b of options.bindings)
      for (const m of b.desc.methods) methods.set(`/${b.desc.typeName}/${m.name}`, m);
    app.addHook("onRequest", (req, reply, done) => {
      const method = methods.get(req.routeOptions.url ?? "");
      // connect-node stops reading a body it refuses (over the size limit, a rejected key): such an answer closes
      // the connection instead of waiting for the rest.
      closeIfBodyUnread(req.raw, reply.raw);
      const problem = method === undefined ? null : protocolProblem(req, method);
      if (problem === null) {
        if (method !== undefined && isConnectUnaryBinary(req, method))
          reportDecodeFailuresAsClientFaults(reply);
        done();
        return;
      }
      options.onCall(methodName(method as DescMethod), "InvalidArgument", 0);
      sendConnectError(reply, problem.status, "invalid_argument", problem.message, problem.headers);
    });
    app.setErrorHandler((err, req, reply) => {
      if (isInternal(err)) req.log.error({ err }, "rpc failed");
      const status = (err as { statusCode?: unknown }).statusCode;
      if (typeof status === "number" && status >= 400 && status < 500)
        return sendConnectError(reply, status, "invalid_argument", (err as Error).message);
      return sendConnectError(reply, 500, "internal", publicError(err).rawMessage);
    });
    const handlerOptions = {
      requestGate: gate(options),
      interceptors: [callMetrics(options.onCall), maskInternal(options.onError)],
      readMaxBytes: options.maxMessageBytes,
      acceptCompression: [clientFault(compressionGzip), clientFault(compressionBrotli)],
    };
    // Unary methods: the everyday Connect call on the fast path (connect-unary.ts), every other request (GET,
    // gRPC-Web, compressed bodies, timeouts) through connect-node's universal handler, as connect-fastify runs it.
    // A method's universal handler (a handler and serializers per protocol) is made on its first request off the
    // fast path: most methods never get one, and making them all at start was startup garbage that an idle
    // server kept in its young generation (RSS; `npm run bench`, "server RSS idle").
    const unary = createConnectRouter(handlerOptions);
    const entries: UnaryMethod[] = [];
    for (const b of options.bindings)
      for (const m of b.desc.methods) {
        if (m.methodKind !== "unary") continue;
        const entry = unaryMethod(m, b.impl as Record<string, unknown>);
        if (entry !== null) entries.push(entry);
      }
    // Bodies are read by the handlers (connect-node or the fast path), never by Fastify.
    app.removeAllContentTypeParsers();
    app.addContentTypeParser("*", (_req, _payload, done) => done(null, undefined));
    const fastOptions = {
      admission: options.admission,
      keyOf: options.keyOf,
      maxMessageBytes: options.maxMessageBytes,
      onCall: options.onCall,
      onError: options.onError,
    };
    for (const entry of entries) {
      let made: UniversalHandler | undefined;
      const universal = (): UniversalHandler => {
        if (made === undefined) {
          unary.rpc(entry.method, entry.fn as never);
          made = unary.handlers[unary.handlers.length - 1] as UniversalHandler;
        }
        return made;
      };
      app.all(`/${entry.method.parent.typeName}/${entry.method.name}`, async (req, reply) => {
        const served = fastConnectUnary(entry, req, reply, fastOptions);
        if (served !== false) return served;
        const handler = universal();
        try {
          const res = await handler(
            universalRequestFromNodeRequest(req.raw, reply.raw, undefined, undefined),
          );
          for (const [key, value] of Object.entries(reply.getHeaders()))
            if (value !== undefined) reply.raw.setHeader(key, value);
          await universalResponseToNodeResponse(res, reply.raw);
        } catch (e) {
          if (ConnectError.from(e).code !== Code.Aborted) options.onError(e, methodName(entry.method));
        }
      });
    }
    // Streaming methods through connect-fastify. Streams still open when the server closes are cut off after the
    // grace through the documented shutdownSignal; the timer is unref'd and cleared at close, so a server with no
    // open stream stops at once (connect-fastify's own shutdownTimeoutMs keeps a ref'd timer for the full grace).
    const shutdown = new AbortController();
    let cutOff: NodeJS.Timeout | undefined;
    app.addHook("preClose", (done) => {
      cutOff = setTimeout(() => shutdown.abort(), options.shutdownTimeoutMs).unref();
      done();
    });
    app.addHook("onClose", (_instance, done) => {
      clearTimeout(cutOff);
      done();
    });
    await app.register(fastifyConnectPlugin, {
      routes: (router) => {
        for (const b of options.bindings)
          for (const m of b.desc.methods) {
            if (m.methodKind === "unary") continue;
            const fn = (b.impl as Record<string, unknown>)[m.localName];
            if (typeof fn === "function") router.rpc(m, fn.bind(b.impl) as never);
          }
      },
      ...handlerOptions,
      shutdownSignal: shutdown.signal,
    });
  };
}

function methodName(method: DescMethod): string {
  return `${method.parent.typeName}/${method.name}`;
}

/** Content types of the Connect protocol (unary and streaming), gRPC-Web and gRPC, as their specifications name them. */
const CONNECT_UNARY = /^application\/(?:json(?:; ?charset=utf-?8)?|proto)$/i;
const CONNECT_STREAM = /^application\/connect\+(?:json(?:; ?charset=utf-?8)?|proto)$/i;
const GRPC_WEB = /^application\/grpc-web(?:-text)?(?:\+(?:json(?:; ?charset=utf-?8)?|proto))?$/i;
const GRPC = /^application\/grpc(?:\+(?:json(?:; ?charset=utf-?8)?|proto))?$/i;

/** Request body encodings served (those connect-node is given below, and none). */
const ENCODINGS: ReadonlySet<string> = new Set(["identity", "gzip", "br"]);

interface ProtocolProblem {
  status: 405 | 415;
  message: string;
  headers?: Record<string, string>;
}

/** What connect-node would refuse with an empty 405 or 415, found first so that the answer can say why. */
function protocolProblem(req: FastifyRequest, method: DescMethod): ProtocolProblem | null {
  const getAllowed =
    method.methodKind === "unary" && method.idempotency === MethodOptions_IdempotencyLevel.NO_SIDE_EFFECTS;
  const allow = getAllowed ? "GET, POST" : "POST";
  if (req.method === "GET") {
    if (!getAllowed)
      return {
        status: 405,
        message: `${method.name} has side effects: call it with POST`,
        headers: { allow },
      };
    const encoding = (req.query as Record<string, unknown>).encoding;
    if (encoding !== "json" && encoding !== "proto")
      return { status: 415, message: "a Connect GET request needs encoding=json or encoding=proto" };
    return null;
  }
  if (req.method !== "POST")
    return { status: 405, message: `HTTP method ${req.method} is not allowed here`, headers: { allow } };
  for (const name of ["content-encoding", "connect-content-encoding", "grpc-encoding"]) {
    const encoding = req.headers[name];
    if (typeof encoding === "string" && !ENCODINGS.has(encoding.trim().toLowerCase()))
      return {
        status: 415,
        message: `${name} ${JSON.stringify(encoding)} is not supported (use gzip or br)`,
      };
  }
  const contentType = req.headers["content-type"] ?? "";
  const connect = method.methodKind === "unary" ? CONNECT_UNARY : CONNECT_STREAM;
  if (connect.test(contentType) || GRPC_WEB.test(contentType) || GRPC.test(contentType)) return null;
  return {
    status: 415,
    message: `content type ${JSON.stringify(contentType)} is not supported by ${method.name} (expected ${
      method.methodKind === "unary"
        ? "application/json or application/proto"
        : "application/connect+json or application/connect+proto"
    }, or gRPC-Web)`,
  };
}

/** A unary Connect call with a binary message (POST application/proto, or GET encoding=proto). */
function isConnectUnaryBinary(req: FastifyRequest, method: DescMethod): boolean {
  if (method.methodKind !== "unary") return false;
  if (req.method === "GET") return (req.query as Record<string, unknown>).encoding === "proto";
  return /^application\/proto$/i.test(req.headers["content-type"] ?? "");
}

/**
 * connect-node answers a binary request message that does not decode ("parse binary: premature EOF") with 500
 * `internal`, before any interceptor runs; it is the client's fault. Such an answer is rewritten to 400
 * `invalid_argument` with the same message. It is told apart from a real internal error by its message: those are
 * masked by the interceptor below, so they reach the wire as INTERNAL_MESSAGE and pass unchanged.
 */
function reportDecodeFailuresAsClientFaults(reply: FastifyReply): void {
  const res = reply.raw;
  const writeHead = res.writeHead;
  const write = res.write;
  const end = res.end;
  let held: Buffer[] | null = null;
  let headers: OutgoingHttpHeaders = {};
  res.writeHead = function (this: ServerResponse, status: number, ...rest: unknown[]) {
    if (held !== null) return this; // asked again because the held head was not sent
    const last = rest[rest.length - 1];
    if (status !== 500 || typeof last !== "object" || last === null || Array.isArray(last)) {
      res.writeHead = writeHead;
      return writeHead.call(this, status, ...(rest as [OutgoingHttpHeaders]));
    }
    headers = last as OutgoingHttpHeaders;
    if (headers["content-encoding"] !== undefined) {
      res.writeHead = writeHead;
      return writeHead.call(this, status, headers);
    }
    held = [];
    return this;
  } as typeof res.writeHead;
  res.write = function (this: ServerResponse, chunk: unknown, ...rest: unknown[]) {
    if (held === null) return (write as (...a: unknown[]) => boolean).call(this, chunk, ...rest);
    held.push(Buffer.from(chunk as Uint8Array));
    const callback = rest.find((r) => typeof r === "function") as (() => void) | undefined;
    callback?.();
    return true;
  } as typeof res.write;
  res.end = function (this: ServerResponse, ...args: unknown[]) {
    if (held === null) return (end as (...a: unknown[]) => ServerResponse).apply(this, args);
    const text = Buffer.concat(held).toString();
    let body: { code?: unknown; message?: unknown } = {};
    try {
      body = JSON.parse(text) as typeof body;
    } catch {
      // not a Connect error body: sent as it was
    }
    const { "content-length": _length, ...rest } = headers;
    if (body.code === "internal" && body.message !== INTERNAL_MESSAGE) {
      const fixed = JSON.stringify({ code: "invalid_argument", message: body.message });
      writeHead.call(this, 400, rest);
      return (end as (...a: unknown[]) => ServerResponse).call(this, fixed);
    }
    writeHead.call(this, 500, rest);
    return (end as (...a: unknown[]) => ServerResponse).call(this, text);
  } as typeof res.end;
}

/** A Connect error body (JSON, `{code, message}`) with the given HTTP status. */
function sendConnectError(
  reply: FastifyReply,
  status: number,
  code: string,
  message: string,
  headers: Record<string, string> = {},
): FastifyReply {
  return reply
    .code(status)
    .headers({ ...headers, "content-type": "application/json" })
    .send(Buffer.from(JSON.stringify({ code, message })));
}

/**
 * The request gate: the session key admitted before the body is read (a rejected call is never parsed; its
 * connection is closed if the body is still arriving, see closeIfBodyUnread).
 */
function gate(options: ConnectPluginOptions): (ctx: HandlerContext) => void | Promise<void> {
  const rejected = (ctx: HandlerContext, err: unknown): never => {
    options.onCall(methodName(ctx.method), errorCodeName(err), 0);
    if (err instanceof ConnectError && err.code === Code.Unauthenticated)
      err.metadata.set("connection", "close");
    throw err;
  };
  return (ctx) => {
    let key: string | undefined;
    const admit = (caller: Caller): void => {
      ctx.values.set(callerKey, caller);
      if (ctx.method.methodKind !== "unary") ctx.values.set(sessionKeyValue, key);
    };
    let caller: ReturnType<Admission>;
    try {
      key = options.keyOf(ctx.requestMethod, (name) => ctx.requestHeader.get(name) ?? undefined);
      caller = options.admission(key);
    } catch (err) {
      return rejected(ctx, err);
    }
    if (caller instanceof Promise) return caller.then(admit, (err: unknown) => rejected(ctx, err));
    admit(caller);
  };
}

/** Calls counted and timed by method and code (streams when they end). */
function callMetrics(observe: CallObserver): Interceptor {
  return (next) => async (req) => {
    const name = methodName(req.method);
    const started = performance.now();
    const seconds = () => (performance.now() - started) / 1000;
    let res: UnaryResponse | StreamResponse;
    try {
      res = await next(req);
    } catch (err) {
      observe(name, errorCodeName(err), seconds());
      throw err;
    }
    if (res.stream) {
      const messages = res.message;
      return {
        ...res,
        message: (async function* () {
          try {
            yield* messages;
            observe(name, "OK", seconds());
          } catch (err) {
            observe(name, errorCodeName(err), seconds());
            throw err;
          }
        })(),
      };
    }
    observe(name, "OK", seconds());
    return res;
  };
}

/** Internal errors logged with their cause and answered with a generic message, as on every transport. */
function maskInternal(onError: (err: unknown, method: string) => void): Interceptor {
  const mask = (err: unknown, name: string): never => {
    if (isInternal(err)) onError(err, name);
    throw publicError(err);
  };
  return (next) => async (req) => {
    const name = methodName(req.method);
    let res: UnaryResponse | StreamResponse;
    try {
      res = await next(req);
    } catch (err) {
      return mask(err, name);
    }
    if (!res.stream) return res;
    const messages = res.message;
    return {
      ...res,
      message: (async function* () {
        try {
          yield* messages;
        } catch (err) {
          mask(err, name);
        }
      })(),
    };
  };
}

type Compression = typeof compressionGzip;

/** A compression whose corrupt or truncated input is the client's fault (INVALID_ARGUMENT, not INTERNAL). */
function clientFault(compression: Compression): Compression {
  return {
    name: compression.name,
    compress: (bytes) => compression.compress(bytes),
    decompress: (bytes, readMaxBytes) =>
      compression.decompress(bytes, readMaxBytes).catch((err: unknown) => {
        const ce = ConnectError.from(err);
        if (ce.code === Code.Internal)
          throw new ConnectError(`${compression.name} body could not be decompressed`, Code.InvalidArgument);
        throw err;
      }),
  };
}
