import type { IncomingMessage, ServerResponse } from "node:http";
import type { DescMethod } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createConnectRouter,
  type HandlerContext,
  type Interceptor,
  type StreamResponse,
  type UnaryResponse,
} from "@connectrpc/connect";
import type { UniversalHandler, UniversalServerResponse } from "@connectrpc/connect/protocol";
import {
  compressionBrotli,
  compressionGzip,
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
} from "@connectrpc/connect-node";
import { type Caller, callerKey } from "../../core/context.ts";
import { type Admission, sessionKeyValue } from "../kit/admission.ts";
import type { KeyOf } from "../kit/browser-session.ts";
import { type AnswerObserver, type CallObserver, errorCodeName } from "../kit/call-metrics.ts";
import { INTERNAL_MESSAGE, isInternal, publicError } from "../kit/errors.ts";
import type { ServiceBinding } from "../kit/service-binding.ts";
import { connectErrorAnswer, writeConnectError } from "./connect-errors.ts";
import { fastConnectUnary, takesConnectGet, type UnaryMethod, unaryMethod } from "./connect-unary.ts";

export interface ConnectHandlerOptions {
  bindings: readonly ServiceBinding[];
  admission: Admission;
  /** The request's session key: the header, or a browser session's. */
  keyOf: KeyOf;
  /** Largest request message accepted, after decompression (RESOURCE_EXHAUSTED beyond). */
  maxMessageBytes: number;
  /** Called for every finished call, rejected ones included. */
  onCall: CallObserver;
  /**
   * Called for every unary call answered OK (AnswerObserver); on connect-node's path, once the answer is handed to
   * connect-node, which writes it.
   */
  onAnswer?: AnswerObserver;
  /** Called with the cause of every internal error (clients get a generic message). */
  onError: (err: unknown, method: string) => void;
  /** Aborted when running streams must end (the server is closing and its grace is over). */
  shutdownSignal: AbortSignal;
  /**
   * The everyday Connect unary call on the hand-written path of connect-unary.ts instead of connect-node
   * (default true; AppDeps.connectFastPath).
   */
  fastPath?: boolean;
}

/** Connect, gRPC-Web and Connect GET for every method of the bindings, on node:http requests. */
export interface ConnectHandler {
  /** Whether `path` (without its query) is a method served here: /<package.Service>/<Method>. */
  serves(path: string): boolean;
  /** Every served path. */
  readonly paths: readonly string[];
  /** Answers one request of a served path; resolves once the answer is written (or the client went away). */
  serve(req: IncomingMessage, res: ServerResponse, path: string): Promise<void>;
}

interface Entry {
  method: DescMethod;
  impl: (...args: never[]) => unknown;
  handler?: UniversalHandler;
  /** The method on the hand-written unary path, when that path is on and the method unary. */
  fast: UnaryMethod | null;
}

/**
 * The everyday Connect unary call (POST JSON or binary with a Content-Length, uncompressed, no timeout) goes to the
 * hand-written path of connect-unary.ts unless `fastPath` is false; every other request goes to
 * connect-node's own request path — connect's router and universal handlers, run on node:http with connect-node's
 * `universalRequestFromNodeRequest` / `universalResponseToNodeResponse`, which is all `connectNodeAdapter` does —
 * with the transport kit on it: admission as connect's request gate (before the body is read), call metrics and
 * internal-error masking as interceptors, the message size limit as `readMaxBytes`, gzip and brotli whose corrupt
 * input is the client's fault. Around it, three answers connect-node gives that the contract does not:
 *
 * - what connect-node refuses with an empty 405 or 415 (a method the RPC does not take, a content type or encoding
 *   it does not speak) is answered with a Connect error body saying why;
 * - a binary request message that does not decode, which connect-node answers with 500 `internal` before any
 *   interceptor runs, is answered 400 `invalid_argument` (the universal response is corrected before it is written);
 * - an answer written while the request body is still arriving (a refused key, an oversized body) closes the
 *   connection instead of leaving it to drain.
 *
 * A method's universal handler (a handler and serializers per protocol) is made on its first request: most methods
 * never get one, and making them all at start was startup garbage an idle server kept (`npm run bench`, "server RSS
 * idle").
 */
