import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fromJson } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HttpGitProviderVerifier } from "../../src/adapters/git-providers/http-git-provider-verifier.ts";
import { ProviderHostPolicy } from "../../src/core/provider-host.ts";
import { SettingsSchema, SettingsService } from "../../src/gen/workspace/v1/settings_pb.js";
import { type FakeProvider, startFakeProvider } from "../helpers/fake-git-provider.ts";
import { connectClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

let t: TestApp;
let provider: FakeProvider;
let alice: string;
let bob: string;

beforeAll(async () => {
  provider = await startFakeProvider(["ghp_good", "glpat_good"]);
  // The fake provider listens on 127.0.0.1: allowed here explicitly, over plain HTTP.
  const hosts = new ProviderHostPolicy(["http://127.0.0.1"]);
  t = await startTestApp({
    verifier: new HttpGitProviderVerifier({ timeoutMs: 500, hosts }),
    git: { hosts },
  });
  alice = await t.keyFor("alice");
  bob = await t.keyFor("bob");
});
afterAll(async () => {
  await t.close();
  await provider.close();
});

const api = (key: string | undefined, method: string, path: string, body?: unknown) =>
  call(t.url, key, method, path, body);

describe("auth", () => {
  it("401 {detail:Unauthorized} without a key, with an unknown key, on every /api path", async () => {
    for (const [m, p] of [
      ["GET", "/api/settings"],
      ["POST", "/api/settings"],
      ["POST", "/api/add-git-providers"],
      ["POST", "/api/unset-provider-tokens"],
      ["GET", "/api/secrets"],
      ["POST", "/api/secrets"],
      ["PUT", "/api/secrets/x"],
      ["DELETE", "/api/secrets/x"],
    ] as const) {
      for (const key of [undefined, "wrong-key", ""]) {
        const r = await api(key, m, p, m === "GET" || m === "DELETE" ? undefined : {});
        expect(r.status, `${m} ${p} ${key}`).toBe(401);
        expect(r.body).toEqual({ detail: "Unauthorized" });
      }
    }
  });
  it("health endpoints need no key", async () => {
    expect((await api(undefined, "GET", "/alive")).body).toEqual({ status: "ok" });
    expect((await api(undefined, "GET", "/health")).body).toBe("OK");
    expect((await api(undefined, "GET", "/server_info")).status).toBe(200);
  });
  it("unknown paths answer JSON 404", async () => {
    const r = await api(alice, "GET", "/api/nope");
    expect(r.status).toBe(404);
    expect(r.body).toEqual({ detail: "Not Found" });
  });
});

describe("GET/POST /api/settings", () => {
  it("404 {error: Settings not found} before the first store", async () => {
    const key = await t.keyFor("fresh");
    const r = await api(key, "GET", "/api/settings");
    expect(r.status).toBe(404);
    expect(r.body).toEqual({ error: "Settings not found" });
    expect(r.headers.get("content-type")).toContain("application/json");
  });

  it("stores, then returns every field with nulls, boolean defaults and *_set fields; secrets never returned", async () => {
    const key = await t.keyFor("u1");
    const s = await api(key, "POST", "/api/settings", {
      language: "en",
      llm_model: "m1",
      llm_api_key: "sk-secret-1",
    });
    expect(s.status).toBe(200);
    expect(s.body).toEqual({ message: "Settings stored" });
    const g = await api(key, "GET", "/api/settings");
    expect(g.status).toBe(200);
    expect(g.body).toEqual({
      language: "en",
      agent: null,
      max_iterations: null,
      security_analyzer: null,
      confirmation_mode: null,
      llm_model: "m1",
      llm_api_key: null,
      llm_base_url: null,
      remote_runtime_resource_factor: null,
      secrets_store: { provider_tokens: {}, custom_secrets: {} },
      enable_default_condenser: true,
      enable_sound_notifications: false,
      enable_proactive_conversation_starters: true,
      enable_solvability_analysis: true,
      user_consents_to_analytics: null,
      sandbox_base_container_image: null,
      sandbox_runtime_container_image: null,
      mcp_config: null,
      search_api_key: null,
      sandbox_api_key: null,
      max_budget_per_task: null,
      condenser_max_size: null,
      email: null,
      email_verified: null,
      git_user_name: null,
      git_user_email: null,
      v1_enabled: null,
      provider_tokens_set: {},
      llm_api_key_set: true,
      search_api_key_set: false,
    });
    expect(g.text).not.toContain("sk-secret-1");
  });

  it("merges: absent keeps, null resets, secrets: null keeps, '' clears (search key: keeps), other replaces", async () => {
    const key = await t.keyFor("u2");
    await api(key, "POST", "/api/settings", {
      agent: "CodeActAgent",
      max_iterations: 50,
      llm_api_key: "k1",
      search_api_key: "s1",
      enable_sound_notifications: true,
      max_budget_per_task: 2.5,
    });
    await api(key, "POST", "/api/settings", {
      language: "fr",
      max_iterations: null,
      llm_api_key: null,
      search_api_key: "",
    });
    const g = (await api(key, "GET", "/api/settings")).body as Record<string, unknown>;
    expect(g.agent).toBe("CodeActAgent");
    expect(g.language).toBe("fr");
    expect(g.max_iterations).toBeNull();
    expect(g.enable_sound_notifications).toBe(true);
    expect(g.max_budget_per_task).toBe(2.5);
    expect(g.llm_api_key_set).toBe(true);
    // The UI posts search_api_key "" with every App and LLM save: it keeps the stored key.
    expect(g.search_api_key_set).toBe(true);
    await api(key, "POST", "/api/settings", { llm_api_key: "" });
    expect(((await api(key, "GET", "/api/settings")).body as Record<string, unknown>).llm_api_key_set).toBe(
      false,
    );
  });

  it("coerces like pydantic (lax): '10' → 10, 'true' → true", async () => {
    const key = await t.keyFor("u3");
    expect(
      (await api(key, "POST", "/api/settings", { max_iterations: "10", confirmation_mode: "true" })).status,
    ).toBe(200);
    const g = (await api(key, "GET", "/api/settings")).body as Record<string, unknown>;
    expect(g.max_iterations).toBe(10);
    expect(g.confirmation_mode).toBe(true);
  });

  it("masks MCP api keys and env values, and keeps them when the mask is posted back", async () => {
    const key = await t.keyFor("u4");
    const mcp = {
      sse_servers: ["https://sse.example.com/sse", { url: " https://b.example.com ", api_key: "sse-key" }],
      stdio_servers: [
        { name: "fs", command: "npx", args: "-y '@mcp/fs' /tmp", env: { TOKEN: "stdio-secret" } },
      ],
      shttp_servers: [{ url: "http://h.example.com/mcp", api_key: "shttp-key", timeout: 30 }],
    };
    expect((await api(key, "POST", "/api/settings", { mcp_config: mcp })).status).toBe(200);
    const g = await api(key, "GET", "/api/settings");
    expect(g.text).not.toMatch(/sse-key|stdio-secret|shttp-key/);
    const got = (g.body as { mcp_config: unknown }).mcp_config;
    expect(got).toEqual({
      sse_servers: [
        { url: "https://sse.example.com/sse", api_key: null },
        { url: "https://b.example.com", api_key: "**********" },
      ],
      stdio_servers: [
        { name: "fs", command: "npx", args: ["-y", "@mcp/fs", "/tmp"], env: { TOKEN: "**********" } },
      ],
      shttp_servers: [{ url: "http://h.example.com/mcp", api_key: "**********", timeout: 30 }],
    });
    // Post back what was read: the stored secrets stay (checked through the service that opens them).
    expect((await api(key, "POST", "/api/settings", g.body)).status).toBe(200);
    const doc = await t.storage.userData.get("u4");
    const opened = t.app.services.settings.openMcp("u4", doc?.value.settings?.mcp_config);
    expect(opened?.sse_servers[1]?.api_key).toBe("sse-key");
    expect(opened?.stdio_servers[0]?.env.TOKEN).toBe("stdio-secret");
  });

  it("reports every validation problem at once with FastAPI locations", async () => {
    const key = await t.keyFor("u5");
    const r = await api(key, "POST", "/api/settings", {
      max_iterations: "ten",
      enable_default_condenser: [true],
      llm_model: 42,
      condenser_max_size: 5,
      mcp_config: {
        sse_servers: [{ url: "ftp://x" }],
        stdio_servers: [{ name: "bad name", command: "npx -y" }],
        shttp_servers: [{ url: "https://ok", timeout: 4000 }],
        bogus: 1,
      },
    });
    expect(r.status).toBe(422);
    const detail = (r.body as { detail: { loc: unknown[]; type: string }[] }).detail;
    const locs = detail.map((d) => `${d.loc.join(".")}:${d.type}`);
    expect(locs).toEqual(
      expect.arrayContaining([
        "body.max_iterations:int_parsing",
        "body.enable_default_condenser:bool_type",
        "body.llm_model:string_type",
        "body.condenser_max_size:value_error",
        "body.mcp_config.sse_servers.0.url:value_error",
        "body.mcp_config.stdio_servers.0.name:value_error",
        "body.mcp_config.stdio_servers.0.command:value_error",
        "body.mcp_config.shttp_servers.0.timeout:value_error",
        "body.mcp_config.bogus:extra_forbidden",
      ]),
    );
    expect(detail.length).toBe(9);
    // nothing stored
    expect((await api(key, "GET", "/api/settings")).status).toBe(404);
  });

  it("invalid JSON → 422 json_invalid; missing body → 422 missing; non-object → 422", async () => {
    const key = await t.keyFor("u6");
    const bad = await call(t.url, key, "POST", "/api/settings", undefined, '{"language": ');
    expect(bad.status).toBe(422);
    expect((bad.body as { detail: { type: string; loc: unknown[] }[] }).detail[0]).toMatchObject({
      type: "json_invalid",
      loc: ["body", expect.any(Number)],
    });
    const missing = await call(t.url, key, "POST", "/api/settings");
    expect(missing.status).toBe(422);
    expect(missing.body).toEqual({
      detail: [{ type: "missing", loc: ["body"], msg: "Field required", input: null }],
    });
    const arr = await api(key, "POST", "/api/settings", [1, 2]);
    expect(arr.status).toBe(422);
  });

  it("ignores unknown top-level keys (the UI sends provider_tokens_set)", async () => {
    const key = await t.keyFor("u7");
    expect(
      (await api(key, "POST", "/api/settings", { provider_tokens_set: { github: null }, zzz: 1, agent: "A" }))
        .status,
    ).toBe(200);
  });

  it("413 with a JSON body over 1 MiB, nothing stored", async () => {
    const key = await t.keyFor("u8");
    const r = await api(key, "POST", "/api/settings", { language: "x".repeat(1024 * 1024 + 10) });
    expect(r.status).toBe(413);
    expect(r.headers.get("content-type")).toContain("application/json");
    expect((await api(key, "GET", "/api/settings")).status).toBe(404);
  });

  it("secrets_store in the settings body: provider tokens merge, custom secrets upsert; only names and hosts come back", async () => {
    const key = await t.keyFor("u9");
    await api(key, "POST", "/api/settings", {
      secrets_store: {
        provider_tokens: { gitlab: { token: "glpat-x", host: "gitlab.corp" } },
        custom_secrets: { API: { secret: "v-1", description: "d" } },
      },
    });
    const g = await api(key, "GET", "/api/settings");
    expect(g.text).not.toMatch(/glpat-x|v-1/);
    const body = g.body as Record<string, unknown>;
    expect(body.secrets_store).toEqual({
      provider_tokens: { gitlab: { host: "gitlab.corp", user_id: null } },
      custom_secrets: { API: { description: "d" } },
    });
    expect(body.provider_tokens_set).toEqual({ gitlab: "gitlab.corp" });
  });
});

describe("POST /api/add-git-providers", () => {
  it("verifies tokens at the provider's host, stores valid ones", async () => {
    const r = await api(alice, "POST", "/api/add-git-providers", {
      provider_tokens: {
        github: { token: "ghp_good", host: provider.host },
        gitlab: { token: "", host: "" },
      },
    });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ message: "Git providers stored" });
    expect(provider.requests.some((q) => q.path === "/api/v3/user" && q.auth === "Bearer ghp_good")).toBe(
      true,
    );
    await api(alice, "POST", "/api/settings", {});
    const g = (await api(alice, "GET", "/api/settings")).body as Record<string, unknown>;
    expect(g.provider_tokens_set).toEqual({ github: provider.host });
  });

  it("401 with the reference message for a token the provider rejects; nothing changes", async () => {
    const r = await api(alice, "POST", "/api/add-git-providers", {
      provider_tokens: { github: { token: "ghp_bad", host: provider.host } },
    });
    expect(r.status).toBe(401);
    expect(r.body).toEqual({ error: "Invalid token. Please make sure it is a valid github token." });
    const g = (await api(alice, "GET", "/api/settings")).body as Record<string, unknown>;
    expect(g.provider_tokens_set).toEqual({ github: provider.host });
  });

  it("503 naming the provider when it cannot be reached (never 'invalid token')", async () => {
    provider.setDown(true);
    try {
      const r = await api(alice, "POST", "/api/add-git-providers", {
        provider_tokens: { gitlab: { token: "glpat_good", host: provider.host } },
      });
      expect(r.status).toBe(503);
      expect((r.body as { error: string }).error).toContain("gitlab");
      expect((r.body as { error: string }).error).not.toContain("Invalid token");
    } finally {
      provider.setDown(false);
    }
    const unreachable = await api(alice, "POST", "/api/add-git-providers", {
      provider_tokens: { gitlab: { token: "glpat_good", host: "127.0.0.1:1" } },
    });
    expect(unreachable.status).toBe(503);
  });

  it("merge: empty token keeps the stored token, host is overwritten, absent providers are removed", async () => {
    const key = await t.keyFor("merge");
    await api(key, "POST", "/api/settings", {});
    await api(key, "POST", "/api/add-git-providers", {
      provider_tokens: {
        github: { token: "ghp_good", host: provider.host },
        gitlab: { token: "glpat_good", host: provider.host },
      },
    });
    // Same host, empty token: kept without re-verification.
    const before = provider.requests.length;
    expect(
      (
        await api(key, "POST", "/api/add-git-providers", {
          provider_tokens: { github: { token: "", host: provider.host } },
        })
      ).status,
    ).toBe(200);
    expect(provider.requests.length).toBe(before);
    const g = (await api(key, "GET", "/api/settings")).body as Record<string, unknown>;
    expect(g.provider_tokens_set).toEqual({ github: provider.host });
  });

  it("422 enum at [body, provider_tokens, key, [key]] for an unknown provider", async () => {
    const r = await api(alice, "POST", "/api/add-git-providers", {
      provider_tokens: { gitea: { token: "x" } },
    });
    expect(r.status).toBe(422);
    expect((r.body as { detail: unknown[] }).detail[0]).toMatchObject({
      type: "enum",
      loc: ["body", "provider_tokens", "gitea", "[key]"],
    });
  });

  it("unset-provider-tokens clears tokens and keeps custom secrets", async () => {
    const key = await t.keyFor("unset");
    await api(key, "POST", "/api/add-git-providers", {
      provider_tokens: { github: { token: "ghp_good", host: provider.host } },
    });
    await api(key, "POST", "/api/secrets", { name: "KEEP", value: "v" });
    const r = await api(key, "POST", "/api/unset-provider-tokens");
    expect(r.body).toEqual({ message: "Unset Git provider tokens" });
    await api(key, "POST", "/api/settings", {});
    expect(
      ((await api(key, "GET", "/api/settings")).body as Record<string, unknown>).provider_tokens_set,
    ).toEqual({});
    expect((await api(key, "GET", "/api/secrets")).body).toEqual({
      custom_secrets: [{ name: "KEEP", description: "" }],
    });
  });
});

