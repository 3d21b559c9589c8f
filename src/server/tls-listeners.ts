import {
  createServer,
  type IncomingMessage,
  type RequestListener,
  type Server,
  type ServerOptions,
  type ServerResponse,
} from "node:http";
import { createServer as createHttpsServer } from "node:https";
import type { TransportLimits } from "../transports/kit/limits.ts";

/** The certificate chain and private key a listener serves TLS with (PEM). */
export interface ListenerTls {
  readonly cert: Buffer;
  readonly key: Buffer;
}

/**
 * node:http's server, or with `tls` node:https's with the same options and listener. An https.Server is an
 * http.Server to everything the HTTP listener does with it (request and upgrade events, timeouts, keep-alive,
 * closeIdleConnections); its 'connection' event still gives the accepted TCP socket, and a request's socket is
 * the TLS socket on top of it (ConnectionGuard.begin finds the one from the other).
 */
export function createHttpOrHttpsServer(
  tls: ListenerTls | undefined,
  options: ServerOptions,
  listener: RequestListener,
): Server {
  if (tls === undefined) return createServer(options, listener);
  return createHttpsServer({ ...options, cert: tls.cert, key: tls.key }, listener) as unknown as Server;
}

/** The paths the webhook listener serves: the agent servers' webhooks (OH_WEBHOOKS_0_BASE_URL). */
export const WEBHOOK_PATH_PREFIX = "/api/v1/webhooks/";
const NOT_FOUND_BODY = JSON.stringify({ detail: "Not Found" });
const DOT_SEGMENT = /\/\.{1,2}(?:[/?#]|$)/;

/**
 * The plain-HTTP webhook listener of a server that serves TLS itself (docs/tls.md): sandboxes would not trust the
 * server's certificate (self-signed, or not naming 127.0.0.1), so their default webhook URL is this listener on
 * loopback instead. It answers only the webhook paths, handing them to `route` (the HTTP server's Fastify
 * routing: the same routes, hooks, limits and access lines); every other path is a JSON 404, so that nothing
 * else of the API is reachable without TLS. Timeouts are the HTTP listener's.
 */
export function createWebhookListener(route: RequestListener, limits: TransportLimits): Server {
  const server = createServer(
    {
      headersTimeout: Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs),
      requestTimeout: limits.requestTimeoutMs,
      connectionsCheckingInterval: 1_000,
    },
    (req: IncomingMessage, res: ServerResponse) => {
      const url = req.url ?? "";
      // No dot segments or percent escapes (a webhook path has neither): only what Fastify routes as a webhook.
      if (url.startsWith(WEBHOOK_PATH_PREFIX) && !DOT_SEGMENT.test(url) && !url.includes("%")) {
        route(req, res);
        return;
      }
      res.writeHead(404, {
        "content-type": "application/json; charset=utf-8",
        "content-length": Buffer.byteLength(NOT_FOUND_BODY),
      });
      res.end(NOT_FOUND_BODY);
    },
  );
  server.maxConnections = limits.maxConnections;
  return server;
}
