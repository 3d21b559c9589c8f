// The Connect unary fast path (src/rpc/connect-unary.ts) against connect-node's own adapter: the same service
// implementation behind both, the same raw HTTP/1.1 requests sent to each over loopback, and the answers compared
// byte for byte (status, headers, body). Covers success, metadata and trailers, every error source (auth gate,
// rate limit, parsing, limits, services throwing ConnectErrors with metadata and details or plain errors),
// response compression, binary and JSON, and the requests the fast path leaves to the adapter.

import { createServer, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { brotliCompressSync, gzipSync } from "node:zlib";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { connectNodeAdapter, createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { Caller } from "../../src/core/context.ts";
import { requireCaller } from "../../src/core/context.ts";
import { resourceExhausted } from "../../src/core/errors.ts";
import { BadRequestSchema } from "../../src/gen/google/rpc/error_details_pb.js";
import {
  GetSettingsRequestSchema,
  SettingsService,
  StoreSettingsRequestSchema,
} from "../../src/gen/workspace/v1/settings_pb.js";
import { createAuthGate } from "../../src/rpc/auth-gate.ts";
import { createConnectUnaryHandler } from "../../src/rpc/connect-unary.ts";
import { bind } from "../../src/rpc/service-registry.ts";

const READ_MAX = 2048;
const callers: Record<string, Caller> = {
  good: { userId: "u1", keyId: "k1" },
  limited: { userId: "u2", keyId: "k2" },
};
/** "async-good" resolves through a promise, as a key missing from the cache does. */
const authenticate = (key: string | undefined): Caller | null | Promise<Caller | null> =>
  key === "async-good" ? sleep(1).then(() => callers.good ?? null) : (callers[key ?? ""] ?? null);
const admit = (caller: Caller): void => {
  if (caller.keyId === "k2") throw resourceExhausted("Too many requests");
};

const settings = { language: "en", llmModel: "anthropic/claude", maxIterations: 100 };
const binding = bind(SettingsService, {
  async getSettings(_req, ctx) {
    const caller = requireCaller(ctx);
    switch (ctx.requestHeader.get("x-mode")) {
      case "meta":
        ctx.responseHeader.set("x-answer", "42");
        ctx.responseHeader.append("set-cookie", "a=1");
        ctx.responseHeader.append("set-cookie", "b=2");
        ctx.responseTrailer.set("x-trailer", "t");
        break;
      case "connect-error":
        ctx.responseHeader.set("x-before", "1");
        ctx.responseTrailer.set("x-trailer", "t");
        throw new ConnectError("nope", Code.FailedPrecondition, { "x-meta": "m" }, [
          { desc: BadRequestSchema, value: { fieldViolations: [{ field: "language", description: "bad" }] } },
        ]);
      case "plain-error":
        throw new Error("boom");
      case "sync-throw":
        throw new ConnectError("sync", Code.NotFound);
      case "async":
        await sleep(2);
        break;
      case "await-signal":
        // Waits for the call's signal (deadline or client gone) and fails with its reason.
        waiting.push(Date.now());
        await new Promise((_, reject) => {
          ctx.signal.addEventListener("abort", () => {
            aborts.push(ctx.signal.reason);
            reject(ctx.signal.reason);
          });
        });
        break;
      case "big":
        return { settings: { ...settings, language: "x".repeat(3000) } };
    }
    return {
      settings: { ...settings, agent: caller.userId },
      llmApiKeySet: true,
      providerTokensSet: { github: { host: "github.com" } },
    };
  },
  storeSettings(req) {
    return { message: `stored ${req.settings?.language ?? "-"} [${req.resetFields.join(",")}]` };
  },
  addGitProviders() {
    return { message: "" };
  },
  unsetProviderTokens() {
    return { message: "" };
  },
});

const calls: { method: string; code: number }[] = [];
const aborts: unknown[] = [];
const waiting: number[] = [];
let fast: Server;
let reference: Server;
beforeAll(async () => {
  const adapter = () =>
    connectNodeAdapter({
      requestGate: createAuthGate(authenticate, admit),
      readMaxBytes: READ_MAX,
      routes: (router) => {
        router.service(SettingsService, binding.impl);
      },
    });
  const unary = createConnectUnaryHandler({
    bindings: [binding],
    authenticate,
    admit,
    readMaxBytes: READ_MAX,
    onCall: (method, code) => calls.push({ method, code }),
  });
  const fallback = adapter();
  fast = createServer((req, res) => {
    if (!unary(req, res, (req.url ?? "").split("?")[0] ?? "")) fallback(req, res);
  });
  reference = createServer(adapter());
  await Promise.all(
    [fast, reference].map((s) => new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve))),
  );
});
afterAll(async () => {
  for (const s of [fast, reference]) {
    s.closeAllConnections();
    await new Promise((resolve) => s.close(resolve));
  }
});

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