export function createConnectHandler(options: ConnectHandlerOptions): ConnectHandler {
  const router = createConnectRouter({
    requestGate: gate(options),
    interceptors: [callMetrics(options.onCall, options.onAnswer), maskInternal(options.onError)],
    readMaxBytes: options.maxMessageBytes,
    acceptCompression: [clientFault(compressionGzip), clientFault(compressionBrotli)],
    shutdownSignal: options.shutdownSignal,
  });
  const entries = new Map<string, Entry>();
  for (const b of options.bindings)
    for (const method of b.desc.methods) {
      const fn = (b.impl as Record<string, unknown>)[method.localName];
      if (typeof fn !== "function") continue;
      entries.set(`/${b.desc.typeName}/${method.name}`, {
        method,
        impl: (fn as (...args: never[]) => unknown).bind(b.impl),
        fast:
          options.fastPath !== false && method.methodKind === "unary"
            ? unaryMethod(method, b.impl as Record<string, unknown>)
            : null,
      });
    }
  const handlerOf = (entry: Entry): UniversalHandler => {
    if (entry.handler === undefined) {
      router.rpc(entry.method, entry.impl as never);
      entry.handler = router.handlers[router.handlers.length - 1] as UniversalHandler;
    }
    return entry.handler;
  };
  return {
    serves: (path) => entries.has(path),
    paths: [...entries.keys()],
    serve: async (req, res, path) => {
      const entry = entries.get(path);
      if (entry === undefined) throw new Error(`not a Connect path: ${path}`);
      if (entry.fast !== null) {
        const served = fastConnectUnary(entry.fast, req, res, options);
        if (served !== false) return served;
      }
      const problem = protocolProblem(req, entry.method);
      if (problem !== null) {
        options.onCall(methodName(entry.method), "InvalidArgument", 0);
        writeConnectError(req, res, new ConnectError(problem.message, Code.InvalidArgument), {
          status: problem.status,
          ...(problem.headers === undefined ? {} : { header: problem.headers }),
        });
        return;
      }
      try {
        let answer = await handlerOf(entry)(universalRequestFromNodeRequest(req, res, undefined, undefined));
        if (answer.status === 500 && (req.method === "GET" || isConnectUnaryBinary(req, entry.method)))
          answer = await decodeFailureAsClientFault(answer, req.method === "GET");
        // Decided when the head is written: a body that has not all arrived by then is not waited for.
        if (!req.complete) res.shouldKeepAlive = false;
        await universalResponseToNodeResponse(answer, res);
      } catch (e) {
        if (ConnectError.from(e).code !== Code.Aborted) options.onError(e, methodName(entry.method));
      }
    },
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

/** Request body encodings served (those connect-node is given above, and none). */
const ENCODINGS: ReadonlySet<string> = new Set(["identity", "gzip", "br"]);

interface ProtocolProblem {
  status: 405 | 415;
  message: string;
  headers?: Record<string, string>;
}

/** A query parameter of the request's URL. */
function queryParam(req: IncomingMessage, name: string): string | null {
  const url = req.url ?? "";
  const q = url.indexOf("?");
  return q < 0 ? null : new URLSearchParams(url.slice(q + 1)).get(name);
}

/** What connect-node would refuse with an empty 405 or 415, found first so that the answer can say why. */
function protocolProblem(req: IncomingMessage, method: DescMethod): ProtocolProblem | null {
  const getAllowed = takesConnectGet(method);
  const allow = getAllowed ? "GET, POST" : "POST";
  if (req.method === "GET") {
    if (!getAllowed)
      return {
        status: 405,
        message: `${method.name} has side effects: call it with POST`,
        headers: { allow },
      };
    const encoding = queryParam(req, "encoding");
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
function isConnectUnaryBinary(req: IncomingMessage, method: DescMethod): boolean {
  if (method.methodKind !== "unary") return false;
  if (req.method === "GET") return queryParam(req, "encoding") === "proto";
  return /^application\/proto$/i.test(req.headers["content-type"] ?? "");
}

/**
 * connect-node answers a binary request message that does not decode ("parse binary: premature EOF"), and a
 * Connect GET's message that is not base64 ("internal error"), with 500 `internal`, before any interceptor runs;
 * it is the client's fault, so the answer becomes 400 `invalid_argument` (with the same message, or for a GET's
 * bare "internal error" one that names the parameter). It is told apart from a real internal error by its message:
 * those are masked by the interceptor below, so they carry INTERNAL_MESSAGE and pass unchanged. A compressed
 * answer passes unchanged.
 */
async function decodeFailureAsClientFault(
  answer: UniversalServerResponse,
  get: boolean,
): Promise<UniversalServerResponse> {
  if (answer.header?.get("content-encoding") || answer.body === undefined) return answer;
  const chunks: Uint8Array[] = [];
  for await (const chunk of answer.body) chunks.push(chunk);
  const bytes = Buffer.concat(chunks);
  const again = {
    ...answer,
    body: (async function* () {
      yield bytes;
    })(),
  };
  let parsed: { code?: unknown; message?: unknown } = {};
  try {
    parsed = JSON.parse(bytes.toString()) as typeof parsed;
  } catch {
    // not a Connect error body: sent as it was
  }
  if (parsed.code !== "internal" || parsed.message === INTERNAL_MESSAGE) return again;
  const message =
    get && parsed.message === "internal error"
      ? "the message parameter does not decode"
      : String(parsed.message);
  const fault = connectErrorAnswer(new ConnectError(message, Code.InvalidArgument));
  const body = fault.body;
  const header = new Headers(answer.header);
  header.set("content-length", String(body.byteLength));
  return {
    ...answer,
    status: fault.status,
    header,
    body: (async function* () {
      yield body;
    })(),
  };
}

/**
 * The request gate: the session key admitted before the body is read (a rejected call is never parsed, and its
 * connection is closed if the body is still arriving).
 */
function gate(options: ConnectHandlerOptions): (ctx: HandlerContext) => void | Promise<void> {
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
      caller = options.admission(key, ctx.method);
    } catch (err) {
      return rejected(ctx, err);
    }
    if (caller instanceof Promise) return caller.then(admit, (err: unknown) => rejected(ctx, err));
    admit(caller);
  };
}

/** Calls counted and timed by method and code (streams when they end); unary answers timed for `answer` too. */
function callMetrics(observe: CallObserver, answer?: AnswerObserver): Interceptor {
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
    answer?.(name, seconds());
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
