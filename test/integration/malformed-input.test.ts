import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

let t: TestApp;
let key: string;
let baseline: string;

/** Values of every JSON type and some hostile ones. */
const WRONG_VALUES: unknown[] = [
  null,
  true,
  false,
  0,
  -1,
  1.5,
  1e308,
  -1e308,
  2 ** 53,
  "",
  " ",
  "x",
  "true",
  "1e400",
  "NaN",
  "\u0000",
  "💥".repeat(100),
  [],
  [1, "a", null],
  {},
  { __proto__: { polluted: true } },
  { constructor: { prototype: { polluted: true } } },
  { a: { b: { c: { d: { e: 1 } } } } },
];

const SETTINGS_KEYS = [
  "language",
  "agent",
  "max_iterations",
  "confirmation_mode",
  "llm_model",
  "llm_api_key",
  "remote_runtime_resource_factor",
  "secrets_store",
  "enable_default_condenser",
  "mcp_config",
  "max_budget_per_task",
  "condenser_max_size",
  "email_verified",
];

const MCP_SHAPES: unknown[] = [
  { sse_servers: "x" },
  { sse_servers: [null] },
  { sse_servers: [{}] },
  { sse_servers: [{ url: 5 }] },
  { sse_servers: [{ url: "http://" }] },
  { sse_servers: [{ url: "javascript:alert(1)" }] },
  { stdio_servers: ["ls"] },
  { stdio_servers: [{ name: "", command: "" }] },
  { stdio_servers: [{ name: "ok", command: "ok", args: "'unbalanced" }] },
  { stdio_servers: [{ name: "ok", command: "ok", env: "NOEQUALS" }] },
  { stdio_servers: [{ name: "ok", command: "ok", env: { "1BAD": "v" } }] },
  { stdio_servers: [{ name: "ok", command: "ok", env: { K: 5 } }] },
  { shttp_servers: [{ url: "https://a", timeout: 0 }] },
  { shttp_servers: [{ url: "https://a", timeout: "abc" }] },
  { shttp_servers: [{ url: "https://a", timeout: 99999999999999 }] },
  { unknown_list: [] },
  { sse_servers: Array.from({ length: 500 }, (_, i) => `https://s${i}.example.com`) },
];

/** A JSON text nested `depth` objects deep (built as text: JSON.stringify itself would overflow). */
function nested(depth: number): string {
  return `${'{"a":'.repeat(depth)}1${"}".repeat(depth)}`;
}

beforeAll(async () => {
  t = await startTestApp();
  key = await t.keyFor("sweep");
  await call(t.url, key, "POST", "/api/settings", {
    language: "en",
    llm_api_key: "k",
    mcp_config: { sse_servers: ["https://keep.example.com"] },
  });
  await call(t.url, key, "POST", "/api/secrets", { name: "KEEP", value: "v" });
  baseline = JSON.stringify(await t.storage.userData.get("sweep"));
});
afterAll(async () => {
  await t.close();
});

async function expectRejectedCleanly(method: string, path: string, body?: unknown, raw?: string) {
  const r = await call(t.url, key, method, path, body, raw);
  expect(
    r.status,
    `${method} ${path} ${raw ?? JSON.stringify(body)?.slice(0, 200)} → ${r.text.slice(0, 300)}`,
  ).toBeLessThan(500);
  expect(r.status).toBeGreaterThanOrEqual(400);
  expect(r.headers.get("content-type") ?? "").toContain("application/json");
  expect(r.text).not.toMatch(/at .*\.ts:\d+|node_modules/);
  return r;
}

