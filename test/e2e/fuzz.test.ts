// Bounded fuzz of every REST route (the app's own route table) and every Connect unary method (the bound service
// descriptors) over loopback, from a fixed seed: malformed JSON, wrong types, huge and deeply nested values, lone
// surrogates, `__proto__` keys, bad query parameters and path ids, wrong content types, gzip bodies (valid and
// truncated), empty bodies, missing keys. Asserts that nothing answers 5xx and that every error body is JSON
// (content type and parse), and prints the figures.

import { Agent, request } from "node:http";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuntimeHandle, SandboxRuntime } from "../../src/ports/sandbox-runtime.ts";
import { startTestApp, type TestApp } from "../helpers/test-app.ts";

const SEED = 0x5eed_2026;
/** Requests sent in all (REST and Connect together). */
const TOTAL = 10_400;
const CONCURRENCY = 12;
/** The run stops sending here even if TOTAL is not reached (then the count check fails). */
const TIME_LIMIT_MS = 110_000;

/** mulberry32: a small, fixed-seed PRNG so that every run sends the same requests. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * A runtime whose sandboxes never become healthy (nothing is started): sandbox and conversation routes run their
 * whole validation and error paths without starting agent processes.
 */
function inertRuntime(): SandboxRuntime {
  const handle = (id: string): RuntimeHandle => ({ data: { id }, agentUrl: "http://127.0.0.1:9", port: 9 });
  return {
    kind: "process",
    start: async (r) => handle(r.sandboxId),
    waitHealthy: async () => false,
    inspect: async () => "error",
    pause: async () => {},
    resume: async (h) => h,
    remove: async () => {},
    removeBySandboxId: async () => 0,
    ping: async () => {},
    close: async () => {},
  } as SandboxRuntime;
}

let t: TestApp;
let key: string;
beforeAll(async () => {
  t = await startTestApp({ runtime: inertRuntime() });
  key = await t.keyFor("fuzzer");
  // Some state to hit: settings, a secret.
  await fetch(`${t.url}/api/settings`, {
    method: "POST",
    headers: { "x-session-api-key": key, "content-type": "application/json" },
    body: JSON.stringify({ language: "en", llm_model: "m" }),
  });
  await fetch(`${t.url}/api/secrets`, {
    method: "POST",
    headers: { "x-session-api-key": key, "content-type": "application/json" },
    body: JSON.stringify({ name: "known", value: "v" }),
  });
});
afterAll(async () => {
  agent.destroy();
  await t?.close();
});

interface Case {
  kind: "rest" | "connect";
  /** Route ("GET /api/settings") or method ("workspace.v1.SettingsService/GetSettings") the case targets. */
  target: string;
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: Buffer | string;
  label: string;
}

interface Outcome {
  c: Case;
  status: number;
  type: string | null;
  text: string;
}

const pick = <T>(r: () => number, xs: readonly T[]): T => xs[Math.floor(r() * xs.length)] as T;

const LONE = "\ud800";
const FIELD_NAMES = [
  "name",
  "value",
  "description",
  "language",
  "llm_model",
  "llm_api_key",
  "max_iterations",
  "confirmation_mode",
  "condenser_max_size",
  "mcp_config",
  "secrets_store",
  "provider_tokens",
  "custom_secrets",
  "initial_message",
  "sandbox_id",
  "sandbox_spec_id",
  "selected_repository",
  "title",
  "settings",
  "resetFields",
  "reset_fields",
  "secretId",
  "providerTokens",
  "mcpConfig",
  "pageId",
  "limit",
  "ids",
  "__proto__",
  "constructor",
  "prototype",
  LONE,
];

function deep(n: number, leaf: string): string {
  return "[".repeat(n) + leaf + "]".repeat(n);
}

/** A random JSON value of a random type (wrong types for every field, sometimes nested or huge). */
function value(r: () => number, depth = 0): unknown {
  const k = Math.floor(r() * (depth > 2 ? 10 : 14));
  switch (k) {
    case 0:
      return null;
    case 1:
      return r() < 0.5;
    case 2:
      return pick(r, [0, -1, 1, 1.5, 2 ** 31, -(2 ** 63), 1e308, 19, 20, 3601]);
    case 3:
      return pick(r, ["", " ", "x", "10", "true", "**********", "https://h.example", "a=b,c=d", "null"]);
    case 4:
      return `${pick(r, ["", "a", "\u0000", "\ufffd", "\u202e"])}${LONE}${pick(r, ["", "b", "\udc00"])}`;
    case 5:
      return "x".repeat(pick(r, [257, 5000, 70_000]));
    case 6:
      return "__proto__";
    case 7:
      return [];
    case 8:
      return {};
    case 9:
      return pick(r, ["-y @mcp/fs", "K=v", "github", "gitlab", "00000000-0000-0000-0000-000000000000"]);
    case 10:
    case 11:
      return object(r, depth + 1);
    default:
      return Array.from({ length: Math.floor(r() * 4) }, () => value(r, depth + 1));
  }
}