describe("/api/secrets", () => {
  it("create 201, duplicate 400 {message}, list names only, rename, collision, delete, 404 {error}", async () => {
    const key = await t.keyFor("sec");
    expect(await api(key, "GET", "/api/secrets")).toMatchObject({
      status: 200,
      body: { custom_secrets: [] },
    });
    const c = await api(key, "POST", "/api/secrets", {
      name: "FOO",
      value: "foo-value",
      description: "the foo",
    });
    expect(c).toMatchObject({ status: 201, body: { message: "Secret created successfully" } });
    expect(await api(key, "POST", "/api/secrets", { name: "FOO", value: "x" })).toMatchObject({
      status: 400,
      body: { message: "Secret FOO already exists" },
    });
    await api(key, "POST", "/api/secrets", { name: "BAR", value: "b" });
    const list = await api(key, "GET", "/api/secrets");
    expect(list.body).toEqual({
      custom_secrets: [
        { name: "FOO", description: "the foo" },
        { name: "BAR", description: "" },
      ],
    });
    expect(list.text).not.toContain("foo-value");
    expect(await api(key, "PUT", "/api/secrets/FOO", { name: "BAR" })).toMatchObject({
      status: 400,
      body: { message: "Secret BAR already exists" },
    });
    expect(await api(key, "PUT", "/api/secrets/FOO", { name: "FOO2", description: "renamed" })).toMatchObject(
      {
        status: 200,
        body: { message: "Secret updated successfully" },
      },
    );
    expect(await api(key, "PUT", "/api/secrets/NOPE", { name: "X" })).toMatchObject({
      status: 404,
      body: { error: "Secret with ID NOPE not found" },
    });
    expect(await api(key, "DELETE", "/api/secrets/FOO2")).toMatchObject({
      status: 200,
      body: { message: "Secret deleted successfully" },
    });
    expect(await api(key, "DELETE", "/api/secrets/FOO2")).toMatchObject({
      status: 404,
      body: { error: "Secret with ID FOO2 not found" },
    });
    expect(await t.app.services.secrets.openAll("sec")).toEqual({ BAR: "b" });
  });

  it("422 for missing fields, all reported", async () => {
    const key = await t.keyFor("sec2");
    const r = await api(key, "POST", "/api/secrets", { description: 5 });
    expect(r.status).toBe(422);
    expect((r.body as { detail: { loc: unknown[] }[] }).detail.map((d) => d.loc)).toEqual([
      ["body", "name"],
      ["body", "value"],
      ["body", "description"],
    ]);
  });
});