describe("malformed input never causes a 5xx and never changes stored data", () => {
  it("wrong types for every settings field (one at a time and all at once)", async () => {
    let rejected = 0;
    for (const k of SETTINGS_KEYS) {
      for (const v of WRONG_VALUES) {
        const r = await call(t.url, key, "POST", "/api/settings", { [k]: v });
        expect(r.status, `${k}=${JSON.stringify(v)?.slice(0, 80)}: ${r.text.slice(0, 200)}`).toBeLessThan(
          500,
        );
        if (r.status === 422) {
          rejected++;
          const detail = (r.body as { detail: { loc: unknown[] }[] }).detail;
          expect(detail.length).toBeGreaterThan(0);
          for (const d of detail) expect(d.loc[0]).toBe("body");
        }
      }
    }
    expect(rejected).toBeGreaterThan(100);
    // restore the baseline (accepted coercions changed some fields) before the strict checks below
    await t.storage.userData.compareAndSet(
      "sweep",
      (await t.storage.userData.get("sweep"))?.version ?? 0,
      JSON.parse(baseline).value,
    );
    baseline = JSON.stringify(await t.storage.userData.get("sweep"));
  });

  it("bad MCP shapes, bad JSON, non-object bodies, huge and deep bodies: 4xx JSON, nothing stored", async () => {
    for (const mcp of MCP_SHAPES) {
      const r = await expectRejectedCleanly("POST", "/api/settings", {
        mcp_config: mcp,
        language: "changed",
      });
      expect(r.status).toBe(422);
    }
    const rawBodies = [
      "{",
      "}",
      "[",
      '{"a":',
      "nul",
      "undefined",
      "{'a':1}",
      '{"a":1,}',
      "\u0000",
      "x".repeat(5000),
      '"just a string"',
      "123",
      "[]",
      "null",
    ];
    for (const raw of rawBodies) await expectRejectedCleanly("POST", "/api/settings", undefined, raw);
    for (const raw of rawBodies)
      await expectRejectedCleanly("POST", "/api/add-git-providers", undefined, raw);
    for (const raw of rawBodies) await expectRejectedCleanly("POST", "/api/secrets", undefined, raw);
    for (const raw of rawBodies) await expectRejectedCleanly("PUT", "/api/secrets/KEEP", undefined, raw);
    await expectRejectedCleanly(
      "POST",
      "/api/settings",
      undefined,
      `{"language":"changed","mcp_config":${nested(5000)}}`,
    );
    await expectRejectedCleanly(
      "POST",
      "/api/settings",
      undefined,
      `{"mcp_config":{"sse_servers":[${nested(40)}]}}`,
    );
    await expectRejectedCleanly("POST", "/api/settings", undefined, nested(100_000));
    const huge = await expectRejectedCleanly("POST", "/api/settings", {
      language: "y".repeat(2 * 1024 * 1024),
    });
    expect(huge.status).toBe(413);
    expect(JSON.stringify(await t.storage.userData.get("sweep"))).toBe(baseline);
  });

  it("wrong shapes for provider tokens and secrets", async () => {
    const shapes: unknown[] = [
      { provider_tokens: [] },
      { provider_tokens: "github" },
      { provider_tokens: { github: "tok" } },
      { provider_tokens: { github: { token: 5 } } },
      { provider_tokens: { GitHub: { token: "x" } } },
      { provider_tokens: {}, mcp_config: { sse_servers: [{ url: "bad" }] } },
    ];
    for (const s of shapes) await expectRejectedCleanly("POST", "/api/add-git-providers", s);
    await expectRejectedCleanly(
      "POST",
      "/api/add-git-providers",
      undefined,
      '{"provider_tokens":{"__proto__":{"token":"x"}}}',
    );
    await expectRejectedCleanly(
      "POST",
      "/api/settings",
      undefined,
      '{"secrets_store":{"provider_tokens":{"constructor":{"token":"x"}}}}',
    );
    for (const s of [
      {},
      { name: 5, value: "v" },
      { name: "A" },
      { value: "v" },
      { name: "A", value: ["v"] },
      { name: "", value: "v" },
    ]) {
      await expectRejectedCleanly("POST", "/api/secrets", s);
    }
    for (const s of [{}, { name: null }, { name: 1 }, { description: "x" }])
      await expectRejectedCleanly("PUT", "/api/secrets/KEEP", s);
    expect(JSON.stringify(await t.storage.userData.get("sweep"))).toBe(baseline);
  });

  it("hostile headers and paths", async () => {
    for (const k of ["x".repeat(10_000), "' OR 1=1 --", "\t", "ключ"]) {
      const r = await fetch(`${t.url}/api/settings`, {
        headers: { "x-session-api-key": encodeURIComponent(k) },
      });
      expect(r.status).toBe(401);
    }
    for (const p of [
      "/api/secrets/%00",
      "/api/secrets/..%2F..%2Fetc%2Fpasswd",
      `/api/secrets/${"a".repeat(3000)}`,
      "/api/secrets/%E0%A4%A",
    ]) {
      const r = await call(t.url, key, "DELETE", p);
      expect(r.status, p).toBeLessThan(500);
      expect(r.headers.get("content-type") ?? "").toContain("application/json");
    }
    const wrongType = await fetch(`${t.url}/api/settings`, {
      method: "POST",
      headers: { "x-session-api-key": key, "content-type": "text/plain" },
      body: "language=en",
    });
    expect(wrongType.status).toBe(422);
    expect(JSON.stringify(await t.storage.userData.get("sweep"))).toBe(baseline);
  });

  it("Connect: malformed JSON and binary bodies, wrong types, oversized and bad gzip bodies on every unary RPC", async () => {
    const unary = t.app.bindings.flatMap((b) =>
      b.desc.methods.filter((m) => m.methodKind === "unary").map((m) => `/${b.desc.typeName}/${m.name}`),
    );
    expect(unary.length).toBeGreaterThan(10);
    let rejected = 0;
    const bodies: [string, string | Uint8Array, Record<string, string>?][] = [
      ["application/json", "{"],
      ["application/json", "[1]"],
      ["application/json", '"x"'],
      ["application/json", "\u0000\u00ff"],
      ["application/json", "x".repeat(2 * 1024 * 1024)],
      ["application/proto", new Uint8Array([0xff, 0xff, 0xff, 0xff])],
      ["application/proto", new Uint8Array([0x0a, 0xff, 0x01])],
      ["application/json", "not gzip", { "content-encoding": "gzip" }],
      ["application/json", gzipSync(" ".repeat(4 * 1024 * 1024)), { "content-encoding": "gzip" }],
    ];
    for (const path of unary)
      for (const [contentType, body, extra] of bodies) {
        const r = await fetch(`${t.url}${path}`, {
          method: "POST",
          headers: { "x-session-api-key": key, "content-type": contentType, ...extra },
          body,
        });
        const text = await r.text();
        const what = `${path} ${contentType} ${String(body).slice(0, 40)} → ${r.status} ${text.slice(0, 200)}`;
        expect(r.status, what).toBeGreaterThanOrEqual(400);
        expect(r.status, what).toBeLessThan(500);
        rejected++;
        expect(r.headers.get("content-type"), what).toBe("application/json");
        expect(JSON.parse(text), what).toMatchObject({
          code: expect.any(String),
          message: expect.any(String),
        });
        expect(text, what).not.toMatch(/at .*\.ts:\d+|node_modules/);
      }
    expect(rejected).toBe(unary.length * bodies.length);
    // Wrong types for the fields the messages do have (unknown fields are ignored, as connect does).
    for (const [path, body] of [
      ["/workspace.v1.SettingsService/StoreSettings", { settings: { language: 5, maxIterations: "many" } }],
      ["/workspace.v1.SecretsService/CreateSecret", { name: 7, value: [] }],
      ["/workspace.v1.SandboxService/SearchSandboxes", { limit: "many" }],
    ] as const) {
      const r = await fetch(`${t.url}${path}`, {
        method: "POST",
        headers: { "x-session-api-key": key, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      expect([r.status, ((await r.json()) as { code: string }).code], path).toEqual([
        400,
        "invalid_argument",
      ]);
    }
    expect(JSON.stringify(await t.storage.userData.get("sweep"))).toBe(baseline);
  });
});
