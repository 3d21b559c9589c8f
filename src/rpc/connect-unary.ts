import type { IncomingMessage } from "node:http";
import {
  create,
  type DescMethod,
  fromBinary,
  fromJsonString,
  isMessage,
  type Message,
  toBinary,
  toJson,
  toJsonString,
} from "@bufbuild/protobuf";
import { base64Encode } from "@bufbuild/protobuf/wire";
import { Code, ConnectError } from "@connectrpc/connect";
import { compressionBrotli, compressionGzip } from "@connectrpc/connect-node";
import type { FastifyReply, FastifyRequest } from "fastify";
import { type Caller, callerValues } from "../core/context.ts";
import type { Admission } from "../transport/admission.ts";
import { type HeaderLookup, type KeyOf, nodeHeaders } from "../transport/browser-session.ts";
import { type CallObserver, codeName } from "../transport/call-metrics.ts";
import { connectHttpStatusOf, isInternal, publicError } from "../transport/errors.ts";
import { abortOnClientGone, LazyHandlerContext } from "../transport/handler-context.ts";

/** What the fast path needs of the transport kit. */
export interface ConnectUnaryOptions {
  admission: Admission;
  keyOf: KeyOf;
  maxMessageBytes: number;
  onCall: CallObserver;
  onError: (err: unknown, method: string) => void;
}

export interface UnaryMethod {
  method: DescMethod;
  name: string;
  fn: (req: unknown, ctx: LazyHandlerContext) => unknown;
}

const CONTENT_TYPE = /^application\/(?:(json)(?:; ?charset=utf-?8)?|(proto))$/i;
/** Connect's compressMinBytes default: smaller answers are sent as they are. */
const COMPRESS_MIN_BYTES = 1024;
const COMPRESSIONS = new Map([
  [compressionGzip.name, compressionGzip],
  [compressionBrotli.name, compressionBrotli],
]);
/** Error metadata that is not copied to the answer's headers (the protocol's own). */
const PROTOCOL_HEADERS = new Set([
  "content-type",
  "content-length",
  "content-encoding",
  "accept-encoding",
  "connect-protocol-version",
  "connect-timeout-ms",
  "connect-content-encoding",
  "connect-accept-encoding",
  "transfer-encoding",
]);
const decoder = new TextDecoder();

/** The implementation of a unary method, bound, for the fast path. */
export function unaryMethod(method: DescMethod, impl: Record<string, unknown>): UnaryMethod | null {
  const fn = impl[method.localName];
  if (typeof fn !== "function") return null;
  return {
    method,
    name: `${method.parent.typeName}/${method.name}`,
    fn: (fn as (req: unknown, ctx: unknown) => unknown).bind(impl),
  };
}

/**
 * The everyday Connect unary call — POST, `application/json` or `application/proto`, a Content-Length within the
 * limit, no request compression, no Connect-Timeout-Ms — served inside the Fastify route straight to the service
 * implementation; `fastConnectUnary` answers false for every other request, which then goes to connect-node.
 *
 * What it earns: connect-node's universal handler (fetch-style Headers, URL parsing, linked AbortControllers
 * aborted with a DOMException on every call, async-iterable bodies) costs ~130 µs of CPU per call on the project's
 * machines, five times a whole bare Fastify request; through it the Connect benchmark runs at ~0.6× bare
 * connect-node against a 0.9× goal. This path runs the same call at the cost of a REST call.
 *
 * It speaks the Connect protocol (connectrpc.com/docs/protocol) with public APIs only: protobuf-es JSON and
 * binary (unknown JSON fields ignored, as connect), connect-node's gzip/brotli for responses of 1 KiB or more when
 * the client accepts them, the protocol's code → HTTP status table and error JSON, response headers and
 * `trailer-`-prefixed trailers. Admission, call metrics and internal-error masking are the transport kit's, as on
 * the connect-node path; a binary body that does not decode is INVALID_ARGUMENT there too.
 * test/integration/connect-unary.test.ts sends the same requests through both paths and compares the answers.
 */
export function fastConnectUnary(
  m: UnaryMethod,
  req: FastifyRequest,
  reply: FastifyReply,
  options: ConnectUnaryOptions,
): false | Promise<void> {
  if (req.method !== "POST") return false;
  const h = req.headers;
  const type = CONTENT_TYPE.exec(h["content-type"] ?? "");
  if (type === null) return false;
  if (h["content-encoding"] !== undefined && h["content-encoding"] !== "identity") return false;
  if (h["connect-timeout-ms"] !== undefined) return false;
  const version = h["connect-protocol-version"];
  if (version !== undefined && version !== "1") return false;
  const length = Number(h["content-length"]);
  if (!Number.isSafeInteger(length) || length < 0 || length > options.maxMessageBytes) return false;
  return serve(m, type[2] !== undefined, length, req, reply, options);
}