/** One raw HTTP/1.1 request (no header or body added by a client library); the answer's bytes as they came. */
function send(
  server: Server,
  path: string,
  headers: Record<string, string>,
  body: string | Uint8Array | undefined,
  method = "POST",
): Promise<Answer> {
  const { port } = server.address() as AddressInfo;
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, path, method, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        const { date: _d, connection: _c, "keep-alive": _k, ...rest } = res.headers;
        resolve({ status: res.statusCode ?? 0, headers: rest, body: Buffer.concat(chunks) });
      });
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(body);
  });
}

async function same(
  path: string,
  headers: Record<string, string>,
  body: string | Uint8Array | undefined,
  method = "POST",
): Promise<Answer> {
  const [a, b] = await Promise.all([
    send(fast, path, headers, body, method),
    send(reference, path, headers, body, method),
  ]);
  expect({ ...a, body: a.body.toString("base64") }).toEqual({ ...b, body: b.body.toString("base64") });
  return a;
}

const GET_SETTINGS = "/workspace.v1.SettingsService/GetSettings";
const STORE_SETTINGS = "/workspace.v1.SettingsService/StoreSettings";
const json = (key?: string, extra: Record<string, string> = {}) => ({
  "content-type": "application/json",
  ...(key === undefined ? {} : { "x-session-api-key": key }),
  ...extra,
});
const json200 = (a: Answer) =>
  expect([a.status, a.headers["content-type"]]).toEqual([200, "application/json"]);

