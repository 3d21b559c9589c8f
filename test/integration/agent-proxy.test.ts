/**
 * The agent proxy as a hostile surface (docs/agent-proxy.md): a real app on the process runtime whose sandboxes run a
 * hostile "agent" (test/helpers/hostile-agent.mjs: what code in a sandbox could answer), reached only through the
 * service's own listener with the sandbox's session key, as the OpenHands UI reaches it with a relative
 * conversation_url. Each case is one promise of the proxy: what it routes, what crosses it each way, whose it is,
 * where it goes, and its bounds.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { createProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";
import { until } from "../helpers/until.ts";

const HOSTILE_AGENT = [process.execPath, join(import.meta.dirname, "../helpers/hostile-agent.mjs")];
const WS_MODULE = createRequire(import.meta.url).resolve("ws");
/** A UI served from another origin the operator allowed (CORS_ORIGINS). */
const UI_ORIGIN = "http://ui.example:5173";

interface Sandbox {
  id: string;
  status: string;
  session_api_key: string | null;
  exposed_urls: { name: string; url: string; port: number }[] | null;
}

let t: TestApp;
let root: string;
let alice: string;
let bob: string;
let sandbox: Sandbox;

const api = (key: string, method: string, path: string, body?: unknown) =>
  call(t.url, key, method, path, body);

/** A request to the service's listener as raw as a hostile client can send it. */
function raw(
  path: string,
  headers: Record<string, string>,
  options: { method?: string; body?: Buffer | string; chunks?: Buffer[] } = {},
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; text: string }> {
  const u = new URL(t.url);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      { host: u.hostname, port: u.port, path, method: options.method ?? "GET", headers },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => {
          text += c;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }));
      },
    );
    req.on("error", reject);
    // Chunks: written one by one, so the body goes chunked (no length declared).
    for (const c of options.chunks ?? []) req.write(c);
    req.end(options.body);
  });
}

async function startSandbox(key: string): Promise<Sandbox> {
  const started = await api(key, "POST", "/api/v1/sandboxes", { sandbox_spec_id: "hostile" });
  expect(started.status, started.text).toBe(200);
  const id = (started.body as Sandbox).id;
  for (let i = 0; i < 200; i++) {
    const [s] = (await api(key, "GET", `/api/v1/sandboxes?id=${id}`)).body as Sandbox[];
    if (s?.status === "RUNNING") return s;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("sandbox did not start");
}

/** Signs `key` in as a browser does and returns the session cookie header. */
async function cookieOf(key: string): Promise<string> {
  const r = await fetch(`${t.url}/api/auth/session`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ key }),
  });
  expect(r.status).toBe(200);
  return (r.headers.get("set-cookie") ?? "").split(";")[0] ?? "";
}

function socket(path: string, headers: Record<string, string> = {}): WebSocket {
  return new WebSocket(`${t.url.replace(/^http/, "ws")}${path}`, { headers });
}

/** The HTTP answer to a refused upgrade: status and JSON body. */
function refusal(ws: WebSocket): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    ws.on("unexpected-response", (_req, res) => {
      let text = "";
      res.on("data", (c: Buffer) => {
        text += c.toString();
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
    });
    ws.on("open", () => reject(new Error("the upgrade was accepted")));
    ws.on("error", () => {});
  });
}

const opened = (ws: WebSocket) =>
  new Promise<void>((resolve, reject) => ws.once("open", () => resolve()).once("error", reject));
const closed = (ws: WebSocket) =>
  new Promise<{ code: number; reason: string }>((resolve) =>
    ws.once("close", (code, reason) => resolve({ code, reason: reason.toString() })),
  );

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "aws-proxy-"));
  const runtime = createProcessRuntime({ workspaceRoot: join(root, "sandboxes"), isolation: "none" });
  t = await startTestApp({
    dir: root,
    runtime,
    specs: [
      {
        id: "hostile",
        command: HOSTILE_AGENT,
        initialEnv: { WS_MODULE },
        workingDir: "",
        createdAt: new Date(),
      },
    ],
    web: { corsOrigins: [UI_ORIGIN] },
    agentProxy: {
      limits: {
        maxBodyBytes: 64 * 1024,
        timeoutMs: 800,
        callsPerSecond: 50,
        maxMessageBytes: 4096,
        messagesPerSecond: 5,
        socketsPerUser: 3,
        checkMs: 200,
      },
    },
  });
  alice = await t.keyFor("alice");
  bob = await t.keyFor("bob");
  sandbox = await startSandbox(alice);
}, 60_000);

