import Fastify from "fastify";
import { describe, expect, it } from "vitest";
import { lazyFastifyCompilers } from "../../src/server/app.ts";

describe("lazyFastifyCompilers", () => {
  it("validates and serializes with Fastify's own compilers when a route declares schemas", async () => {
    const app = Fastify({ schemaController: { compilersFactory: lazyFastifyCompilers() } });
    app.post(
      "/x",
      {
        schema: {
          body: { type: "object", required: ["n"], properties: { n: { type: "integer" } } },
          response: { 200: { type: "object", properties: { n: { type: "integer" } } } },
        },
      },
      async (req) => ({ n: (req.body as { n: number }).n + 1, dropped: "by the serializer" }),
    );
    const bad = await app.inject({ method: "POST", url: "/x", payload: { n: "not a number" } });
    expect(bad.statusCode).toBe(400);
    const ok = await app.inject({ method: "POST", url: "/x", payload: { n: 1 } });
    expect(ok.json()).toStrictEqual({ n: 2 });
    await app.close();
  });
});