async function serve(
  m: UnaryMethod,
  binary: boolean,
  length: number,
  req: FastifyRequest,
  reply: FastifyReply,
  options: ConnectUnaryOptions,
): Promise<void> {
  const started = performance.now();
  const seconds = (): number => (performance.now() - started) / 1000;
  const raw = req.raw;
  const headers = nodeHeaders(req.headers);
  let ctx: LazyHandlerContext | null = null;
  try {
    // Admitted before the body is read, as connect's request gate: a rejected call is never parsed.
    const admitted = options.admission(options.keyOf("POST", headers));
    const caller: Caller = admitted instanceof Promise ? await admitted : admitted;
    ctx = new LazyHandlerContext({
      service: m.method.parent,
      method: m.method,
      protocolName: "connect",
      requestMethod: "POST",
      url: req.url,
      values: callerValues(caller),
      signal: () =>
        abortOnClientGone(
          reply.raw,
          () => new ConnectError("the client closed the connection", Code.Canceled),
        ).signal,
      requestHeader: () => webHeaders(raw),
    });
    const body = await readBody(raw, length);
    if (body === null) {
      options.onCall(m.name, "Canceled", seconds());
      return;
    }
    const input = decode(m.method, binary, body);
    const result = m.fn(input, ctx);
    const output = result instanceof Promise ? await result : result;
    const bytes = encode(m.method, binary, output);
    options.onCall(m.name, "OK", seconds());
    await send(reply, 200, binary ? "application/proto" : "application/json", bytes, ctx, undefined, headers);
  } catch (err) {
    const error = publicError(err);
    if (isInternal(err)) options.onError(err, m.name);
    options.onCall(m.name, codeName(error.code), seconds());
    if (error.code === Code.Unauthenticated) reply.raw.shouldKeepAlive = false;
    await send(
      reply,
      connectHttpStatusOf(error.code),
      "application/json",
      Buffer.from(errorJson(error)),
      ctx,
      error,
      headers,
    );
  }
}

/** The whole body (its length is known), or null when the client went away first. */
function readBody(req: IncomingMessage, length: number): Promise<Buffer | null> {
  if (length === 0) return Promise.resolve(Buffer.alloc(0));
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    const onData = (chunk: Buffer): void => {
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

/** The protocol's error JSON: `{code, message?, details?: [{type, debug?, value}]}` (values unpadded base64). */
function errorJson(error: ConnectError): string {
  const out: { code: string; message?: string; details?: unknown[] } = { code: snakeCode(error.code) };
  if (error.rawMessage.length > 0) out.message = error.rawMessage;
  if (error.details.length > 0)
    out.details = error.details.map((d) => {
      if (!("desc" in d)) return { ...d, value: base64Encode(d.value, "std_raw") };
      const msg = create(d.desc, d.value);
      let debug: unknown;
      try {
        debug = toJson(d.desc, msg);
      } catch {
        // optional debug information (a message holding an Any may not print)
      }
      const value = base64Encode(toBinary(d.desc, msg), "std_raw");
      return debug === undefined ? { type: d.desc.typeName, value } : { type: d.desc.typeName, debug, value };
    });
  return JSON.stringify(out);
}

function snakeCode(code: Code): string {
  const name = Code[code];
  return name === undefined
    ? String(code)
    : name[0]?.toLowerCase() + name.slice(1).replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/** Writes the answer: the service's response headers, its trailers as `trailer-` headers, error metadata. */
async function send(
  reply: FastifyReply,
  status: number,
  contentType: string,
  body: Buffer,
  ctx: LazyHandlerContext | null,
  error: ConnectError | undefined,
  request: HeaderLookup,
): Promise<void> {
  if (reply.sent || reply.raw.destroyed) return;
  reply.code(status).header("content-type", contentType);
  ctx?.usedResponseHeader?.forEach((value, key) => {
    reply.header(key, value);
  });
  if (error !== undefined)
    error.metadata.forEach((value, key) => {
      if (!PROTOCOL_HEADERS.has(key)) reply.header(key, value);
    });
  ctx?.usedResponseTrailer?.forEach((value, key) => {
    reply.header(`trailer-${key}`, value);
  });
  let out = body;
  if (out.byteLength >= COMPRESS_MIN_BYTES) {
    const compression = acceptedCompression(request("accept-encoding"));
    if (compression !== undefined) {
      out = Buffer.from(await compression.compress(body));
      reply.header("content-encoding", compression.name);
    }
  }
  await reply.send(out);
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
