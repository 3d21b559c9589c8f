import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SecretBox } from "../../src/core/secret-box.ts";
import { SettingsService } from "../../src/gen/workspace/v1/settings_pb.js";
import { BrowserSessions, SESSION_COOKIE } from "../../src/transports/kit/browser-session.ts";
import { Browser } from "../helpers/browser.ts";
import { grpcClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

const UI_ORIGIN = "http://ui.localhost:5173";
let t: TestApp;
let aliceKey: string;

beforeAll(async () => {
  t = await startTestApp({ web: { corsOrigins: [UI_ORIGIN] } });
  aliceKey = await t.keyFor("alice");
});
afterAll(async () => {
  await t.close();
});

/** A raw request with any Host header (fetch does not let the Host be chosen). */
function raw(
  base: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: string,
): Promise<{ status: number; body: string }> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: url.hostname, port: url.port, method, path, headers }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => {
        text += c;
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on("error", reject);
    req.end(body);
  });
}

describe("sign-in page", () => {
  it("is plain HTML with its script allowed by hash and nothing loaded from elsewhere", async () => {
    const r = await call(t.url, undefined, "GET", "/sign-in");
    expect(r.status).toBe(200);
    // The same page under /api (for proxies that forward only /api).
    expect((await call(t.url, undefined, "GET", "/api/auth/sign-in")).text).toBe(r.text);
    expect(r.headers.get("content-type")).toBe("text/html; charset=utf-8");
    const csp = r.headers.get("content-security-policy") ?? "";
    expect(csp).toContain("default-src 'none'");
    expect(csp).toMatch(/script-src 'sha256-[A-Za-z0-9+/=]+'/);
    expect(r.text).toContain('<form id="sign-in">');
    expect(r.text).not.toMatch(/(src|href)="(https?:)?\/\//);
  });
});

describe("POST /api/auth/session", () => {
  it("sets an HttpOnly SameSite=Strict cookie that does not hold the key", async () => {
    const b = new Browser(t.url);
    const r = await b.request("POST", "/api/auth/session", { key: aliceKey });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ user_id: "alice", expires_in: 86400 });
    const sc = b.setCookies[0] ?? "";
    expect(sc.startsWith(`${SESSION_COOKIE}=`)).toBe(true);
    expect(sc).toMatch(/; HttpOnly/);
    expect(sc).toMatch(/; SameSite=Strict/);
    expect(sc).toMatch(/; Path=\//);
    expect(sc).toMatch(/; Max-Age=86400/);
    expect(sc).not.toMatch(/Secure/);
    expect(sc).not.toContain(aliceKey);
    expect(decodeURIComponent(sc)).not.toContain(aliceKey);
  });

  it("401 JSON for an unknown key, 422 for a missing one; no cookie either way", async () => {
    const b = new Browser(t.url);
    const bad = await b.request("POST", "/api/auth/session", { key: "ws_nope" });
    expect(bad.status).toBe(401);
    expect(bad.body).toEqual({ detail: "Unauthorized" });
    const missing = await b.request("POST", "/api/auth/session", {});
    expect(missing.status).toBe(422);
    expect((missing.body as { detail: { loc: unknown[]; type: string }[] }).detail[0]).toMatchObject({
      loc: ["body", "key"],
      type: "missing",
    });
    expect(b.setCookies).toEqual([]);
  });

  it("refuses a sign-in posted from a foreign origin (login CSRF)", async () => {
    const b = new Browser(t.url, "http://evil.example");
    const r = await b.request("POST", "/api/auth/session", { key: aliceKey });
    expect(r.status).toBe(403);
    expect(b.setCookies).toEqual([]);
  });

  it("Secure and __Host- behind a trusted TLS proxy only", async () => {
    const proxied = await startTestApp({ web: { trustProxy: true } });
    try {
      const key = await proxied.keyFor("p");
      const b = new Browser(proxied.url, "https://ws.example.com");
      const headers = { "x-forwarded-proto": "https", "x-forwarded-host": "ws.example.com" };
      const r = await b.request("POST", "/api/auth/session", { key }, headers);
      expect(r.status).toBe(200);
      expect(b.setCookies[0]).toMatch(/^__Host-aws_session=.*; Secure/);
      // The cookie authenticates a mutation from the proxy's public origin.
      const s = await b.request("POST", "/api/settings", { language: "fr" }, headers);
      expect(s.status).toBe(200);
    } finally {
      await proxied.close();
    }
    // Not trusted: the forwarded header changes nothing.
    const b = new Browser(t.url);
    await b.request("POST", "/api/auth/session", { key: aliceKey }, { "x-forwarded-proto": "https" });
    expect(b.setCookies[0]).not.toMatch(/Secure/);
  });
});

