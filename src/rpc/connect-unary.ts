import type { IncomingMessage, ServerResponse } from "node:http";
import { create, type DescMethod } from "@bufbuild/protobuf";
import { Code, ConnectError, type ContextValues } from "@connectrpc/connect";
import {
  type Compression,
  compressionNegotiate,
  createMethodSerializationLookup,
  mergeNonProtocolHeaders,
  validateReadWriteMaxBytes,
} from "@connectrpc/connect/protocol";
import {
  codeToHttpStatus,
  contentTypeUnaryJson,
  contentTypeUnaryProto,
  errorToJsonBytes,
  parseContentType,
  parseTimeout,
  trailerMux,
} from "@connectrpc/connect/protocol-connect";
import { compressionBrotli, compressionGzip } from "@connectrpc/connect-node";
import { callerValues } from "../core/context.ts";
import { headerKeyOf, nodeHeaders as headerLookup, type KeyOf } from "../transport/browser-session.ts";
import { type Admit, type Authenticate, admittedCaller } from "./auth-gate.ts";
import { abortOnClientGone, LazyHandlerContext } from "./handler-context.ts";
import type { ServiceBinding } from "./service-registry.ts";

export interface ConnectUnaryOptions {
  bindings: readonly ServiceBinding[];
  authenticate: Authenticate;
  admit: Admit;
  /** The request's session key: the header, or a browser session's (default: the header only). */
  keyOf?: KeyOf;
  /** The largest request body read, as connect-node's readMaxBytes. */
  readMaxBytes: number;
  /** Called for every finished call (metrics), as for the other transports. */
  onCall?: (method: string, code: Code | 0, ms: number) => void;
  /** Called for calls failing with INTERNAL or UNKNOWN. */
  onError?: (err: unknown, method: string) => void;
}

/**
 * Serves the calls it takes; returns false, touching nothing, for every call it leaves to connect-node's adapter.
 */
export type ConnectUnaryHandler = (req: IncomingMessage, res: ServerResponse, path: string) => boolean;

type Serialization = ReturnType<typeof createMethodSerializationLookup>;
type Limits = ReturnType<typeof validateReadWriteMaxBytes>;
type Negotiated = { request: Compression | null; response: Compression | null };
interface UnaryMethod {
  method: DescMethod;
  name: string;
  fn: (req: unknown, ctx: LazyHandlerContext) => unknown;
  serialization: Serialization;
}

/** What connect-node's adapter accepts by default (connectNodeAdapter's acceptCompression). */
const ACCEPT_COMPRESSION: Compression[] = [compressionGzip, compressionBrotli];

/**
 * Connect protocol unary calls (POST with `application/json` or `application/proto`) served straight from
 * node:http to the service implementation.
 *
 * connect-node's adapter turns each call into its universal request/response form first: Node headers copied into
 * a fetch Headers object, the URL parsed twice, three AbortControllers linked by event listeners, two of them
 * aborted with a DOMException (a captured stack trace) on every call, and request and response bodies wrapped in
 * async iterators. In the Connect benchmark that glue cost about two thirds of a call. The wire format stays
 * connect's: messages are parsed and serialized with connect's own method serialization (same read/write limits,
 * same error messages), compression is negotiated and applied with connect's functions and connect-node's
 * gzip/brotli, Connect-Timeout-Ms is parsed by connect's parser, and errors are written with its error JSON, HTTP
 * status mapping and trailer-prefixed metadata. One deliberate difference: a binary body that is not a valid
 * message is INVALID_ARGUMENT (400) here, where connect answers INTERNAL (500). GET, streaming methods, gRPC-Web
 * and unknown content types go to connect-node's adapter. test/integration/connect-unary.test.ts sends the same
 * raw requests to both and compares the answers byte for byte. The connect functions used are exported as
 * "private" (no semver promise): package.json pins @connectrpc/connect and connect-node to an exact version.
 */
export function createConnectUnaryHandler(options: ConnectUnaryOptions): ConnectUnaryHandler {
  const limits = validateReadWriteMaxBytes(options.readMaxBytes, undefined, undefined);
  const methods = new Map<string, UnaryMethod>();
  for (const { desc, impl } of options.bindings) {
    for (const method of desc.methods) {
      if (method.methodKind !== "unary") continue;
      const fn = impl[method.localName] as ((req: unknown, ctx: unknown) => unknown) | undefined;
      if (fn === undefined) continue;
      methods.set(`/${desc.typeName}/${method.name}`, {
        method,
        name: `${desc.typeName}/${method.name}`,
        fn: fn.bind(impl),
        serialization: createMethodSerializationLookup(method, undefined, undefined, limits),
      });
    }
  }

  return (req, res, path) => {
    if (req.method !== "POST") return false;
    const entry = methods.get(path);
    if (entry === undefined) return false;
    const type = parseContentType(req.headers["content-type"] ?? null);
    if (type === undefined || type.stream) return false;
    new UnaryCall(entry, type.binary, req, res, options, limits).run();
    return true;
  };
}

