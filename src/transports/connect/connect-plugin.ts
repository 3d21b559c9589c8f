import { Code, ConnectError } from "@connectrpc/connect";
import type { FastifyInstance } from "fastify";
import { connectErrorAnswer } from "./connect-errors.ts";
import { type ConnectHandler, type ConnectHandlerOptions, createConnectHandler } from "./connect-handler.ts";

/**
 * The Connect paths as Fastify routes, in an encapsulated plugin, for the Connect requests Fastify gets: those the
 * server's request listener does not take ahead of Fastify (src/transports/connect/connect-ahead.ts) — cross-origin requests
 * when CORS is on (@fastify/cors answers their preflight and adds its headers), other HTTP methods, requests while
 * the server closes. The route answers with the same handler; the headers Fastify's hooks set (request id, CORS)
 * are carried over. Bodies are read by the handler, never by Fastify.
 */
export function connectRoutes(handler: ConnectHandler) {
  return async (app: FastifyInstance): Promise<void> => {
    app.removeAllContentTypeParsers();
    app.addContentTypeParser("*", (_req, _payload, done) => done(null, undefined));
    app.setErrorHandler((err, req, reply) => {
      const status = (err as { statusCode?: unknown }).statusCode;
      const client = typeof status === "number" && status >= 400 && status < 500;
      if (!client) req.log.error({ err }, "rpc failed");
      const answer = client
        ? connectErrorAnswer(new ConnectError((err as Error).message, Code.InvalidArgument), { status })
        : connectErrorAnswer(err);
      return reply
        .code(answer.status)
        .headers(Object.fromEntries(answer.header))
        .send(Buffer.from(answer.body));
    });
    for (const path of handler.paths)
      app.all(path, async (req, reply) => {
        for (const [key, value] of Object.entries(reply.getHeaders()))
          if (value !== undefined) reply.raw.setHeader(key, value);
        await handler.serve(req.raw, reply.raw, path);
      });
  };
}

/**
 * Connect on a Fastify server of the caller's making: the Connect handler (src/transports/connect/connect-handler.ts) as Fastify
 * routes, with streams cut off `shutdownTimeoutMs` after the server starts closing.
 */
export function connectPlugin(
  options: Omit<ConnectHandlerOptions, "shutdownSignal"> & { shutdownTimeoutMs: number },
) {
  return async (app: FastifyInstance): Promise<void> => {
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
    await connectRoutes(createConnectHandler({ ...options, shutdownSignal: shutdown.signal }))(app);
  };
}