describe("the cookie authenticates like the header", () => {
  it("REST reads and same-origin writes; GET /api/auth/session says who", async () => {
    const b = new Browser(t.url);
    await b.signIn(aliceKey);
    expect((await b.request("GET", "/api/auth/session")).body).toEqual({
      user_id: "alice",
      authenticated_by: "cookie",
    });
    expect((await b.request("POST", "/api/settings", { language: "de" })).status).toBe(200);
    const g = await b.request("GET", "/api/settings");
    expect(g.status).toBe(200);
    expect((g.body as { language: string }).language).toBe("de");
    // The same user through the header.
    expect(
      ((await call(t.url, aliceKey, "GET", "/api/settings")).body as { language: string }).language,
    ).toBe("de");
  });

  it("CSRF: a cookie-authenticated mutation needs the own origin or a CORS origin (Origin, else Referer)", async () => {
    const b = new Browser(t.url);
    await b.signIn(aliceKey);
    const post = (headers: Record<string, string>) =>
      b.request("POST", "/api/settings", { agent: "X" }, headers);
    expect((await post({ origin: "http://evil.example" })).status).toBe(403);
    expect((await post({ origin: "null" })).status).toBe(403);
    // Same site, other port: SameSite lets the cookie through, the origin check does not.
    expect((await post({ origin: t.url.replace(/:\d+$/, ":1") })).status).toBe(403);
    expect((await post({ origin: UI_ORIGIN })).status).toBe(200);
    expect((await post({ origin: "", referer: `${t.url}/settings` })).status).toBe(200);
    expect((await post({ origin: "", referer: "http://evil.example/x" })).status).toBe(403);
    // Neither header: refused (browsers always send Origin on non-GET requests).
    const none = await fetch(`${t.url}/api/settings`, {
      method: "POST",
      headers: { cookie: b.cookieHeader() ?? "", "content-type": "application/json" },
      body: "{}",
    });
    expect(none.status).toBe(403);
    // The header key needs no origin (not a browser credential).
    expect((await call(t.url, aliceKey, "POST", "/api/settings", { agent: "Y" })).status).toBe(200);
    // Nothing the refused requests sent was stored.
    expect(((await b.request("GET", "/api/settings")).body as { agent: string }).agent).toBe("Y");
  });

  it("revoking the key ends the session; tampered and expired cookies are 401", async () => {
    const issued = await t.app.keys.issue("carol");
    const b = new Browser(t.url);
    await b.signIn(issued.key);
    expect((await b.request("GET", "/api/secrets")).status).toBe(200);
    await t.app.keys.revoke(issued.record.id);
    const after = await b.request("GET", "/api/secrets");
    expect(after.status).toBe(401);
    expect(after.body).toEqual({ detail: "Unauthorized" });

    const tampered = new Browser(t.url);
    await tampered.signIn(aliceKey);
    const v = tampered.cookies.get(SESSION_COOKIE) ?? "";
    tampered.cookies.set(SESSION_COOKIE, `${v.slice(0, -2)}${v.endsWith("AA") ? "BB" : "AA"}`);
    expect((await tampered.request("GET", "/api/settings")).status).toBe(401);

    // A cookie sealed with the server's key but past its lifetime.
    const sessions = new BrowserSessions({
      box: new SecretBox(new SecretBox(t.encryptionKey).derive("browser-sessions")),
      allowedOrigins: [],
      trustProxy: false,
      maxAgeSeconds: 60,
      singleUser: false,
    });
    const expired = new Browser(t.url);
    expired.cookies.set(SESSION_COOKIE, sessions.seal(aliceKey, Date.now() - 61_000));
    expect((await expired.request("GET", "/api/settings")).status).toBe(401);
    const fresh = new Browser(t.url);
    fresh.cookies.set(SESSION_COOKIE, sessions.seal(aliceKey));
    expect((await fresh.request("GET", "/api/settings")).status).toBe(200);
  });

  it("sign-out clears the cookie (DELETE and POST /api/auth/sign-out)", async () => {
    for (const [method, path] of [
      ["DELETE", "/api/auth/session"],
      ["POST", "/api/auth/sign-out"],
    ] as const) {
      const b = new Browser(t.url);
      await b.signIn(aliceKey);
      const signedIn = b.cookieHeader() ?? "";
      const r = await b.request(method, path);
      expect(r.status).toBe(204);
      expect(b.setCookies.some((c) => /^aws_session=; Max-Age=0/.test(c))).toBe(true);
      expect(b.cookies.size).toBe(0);
      expect((await b.request("GET", "/api/auth/session")).status).toBe(401);
      // Sign-out is a mutation: refused from a foreign origin.
      const evil = await fetch(`${t.url}${path}`, {
        method,
        headers: { cookie: signedIn, origin: "http://evil.example" },
      });
      expect(evil.status).toBe(403);
      // ... and so is one that does not say where it comes from.
      const unnamed = await fetch(`${t.url}${path}`, { method, headers: { cookie: signedIn } });
      expect(unnamed.status).toBe(403);
      expect(await unnamed.json()).toEqual({ detail: "Cross-origin request refused" });
    }
  });

  it("Connect and gRPC-Web accept the cookie (origin-checked); native gRPC does not", async () => {
    const b = new Browser(t.url);
    await b.signIn(aliceKey);
    const cookie = b.cookieHeader() ?? "";
    const connect = (origin: string | undefined) =>
      fetch(`${t.url}/workspace.v1.SettingsService/GetSettings`, {
        method: "POST",
        headers: { cookie, "content-type": "application/json", ...(origin ? { origin } : {}) },
        body: "{}",
      });
    const ok = await connect(t.url);
    expect(ok.status).toBe(200);
    expect(((await ok.json()) as { settings?: { language?: string } }).settings).toBeDefined();
    expect((await connect("http://evil.example")).status).toBe(403);
    expect((await connect(undefined)).status).toBe(403);

    const grpcWeb = createClient(
      SettingsService,
      createGrpcWebTransport({
        baseUrl: t.url,
        httpVersion: "1.1",
        interceptors: [
          (next) => async (req) => {
            req.header.set("cookie", cookie);
            req.header.set("origin", t.url);
            return next(req);
          },
        ],
      }),
    );
    const res = await grpcWeb.getSettings({});
    expect(res.settings).toBeDefined();

    const g = grpcClient(SettingsService, t.grpcAddress);
    try {
      const md = new (await import("@grpc/grpc-js")).Metadata();
      md.set("cookie", cookie);
      const err = await new Promise<{ code: number }>((resolve) => {
        (
          g.raw as unknown as Record<string, (r: unknown, m: unknown, cb: (e: unknown) => void) => void>
        ).GetSettings?.call(g.raw, {}, md, (e) => resolve(e as { code: number }));
      });
      expect(err.code).toBe(16); // UNAUTHENTICATED
    } finally {
      g.close();
    }
  });
});

