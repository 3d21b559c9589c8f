import type { IncomingMessage, ServerResponse } from "node:http";
import type { ConnectError } from "@connectrpc/connect";
import { mergeNonProtocolHeaders } from "@connectrpc/connect/protocol";
import { errorToJsonBytes, trailerMux } from "@connectrpc/connect/protocol-connect";
import { connectHttpStatusOf, publicError } from "../kit/errors.ts";

/** A Connect error answer: HTTP status, headers and body. */
export interface ConnectErrorAnswer {
  status: number;
  header: Headers;
  body: Uint8Array;
  /** The error as answered (internal errors masked). */
  error: ConnectError;
}

export interface ConnectErrorOptions {
  /**
   * The HTTP status where the answer is about the request itself rather than a call's code (405/415 for a method
   * or content type the protocol does not take, an HTTP error Fastify raised); else the table's.
   */
  status?: number;
  /** Headers the answer carries besides the error's (the handler context's response headers, Allow). */
  header?: Headers | Record<string, string>;
  /** Trailers the service set, sent as `trailer-` headers (the Connect unary protocol's way). */
  trailer?: Headers;
}

/**
 * THE Connect error answer of this server, for the unary Connect protocol: internal errors masked alike
 * (`publicError`), the HTTP status from ERROR_TABLE (`connectHttpStatusOf`), connect's own error JSON
 * (`errorToJsonBytes`: `{code, message, details}`), the error's metadata as headers (`mergeNonProtocolHeaders`) and
 * trailers as `trailer-` headers (`trailerMux`). Every Connect error the server writes itself comes from here: the
 * failed calls of the unary path (connect-unary.ts), the protocol problems found before connect-node, the binary
 * decode failures connect-node reports as internal (connect-handler.ts) and the errors Fastify raises on a Connect
 * route (connect-plugin.ts). The calls connect-node serves are answered by connect-node with connect's
 * `codeToHttpStatus`, which the table's Connect column equals (test/unit/connect-errors.test.ts).
 */
export function connectErrorAnswer(err: unknown, opts: ConnectErrorOptions = {}): ConnectErrorAnswer {
  const error = publicError(err);
  const header = new Headers(opts.header);
  header.set("content-type", "application/json");
  mergeNonProtocolHeaders(header, error.metadata);
  return {
    status: opts.status ?? connectHttpStatusOf(error.code),
    header: opts.trailer === undefined ? header : trailerMux(header, opts.trailer),
    body: errorToJsonBytes(error, {}),
    error,
  };
}

/** Writes a Connect error answer (see connectErrorAnswer) on a node:http response. */
export function writeConnectError(
  req: IncomingMessage,
  res: ServerResponse,
  err: unknown,
  opts: ConnectErrorOptions = {},
): void {
  if (res.headersSent || res.destroyed) return;
  const answer = connectErrorAnswer(err, opts);
  answer.header.set("content-length", String(answer.body.byteLength));
  // A request whose body has not all arrived is not waited for: the connection closes after the answer.
  if (!req.complete) res.shouldKeepAlive = false;
  res.writeHead(answer.status, Object.fromEntries(answer.header));
  res.end(answer.body);
}
