import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SettingsService } from "../../src/gen/workspace/v1/settings_pb.js";
import { connectClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t.close();
});

const api = (key: string, method: string, path: string, body?: unknown) =>
  call(t.url, key, method, path, body);
type Json = Record<string, unknown>;

/** The stored MCP config with its secrets opened. */
async function openedMcp(user: string) {
  const doc = await t.storage.userData.get(user);
  return t.app.services.settings.openMcp(user, doc?.value.settings?.mcp_config);
}

describe("secrets survive the UI's saves", () => {
  it('search_api_key "" keeps the stored search key; null and absent keep it too', async () => {
    const key = await t.keyFor("s1");
    await api(key, "POST", "/api/settings", { search_api_key: "tvly-secret", llm_api_key: "llm-secret" });
    for (const body of [{ search_api_key: "" }, { search_api_key: "   " }, { search_api_key: null }, {}]) {
      expect((await api(key, "POST", "/api/settings", { language: "de", ...body })).status).toBe(200);
      const g = (await api(key, "GET", "/api/settings")).body as Json;
      expect(g.search_api_key_set, JSON.stringify(body)).toBe(true);
      expect(g.llm_api_key_set).toBe(true);
    }
    // A new value still replaces it; llm_api_key "" still clears (the contract's rule for the other secrets).
    await api(key, "POST", "/api/settings", { search_api_key: "tvly-new", llm_api_key: "" });
    const g = (await api(key, "GET", "/api/settings")).body as Json;
    expect(g.search_api_key_set).toBe(true);
    expect(g.llm_api_key_set).toBe(false);
  });
});

describe("null resets a non-secret field to its default", () => {
  it("booleans included, over REST", async () => {
    const key = await t.keyFor("n1");
    await api(key, "POST", "/api/settings", {
      enable_default_condenser: false,
      enable_sound_notifications: true,
      enable_proactive_conversation_starters: false,
      enable_solvability_analysis: false,
      confirmation_mode: true,
      agent: "X",
    });
    const r = await api(key, "POST", "/api/settings", {
      enable_default_condenser: null,
      enable_sound_notifications: null,
      enable_proactive_conversation_starters: null,
      enable_solvability_analysis: null,
      confirmation_mode: null,
      agent: null,
    });
    expect(r.status).toBe(200);
    const g = (await api(key, "GET", "/api/settings")).body as Json;
    expect(g.enable_default_condenser).toBe(true);
    expect(g.enable_sound_notifications).toBe(false);
    expect(g.enable_proactive_conversation_starters).toBe(true);
    expect(g.enable_solvability_analysis).toBe(true);
    expect(g.confirmation_mode).toBeNull();
    expect(g.agent).toBeNull();
  });

  it("a non-boolean value still answers 422 bool_type", async () => {
    const key = await t.keyFor("n2");
    const r = await api(key, "POST", "/api/settings", { enable_default_condenser: { a: 1 } });
    expect(r.status).toBe(422);
    expect((r.body as { detail: { type: string }[] }).detail[0]?.type).toBe("bool_type");
  });

  it("reset_fields resets a boolean over Connect too", async () => {
    const key = await t.keyFor("n3");
    await api(key, "POST", "/api/settings", { enable_default_condenser: false });
    const client = connectClient(SettingsService, t.url, key);
    await client.storeSettings({ resetFields: ["enable_default_condenser"] });
    const g = (await api(key, "GET", "/api/settings")).body as Json;
    expect(g.enable_default_condenser).toBe(true);
  });
});

describe("masked MCP values follow the entry being edited", () => {
  const MASK = "**********";

  it("an sse/shttp entry whose URL changed keeps its key (same list position)", async () => {
    const key = await t.keyFor("m1");
    await api(key, "POST", "/api/settings", {
      mcp_config: {
        sse_servers: [
          { url: "https://a.example.com/sse", api_key: "key-a" },
          { url: "https://b.example.com/sse", api_key: "key-b" },
        ],
        stdio_servers: [],
        shttp_servers: [{ url: "https://h.example.com/mcp", api_key: "key-h", timeout: 30 }],
      },
    });
    const read = ((await api(key, "GET", "/api/settings")).body as Json).mcp_config as {
      sse_servers: Json[];
      shttp_servers: Json[];
      stdio_servers: Json[];
    };
    // The UI's edit: the entry at index 1 and the shttp entry get new URLs, the mask is posted back.
    read.sse_servers[1] = { url: "https://b2.example.com/sse", api_key: MASK };
    read.shttp_servers[0] = { url: "https://h2.example.com/mcp", api_key: MASK, timeout: 60 };
    expect((await api(key, "POST", "/api/settings", { mcp_config: read })).status).toBe(200);
    const opened = await openedMcp("m1");
    expect(opened?.sse_servers.map((e) => [e.url, e.api_key])).toEqual([
      ["https://a.example.com/sse", "key-a"],
      ["https://b2.example.com/sse", "key-b"],
    ]);
    expect(opened?.shttp_servers.map((e) => [e.url, e.api_key, e.timeout])).toEqual([
      ["https://h2.example.com/mcp", "key-h", 60],
    ]);
  });

  it("a renamed stdio entry keeps its env values; a URL match wins over the position", async () => {
    const key = await t.keyFor("m2");
    await api(key, "POST", "/api/settings", {
      mcp_config: {
        sse_servers: [
          { url: "https://a.example.com", api_key: "key-a" },
          { url: "https://b.example.com", api_key: "key-b" },
        ],
        stdio_servers: [{ name: "fs", command: "npx", args: ["fs"], env: { TOKEN: "tok", OTHER: "o" } }],
        shttp_servers: [],
      },
    });
    await api(key, "POST", "/api/settings", {
      mcp_config: {
        // Deleted entry 0: entry b moves to index 0 and is found by its URL.
        sse_servers: [{ url: "https://b.example.com", api_key: MASK }],
        stdio_servers: [{ name: "files", command: "npx", args: ["fs"], env: { TOKEN: MASK, NEW: "n" } }],
        shttp_servers: [],
      },
    });
    const opened = await openedMcp("m2");
    expect(opened?.sse_servers).toEqual([{ url: "https://b.example.com", api_key: "key-b" }]);
    expect(opened?.stdio_servers[0]?.name).toBe("files");
    expect(opened?.stdio_servers[0]?.env).toEqual({ TOKEN: "tok", NEW: "n" });
  });

  it("a mask with no stored entry at all stores no key", async () => {
    const key = await t.keyFor("m3");
    await api(key, "POST", "/api/settings", {
      mcp_config: { sse_servers: [{ url: "https://x.example.com", api_key: MASK }] },
    });
    const opened = await openedMcp("m3");
    expect(opened?.sse_servers).toEqual([{ url: "https://x.example.com", api_key: null }]);
  });
});
