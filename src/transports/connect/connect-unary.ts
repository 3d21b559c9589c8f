import type { IncomingMessage, ServerResponse } from "node:http";
import {
  create,
  type DescMethod,
  fromBinary,
  fromJsonString,
  isMessage,
  type Message,
  toBinary,
  toJsonString,
} from "@bufbuild/protobuf";
import { base64Decode } from "@bufbuild/protobuf/wire";
import { MethodOptions_IdempotencyLevel } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { trailerMux } from "@connectrpc/connect/protocol-connect";
import { compressionBrotli, compressionGzip } from "@connectrpc/connect-node";
import { type Caller, callerValues } from "../../core/context.ts";
import type { Admission } from "../kit/admission.ts";
import { type KeyOf, nodeHeaders } from "../kit/browser-session.ts";
import { type AnswerObserver, type CallObserver, codeName } from "../kit/call-metrics.ts";
import { isInternal } from "../kit/errors.ts";
import { abortOnClientGone, LazyHandlerContext } from "../kit/handler-context.ts";
import { connectErrorAnswer } from "./connect-errors.ts";

/** What the unary path needs of the transport kit. */
export interface ConnectUnaryOptions {
  admission: Admission;
  keyOf: KeyOf;
  maxMessageBytes: number;
  onCall: CallObserver;
  /** Called for every call answered OK (AnswerObserver): from its body read to its answer encoded. */
  onAnswer?: AnswerObserver;
  onError: (err: unknown, method: string) => void;
}

export interface UnaryMethod {
  method: DescMethod;
  name: string;
  /** Declared `idempotency_level = NO_SIDE_EFFECTS`: it may be called with a Connect GET. */
  readOnly: boolean;
  fn: (req: unknown, ctx: LazyHandlerContext) => unknown;
}

const CONTENT_TYPE = /^application\/(?:(json)(?:; ?charset=utf-?8)?|(proto))$/i;
/** Connect's compressMinBytes default: smaller answers are sent as they are. */
const COMPRESS_MIN_BYTES = 1024;
const COMPRESSIONS = new Map([
  [compressionGzip.name, compressionGzip],
  [compressionBrotli.name, compressionBrotli],
]);
const decoder = new TextDecoder();

/** Whether a method takes a Connect GET: a unary one declared `idempotency_level = NO_SIDE_EFFECTS`. */
export function takesConnectGet(method: DescMethod): boolean {
  return (
    method.methodKind === "unary" && method.idempotency === MethodOptions_IdempotencyLevel.NO_SIDE_EFFECTS
  );
}

/** The implementation of a unary method, bound, for this path. */
export function unaryMethod(method: DescMethod, impl: Record<string, unknown>): UnaryMethod | null {
  const fn = impl[method.localName];
  if (typeof fn !== "function") return null;
  return {
    method,
    name: `${method.parent.typeName}/${method.name}`,
    readOnly: takesConnectGet(method),
    fn: (fn as (req: unknown, ctx: unknown) => unknown).bind(impl),
  };
}

/**
 * The everyday Connect unary call — POST, `application/json` or `application/proto`, a Content-Length within the
 * limit or a chunked body (what connect-node's own client sends over HTTP/1.1; read up to the limit), no request
 * compression, no Connect-Timeout-Ms; or a Connect GET of a read (a method declared `NO_SIDE_EFFECTS`, its message
 * in the query: what connect's clients send with `useHttpGet`) — served straight to the service implementation;
 * `fastConnectUnary` answers false for every other request, which then goes to connect-node's handler
 * (src/transports/connect/connect-handler.ts). On by default; `buildApp({ connectFastPath: false })` sends every call to connect-node.
 *
 * What it earns: connect-node's universal handler (fetch-style Headers, URL parsing, linked AbortControllers
 * aborted with a DOMException on every call, async-iterable bodies, the interceptor chain) costs several times a
 * whole REST call: with every call on connect-node the Connect benchmark runs at about half of bare connect-node,
 * against a 0.9× goal; on this path at about twice (`npm run bench -- --only connect` measures both ways in one run;
 * docs/transport.md has the recorded figures).
 *
 * It speaks the Connect protocol (connectrpc.com/docs/protocol) with public APIs: protobuf-es JSON and binary
 * (unknown JSON fields ignored, as connect), trailer headers (`trailerMux`), error answers by the server's one
 * Connect error writer (`connectErrorAnswer`, connect-errors.ts), connect-node's gzip/brotli for answers of 1 KiB or
 * more when the client accepts them. Admission, call metrics and internal-error masking are the transport kit's, as
 * on connect-node's path; a binary body that does not decode is INVALID_ARGUMENT on both.
 * test/integration/connect-unary.test.ts sends the same requests through both paths and compares the answers.
 */