describe("CORS", () => {
  it("answers the preflight of an allowed origin with credentials, and nothing for others", async () => {
    const pre = await fetch(`${t.url}/api/settings`, {
      method: "OPTIONS",
      headers: {
        origin: UI_ORIGIN,
        "access-control-request-method": "POST",
        "access-control-request-headers": "content-type,x-session-api-key",
      },
    });
    expect(pre.status).toBe(204);
    expect(pre.headers.get("access-control-allow-origin")).toBe(UI_ORIGIN);
    expect(pre.headers.get("access-control-allow-credentials")).toBe("true");
    expect(pre.headers.get("access-control-allow-methods")).toContain("POST");
    expect(pre.headers.get("access-control-allow-headers")?.toLowerCase()).toContain("x-session-api-key");
    const get = await fetch(`${t.url}/api/options/config`, {
      headers: { origin: UI_ORIGIN, "x-session-api-key": aliceKey },
    });
    expect(get.headers.get("access-control-allow-origin")).toBe(UI_ORIGIN);
    expect(get.headers.get("vary")?.toLowerCase()).toContain("origin");
    const unauth = await fetch(`${t.url}/api/settings`, { headers: { origin: UI_ORIGIN } });
    expect(unauth.status).toBe(401);
    expect(unauth.headers.get("access-control-allow-origin")).toBe(UI_ORIGIN);
    const other = await fetch(`${t.url}/api/settings`, {
      method: "OPTIONS",
      headers: { origin: "http://evil.example", "access-control-request-method": "POST" },
    });
    expect(other.headers.get("access-control-allow-origin")).toBeNull();
  });

  it("the UI dev server's /api proxy (Host rewritten, the browser's Origin forwarded) signs in only when listed", async () => {
    // Through the proxy the server sees its own Host and the dev server's Origin: the listed one is accepted for
    // sign-in and mutations, and its cookie then authenticates.
    const dev = new Browser(t.url, UI_ORIGIN);
    await dev.signIn(aliceKey);
    expect((await dev.request("POST", "/api/settings", { language: "fr" })).status).toBe(200);
    expect(((await dev.request("GET", "/api/settings")).body as { language: string }).language).toBe("fr");
    // A dev server whose origin is not in CORS_ORIGINS: sign-in is refused (no cookie), so is a mutation.
    const unlisted = new Browser(t.url, "http://localhost:3999");
    const refused = await unlisted.request("POST", "/api/auth/session", { key: aliceKey });
    expect(refused.status).toBe(403);
    expect(unlisted.setCookies).toEqual([]);
    const signedElsewhere = new Browser(t.url, "http://localhost:3999");
    signedElsewhere.cookies.set(...([...dev.cookies][0] as [string, string]));
    expect((await signedElsewhere.request("POST", "/api/settings", { language: "xx" })).status).toBe(403);
    // The UI calling the API directly from another origin sends no cookie (axios without withCredentials):
    // that is an anonymous request, 401 even from a listed origin.
    const direct = await fetch(`${t.url}/api/settings`, { headers: { origin: UI_ORIGIN } });
    expect(direct.status).toBe(401);
    expect(((await dev.request("GET", "/api/settings")).body as { language: string }).language).toBe("fr");
  });

  it("without CORS_ORIGINS there is no CORS answer at all", async () => {
    const plain = await startTestApp();
    try {
      const pre = await fetch(`${plain.url}/api/settings`, {
        method: "OPTIONS",
        headers: { origin: UI_ORIGIN, "access-control-request-method": "POST" },
      });
      expect(pre.headers.get("access-control-allow-origin")).toBeNull();
    } finally {
      await plain.close();
    }
  });
});

