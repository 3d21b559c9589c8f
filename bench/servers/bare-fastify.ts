// Baseline of the REST benchmarks: a bare Fastify app (no logger) with GET /api/settings answering the same JSON
// as the service after the same X-Session-API-Key check against a constant, and POST /api/settings parsing the
// same body and answering {"message":"Settings stored"}. Argument: the fixture file written by bench/run.ts.
// Prints {port, pid} as one JSON line.
import { readFileSync } from "node:fs";
import Fastify from "fastify";
import type { Fixture } from "./fixture.ts";

const fixture = JSON.parse(readFileSync(process.argv[2] ?? "", "utf8")) as Fixture;
const NO_CACHE = {
  "cache-control": "no-cache, no-store, must-revalidate, max-age=0",
  pragma: "no-cache",
  expires: "0",
};

const app = Fastify({ logger: false, bodyLimit: 1024 * 1024 });
app.addHook("onRequest", async (req, reply) => {
  if (req.headers["x-session-api-key"] !== fixture.key) {
    await reply.code(401).headers(NO_CACHE).send({ detail: "Unauthorized" });
    return reply;
  }
});
app.get("/api/settings", async (_req, reply) => reply.headers(NO_CACHE).send(fixture.restSettings));
app.post("/api/settings", async (req, reply) => {
  if (typeof req.body !== "object" || req.body === null) return reply.code(422).send({ detail: [] });
  return reply.headers(NO_CACHE).send({ message: "Settings stored" });
});
await app.listen({ host: "127.0.0.1", port: 0 });
const address = app.server.address();
const port = typeof address === "object" && address !== null ? address.port : 0;
process.stdout.write(`${JSON.stringify({ port, pid: process.pid })}\n`);
process.on("SIGTERM", () => void app.close().then(() => process.exit(0)));