/** One call: an object with methods rather than per-call closures. */
class UnaryCall {
  readonly entry: UnaryMethod;
  readonly binary: boolean;
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly options: ConnectUnaryOptions;
  readonly limits: Limits;
  readonly #started = performance.now();
  #ctx: LazyHandlerContext | undefined;
  #compression: Negotiated = { request: null, response: null };

  constructor(
    entry: UnaryMethod,
    binary: boolean,
    req: IncomingMessage,
    res: ServerResponse,
    options: ConnectUnaryOptions,
    limits: Limits,
  ) {
    this.entry = entry;
    this.binary = binary;
    this.req = req;
    this.res = res;
    this.options = options;
    this.limits = limits;
  }

  run(): void {
    const headers = this.req.headers;
    // In connect's order: the timeout and compression headers are parsed first, their errors are answered only
    // after the caller is admitted, and the body is read last.
    const timeout = parseTimeout(headerValue(headers["connect-timeout-ms"]), Number.MAX_SAFE_INTEGER);
    const requested = headers["content-encoding"];
    const accepted = headers["accept-encoding"];
    const compression =
      requested === undefined && accepted === undefined
        ? undefined
        : compressionNegotiate(ACCEPT_COMPRESSION, requested ?? null, accepted ?? null, "Accept-Encoding");
    if (compression !== undefined) this.#compression = compression;
    const protocolError = compression?.error ?? timeout.error;
    let caller: ReturnType<typeof admittedCaller>;
    try {
      // The caller is admitted before the body is read, as connect's request gate: a rejected call is never parsed.
      caller = admittedCaller(
        this.options.authenticate,
        this.options.admit,
        (this.options.keyOf ?? headerKeyOf)(this.req.method ?? "POST", headerLookup(headers)),
      );
    } catch (err) {
      this.fail(err);
      return;
    }
    if (caller instanceof Promise) {
      caller.then(
        (c) => this.read(callerValues(c), timeout.timeoutMs, protocolError),
        (err: unknown) => this.fail(err),
      );
      return;
    }
    this.read(callerValues(caller), timeout.timeoutMs, protocolError);
  }

