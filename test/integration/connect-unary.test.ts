// The Connect unary fast path (src/transports/connect/connect-unary.ts) against connect-node's universal handler: the same
// request is sent to a server with the fast path and to one without it (every call on connect-node), each once with
// a Content-Length and once chunked (as connect-node's own client sends), and the four answers must agree in status,
// headers and body. A Connect GET of a read is sent to both servers the same way.

import { type ClientRequest, type RequestOptions, request } from "node:http";
import { gunzipSync } from "node:zlib";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  GetSettingsRequestSchema,
  GetSettingsResponseSchema,
  SettingsService,
} from "../../src/gen/workspace/v1/settings_pb.js";
import { startTestApp, type TestApp } from "../helpers/test-app.ts";

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

/** One request to `target` (`write` sends its body and ends it), its whole answer. */
function exchange(
  target: string,
  options: RequestOptions,
  write: (req: ClientRequest) => void,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(target, options, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () =>
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
      );
      res.on("error", reject);
    });
    req.on("error", reject);
    write(req);
  });
}

function send(
  url: string,
  path: string,
  headers: Record<string, string>,
  body: Buffer | string,
  chunked: boolean,
): Promise<Answer> {
  const bytes = typeof body === "string" ? Buffer.from(body) : body;
  const options = {
    method: "POST",
    headers: chunked ? headers : { ...headers, "content-length": String(bytes.byteLength) },
  };
  return exchange(`${url}${path}`, options, (req) => {
    // Chunked: the body in two writes without a Content-Length (Transfer-Encoding: chunked).
    if (chunked && bytes.byteLength > 1) {
      req.write(bytes.subarray(0, 1));
      req.end(bytes.subarray(1));
    } else req.end(bytes);
  });
}

/** Stores `settings` (Connect JSON) for the key's user on `app`. */
async function storeSettings(app: TestApp, key: string, settings: Record<string, unknown>): Promise<void> {
  const stored = await send(
    app.url,
    "/workspace.v1.SettingsService/StoreSettings",
    { "x-session-api-key": key, "content-type": "application/json" },
    JSON.stringify({ settings }),
    false,
  );
  expect(stored.status).toBe(200);
}

/** What must agree between the two paths: status, the protocol's headers, trailers, and the body. */
function comparable(a: Answer): unknown {
  const headers: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(a.headers)) {
    if (k === "date" || k === "x-request-id" || k === "keep-alive" || k === "transfer-encoding") continue;
    if (k === "content-length") continue; // chunked on one side when connect-node streams it
    headers[k] = v;
  }
  const body = a.headers["content-encoding"] === "gzip" ? gunzipSync(a.body) : a.body;
  return { status: a.status, headers, body: body.toString("base64") };
}