export function fastConnectUnary(
  m: UnaryMethod,
  req: IncomingMessage,
  res: ServerResponse,
  options: ConnectUnaryOptions,
): false | Promise<void> {
  if (req.method === "GET") return m.readOnly ? connectGet(m, req, res, options) : false;
  if (req.method !== "POST") return false;
  const h = req.headers;
  const type = CONTENT_TYPE.exec(h["content-type"] ?? "");
  if (type === null) return false;
  if (h["content-encoding"] !== undefined && h["content-encoding"] !== "identity") return false;
  if (h["connect-timeout-ms"] !== undefined) return false;
  const version = h["connect-protocol-version"];
  if (version !== undefined && version !== "1") return false;
  // A chunked body's length is known once it has arrived (CHUNKED): it is read up to the limit.
  const length =
    h["content-length"] === undefined && h["transfer-encoding"]?.toLowerCase() === "chunked"
      ? CHUNKED
      : Number(h["content-length"]);
  if (!Number.isSafeInteger(length) || length < CHUNKED || length > options.maxMessageBytes) return false;
  return serve(m, type[2] !== undefined, length, req, res, options);
}

/**
 * A Connect GET (connectrpc.com/docs/protocol, "Unary-Get Request"): `encoding` json or proto, the message in
 * `message` (base64url with `base64=1`), `connect` absent or v1, no compression; anything else goes to connect-node.
 * A message that does not decode is INVALID_ARGUMENT (connect-node answers 500 `internal` for a bad base64).
 * Its whole request is its head, so it is served in the pass that parsed it, where a POST's body (which
 * connect-node's client writes after the head, the end after the body) can arrive in later reads: under load each
 * read is another pass of a busy event loop.
 */
function connectGet(
  m: UnaryMethod,
  req: IncomingMessage,
  res: ServerResponse,
  options: ConnectUnaryOptions,
): false | Promise<void> {
  if (req.headers["connect-timeout-ms"] !== undefined) return false;
  const url = req.url ?? "";
  const q = url.indexOf("?");
  const params = new URLSearchParams(q < 0 ? "" : url.slice(q + 1));
  const encoding = params.get("encoding");
  if (encoding !== "json" && encoding !== "proto") return false;
  const compression = params.get("compression");
  if (compression !== null && compression !== "identity") return false;
  const version = params.get("connect");
  if (version !== null && version !== "v1") return false;
  const message = params.get("message") ?? "";
  const base64 = params.get("base64") === "1";
  // Decoded once the call is admitted, as connect-node does: a refused call's message is never read.
  return serve(
    m,
    encoding === "proto",
    () => queryMessage(message, base64, options.maxMessageBytes),
    req,
    res,
    options,
  );
}

const BASE64 = /^[A-Za-z0-9+/_-]*={0,2}$/;

/** A Connect GET's message bytes: INVALID_ARGUMENT when base64 does not decode, RESOURCE_EXHAUSTED beyond the limit. */
function queryMessage(message: string, base64: boolean, max: number): Buffer {
  if (base64 && !BASE64.test(message))
    throw new ConnectError("the message parameter is not base64url (base64=1)", Code.InvalidArgument);
  const bytes = base64 ? Buffer.from(base64Decode(message)) : Buffer.from(message, "utf8");
  if (bytes.byteLength > max)
    throw new ConnectError(
      `message size is larger than configured readMaxBytes ${max}`,
      Code.ResourceExhausted,
    );
  return bytes;
}

async function serve(
  m: UnaryMethod,
  binary: boolean,
  /** The body's announced length (CHUNKED: not announced), or a GET's message, read from its query. */
  source: number | (() => Buffer),
  req: IncomingMessage,
  res: ServerResponse,
  options: ConnectUnaryOptions,
): Promise<void> {
  const requestMethod = typeof source === "number" ? "POST" : "GET";
  const started = performance.now();
  const seconds = (): number => (performance.now() - started) / 1000;
  const headers = nodeHeaders(req.headers);
  let ctx: LazyHandlerContext | null = null;
  try {
    // Admitted before the body is read, as connect's request gate: a rejected call is never parsed.
    const admitted = options.admission(options.keyOf(requestMethod, headers), m.method);
    const caller: Caller = admitted instanceof Promise ? await admitted : admitted;
    ctx = new LazyHandlerContext({
      service: m.method.parent,
      method: m.method,
      protocolName: "connect",
      requestMethod,
      url: req.url ?? "",
      values: callerValues(caller),
      signal: () =>
        abortOnClientGone(res, () => new ConnectError("the client closed the connection", Code.Canceled))
          .signal,
      requestHeader: () => webHeaders(req),
    });
    const body = typeof source === "number" ? await readBody(req, source, options.maxMessageBytes) : source();
    if (body === null) {
      options.onCall(m.name, "Canceled", seconds());
      return;
    }
    if (body === TOO_LARGE) {
      // Not read to its end: the connection goes with the answer rather than reading the rest.
      res.shouldKeepAlive = false;
      throw new ConnectError(
        `message size is larger than configured readMaxBytes ${options.maxMessageBytes}`,
        Code.ResourceExhausted,
      );
    }
    // The request is in hand: the handler's part starts here (the body's wait is the client's and the network's).
    const handled = performance.now();
    const input = decode(m.method, binary, body);
    const result = m.fn(input, ctx);
    const output = result instanceof Promise ? await result : result;
    const bytes = encode(m.method, binary, output);
    options.onAnswer?.(m.name, (performance.now() - handled) / 1000);
    const header = new Headers(ctx.usedResponseHeader);
    header.set("content-type", binary ? "application/proto" : "application/json");
    await send(req, res, 200, trailerMux(header, ctx.usedResponseTrailer ?? new Headers()), bytes);
    // Timed to the answer handed to the socket, as REST calls are (to the response's end) and gRPC calls (to the
    // status sent).
    options.onCall(m.name, "OK", seconds());
  } catch (err) {
    if (isInternal(err)) options.onError(err, m.name);
    const answer = connectErrorAnswer(err, {
      ...(ctx?.usedResponseHeader === undefined ? {} : { header: ctx.usedResponseHeader }),
      trailer: ctx?.usedResponseTrailer ?? new Headers(),
    });
    if (answer.error.code === Code.Unauthenticated) res.shouldKeepAlive = false;
    await send(req, res, answer.status, answer.header, answer.body);
    options.onCall(m.name, codeName(answer.error.code), seconds());
  }
}

