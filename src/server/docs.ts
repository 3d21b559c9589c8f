import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from "fastify";

/**
 * GET /openapi.json and Swagger UI under /docs, both made on first use: the document is built on the first
 * request for it, and @fastify/swagger + @fastify/swagger-ui (with @fastify/static and their dependencies) are
 * imported only when someone first opens /docs. They run in a Fastify instance of their own that answers the
 * /docs requests through `inject`, so the server that answers everything else starts without them (~3 MiB of
 * the idle RSS) and a production server nobody browses never loads them.
 */
export function registerDocs(http: FastifyInstance, buildDocument: () => object): void {
  let document: object | undefined;
  const openapi = (): object => {
    document ??= buildDocument();
    return document;
  };
  http.get("/openapi.json", async () => openapi());

  let docs: Promise<FastifyInstance> | undefined;
  const docsApp = (): Promise<FastifyInstance> => {
    docs ??= (async () => {
      const [{ default: swagger }, { default: swaggerUi }] = await Promise.all([
        import("@fastify/swagger"),
        import("@fastify/swagger-ui"),
      ]);
      const app = Fastify({ logger: false });
      await app.register(swagger, { mode: "static", specification: { document: openapi() as never } });
      await app.register(swaggerUi, { routePrefix: "/docs" });
      await app.ready();
      return app;
    })();
    // A failed load is retried by the next request instead of being remembered.
    docs.catch(() => {
      docs = undefined;
    });
    return docs;
  };
  const relay = async (req: FastifyRequest, reply: FastifyReply) => {
    const app = await docsApp();
    const res = await app.inject({ method: "GET", url: req.url, headers: req.headers });
    for (const [name, value] of Object.entries(res.headers)) {
      if (
        value !== undefined &&
        name !== "content-length" &&
        name !== "transfer-encoding" &&
        name !== "connection"
      )
        void reply.header(name, value);
    }
    return reply.code(res.statusCode).send(res.rawPayload);
  };
  http.get("/docs", relay);
  http.get("/docs/*", relay);
}