describe("Connect unary fast path answers exactly as connect-node", () => {
  /** The server with the fast path, and one with every call on connect-node. */
  let t: TestApp;
  let node: TestApp;
  const path = (m: string) => `/workspace.v1.SettingsService/${m}`;
  /** A key header `user:<name>` becomes that user's key on the server called. */
  const keyed = async (app: TestApp, headers: Record<string, string>) => {
    const name = /^user:(.+)$/.exec(headers["x-session-api-key"] ?? "")?.[1];
    return name === undefined ? headers : { ...headers, "x-session-api-key": await app.keyFor(name) };
  };
  const both = async (method: string, headers: Record<string, string>, body: Buffer | string) => {
    const fast = await send(t.url, path(method), await keyed(t, headers), body, false);
    for (const [app, chunked] of [
      [t, true],
      [node, false],
      [node, true],
    ] as const)
      expect(
        comparable(await send(app.url, path(method), await keyed(app, headers), body, chunked)),
      ).toStrictEqual(comparable(fast));
    return fast;
  };
  const json = () => ({ "x-session-api-key": "user:fast", "content-type": "application/json" });

  beforeAll(async () => {
    t = await startTestApp();
    node = await startTestApp({ connectFastPath: false });
    for (const app of [t, node]) {
      await storeSettings(app, await app.keyFor("fast"), {
        language: "en",
        llmModel: "m".repeat(1500),
        maxIterations: 9,
      });
    }
  });
  afterAll(async () => {
    await t.close();
    await node.close();
  });

  it("a JSON call, with the response message as connect writes it", async () => {
    const a = await both("GetSettings", json(), "{}");
    expect(a.status).toBe(200);
    expect(a.headers["content-type"]).toBe("application/json");
    const body = JSON.parse(a.body.toString()) as { settings: { maxIterations: number } };
    expect(body.settings.maxIterations).toBe(9);
  });

  it("an empty JSON body (not a JSON value), unknown JSON fields and a charset parameter", async () => {
    expect((await both("GetSettings", json(), "")).status).toBe(400);
    expect((await both("GetSettings", json(), '{"noSuchField":1}')).status).toBe(200);
    const charset = { ...json(), "content-type": "application/json; charset=utf-8" };
    expect((await both("GetSettings", charset, "{}")).status).toBe(200);
  });

  it("a binary call", async () => {
    const headers = { "x-session-api-key": "user:fast", "content-type": "application/proto" };
    const a = await both(
      "GetSettings",
      headers,
      Buffer.from(toBinary(GetSettingsRequestSchema, {} as never)),
    );
    expect(a.status).toBe(200);
    expect(a.headers["content-type"]).toBe("application/proto");
    expect(fromBinary(GetSettingsResponseSchema, a.body).settings?.maxIterations).toBe(9);
  });

  it("a response of 1 KiB or more compressed with the encoding the client accepts first", async () => {
    const a = await both("GetSettings", { ...json(), "accept-encoding": "br, gzip" }, "{}");
    expect(a.headers["content-encoding"]).toBe("br");
    const g = await both("GetSettings", { ...json(), "accept-encoding": "deflate, gzip" }, "{}");
    expect(g.headers["content-encoding"]).toBe("gzip");
    const none = await both("GetSettings", { ...json(), "accept-encoding": "deflate" }, "{}");
    expect(none.headers["content-encoding"]).toBeUndefined();
  });

  it("errors: unknown key, not found, bad JSON, a binary body that does not decode", async () => {
    const bad = await both("GetSettings", { ...json(), "x-session-api-key": "ws_wrong_key_123" }, "{}");
    expect(bad.status).toBe(401);
    expect(JSON.parse(bad.body.toString())).toMatchObject({ code: "unauthenticated" });
    const missing = await both("GetSettings", { ...json(), "x-session-api-key": "user:nobody" }, "{}");
    expect(missing.status).toBe(404);
    expect(JSON.parse(missing.body.toString())).toStrictEqual({
      code: "not_found",
      message: "Settings not found",
    });
    const broken = await both("GetSettings", json(), "{");
    expect(broken.status).toBe(400);
    expect(JSON.parse(broken.body.toString())).toMatchObject({ code: "invalid_argument" });
    const garbage = await both(
      "GetSettings",
      { "x-session-api-key": "user:fast", "content-type": "application/proto" },
      Buffer.from([0xff, 0xff, 0xff]),
    );
    expect(garbage.status).toBe(400);
    expect(JSON.parse(garbage.body.toString())).toMatchObject({ code: "invalid_argument" });
  });

  it("INVALID_ARGUMENT with its BadRequest details (type, debug, unpadded base64 value), nothing stored", async () => {
    const a = await both("StoreSettings", json(), JSON.stringify({ resetFields: ["no_such_field"] }));
    expect(a.status).toBe(400);
    const body = JSON.parse(a.body.toString()) as {
      code: string;
      details: { type: string; value: string; debug: unknown }[];
    };
    expect(body.code).toBe("invalid_argument");
    expect(body.details[0]?.type).toBe("google.rpc.BadRequest");
    expect(body.details[0]?.value).not.toMatch(/=$/);
    expect(JSON.stringify(body.details[0]?.debug)).toMatch(/reset_fields\[0\]/);
    const after = JSON.parse((await both("GetSettings", json(), "{}")).body.toString()) as {
      settings: { maxIterations: number };
    };
    expect(after.settings.maxIterations).toBe(9);
  });
});

/** A GET of `path` with `query`, its answer. */
function get(url: string, path: string, query: string, headers: Record<string, string>): Promise<Answer> {
  return exchange(`${url}${path}?${query}`, { method: "GET", headers }, (req) => req.end());
}