describe("Connect unary fast path answers exactly what connect-node's adapter answers", () => {
  it("successful calls: JSON (content-type variants), binary, async caller lookup, async services", async () => {
    const ok = await same(GET_SETTINGS, json("good"), "{}");
    json200(ok);
    expect(JSON.parse(ok.body.toString())).toMatchObject({ settings: { language: "en", agent: "u1" } });
    for (const contentType of [
      "application/json; charset=utf-8",
      "Application/JSON",
      "application/json;charset=utf8",
    ])
      json200(await same(GET_SETTINGS, { ...json("good"), "content-type": contentType }, "{}"));
    const proto = await same(
      GET_SETTINGS,
      { "content-type": "application/proto", "x-session-api-key": "good" },
      toBinary(GetSettingsRequestSchema, create(GetSettingsRequestSchema)),
    );
    expect([proto.status, proto.headers["content-type"]]).toEqual([200, "application/proto"]);
    json200(await same(GET_SETTINGS, json("async-good"), "{}"));
    json200(await same(GET_SETTINGS, json("good", { "x-mode": "async" }), "{}"));
    expect((await same(GET_SETTINGS, json("good"), "")).status).toBe(400); // an empty body is not JSON
  });

  it("request parsing: proto and JSON names, unknown fields, wrong types, malformed JSON and bytes, empty bodies", async () => {
    const stored = await same(
      STORE_SETTINGS,
      json("good"),
      '{"settings":{"language":"fr"},"resetFields":["a"]}',
    );
    expect(JSON.parse(stored.body.toString())).toEqual({ message: "stored fr [a]" });
    await same(STORE_SETTINGS, json("good"), '{"settings":{"language":"fr"},"reset_fields":["b","c"]}');
    await same(
      STORE_SETTINGS,
      { "content-type": "application/proto", "x-session-api-key": "good" },
      toBinary(StoreSettingsRequestSchema, create(StoreSettingsRequestSchema, { resetFields: ["x"] })),
    );
    // connect's JSON options ignore unknown fields.
    expect((await same(STORE_SETTINGS, json("good"), '{"nope":1}')).status).toBe(200);
    for (const body of [
      '{"settings":{"language":5}}',
      '{"settings":{"maxIterations":"many"}}',
      "{",
      "[]",
      "null",
      '"text"',
      "",
      "\u0000\u00ff",
    ]) {
      const a = await same(STORE_SETTINGS, json("good"), body);
      expect([a.status, JSON.parse(a.body.toString()).code]).toEqual([400, "invalid_argument"]);
    }
    // A binary body that is no message: INVALID_ARGUMENT here, where connect-node answers INTERNAL (500).
    const garbage = new Uint8Array([0xff, 0xff, 0xff]);
    const proto = { "content-type": "application/proto", "x-session-api-key": "good" };
    const [ours, theirs] = await Promise.all([
      send(fast, STORE_SETTINGS, proto, garbage),
      send(reference, STORE_SETTINGS, proto, garbage),
    ]);
    expect([theirs.status, JSON.parse(theirs.body.toString()).code]).toEqual([500, "internal"]);
    expect([ours.status, JSON.parse(ours.body.toString())]).toEqual([
      400,
      { ...JSON.parse(theirs.body.toString()), code: "invalid_argument" },
    ]);
  });

  it("the auth gate and the rate limit answer before the body is read", async () => {
    for (const key of [undefined, "wrong", ""]) {
      const a = await same(GET_SETTINGS, json(key), "{}");
      expect(a.status).toBe(401);
      expect(JSON.parse(a.body.toString())).toMatchObject({ code: "unauthenticated" });
    }
    const limited = await same(GET_SETTINGS, json("limited"), "{}");
    expect(limited.status).toBe(429);
    // Malformed bodies from unknown callers are refused as unauthenticated, never parsed.
    expect((await same(STORE_SETTINGS, json("wrong"), "{")).status).toBe(401);
  });

  it("read limits: a declared length over readMaxBytes is refused unread; one at the limit is read", async () => {
    const over = await same(
      STORE_SETTINGS,
      json("good"),
      JSON.stringify({ settings: { language: "x".repeat(READ_MAX) } }),
    );
    expect(over.status).toBe(429);
    expect(JSON.parse(over.body.toString())).toMatchObject({ code: "resource_exhausted" });
    const prefix = '{"settings":{"language":"';
    const atLimit = `${prefix}${"y".repeat(READ_MAX - prefix.length - 3)}"}}`;
    expect(atLimit.length).toBe(READ_MAX);
    json200(await same(STORE_SETTINGS, json("good"), atLimit));
  });

  it("service metadata: response headers, set-cookie, trailers as trailer- headers; on errors too", async () => {
    const meta = await same(GET_SETTINGS, json("good", { "x-mode": "meta" }), "{}");
    expect(meta.headers).toMatchObject({
      "x-answer": "42",
      "set-cookie": ["a=1", "b=2"],
      "trailer-x-trailer": "t",
    });
    const err = await same(GET_SETTINGS, json("good", { "x-mode": "connect-error" }), "{}");
    expect(err.status).toBe(400);
    expect(err.headers).toMatchObject({ "x-before": "1", "x-meta": "m", "trailer-x-trailer": "t" });
    expect(JSON.parse(err.body.toString())).toMatchObject({ code: "failed_precondition", message: "nope" });
    expect(JSON.parse(err.body.toString()).details).toHaveLength(1);
    const internal = await same(GET_SETTINGS, json("good", { "x-mode": "plain-error" }), "{}");
    expect([internal.status, JSON.parse(internal.body.toString())]).toEqual([
      500,
      { code: "internal", message: "internal error" },
    ]);
    expect((await same(GET_SETTINGS, json("good", { "x-mode": "sync-throw" }), "{}")).status).toBe(404);
  });

  it("response compression as negotiated from Accept-Encoding, above compressMinBytes only", async () => {
    for (const accept of ["gzip", "br", "br, gzip", "identity", "deflate, gzip;q=0.5", "zstd"]) {
      await same(GET_SETTINGS, json("good", { "x-mode": "big", "accept-encoding": accept }), "{}");
      await same(GET_SETTINGS, json("good", { "accept-encoding": accept }), "{}");
    }
    const gz = await same(GET_SETTINGS, json("good", { "x-mode": "big", "accept-encoding": "gzip" }), "{}");
    expect(gz.headers["content-encoding"]).toBe("gzip");
    const small = await same(GET_SETTINGS, json("good", { "accept-encoding": "gzip" }), "{}");
    expect(small.headers["content-encoding"]).toBeUndefined();
  });

  it("compressed requests, Connect-Timeout-Ms, and protocol errors in those headers", async () => {
    const body = gzipSync('{"settings":{"language":"gz"}}');
    const stored = await same(STORE_SETTINGS, json("good", { "content-encoding": "gzip" }), body);
    expect(JSON.parse(stored.body.toString())).toEqual({ message: "stored gz []" });
    await same(STORE_SETTINGS, json("good", { "content-encoding": "br" }), brotliCompressSync("{}"));
    // Compressed request, no Accept-Encoding: the answer is compressed the same way when large enough.
    await same(GET_SETTINGS, json("good", { "content-encoding": "gzip", "x-mode": "big" }), gzipSync("{}"));
    await same(GET_SETTINGS, json("good", { "content-encoding": "identity" }), "{}");
    await same(STORE_SETTINGS, json("good", { "content-encoding": "gzip" }), "not gzip");
    // Decompressed past readMaxBytes.
    await same(
      STORE_SETTINGS,
      json("good", { "content-encoding": "gzip" }),
      gzipSync(" ".repeat(READ_MAX * 4)),
    );
    const unknown = await same(GET_SETTINGS, json("good", { "content-encoding": "snappy" }), "{}");
    expect([unknown.status, JSON.parse(unknown.body.toString()).code]).toEqual([501, "unimplemented"]);
    expect((await same(GET_SETTINGS, json("wrong", { "content-encoding": "snappy" }), "{}")).status).toBe(
      401,
    );
    json200(await same(GET_SETTINGS, json("good", { "connect-timeout-ms": "5000" }), "{}"));
    for (const bad of ["x", "-1", "12345678901"])
      expect((await same(GET_SETTINGS, json("good", { "connect-timeout-ms": bad }), "{}")).status).toBe(400);
  });

  it("a service waiting on its signal is stopped at the Connect-Timeout-Ms deadline", async () => {
    const timedOut = await same(
      GET_SETTINGS,
      json("good", { "x-mode": "await-signal", "connect-timeout-ms": "30" }),
      "{}",
    );
    expect([timedOut.status, JSON.parse(timedOut.body.toString())]).toEqual([
      504,
      { code: "deadline_exceeded", message: "the operation timed out" },
    ]);
  });

  it("leaves the rest to the adapter: GET, streaming and unknown content types", async () => {
    const before = calls.length;
    await same(
      `${GET_SETTINGS}?encoding=json&message=%7B%7D`,
      { "x-session-api-key": "good" },
      undefined,
      "GET",
    );
    for (const contentType of [
      "application/connect+json",
      "text/plain",
      "application/grpc-web+proto",
      "application/xml",
    ])
      await same(GET_SETTINGS, { ...json("good"), "content-type": contentType }, "{}");
    const { "content-type": _, ...noType } = json("good");
    await same(GET_SETTINGS, noType, "{}");
    expect(calls.length).toBe(before);
  });
});