describe("concurrency", () => {
  it("20 concurrent partial writes to one user's settings all land (compare-and-set, no lost update)", async () => {
    const key = await t.keyFor("concurrent");
    await api(key, "POST", "/api/settings", {});
    await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        api(key, "POST", "/api/settings", {
          secrets_store: { custom_secrets: { [`S${i}`]: { secret: `v${i}` } } },
        }),
      ),
    );
    const names = (
      (await api(key, "GET", "/api/secrets")).body as { custom_secrets: { name: string }[] }
    ).custom_secrets.map((s) => s.name);
    expect(names.sort()).toEqual(Array.from({ length: 20 }, (_, i) => `S${i}`).sort());
  });
});

describe("isolation and at-rest encryption", () => {
  it("a user never sees another user's settings or secrets", async () => {
    await api(alice, "POST", "/api/settings", { agent: "alice-agent" });
    await api(alice, "POST", "/api/secrets", { name: "ALICE_ONLY", value: "a" });
    const b = await api(bob, "GET", "/api/settings");
    expect(b.status).toBe(404);
    expect((await api(bob, "GET", "/api/secrets")).body).toEqual({ custom_secrets: [] });
    expect((await api(bob, "DELETE", "/api/secrets/ALICE_ONLY")).status).toBe(404);
    expect((await api(alice, "GET", "/api/secrets")).text).toContain("ALICE_ONLY");
  });

  it("secret values are not in the database file in clear", async () => {
    const key = await t.keyFor("enc");
    await api(key, "POST", "/api/settings", {
      llm_api_key: "PLAINTEXT-LLM-KEY-123",
      search_api_key: "PLAINTEXT-SEARCH-KEY",
    });
    await api(key, "POST", "/api/secrets", { name: "S", value: "PLAINTEXT-CUSTOM-SECRET" });
    const files = ["workspace.sqlite", "workspace.sqlite-wal"].map((f) => {
      try {
        return readFileSync(join(t.dir, f)).toString("latin1");
      } catch {
        return "";
      }
    });
    for (const content of files) expect(content).not.toMatch(/PLAINTEXT-(LLM-KEY|SEARCH-KEY|CUSTOM-SECRET)/);
    expect(files.join("")).not.toContain(key);
  });
});

