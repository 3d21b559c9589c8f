/**
 * The agent server's answers: a {@link Reply} a route decides on, the errors that carry one (422 in
 * FastAPI/pydantic's shape, 413), and writing one to the response.
 */
import type { IncomingMessage, ServerResponse } from "node:http";

/** One problem in a request, in FastAPI/pydantic's shape (`{"detail": [violation, ...]}` with status 422). */
export interface AgentViolation {
  type: string;
  loc: (string | number)[];
  msg: string;
  input: unknown;
  ctx?: Record<string, unknown>;
}

/** A response the router decided on. */
export interface Reply {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
}

/** Thrown by a route (or what it calls) to answer with its reply instead of a 500. */
export class RequestError extends Error {
  readonly reply: Reply;
  constructor(reply: Reply) {
    super(`request error ${reply.status}`);
    this.reply = reply;
  }
}

/** A reply of `{"detail": message}`. */
export const detail = (status: number, message: string): Reply => ({ status, body: { detail: message } });
/** 422 with FastAPI/pydantic's list of violations. */
export const unprocessable = (violations: AgentViolation[]): RequestError =>
  new RequestError({ status: 422, body: { detail: violations } });

/** 413 for a body over `limit` bytes. */
export const tooLarge = (limit: number): RequestError =>
  new RequestError({
    status: 413,
    body: { detail: `Request body too large (limit ${limit} bytes)` },
    // The rest of the body is not read: close the connection rather than leave it half-consumed.
    headers: { connection: "close" },
  });

/** Writes a reply as JSON (no body for HEAD); a reply that closes the connection closes it once sent. */
export function sendReply(req: IncomingMessage, res: ServerResponse, reply: Reply): void {
  if (res.headersSent || res.destroyed) return;
  const body = JSON.stringify(reply.body);
  res.writeHead(reply.status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(body),
    ...reply.headers,
  });
  res.end(req.method === "HEAD" ? undefined : body);
  if (reply.headers?.connection === "close") res.on("finish", () => req.socket.destroySoon());
}