describe("Connect unary fast path", () => {
  it("serves connect-node's own client (JSON and binary) and counts every call by method and code", async () => {
    const { port } = fast.address() as AddressInfo;
    for (const useBinaryFormat of [false, true]) {
      const client = createClient(
        SettingsService,
        createConnectTransport({
          baseUrl: `http://127.0.0.1:${port}`,
          httpVersion: "1.1",
          useBinaryFormat,
          interceptors: [
            (next) => (req) => {
              req.header.set("x-session-api-key", "good");
              return next(req);
            },
          ],
        }),
      );
      const before = calls.length;
      expect((await client.getSettings({})).settings?.agent).toBe("u1");
      expect((await client.storeSettings({ settings: { language: "de" } })).message).toBe("stored de []");
      await expect(client.getSettings({}, { headers: { "x-mode": "connect-error" } })).rejects.toMatchObject({
        code: Code.FailedPrecondition,
        rawMessage: "nope",
      });
      expect(calls.slice(before)).toEqual([
        { method: "workspace.v1.SettingsService/GetSettings", code: 0 },
        { method: "workspace.v1.SettingsService/StoreSettings", code: 0 },
        { method: "workspace.v1.SettingsService/GetSettings", code: Code.FailedPrecondition },
      ]);
    }
  });

  it("a body over readMaxBytes without a declared length gets resource_exhausted and the connection is closed", async () => {
    const { port } = fast.address() as AddressInfo;
    const answer = await new Promise<Answer>((resolve, reject) => {
      const req = request(
        {
          host: "127.0.0.1",
          port,
          path: STORE_SETTINGS,
          method: "POST",
          headers: { ...json("good"), "transfer-encoding": "chunked" },
          agent: false,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () =>
            resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
          );
        },
      );
      req.on("error", reject);
      req.write('{"settings":{"language":"');
      req.write("z".repeat(READ_MAX));
      // The rest is never needed: the server answers as soon as the limit is passed.
    });
    expect(answer.status).toBe(429);
    expect(answer.headers.connection).toBe("close");
    expect(JSON.parse(answer.body.toString())).toEqual({
      code: "resource_exhausted",
      message: `message size is larger than configured readMaxBytes ${READ_MAX}`,
    });
  });

  it("aborts a service's signal with CANCELED when the client goes away before the answer", async () => {
    const { port } = fast.address() as AddressInfo;
    const before = aborts.length;
    const req = request({
      host: "127.0.0.1",
      port,
      path: GET_SETTINGS,
      method: "POST",
      headers: json("good", { "x-mode": "await-signal" }),
      agent: false,
    });
    req.on("error", () => {});
    const started = waiting.length;
    req.end("{}");
    await vi.waitFor(() => expect(waiting.length).toBe(started + 1)); // the service is waiting on its signal
    req.destroy();
    await vi.waitFor(() => expect(aborts.length).toBe(before + 1));
    expect(aborts.at(-1)).toMatchObject({ code: Code.Canceled });
  });
});
