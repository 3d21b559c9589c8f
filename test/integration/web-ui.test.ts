import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_MODELS } from "../../src/rest/options-routes.ts";
import { Browser } from "../helpers/browser.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

const INDEX =
  "<!doctype html><html><head><script type=module src=/assets/app-abc123.js></script></head></html>";
const APP_JS = "console.log('app');";
let t: TestApp;
let checkout: string;
let ui: string;
let key: string;

beforeAll(async () => {
  // A fake frontend/build folder, as the OpenHands frontend's `npm run build` leaves it (its react-router config
  // moves build/client up into build/).
  checkout = mkdtempSync(join(tmpdir(), "aws-ui-"));
  ui = join(checkout, "frontend", "build");
  mkdirSync(join(ui, "assets"), { recursive: true });
  writeFileSync(join(ui, "index.html"), INDEX);
  writeFileSync(join(ui, "assets", "app-abc123.js"), APP_JS);
  writeFileSync(join(ui, "assets", "style-def456.css"), "body{}");
  writeFileSync(join(ui, "favicon.ico"), Buffer.from([0, 0, 1, 0]));
  writeFileSync(join(ui, ".env"), "SECRET=1");
  writeFileSync(join(ui, "other.html"), INDEX);
  // Files outside UI_DIR, reachable through symbolic links inside it: a linked folder and a linked file.
  mkdirSync(join(checkout, "outside"));
  writeFileSync(join(checkout, "outside", "secret.key"), "KEY");
  symlinkSync(join(checkout, "outside"), join(ui, "linked"));
  symlinkSync(join(checkout, "outside", "secret.key"), join(ui, "assets", "key.js"));
  // A link that stays inside is served.
  symlinkSync(join(ui, "assets", "app-abc123.js"), join(ui, "assets", "alias-abc123.js"));
  t = await startTestApp({
    web: {
      uiDir: ui,
      options: { models: ["zeta/model-b", "alpha/model-a"], agents: undefined, securityAnalyzers: ["llm"] },
    },
  });
  key = await t.keyFor("u");
});
afterAll(async () => {
  await t.close();
  rmSync(checkout, { recursive: true, force: true });
});