describe("AUTH_MODE=single-user", () => {
  let s: TestApp;
  beforeAll(async () => {
    s = await startTestApp({ web: { singleUser: true } });
  });
  afterAll(async () => {
    await s.close();
  });

  it("a request without a key acts as user default; a wrong key is still 401", async () => {
    expect((await call(s.url, undefined, "POST", "/api/settings", { language: "it" })).status).toBe(200);
    const g = await call(s.url, undefined, "GET", "/api/settings");
    expect((g.body as { language: string }).language).toBe("it");
    const defaultKey = await s.keyFor("default");
    expect(
      ((await call(s.url, defaultKey, "GET", "/api/settings")).body as { language: string }).language,
    ).toBe("it");
    expect((await call(s.url, "ws_wrong", "GET", "/api/settings")).status).toBe(401);
    expect((await call(s.url, undefined, "GET", "/api/auth/session")).body).toEqual({
      user_id: "default",
      authenticated_by: "single-user",
    });
  });

  it("no other web page acts as default: foreign Origin and non-loopback Host (DNS rebinding) are 403", async () => {
    const port = new URL(s.url).port;
    const evil = await fetch(`${s.url}/api/settings`, {
      method: "POST",
      headers: { origin: "http://evil.example", "content-type": "application/json" },
      body: JSON.stringify({ language: "xx" }),
    });
    expect(evil.status).toBe(403);
    const rebound = await raw(s.url, "GET", "/api/settings", { host: `evil.example:${port}` });
    expect(rebound.status).toBe(403);
    const local = await raw(s.url, "GET", "/api/settings", { host: `localhost:${port}` });
    expect(local.status).toBe(200);
    expect(
      ((await call(s.url, undefined, "GET", "/api/settings")).body as { language: string }).language,
    ).toBe("it");
  });
});