describe("POST /api/settings and Connect StoreSettings", () => {
  // The REST binder hands the service the body as its model validated it, instead of the service converting the
  // request message back to JSON and validating the MCP config again: both ways must store the same settings.
  it("store the same settings for the same body", async () => {
    const settings = {
      language: "de",
      agent: "CodeActAgent",
      max_iterations: 42,
      security_analyzer: "llm",
      confirmation_mode: true,
      llm_model: "anthropic/claude-sonnet-4-5-20250929",
      llm_api_key: "sk-test",
      llm_base_url: "https://llm.example.com/v1",
      remote_runtime_resource_factor: 2,
      enable_default_condenser: false,
      enable_sound_notifications: true,
      enable_proactive_conversation_starters: false,
      user_consents_to_analytics: true,
      sandbox_base_container_image: "python:3.12",
      max_budget_per_task: 12.5,
      condenser_max_size: 120,
      email: "a@example.com",
      git_user_name: "A",
      git_user_email: "a@example.com",
      v1_enabled: true,
      search_api_key: "search-secret",
      mcp_config: {
        sse_servers: [
          { url: " https://sse.example.com/sse ", api_key: "sse-key" },
          { url: "wss://w.example.com" },
        ],
        stdio_servers: [{ name: "fs", command: "npx", args: ["-y", "@mcp/fs"], env: { TOKEN: "t" } }],
        shttp_servers: [
          { url: "http://h.example.com/mcp", api_key: "k", timeout: 30 },
          { url: "https://h2.example.com" },
        ],
      },
      secrets_store: { custom_secrets: { OPENAI: { secret: "s1", description: "d" } } },
    };
    const restKey = await t.keyFor("same-rest");
    expect((await api(restKey, "POST", "/api/settings", settings)).status).toBe(200);
    const rpcKey = await t.keyFor("same-rpc");
    const client = connectClient(SettingsService, t.url, rpcKey);
    await client.storeSettings({ settings: fromJson(SettingsSchema, settings), resetFields: [] });
    const [viaRest, viaRpc] = await Promise.all([
      api(restKey, "GET", "/api/settings"),
      api(rpcKey, "GET", "/api/settings"),
    ]);
    expect(viaRest.status).toBe(200);
    expect(viaRest.body).toEqual(viaRpc.body);
    const docs = await Promise.all(["same-rest", "same-rpc"].map((u) => t.storage.userData.get(u)));
    const s = t.app.services.settings;
    expect(s.openMcp("same-rest", docs[0]?.value.settings?.mcp_config)).toEqual(
      s.openMcp("same-rpc", docs[1]?.value.settings?.mcp_config),
    );
    expect(Object.keys(docs[0]?.value.settings ?? {}).sort()).toEqual(
      Object.keys(docs[1]?.value.settings ?? {}).sort(),
    );
  });

  it('keep an SHTTP server\'s "timeout": null over REST, as the reference does (its default is 60)', async () => {
    const key = await t.keyFor("timeout-null");
    const mcp = {
      shttp_servers: [{ url: "https://a.example.com", timeout: null }, { url: "https://b.example.com" }],
    };
    expect((await api(key, "POST", "/api/settings", { mcp_config: mcp })).status).toBe(200);
    const g = await api(key, "GET", "/api/settings");
    expect((g.body as { mcp_config: { shttp_servers: unknown } }).mcp_config.shttp_servers).toEqual([
      { url: "https://a.example.com", api_key: null, timeout: null },
      { url: "https://b.example.com", api_key: null, timeout: 60 },
    ]);
  });
});

describe("GET /api/settings body", () => {
  it("is JSON with Fastify's content type and length, the same bytes while unchanged, new after a store", async () => {
    const key = await t.keyFor("bytes");
    expect((await api(key, "POST", "/api/settings", { language: "it" })).status).toBe(200);
    const get = () =>
      fetch(`${t.url}/api/settings`, { headers: { "x-session-api-key": key } }).then(async (r) => ({
        type: r.headers.get("content-type"),
        length: r.headers.get("content-length"),
        cache: r.headers.get("cache-control"),
        text: await r.text(),
      }));
    const a = await get();
    const b = await get();
    expect(a.type).toBe("application/json; charset=utf-8");
    expect(a.cache).toBe("no-cache, no-store, must-revalidate, max-age=0");
    expect(Number(a.length)).toBe(Buffer.byteLength(a.text));
    expect(JSON.parse(a.text)).toMatchObject({ language: "it" });
    expect(b).toEqual(a);
    expect((await api(key, "POST", "/api/settings", { language: "nl" })).status).toBe(200);
    expect(JSON.parse((await get()).text)).toMatchObject({ language: "nl" });
  });
});