describe("UI_DIR", () => {
  it("serves index.html at / to a signed-in browser, never cached", async () => {
    const b = new Browser(t.url);
    await b.signIn(key);
    const r = await b.request("GET", "/");
    expect(r.status).toBe(200);
    expect(r.text).toBe(INDEX);
    expect(r.headers.get("content-type")).toMatch(/^text\/html/);
    expect(r.headers.get("cache-control")).toBe("no-cache");
  });

  it("sends a browser that is not signed in to the sign-in page, with where it was going", async () => {
    for (const path of ["/", "/settings/mcp"]) {
      const r = await fetch(`${t.url}${path}`, { redirect: "manual" });
      expect(r.status).toBe(302);
      expect(r.headers.get("location")).toBe(`/sign-in?next=${encodeURIComponent(path)}`);
    }
    // The header key counts as signed in too.
    expect((await call(t.url, key, "GET", "/settings")).text).toBe(INDEX);
  });

  it("SPA fallback: client-side routes get index.html; API paths, files and non-GET get JSON 404", async () => {
    const b = new Browser(t.url);
    await b.signIn(key);
    for (const path of ["/settings", "/settings/integrations", "/conversations/abc123?x=1", "/accept-tos"]) {
      const r = await b.request("GET", path);
      expect(r.status, path).toBe(200);
      expect(r.text).toBe(INDEX);
      expect(r.headers.get("cache-control")).toBe("no-cache");
    }
    for (const path of ["/api/nope", "/api/v1/nope", "/assets/missing-000.js", "/missing.png", "/.env"]) {
      const r = await b.request("GET", path);
      expect(r.status, path).toBe(404);
      expect(r.body).toEqual({ detail: "Not Found" });
    }
    const post = await b.request("POST", "/settings", {});
    expect(post.status).toBe(404);
    expect(post.body).toEqual({ detail: "Not Found" });
  });

  it("hashed assets: right content type and a year's immutable caching; other files an hour", async () => {
    const js = await fetch(`${t.url}/assets/app-abc123.js`);
    expect(js.status).toBe(200);
    expect(js.headers.get("content-type")).toMatch(/^(application|text)\/javascript/);
    expect(js.headers.get("cache-control")).toBe("public, max-age=31536000, immutable");
    expect(await js.text()).toBe(APP_JS);
    const css = await fetch(`${t.url}/assets/style-def456.css`);
    expect(css.headers.get("content-type")).toMatch(/^text\/css/);
    const ico = await fetch(`${t.url}/favicon.ico`);
    expect(ico.status).toBe(200);
    expect(ico.headers.get("content-type")).toMatch(/icon/);
    expect(ico.headers.get("cache-control")).toBe("public, max-age=3600");
  });

  it("the API is unchanged: 401 JSON without a session, health and RPC paths as before", async () => {
    const r = await fetch(`${t.url}/api/settings`);
    expect(r.status).toBe(401);
    expect(await r.json()).toEqual({ detail: "Unauthorized" });
    expect((await call(t.url, undefined, "GET", "/alive")).body).toEqual({ status: "ok" });
    const rpc = await fetch(`${t.url}/workspace.v1.SettingsService/GetSettings`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(rpc.status).toBe(401);
  });

  it("every HTML entry is behind sign-in: /index.html redirects as / does; other pages are never served as files", async () => {
    for (const path of ["/index.html", "/INDEX.HTML", "/%69ndex.html", "/index.html?x=1"]) {
      const r = await fetch(`${t.url}${path}`, { redirect: "manual" });
      expect(r.status, path).not.toBe(200);
      expect(await r.text(), path).not.toBe(INDEX);
    }
    const r = await fetch(`${t.url}/index.html`, { redirect: "manual" });
    expect(r.status).toBe(302);
    expect(r.headers.get("location")).toBe(`/sign-in?next=${encodeURIComponent("/index.html")}`);
    const b = new Browser(t.url);
    await b.signIn(key);
    expect((await b.request("GET", "/index.html")).text).toBe(INDEX);
    expect((await b.request("GET", "/other.html")).status).toBe(404);
  });

  it("no file is served from outside UI_DIR through a symbolic link", async () => {
    for (const path of ["/linked/secret.key", "/assets/key.js"]) {
      const r = await call(t.url, key, "GET", path);
      expect(r.status, path).toBe(404);
      expect(r.text, path).not.toContain("KEY");
    }
    const inside = await fetch(`${t.url}/assets/alias-abc123.js`);
    expect(inside.status).toBe(200);
    expect(await inside.text()).toBe(APP_JS);
  });

  it("without UI_DIR, / is the JSON 404 it always was", async () => {
    const plain = await startTestApp();
    try {
      const r = await call(plain.url, undefined, "GET", "/");
      expect(r.status).toBe(404);
      expect(r.body).toEqual({ detail: "Not Found" });
    } finally {
      await plain.close();
    }
  });
});

describe("/api/options", () => {
  it("config: the open-source GetConfigResponse, behind the session key like every /api path", async () => {
    for (const path of ["config", "models", "agents", "security-analyzers"]) {
      const anon = await call(t.url, undefined, "GET", `/api/options/${path}`);
      expect(anon.status).toBe(401);
      expect(anon.body).toEqual({ detail: "Unauthorized" });
    }
    const b = new Browser(t.url);
    await b.signIn(key);
    expect((await b.request("GET", "/api/options/config")).status).toBe(200);
    const r = await call(t.url, key, "GET", "/api/options/config");
    expect(r.status).toBe(200);
    expect(r.body).toEqual({
      APP_MODE: "oss",
      GITHUB_CLIENT_ID: "",
      POSTHOG_CLIENT_KEY: "",
      PROVIDERS_CONFIGURED: [],
      FEATURE_FLAGS: {
        ENABLE_BILLING: false,
        HIDE_LLM_SETTINGS: false,
        ENABLE_JIRA: false,
        ENABLE_JIRA_DC: false,
        ENABLE_LINEAR: false,
      },
    });
    expect(r.headers.get("cache-control")).toContain("no-cache");
  });

  it("models, agents and security analyzers: configured lists sorted, built-in lists otherwise", async () => {
    expect((await call(t.url, key, "GET", "/api/options/models")).body).toEqual([
      "alpha/model-a",
      "zeta/model-b",
    ]);
    expect((await call(t.url, key, "GET", "/api/options/agents")).body).toEqual(["CodeActAgent"]);
    expect((await call(t.url, key, "GET", "/api/options/security-analyzers")).body).toEqual(["llm"]);
    const plain = await startTestApp({ web: { singleUser: true } });
    try {
      // Single-user mode: no key needed.
      const models = (await call(plain.url, undefined, "GET", "/api/options/models")).body as string[];
      expect(models).toEqual([...DEFAULT_MODELS].sort());
      expect(models.every((m) => /^[a-z0-9-]+\/[\w.-]+$/.test(m))).toBe(true);
      expect((await call(plain.url, undefined, "GET", "/api/options/security-analyzers")).body).toEqual([
        "invariant",
        "llm",
      ]);
    } finally {
      await plain.close();
    }
  });
});