describe("Connect GET of a read (NO_SIDE_EFFECTS) answers exactly as connect-node", () => {
  let t: TestApp;
  let node: TestApp;
  const lines: { method?: string; url?: string; msg?: string }[] = [];
  const path = (m: string) => `/workspace.v1.SettingsService/${m}`;
  /** The same GET to the fast path's server and to connect-node's: equal answers; the fast path's is returned. */
  const both = async (method: string, query: string, user = "reader", extra: Record<string, string> = {}) => {
    const fast = await get(t.url, path(method), query, {
      "x-session-api-key": await t.keyFor(user),
      ...extra,
    });
    const slow = await get(node.url, path(method), query, {
      "x-session-api-key": await node.keyFor(user),
      ...extra,
    });
    expect(comparable(slow)).toStrictEqual(comparable(fast));
    return fast;
  };
  const message = (json: string) => `connect=v1&encoding=json&message=${encodeURIComponent(json)}`;

  beforeAll(async () => {
    t = await startTestApp({
      logger: { level: "info", stream: { write: (line: string) => lines.push(JSON.parse(line)) } },
    });
    node = await startTestApp({ connectFastPath: false });
    for (const app of [t, node]) {
      await storeSettings(app, await app.keyFor("reader"), { language: "en", maxIterations: 7 });
    }
  });
  afterAll(async () => {
    await t.close();
    await node.close();
  });

  it("JSON and base64 binary messages, with and without the connect parameter", async () => {
    const a = await both("GetSettings", message("{}"));
    expect(a.status).toBe(200);
    expect(JSON.parse(a.body.toString()).settings.maxIterations).toBe(7);
    expect((await both("GetSettings", "encoding=json&message=%7B%7D")).status).toBe(200);
    const proto = Buffer.from(toBinary(GetSettingsRequestSchema, {} as never)).toString("base64url");
    const b = await both("GetSettings", `connect=v1&encoding=proto&base64=1&message=${proto}`);
    expect(b.status).toBe(200);
    expect(fromBinary(GetSettingsResponseSchema, b.body).settings?.maxIterations).toBe(7);
  });

  it("refusals: a method with side effects, no encoding, bad JSON, an unknown key, compression", async () => {
    const store = await both("StoreSettings", message('{"settings":{"maxIterations":1}}'));
    expect(store.status).toBe(405);
    expect(
      JSON.parse((await both("GetSettings", message("{}"))).body.toString()).settings.maxIterations,
    ).toBe(7);
    expect((await both("GetSettings", "connect=v1&message=%7B%7D")).status).toBe(415);
    expect((await both("GetSettings", message("{"))).status).toBe(400);
    expect((await both("GetSettings", "connect=v1&encoding=json&message=%7B%7D&connect=v2")).status).toBe(
      200,
    );
    const unknown = await get(t.url, path("GetSettings"), message("{}"), {
      "x-session-api-key": "ws_wrong_key_123",
    });
    expect(unknown.status).toBe(401);
    expect((await both("GetSettings", `${message("{}")}&compression=gzip`)).status).toBe(400);
  });

  it("a message that is not base64 with base64=1: 400 invalid_argument on both paths, after the key is checked", async () => {
    const query = `connect=v1&encoding=json&base64=1&message=${encodeURIComponent('["x"]')}`;
    for (const app of [t, node]) {
      const bad = await get(app.url, path("GetSettings"), query, {
        "x-session-api-key": await app.keyFor("reader"),
      });
      expect(bad.status).toBe(400);
      expect(JSON.parse(bad.body.toString())).toMatchObject({ code: "invalid_argument" });
      const unknown = await get(app.url, path("GetSettings"), query, {
        "x-session-api-key": "ws_wrong_key_123",
      });
      expect(unknown.status).toBe(401);
    }
  });

  it("connect's own client sends reads as GET with useHttpGet, and writes still as POST", async () => {
    const transport = createConnectTransport({ baseUrl: t.url, httpVersion: "1.1", useHttpGet: true });
    const client = createClient(SettingsService, transport);
    const headers = { "x-session-api-key": await t.keyFor("reader") };
    lines.length = 0;
    const read = await client.getSettings({}, { headers });
    expect(read.settings?.maxIterations).toBe(7);
    await client.storeSettings({ settings: { maxIterations: 8 } }, { headers });
    const calls = lines
      .filter((l) => l.msg === "request completed")
      .map((l) => `${l.method} ${(l.url ?? "").split("?")[0]}`);
    expect(calls).toStrictEqual([`GET ${path("GetSettings")}`, `POST ${path("StoreSettings")}`]);
  });
});