function object(r: () => number, depth = 0): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const n = Math.floor(r() * 5);
  for (let i = 0; i < n; i++) {
    Object.defineProperty(out, pick(r, FIELD_NAMES), {
      value: value(r, depth),
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return out;
}

const MALFORMED = [
  "{",
  "[1,",
  '{"a":}',
  "nul",
  "{'a':1}",
  '{"a":1}}',
  "\u0000",
  '{"a":"\\ud800"}',
  '{"\\ud800":1}',
  '{"__proto__":{"polluted":1},"constructor":{"prototype":{"polluted":1}}}',
  '{"name":"__proto__","value":"x"}',
  "1e999999",
  '"just a string"',
  "[]",
  "true",
  "-0",
  '{"a":1,"a":2}',
  `{"a":"${"\\u0041".repeat(2000)}"}`,
];

/** A random body: JSON of random shape, malformed text, huge, deeply nested, empty or binary. */
function body(r: () => number, protoFields: readonly string[]): { text: Buffer | string; json: boolean } {
  const k = r();
  if (k < 0.35) {
    const o = object(r);
    // Fields of the target's own request message with wrong values.
    for (const f of protoFields) if (r() < 0.5) o[f] = value(r);
    return { text: JSON.stringify(o), json: true };
  }
  if (k < 0.55) return { text: pick(r, MALFORMED), json: true };
  if (k < 0.62) return { text: "", json: true };
  if (k < 0.67) return { text: deep(pick(r, [40, 200, 5000]), "1"), json: true };
  if (k < 0.7) return { text: `{"a":"${"x".repeat(1_100_000)}"}`, json: true };
  if (k < 0.75) return { text: `{"a":${deep(2000, "{}")}}`.replaceAll("[{}]", "[{}]"), json: true };
  const bytes = Buffer.alloc(Math.floor(r() * 64));
  for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(r() * 256);
  return { text: bytes, json: false };
}

const CONTENT_TYPES = [
  "application/json",
  "application/json; charset=utf-8",
  "text/plain",
  "application/x-www-form-urlencoded",
  "multipart/form-data; boundary=x",
  "application/octet-stream",
  "application/json; charset=latin1",
  "",
];

const PATH_IDS = [
  "x",
  "known",
  "00000000000000000000000000000000",
  "3fa85f64-5717-4562-b3fc-2c963f66afa6",
  "__proto__",
  "constructor",
  "%ED%A0%80",
  "%EF%BF%BD",
  "%FF",
  "%00",
  "..%2F..%2Fetc",
  "%2e%2e",
  "a".repeat(3000),
  "-1",
  "null",
  "%20",
];

const QUERIES = [
  "",
  "?limit=abc",
  "?limit=-1",
  "?limit=0",
  "?limit=101",
  "?limit=1e309",
  "?limit=99999999999999999999999",
  "?page_id=%ED%A0%80",
  "?page_id=__proto__",
  "?page_id=not-a-token",
  "?id=x&id=y",
  "?id=%ED%A0%80",
  "?ids=a&ids=b&ids=3fa85f64-5717-4562-b3fc-2c963f66afa6",
  "?__proto__[polluted]=1",
  "?constructor=1&prototype=2",
  "?title__contains=%ED%A0%80",
  "?created_at__gte=yesterday",
  "?created_at__gte=2025-13-45",
  "?sort_order=SIDEWAYS",
  "?limit=5&limit=6",
  `?page_id=${"p".repeat(5000)}`,
  "?%FF=%FF",
  "?a=%",
];

/** gzip of the body, sometimes cut short; or another encoding. */
function encode(r: () => number, b: Buffer | string, headers: Record<string, string>, header: string) {
  const k = r();
  if (k < 0.5) {
    headers[header] = "gzip";
    return gzipSync(b);
  }
  if (k < 0.8) {
    headers[header] = "gzip";
    const z = gzipSync(b);
    return z.subarray(0, Math.max(1, Math.floor(z.length * r())));
  }
  headers[header] = pick(r, ["deflate", "br", "x-unknown", "gzip, gzip"]);
  return Buffer.from(b);
}

function restCase(r: () => number, route: { method: string; url: string }): Case {
  const path = route.url.replace(/:[a-z_]+/g, () => pick(r, PATH_IDS)) + (r() < 0.5 ? pick(r, QUERIES) : "");
  const headers: Record<string, string> = {};
  const a = r();
  if (a < 0.9) headers["x-session-api-key"] = key;
  else if (a < 0.95) headers["x-session-api-key"] = "wrong";
  let b: Buffer | string | undefined;
  let label = "no body";
  if (route.method !== "GET" || r() < 0.2) {
    const made = body(r, []);
    b = made.text;
    label = "body";
    const ct = pick(r, CONTENT_TYPES);
    if (ct !== "") headers["content-type"] = ct;
    if (r() < 0.15) {
      b = encode(r, b, headers, "content-encoding");
      label = `encoded ${headers["content-encoding"]}`;
    }
  }
  // Methods the route does not have, now and then.
  const method = r() < 0.05 ? pick(r, ["PATCH", "PUT", "DELETE", "OPTIONS"]) : route.method;
  return {
    kind: "rest",
    target: `${route.method} ${route.url}`,
    method,
    path,
    headers,
    ...(b === undefined ? {} : { body: b }),
    label,
  };
}

function connectCase(
  r: () => number,
  m: { typeName: string; name: string; fields: readonly string[] },
): Case {
  const headers: Record<string, string> = {};
  if (r() < 0.92) headers["x-session-api-key"] = key;
  const made = body(r, m.fields);
  let b: Buffer | string = made.text;
  const ct = r();
  if (ct < 0.55) headers["content-type"] = "application/json";
  else if (ct < 0.8) headers["content-type"] = "application/proto";
  else headers["content-type"] = pick(r, ["application/connect+json", "text/plain", "application/grpc", ""]);
  if (headers["content-type"] === "") delete headers["content-type"];
  if (r() < 0.7) headers["connect-protocol-version"] = "1";
  let label = `${headers["content-type"] ?? "no content type"}`;
  if (r() < 0.12) {
    b = encode(r, b, headers, "content-encoding");
    label += ` encoded ${headers["content-encoding"]}`;
  }
  const verb = r();
  const method = verb < 0.9 ? "POST" : pick(r, ["GET", "PUT", "DELETE"]);
  let path = `/${m.typeName}/${m.name}`;
  if (method === "GET") {
    path += `?encoding=${pick(r, ["json", "proto", "xml"])}&message=${encodeURIComponent(
      typeof b === "string" ? b.slice(0, 2000) : b.toString("base64"),
    )}${r() < 0.5 ? "&connect=v1" : ""}${r() < 0.3 ? "&base64=1" : ""}`;
    return {
      kind: "connect",
      target: `${m.typeName}/${m.name}`,
      method,
      path,
      headers,
      label: `GET ${label}`,
    };
  }
  return { kind: "connect", target: `${m.typeName}/${m.name}`, method, path, headers, body: b, label };
}

const agent = new Agent({ keepAlive: true, maxSockets: 64 });
/** Resets of a reused keep-alive socket the server had just closed, retried once (Node's documented pattern). */
let staleSocketRetries = 0;
/** The body limit every protocol enforces (1 MiB). */
const BODY_LIMIT = 1024 * 1024;
/**
 * Bodies over the limit the server refused before reading them all: it answers and closes the connection while the
 * client still writes, so the client sees EPIPE/ECONNRESET instead of the answer (the 413 itself is checked in
 * test/integration/limits.test.ts).
 */
let refusedWhileSending = 0;

function sendOnce(c: Case): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const { hostname, port } = new URL(t.url);
    const req = request(
      { host: hostname, port, method: c.method, path: c.path, headers: c.headers, agent, timeout: 20_000 },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (d: Buffer) => chunks.push(d));
        res.on("end", () =>
          resolve({
            c,
            status: res.statusCode ?? 0,
            type: res.headers["content-type"] ?? null,
            text: Buffer.concat(chunks).toString("utf8"),
          }),
        );
        res.on("error", reject);
      },
    );
    req.on("timeout", () => req.destroy(new Error("timed out")));
    req.on("error", (e: NodeJS.ErrnoException) => {
      if (req.reusedSocket && e.code === "ECONNRESET") {
        staleSocketRetries++;
        sendOnce(c).then(resolve, reject);
      } else if ((c.body?.length ?? 0) > BODY_LIMIT && (e.code === "EPIPE" || e.code === "ECONNRESET")) {
        refusedWhileSending++;
        resolve({ c, status: 413, type: "application/json", text: "{}" });
      } else reject(e);
    });
    req.end(c.body === undefined || c.method === "GET" ? undefined : c.body);
  });
}