afterAll(async () => {
  if (sandbox !== undefined) await api(alice, "DELETE", `/api/v1/sandboxes/${sandbox.id}`);
  await t?.close();
  rmSync(root, { recursive: true, force: true });
});

describe("routing: the sandbox key on an agent route, nothing else", () => {
  it("names the agent by the service's origin, with the direct URL beside it", () => {
    const urls = sandbox.exposed_urls ?? [];
    expect(urls[0]).toMatchObject({ name: "AGENT_SERVER", url: "/" });
    expect(urls[1]?.name).toBe("AGENT_SERVER_DIRECT");
    expect(urls[1]?.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(sandbox.session_api_key).toMatch(new RegExp(`^sbx_${sandbox.id}_[0-9A-Za-z]{43}$`));
  });

  it("forwards an agent route with the sandbox key, and leaves the service's own routes alone", async () => {
    const key = sandbox.session_api_key ?? "";
    const echo = await raw("/api/conversations/echo?x=1", { "x-session-api-key": key });
    expect(echo.status).toBe(200);
    expect(JSON.parse(echo.text)).toMatchObject({ method: "GET", url: "/api/conversations/echo?x=1" });
    // The same path with the user's own key is the service's (its legacy conversation route), not the agent's.
    const own = await raw("/api/conversations/echo", { "x-session-api-key": alice });
    expect(own.text).not.toContain('"headers"');
    // The sandbox key on a route of the service's is not a user's key.
    expect((await raw("/api/settings", { "x-session-api-key": key })).status).toBe(401);
  });

  it("refuses a path outside the agent's routes once dot segments are resolved", async () => {
    const key = sandbox.session_api_key ?? "";
    const r = await raw("/api/conversations/../../etc/passwd", { "x-session-api-key": key });
    expect(r.status).toBe(404);
    expect(r.text).not.toContain("outside");
  });

  it("answers a wrong or made-up key with a JSON error and never reaches an agent", async () => {
    const key = sandbox.session_api_key ?? "";
    const wrong = `${key.slice(0, -4)}${key.endsWith("AAAA") ? "BBBB" : "AAAA"}`;
    const r = await raw("/api/conversations/echo", { "x-session-api-key": wrong });
    expect(r.status).toBe(404);
    expect(JSON.parse(r.text)).toHaveProperty("detail");
    const other = await raw("/api/conversations/echo", {
      "x-session-api-key": `sbx_${"x".repeat(22)}_${"A".repeat(43)}`,
    });
    expect(other.status).toBe(404);
  });
});

describe("a user's credentials never reach a sandbox", () => {
  it("passes only the listed request headers: no cookie, Authorization or forwarded identity", async () => {
    const cookie = await cookieOf(alice);
    const r = await raw("/api/conversations/echo", {
      "x-session-api-key": sandbox.session_api_key ?? "",
      cookie,
      authorization: `Bearer ${alice}`,
      "proxy-authorization": "Basic Zm9vOmJhcg==",
      "x-forwarded-for": "10.0.0.1",
      "x-api-key": alice,
      "x-user-id": "alice",
      connection: "x-session-api-key, keep-alive",
    });
    expect(r.status).toBe(200);
    const seen = JSON.parse(r.text) as { headers: Record<string, string> };
    expect(Object.keys(seen.headers).sort()).toEqual(["connection", "host", "x-session-api-key"]);
    expect(JSON.stringify(seen)).not.toContain(alice);
    expect(JSON.stringify(seen)).not.toContain(cookie.split("=")[1] ?? "never");
  });

  it("does not pass the user's credentials on the websocket either", async () => {
    const key = sandbox.session_api_key ?? "";
    const cookie = await cookieOf(alice);
    const ws = socket(`/sockets/events/abc?session_api_key=${key}`, {
      cookie,
      authorization: `Bearer ${alice}`,
    });
    const received: string[] = [];
    ws.on("message", (d) => received.push(d.toString()));
    await opened(ws);
    ws.send("hello");
    await until(
      () => received,
      (r) => r.length >= 2,
    );
    // What the agent sent the moment it accepted (its snapshot) is not lost while the relay is set up.
    expect(received).toEqual(["first", "hello"]);
    ws.close();
  });
});

describe("a sandbox's answers cannot act on the service's origin", () => {
  it("drops Set-Cookie and CORS grants, adds nosniff and a sandboxing CSP, and makes HTML an attachment", async () => {
    const r = await raw("/api/conversations/html", { "x-session-api-key": sandbox.session_api_key ?? "" });
    expect(r.status).toBe(200);
    expect(r.headers["set-cookie"]).toBeUndefined();
    expect(r.headers["access-control-allow-origin"]).toBeUndefined();
    expect(r.headers["access-control-allow-credentials"]).toBeUndefined();
    expect(r.headers["x-content-type-options"]).toBe("nosniff");
    expect(r.headers["content-security-policy"]).toMatch(/^sandbox;.*default-src 'none'/);
    expect(r.headers["content-disposition"]).toBe("attachment");
  });

  it("gives an allowed UI origin the service's CORS grant, refusals included, and no other origin any", async () => {
    const key = sandbox.session_api_key ?? "";
    const ok = await raw("/api/conversations/echo", { "x-session-api-key": key, origin: UI_ORIGIN });
    expect(ok.status).toBe(200);
    expect(ok.headers["access-control-allow-origin"]).toBe(UI_ORIGIN);
    expect(ok.headers["access-control-allow-credentials"]).toBe("true");
    const refused = await raw("/api/conversations/echo", {
      "x-session-api-key": `${key.slice(0, -1)}${key.endsWith("X") ? "Y" : "X"}`,
      origin: UI_ORIGIN,
    });
    expect(refused.status).toBe(404);
    expect(refused.headers["access-control-allow-origin"]).toBe(UI_ORIGIN);
    // The agent's own grant to any origin never passes, and a foreign origin gets none.
    const html = await raw("/api/conversations/html", {
      "x-session-api-key": key,
      origin: "http://evil.example",
    });
    expect(html.headers["access-control-allow-origin"]).toBeUndefined();
    expect(html.headers["access-control-allow-credentials"]).toBeUndefined();
  });

  it("serves file downloads as attachments", async () => {
    const r = await raw("/api/file/download/x.html", { "x-session-api-key": sandbox.session_api_key ?? "" });
    expect(r.headers["content-disposition"]).toMatch(/^attachment/);
    expect(r.headers["set-cookie"]).toBeUndefined();
  });
});

describe("whose it is", () => {
  it("refuses a call that comes with another user's session cookie", async () => {
    const key = sandbox.session_api_key ?? "";
    const bobCookie = await cookieOf(bob);
    const r = await raw("/api/conversations/echo", { "x-session-api-key": key, cookie: bobCookie });
    expect(r.status).toBe(403);
    expect(JSON.parse(r.text)).toEqual({ detail: "This sandbox belongs to another user" });
    const ws = socket(`/sockets/events/abc?session_api_key=${key}`, { cookie: bobCookie });
    expect(await refusal(ws)).toMatchObject({ status: 403 });
    // The owner's own cookie is fine.
    const own = await raw("/api/conversations/echo", {
      "x-session-api-key": key,
      cookie: await cookieOf(alice),
    });
    expect(own.status).toBe(200);
  });
});

describe("where it goes: only the agent the service recorded", () => {
  it("ignores the Host header, and never takes a host from an absolute-form request target", async () => {
    const key = sandbox.session_api_key ?? "";
    const direct = new URL(sandbox.exposed_urls?.[1]?.url ?? "");
    const r = await raw("/api/conversations/echo", { "x-session-api-key": key, host: "evil.example:1" });
    expect(r.status).toBe(200);
    expect((JSON.parse(r.text) as { headers: { host: string } }).headers.host).toBe(direct.host);
    // An absolute-form target is no agent route: the service answers it itself (the key is not a user's).
    const absolute = await raw("http://169.254.169.254:80/api/conversations/echo", {
      "x-session-api-key": key,
      host: "169.254.169.254",
    });
    expect(absolute.status).toBe(401);
    expect(absolute.text).not.toContain('"headers"');
  });
});

describe("bounds", () => {
  it("refuses a body over the limit with 413, declared or streamed", async () => {
    const key = sandbox.session_api_key ?? "";
    const big = Buffer.alloc(65 * 1024, 97);
    const declared = await raw(
      "/api/conversations/echo",
      {
        "x-session-api-key": key,
        "content-type": "application/octet-stream",
        "content-length": String(big.length),
      },
      { method: "POST", body: big },
    );
    expect(declared.status).toBe(413);
    const streamed = await raw(
      "/api/conversations/echo",
      { "x-session-api-key": key, "content-type": "application/octet-stream" },
      { method: "POST", chunks: [big.subarray(0, 40_000), big.subarray(40_000)] },
    ).catch((err: unknown) => ({ status: -1, text: String(err) }));
    // The answer is 413, or the connection is cut once the limit is passed (the rest is never read).
    expect([413, -1]).toContain(streamed.status);
    const ok = await raw(
      "/api/conversations/echo",
      { "x-session-api-key": key, "content-type": "application/octet-stream" },
      { method: "POST", body: Buffer.alloc(1000, 97) },
    );
    expect(JSON.parse(ok.text)).toMatchObject({ length: 1000 });
  });

  it("limits calls per second per sandbox (429 with Retry-After)", async () => {
    const key = sandbox.session_api_key ?? "";
    const answers = await Promise.all(
      Array.from({ length: 160 }, () => raw("/api/conversations/echo", { "x-session-api-key": key })),
    );
    const limited = answers.filter((a) => a.status === 429);
    expect(limited.length).toBeGreaterThan(0);
    expect(limited[0]?.headers["retry-after"]).toBe("1");
    expect(answers.filter((a) => a.status === 200).length).toBeGreaterThanOrEqual(100);
    await new Promise((r) => setTimeout(r, 2500)); // the bucket refills for the next cases
  });

  it("answers 504 when the agent does not answer in time", async () => {
    const began = Date.now();
    const r = await raw("/api/bash/slow", { "x-session-api-key": sandbox.session_api_key ?? "" });
    expect(r.status).toBe(504);
    expect(JSON.parse(r.text)).toHaveProperty("detail");
    expect(Date.now() - began).toBeLessThan(5000);
  });

  it("closes a socket whose client sends a message over the limit (1009) or too many (1008)", async () => {
    const key = sandbox.session_api_key ?? "";
    const big = socket(`/sockets/events/a?session_api_key=${key}`);
    await opened(big);
    big.send("x".repeat(5000));
    expect((await closed(big)).code).toBe(1009);
    const chatty = socket(`/sockets/events/b?session_api_key=${key}`);
    await opened(chatty);
    for (let i = 0; i < 40; i++) chatty.send(`m${i}`);
    expect((await closed(chatty)).code).toBe(1008);
  });

  it("limits open sockets per user, and another user is not affected", async () => {
    const key = sandbox.session_api_key ?? "";
    const open: WebSocket[] = [];
    for (let i = 0; i < 3; i++) {
      const ws = socket(`/sockets/events/c${i}?session_api_key=${key}`);
      await opened(ws);
      open.push(ws);
    }
    const refused = await refusal(socket(`/sockets/events/c9?session_api_key=${key}`));
    expect(refused.status).toBe(429);
    const bobs = await startSandbox(bob);
    const theirs = socket(`/sockets/events/d?session_api_key=${bobs.session_api_key}`);
    await opened(theirs);
    theirs.close();
    for (const ws of open) ws.close();
    await api(bob, "DELETE", `/api/v1/sandboxes/${bobs.id}`);
  }, 30_000);

  it("forwards the agent's messages as they come, many and large", async () => {
    const ws = socket(`/sockets/events/e?session_api_key=${sandbox.session_api_key}`);
    await opened(ws);
    let bytes = 0;
    let count = 0;
    const done = new Promise<void>((resolve) =>
      ws.on("message", (d: Buffer) => {
        if (d.toString() === "first") return;
        bytes += d.length;
        count++;
        if (count === 200) resolve();
      }),
    );
    ws.send("burst:200:65536");
    await done;
    expect(bytes).toBe(200 * 65536);
    ws.close();
  });
});

describe("a sandbox that stops running", () => {
  it("answers at once when paused, closes its open sockets, and answers 404 once deleted", async () => {
    const s = await startSandbox(alice);
    const key = s.session_api_key ?? "";
    const ws = socket(`/sockets/events/p?session_api_key=${key}`);
    await opened(ws);
    const gone = closed(ws);
    expect((await api(alice, "POST", `/api/v1/sandboxes/${s.id}/pause`)).status).toBe(200);
    const began = Date.now();
    const r = await raw("/api/conversations/echo", { "x-session-api-key": key });
    expect(r.status).toBe(409);
    expect(JSON.parse(r.text).detail).toMatch(/paused/);
    expect(Date.now() - began).toBeLessThan(1000);
    expect(await refusal(socket(`/sockets/events/q?session_api_key=${key}`))).toMatchObject({ status: 409 });
    expect((await gone).code).toBe(1001);
    expect((await api(alice, "DELETE", `/api/v1/sandboxes/${s.id}`)).status).toBe(200);
    const deleted = await raw("/api/conversations/echo", { "x-session-api-key": key });
    expect(deleted.status).toBe(404);
  }, 30_000);

  it("refuses an upgrade on any other path", async () => {
    expect(await refusal(socket("/api/settings"))).toMatchObject({ status: 404 });
  });
});