/** A chunked body: its length is not announced. */
const CHUNKED = -1;
const TOO_LARGE = Symbol("too large");

/**
 * The whole body, null when the client went away first, TOO_LARGE when a chunked body grew past `max` (one with a
 * Content-Length is within it: Node's parser ends it there).
 */
function readBody(
  req: IncomingMessage,
  length: number,
  max: number,
): Promise<Buffer | null | typeof TOO_LARGE> {
  if (length === 0) return Promise.resolve(Buffer.alloc(0));
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let read = 0;
    const onData = (chunk: Buffer): void => {
      read += chunk.byteLength;
      if (read > max) {
        cleanup();
        req.pause();
        resolve(TOO_LARGE);
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = (): void => {
      cleanup();
      resolve(chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks));
    };
    const onGone = (): void => {
      cleanup();
      resolve(null);
    };
    const cleanup = (): void => {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onGone);
      req.off("close", onGone);
    };
    if (req.destroyed) {
      resolve(null);
      return;
    }
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onGone);
    req.on("close", onGone);
  });
}

/** The request message, as connect parses it (JSON: unknown fields ignored; an empty binary body is the empty message). */
function decode(method: DescMethod, binary: boolean, body: Buffer): Message {
  if (binary) {
    try {
      return fromBinary(method.input, body);
    } catch (e) {
      throw new ConnectError(
        `parse binary: ${e instanceof Error ? e.message : String(e)}`,
        Code.InvalidArgument,
      );
    }
  }
  try {
    return fromJsonString(method.input, decoder.decode(body), { ignoreUnknownFields: true });
  } catch (e) {
    throw ConnectError.from(e, Code.InvalidArgument);
  }
}

function encode(method: DescMethod, binary: boolean, output: unknown): Buffer {
  const message = isMessage(output, method.output) ? output : create(method.output, output as never);
  try {
    return binary
      ? Buffer.from(toBinary(method.output, message))
      : Buffer.from(toJsonString(method.output, message));
  } catch (e) {
    throw ConnectError.from(e, Code.Internal);
  }
}

/** Writes an answer (its headers complete but for the encoding and length), compressed as connect-node would. */
async function send(
  req: IncomingMessage,
  res: ServerResponse,
  status: number,
  out: Headers,
  body: Uint8Array,
): Promise<void> {
  if (res.headersSent || res.destroyed) return;
  let bytes = body;
  if (bytes.byteLength >= COMPRESS_MIN_BYTES) {
    const compression = acceptedCompression(req.headers["accept-encoding"]);
    if (compression !== undefined) {
      bytes = await compression.compress(body);
      out.set("content-encoding", compression.name);
    }
  }
  out.set("content-length", String(bytes.byteLength));
  // A POST body not read to its end closes the connection; a GET (served in the pass that parsed its head, before
  // Node marks it complete) has nothing left to read.
  if (!req.complete && req.method === "POST") res.shouldKeepAlive = false;
  res.writeHead(status, Object.fromEntries(out));
  res.end(bytes);
}

/** The first encoding of the client's Accept-Encoding that is served, as connect negotiates it (names as sent). */
function acceptedCompression(accept: string | undefined) {
  if (accept === undefined) return undefined;
  for (const part of accept.split(",")) {
    const c = COMPRESSIONS.get(part.trim());
    if (c !== undefined) return c;
  }
  return undefined;
}

/** The request headers as a fetch Headers object (for services that read ctx.requestHeader). */
function webHeaders(req: IncomingMessage): Headers {
  const header = new Headers();
  const raw = req.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) header.append(raw[i] as string, raw[i + 1] as string);
  return header;
}