  read(values: ContextValues, timeoutMs: number | undefined, protocolError: ConnectError | undefined): void {
    const req = this.req;
    const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
    this.#ctx = new LazyHandlerContext({
      service: this.entry.method.parent,
      method: this.entry.method,
      protocolName: "connect",
      requestMethod: "POST",
      url: req.url ?? "",
      values,
      signal: () => callSignal(this.res, deadline),
      requestHeader: () => webHeaders(req),
      ...(deadline === undefined ? {} : { deadline }),
    });
    if (protocolError !== undefined) {
      this.fail(protocolError);
      return;
    }
    const max = this.limits.readMaxBytes;
    const hint = lengthHint(req.headers["content-length"]);
    if (hint !== undefined && hint > max) {
      this.fail(
        new ConnectError(
          `message size ${hint} is larger than configured readMaxBytes ${max}`,
          Code.ResourceExhausted,
        ),
      );
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size <= max) {
        chunks.push(chunk);
        return;
      }
      cleanup();
      // The rest of the body is not read: the answer closes the connection.
      this.res.shouldKeepAlive = false;
      this.fail(
        new ConnectError(
          `message size is larger than configured readMaxBytes ${max}`,
          Code.ResourceExhausted,
        ),
      );
    };
    const onEnd = (): void => {
      cleanup();
      const body = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, size);
      const compression = this.#compression.request;
      if (compression === null) this.invoke(body);
      else
        compression.decompress(body, max).then(
          (bytes) => this.invoke(bytes),
          (err: unknown) => this.fail(err),
        );
    };
    // The client went away before the whole body arrived: nobody is left to answer.
    const onGone = (): void => {
      cleanup();
      this.options.onCall?.(this.entry.name, Code.Canceled, performance.now() - this.#started);
    };
    const cleanup = (): void => {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onGone);
      req.off("close", onGone);
    };
    if (req.destroyed) {
      onGone();
      return;
    }
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onGone);
    req.on("close", onGone);
  }

  invoke(body: Uint8Array): void {
    const { entry, binary } = this;
    let input: unknown;
    try {
      input = entry.serialization.getI(binary).parse(body);
    } catch (err) {
      // connect reports a binary body that is not a valid message as INTERNAL; it is the client's input.
      this.fail(
        binary && err instanceof ConnectError && err.code === Code.Internal
          ? new ConnectError(err.rawMessage, Code.InvalidArgument)
          : err,
      );
      return;
    }
    let result: unknown;
    try {
      result = entry.fn(input, this.#ctx as LazyHandlerContext);
    } catch (err) {
      this.fail(err);
      return;
    }
    if (result instanceof Promise)
      result.then(
        (output: unknown) => this.succeed(output),
        (err: unknown) => this.fail(err),
      );
    else this.succeed(result);
  }

  succeed(output: unknown): void {
    let body: Uint8Array;
    try {
      body = this.entry.serialization
        .getO(this.binary)
        .serialize(create(this.entry.method.output, output as never));
    } catch (err) {
      this.fail(err);
      return;
    }
    this.options.onCall?.(this.entry.name, 0, performance.now() - this.#started);
    this.send(200, this.binary ? contentTypeUnaryProto : contentTypeUnaryJson, body, undefined);
  }

  fail(err: unknown): void {
    const error =
      err instanceof ConnectError
        ? err
        : new ConnectError("internal error", Code.Internal, undefined, undefined, err);
    if (error.code === Code.Internal || error.code === Code.Unknown)
      this.options.onError?.(err, this.entry.name);
    this.options.onCall?.(this.entry.name, error.code, performance.now() - this.#started);
    this.send(codeToHttpStatus(error.code), contentTypeUnaryJson, errorToJsonBytes(error, undefined), error);
  }

  /** Writes the answer as connect's unary handler does: metadata, trailers as `trailer-` headers, compression. */
  send(status: number, contentType: string, body: Uint8Array, error: ConnectError | undefined): void {
    const res = this.res;
    if (res.headersSent || res.destroyed) return;
    const ctx = this.#ctx;
    const usedHeader = ctx?.usedResponseHeader;
    const usedTrailer = ctx?.usedResponseTrailer;
    const compression = this.#compression.response;
    const compress = compression !== null && body.byteLength >= this.limits.compressMinBytes;
    const errorMetadata = error !== undefined && !error.isWireError && !isEmpty(error.metadata);
    if (usedHeader === undefined && usedTrailer === undefined && !compress && !errorMetadata) {
      // The usual case: nothing but the message.
      res.writeHead(status, { "content-type": contentType, "content-length": body.byteLength }).end(body);
      return;
    }
    const header = new Headers(usedHeader);
    header.set("content-type", contentType);
    if (errorMetadata) mergeNonProtocolHeaders(header, error.metadata);
    const finish = (bytes: Uint8Array): void => {
      const all = trailerMux(header, usedTrailer ?? new Headers());
      all.set("content-length", String(bytes.byteLength));
      if (!res.headersSent && !res.destroyed) res.writeHead(status, nodeHeaders(all)).end(bytes);
    };
    if (!compress) {
      finish(body);
      return;
    }
    compression.compress(body).then(
      (bytes) => {
        header.set("content-encoding", compression.name);
        finish(bytes);
      },
      (err: unknown) => {
        this.options.onError?.(err, this.entry.name);
        res.destroy();
      },
    );
  }
}

/** A request header as fetch's Headers.get gives it: repeated fields joined with ", ". */
function headerValue(value: string | string[] | undefined): string | null {
  if (value === undefined) return null;
  return typeof value === "string" ? value : value.join(", ");
}

function isEmpty(headers: Headers): boolean {
  for (const _ of headers.keys()) return false;
  return true;
}

/** Content-Length as connect's readAllBytes reads it: a non-negative integer, else no hint. */
function lengthHint(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number.parseInt(value, 10);
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}

/** The request headers as a fetch Headers object (for services that read ctx.requestHeader). */
function webHeaders(req: IncomingMessage): Headers {
  const header = new Headers();
  const raw = req.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) header.append(raw[i] as string, raw[i + 1] as string);
  return header;
}

/** A fetch Headers object as Node response headers (Set-Cookie kept as separate fields). */
function nodeHeaders(header: Headers): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  header.forEach((value, key) => {
    if (key !== "set-cookie") out[key] = value;
  });
  const cookies = header.getSetCookie();
  if (cookies.length > 0) out["set-cookie"] = cookies;
  return out;
}

/**
 * Aborted when the client goes away before the answer is complete, or at the deadline (made only when a service
 * asks), with connect's reasons.
 */
function callSignal(res: ServerResponse, deadline: number | undefined): AbortSignal {
  const abort = abortOnClientGone(
    res,
    () => new ConnectError("the client closed the connection", Code.Canceled),
  );
  if (deadline !== undefined && !abort.signal.aborted) {
    const timer = setTimeout(
      () => abort.abort(new ConnectError("the operation timed out", Code.DeadlineExceeded)),
      Math.max(0, deadline - Date.now()),
    );
    res.once("close", () => clearTimeout(timer));
  }
  return abort.signal;
}