const send = sendOnce;

function problem(o: Outcome): string | null {
  if (o.status >= 500) return `status ${o.status}`;
  if (o.status >= 400) {
    if (o.type === null || !o.type.includes("json"))
      return `status ${o.status} with error body content type ${o.type}`;
    try {
      JSON.parse(o.text);
    } catch {
      return `error body is not JSON: ${JSON.stringify(o.text.slice(0, 80))}`;
    }
  }
  return null;
}

describe("fuzz", () => {
  it(`${TOTAL} requests over every REST route and Connect unary method: no 5xx, every error body JSON`, {
    timeout: TIME_LIMIT_MS + 60_000,
  }, async () => {
    const r = prng(SEED);
    const routes = t.app.routes.filter((x) => x.stream !== true);
    const streamRoutes = t.app.routes.filter((x) => x.stream === true);
    const methods = t.app.bindings.flatMap((b) =>
      b.desc.methods
        .filter((m) => m.methodKind === "unary")
        .map((m) => ({
          typeName: b.desc.typeName,
          name: m.name,
          fields: m.input.fields.map((f) => f.jsonName),
        })),
    );
    expect(routes.length).toBeGreaterThan(10);
    expect(methods.length).toBeGreaterThan(10);

    const cases: Case[] = [];
    // Every route and method at least a few times, then at random.
    for (const route of routes) for (let i = 0; i < 5; i++) cases.push(restCase(r, route));
    for (const m of methods) for (let i = 0; i < 5; i++) cases.push(connectCase(r, m));
    // Streaming routes answer a JSON array over time: only requests they refuse are sent.
    for (const route of streamRoutes) {
      for (const q of QUERIES.slice(1, 8)) {
        cases.push({
          kind: "rest",
          target: `${route.method} ${route.url}`,
          method: route.method,
          path: route.url.replace(/:[a-z_]+/g, "%ED%A0%80") + q,
          headers: { "x-session-api-key": key },
          label: "stream refused",
        });
      }
    }
    while (cases.length < TOTAL) {
      cases.push(r() < 0.55 ? restCase(r, pick(r, routes)) : connectCase(r, pick(r, methods)));
    }

    const started = Date.now();
    const outcomes: Outcome[] = [];
    const failures: string[] = [];
    let next = 0;
    const worker = async () => {
      while (next < cases.length && Date.now() - started < TIME_LIMIT_MS) {
        const c = cases[next++] as Case;
        let o: Outcome;
        try {
          o = await send(c);
        } catch (e) {
          failures.push(
            `${c.kind} ${c.method} ${c.path.slice(0, 120)} [${c.label}, ${c.body?.length ?? 0} bytes]: ${String(e)}`,
          );
          continue;
        }
        outcomes.push(o);
        const p = problem(o);
        if (p !== null)
          failures.push(
            `${c.kind} ${c.method} ${c.path.slice(0, 120)} [${c.label}] → ${p}: ${o.text.slice(0, 160)}`,
          );
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    const seconds = (Date.now() - started) / 1000;

    const byClass = new Map<string, number>();
    const byStatus = new Map<number, number>();
    for (const o of outcomes) {
      const cls = `${Math.floor(o.status / 100)}xx`;
      byClass.set(cls, (byClass.get(cls) ?? 0) + 1);
      byStatus.set(o.status, (byStatus.get(o.status) ?? 0) + 1);
    }
    const routesHit = new Set(outcomes.filter((o) => o.c.kind === "rest").map((o) => o.c.target));
    const methodsHit = new Set(outcomes.filter((o) => o.c.kind === "connect").map((o) => o.c.target));
    const figures = [
      `fuzz: seed ${SEED.toString(16)}, ${outcomes.length} requests answered in ${seconds.toFixed(1)} s`,
      `  by class: ${[...byClass]
        .sort()
        .map(([k, v]) => `${k} ${v}`)
        .join(", ")}`,
      `  by status: ${[...byStatus]
        .sort((a, b) => a[0] - b[0])
        .map(([k, v]) => `${k}:${v}`)
        .join(" ")}`,
      `  REST routes covered: ${routesHit.size}/${t.app.routes.length}; Connect unary methods covered: ${methodsHit.size}/${methods.length}`,
      `  resets of a reused keep-alive socket, retried: ${staleSocketRetries}; bodies over 1 MiB refused while sending: ${refusedWhileSending}`,
      `  problems: ${failures.length}`,
      ...[...failures.filter((f) => f.startsWith("rest")), ...failures.filter((f) => !f.startsWith("rest"))]
        .slice(0, Number(process.env.FUZZ_SHOW ?? 25))
        .map((f) => `    ${f}`),
    ];
    console.log(figures.join("\n"));

    expect(outcomes.length).toBeGreaterThanOrEqual(10_000);
    expect(routesHit.size).toBe(t.app.routes.length);
    expect(methodsHit.size).toBe(methods.length);
    expect(failures).toEqual([]);
    // The fuzzer's own account still reads (nothing it sent broke it).
    const settings = await fetch(`${t.url}/api/settings`, { headers: { "x-session-api-key": key } });
    expect(settings.status).toBe(200);
    expect(Object.hasOwn(Object.prototype, "polluted")).toBe(false);
  });
});
