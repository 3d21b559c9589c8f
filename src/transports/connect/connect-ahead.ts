import type { IncomingMessage, RequestListener, ServerResponse } from "node:http";
import type { ConnectHandler } from "./connect-handler.ts";

export interface ConnectAheadOptions {
  handler: ConnectHandler;
  /** The request id of a request without x-request-id (Fastify's generator, so ids never repeat across the two). */
  requestId: () => string;
  /** One access line per request, as Fastify's onResponse hook writes it for the other routes. */
  log: () => { info(fields: object, msg: string): void };
  /** The HTTP metrics of one request. */
  observe: (method: string, route: string, status: number, seconds: number) => void;
  /** Cross-origin requests go to Fastify (its CORS plugin adds the headers) when CORS is on. */
  cors: boolean;
  /** True once the server is closing: requests then go to Fastify, which answers 503. */
  closing: () => boolean;
}

/**
 * The server's request listener: Connect, gRPC-Web and Connect GET requests (POST or GET on a method's path) go
 * straight to connect-node's handler, before Fastify sees them, with the request id, access line and HTTP metrics
 * Fastify's hooks give every other request; everything else — and a Connect request Fastify must see (cross-origin
 * under CORS, another HTTP method, a closing server) — goes to Fastify's own handler. What it earns: Fastify's
 * request and reply objects, hooks and routing cost more than connect-node's whole call (docs/transport.md).
 */
export function connectAhead(options: ConnectAheadOptions, fastify: RequestListener): RequestListener {
  const { handler } = options;
  return (req: IncomingMessage, res: ServerResponse) => {
    const url = req.url ?? "";
    const q = url.indexOf("?");
    const path = q < 0 ? url : url.slice(0, q);
    if (
      !handler.serves(path) ||
      (req.method !== "POST" && req.method !== "GET") ||
      (options.cors && req.headers.origin !== undefined) ||
      options.closing()
    ) {
      fastify(req, res);
      return;
    }
    const started = performance.now();
    const given = req.headers["x-request-id"];
    const reqId = typeof given === "string" && given !== "" ? given : options.requestId();
    res.setHeader("x-request-id", reqId);
    res.once("close", () => {
      const ms = performance.now() - started;
      options.observe(req.method as string, path, res.statusCode, ms / 1000);
      options
        .log()
        .info(
          { reqId, method: req.method, url, route: path, statusCode: res.statusCode, ms },
          "request completed",
        );
    });
    void handler.serve(req, res, path);
  };
}