describe("Logout in the UI's user menu (open-source mode: POST /api/unset-provider-tokens, then a reload)", () => {
  let ui: string;
  let u: TestApp;
  let key: string;
  beforeAll(async () => {
    ui = mkdtempSync(join(tmpdir(), "aws-logout-ui-"));
    writeFileSync(join(ui, "index.html"), "<!doctype html><title>OpenHands</title>");
    u = await startTestApp({ web: { uiDir: ui } });
    key = await u.keyFor("lou");
    expect((await call(u.url, key, "POST", "/api/settings", { language: "en" })).status).toBe(200);
  });
  afterAll(async () => {
    await u.close();
    rmSync(ui, { recursive: true, force: true });
  });

  it("ends the browser session: the cookie is cleared, the reloaded page is the sign-in; the tokens go as upstream", async () => {
    const b = new Browser(u.url);
    await b.signIn(key);
    const stored = await b.request("POST", "/api/add-git-providers", {
      provider_tokens: { github: { token: "ghp_lou_0123456789", host: null } },
    });
    expect(stored.status, stored.text).toBe(200);
    expect((await b.request("GET", "/conversations/abc")).status).toBe(200);

    // useLogout: AuthService.logout("oss") posts this from the page (its Origin), then window.location.reload().
    const out = await b.request("POST", "/api/unset-provider-tokens");
    expect(out).toMatchObject({ status: 200, body: { message: "Unset Git provider tokens" } });
    expect(
      b.setCookies.some((c) => /^aws_session=; Max-Age=0; Path=\/; HttpOnly; SameSite=Strict$/.test(c)),
    ).toBe(true);
    expect(b.cookies.size).toBe(0);
    const reload = await b.request("GET", "/conversations/abc");
    expect(reload.status).toBe(302);
    expect(reload.headers.get("location")).toBe(`/sign-in?next=${encodeURIComponent("/conversations/abc")}`);
    expect((await b.request("GET", "/api/settings")).status).toBe(401);

    // Signed in again: the git provider tokens were removed, as the reference's call does.
    await b.signIn(key);
    const settings = await b.request("GET", "/api/settings");
    expect((settings.body as { provider_tokens_set: unknown }).provider_tokens_set).toEqual({});
  });

  it("called with a key (X-Session-API-Key) it keeps the reference's meaning: tokens removed, no session touched", async () => {
    const b = new Browser(u.url);
    await b.signIn(key);
    await b.request("POST", "/api/add-git-providers", {
      provider_tokens: { gitlab: { token: "glpat-lou-0123456789", host: null } },
    });
    // Even from the signed-in browser: the header is what authenticates the call.
    const r = await b.request("POST", "/api/unset-provider-tokens", undefined, { "x-session-api-key": key });
    expect(r.status).toBe(200);
    expect(r.headers.getSetCookie()).toEqual([]);
    expect(b.cookies.size).toBe(1);
    expect((await b.request("GET", "/conversations/abc")).status).toBe(200);
    const settings = await b.request("GET", "/api/settings");
    expect((settings.body as { provider_tokens_set: unknown }).provider_tokens_set).toEqual({});
    const scripted = await call(u.url, key, "POST", "/api/unset-provider-tokens");
    expect(scripted.status).toBe(200);
    expect(scripted.headers.getSetCookie()).toEqual([]);
  });
});
