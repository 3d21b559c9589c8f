/**
 * The OpenHands web UI's settings flows (frontend at All-Hands-AI/OpenHands 156d0686), replayed request by request
 * against a real server as a signed-in browser: the order of the calls, the bodies the UI's hooks build from what
 * they read (use-settings maps GET /api/settings, use-save-settings merges the form into it and posts the whole
 * thing back, the MCP hooks post the whole masked list back), and every field the UI reads afterwards. After each
 * flow, every secret stored so far is checked by value: no flow may lose one.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SecretBox } from "../../src/core/secret-box.ts";
import { Browser } from "../helpers/browser.ts";
import { startTestApp, type TestApp } from "../helpers/test-app.ts";

const USER = "ui-user";
const MASK = "**********";
type Json = Record<string, unknown>;

/** The UI's DEFAULT_SETTINGS (services/settings.ts), used when GET /api/settings is 404. */
const UI_DEFAULTS: UiSettings = {
  LLM_MODEL: "openhands/claude-sonnet-4-20250514",
  LLM_BASE_URL: "",
  AGENT: "CodeActAgent",
  LANGUAGE: "en",
  LLM_API_KEY_SET: false,
  SEARCH_API_KEY_SET: false,
  CONFIRMATION_MODE: false,
  SECURITY_ANALYZER: "llm",
  REMOTE_RUNTIME_RESOURCE_FACTOR: 1,
  PROVIDER_TOKENS_SET: {},
  ENABLE_DEFAULT_CONDENSER: true,
  CONDENSER_MAX_SIZE: 120,
  ENABLE_SOUND_NOTIFICATIONS: false,
  USER_CONSENTS_TO_ANALYTICS: false,
  ENABLE_PROACTIVE_CONVERSATION_STARTERS: false,
  ENABLE_SOLVABILITY_ANALYSIS: false,
  SEARCH_API_KEY: "",
  MAX_BUDGET_PER_TASK: null,
  MCP_CONFIG: { sse_servers: [], stdio_servers: [], shttp_servers: [] },
  GIT_USER_NAME: "openhands",
  GIT_USER_EMAIL: "openhands@all-hands.dev",
};

/** The UI's Settings object (upper-case keys, as use-settings builds it). */
type UiSettings = Record<string, unknown> & { MCP_CONFIG: McpConfig | null };
interface McpConfig {
  sse_servers: Json[];
  stdio_servers: Json[];
  shttp_servers: Json[];
}

/** What every GET /api/settings must hold for the UI (the fields use-settings reads). */
const FIELDS_READ = [
  "llm_model",
  "llm_base_url",
  "agent",
  "language",
  "confirmation_mode",
  "security_analyzer",
  "llm_api_key_set",
  "search_api_key_set",
  "remote_runtime_resource_factor",
  "provider_tokens_set",
  "enable_default_condenser",
  "condenser_max_size",
  "enable_sound_notifications",
  "enable_proactive_conversation_starters",
  "enable_solvability_analysis",
  "user_consents_to_analytics",
  "search_api_key",
  "max_budget_per_task",
  "email",
  "email_verified",
  "mcp_config",
  "git_user_name",
  "git_user_email",
];

/** use-settings: GET /api/settings → the UI's Settings. */
function fromApi(api: Json): UiSettings {
  return {
    LLM_MODEL: api.llm_model,
    LLM_BASE_URL: api.llm_base_url,
    AGENT: api.agent,
    LANGUAGE: api.language,
    CONFIRMATION_MODE: api.confirmation_mode,
    SECURITY_ANALYZER: api.security_analyzer,
    LLM_API_KEY_SET: api.llm_api_key_set,
    SEARCH_API_KEY_SET: api.search_api_key_set,
    REMOTE_RUNTIME_RESOURCE_FACTOR: api.remote_runtime_resource_factor,
    PROVIDER_TOKENS_SET: api.provider_tokens_set,
    ENABLE_DEFAULT_CONDENSER: api.enable_default_condenser,
    CONDENSER_MAX_SIZE: api.condenser_max_size ?? 120,
    ENABLE_SOUND_NOTIFICATIONS: api.enable_sound_notifications,
    ENABLE_PROACTIVE_CONVERSATION_STARTERS: api.enable_proactive_conversation_starters,
    ENABLE_SOLVABILITY_ANALYSIS: api.enable_solvability_analysis,
    USER_CONSENTS_TO_ANALYTICS: api.user_consents_to_analytics,
    SEARCH_API_KEY: api.search_api_key || "",
    MAX_BUDGET_PER_TASK: api.max_budget_per_task,
    EMAIL: api.email || "",
    EMAIL_VERIFIED: api.email_verified,
    MCP_CONFIG: api.mcp_config as McpConfig | null,
    GIT_USER_NAME: api.git_user_name || "openhands",
    GIT_USER_EMAIL: api.git_user_email || "openhands@all-hands.dev",
    IS_NEW_USER: false,
  };
}

const trimmed = (v: unknown): string => (typeof v === "string" ? v.trim() : "");

/** use-save-settings: the merged Settings → the POST /api/settings body (undefined keys are not sent). */
function toPostBody(s: Json): Json {
  const body: Json = {
    llm_model: s.LLM_MODEL,
    llm_base_url: s.LLM_BASE_URL,
    agent: s.AGENT || "CodeActAgent",
    language: s.LANGUAGE || "en",
    confirmation_mode: s.CONFIRMATION_MODE,
    security_analyzer: s.SECURITY_ANALYZER,
    llm_api_key: s.llm_api_key === "" ? "" : trimmed(s.llm_api_key) || undefined,
    remote_runtime_resource_factor: s.REMOTE_RUNTIME_RESOURCE_FACTOR,
    enable_default_condenser: s.ENABLE_DEFAULT_CONDENSER,
    condenser_max_size: s.CONDENSER_MAX_SIZE ?? 120,
    enable_sound_notifications: s.ENABLE_SOUND_NOTIFICATIONS,
    user_consents_to_analytics: s.user_consents_to_analytics,
    provider_tokens_set: s.PROVIDER_TOKENS_SET,
    mcp_config: s.MCP_CONFIG,
    enable_proactive_conversation_starters: s.ENABLE_PROACTIVE_CONVERSATION_STARTERS,
    enable_solvability_analysis: s.ENABLE_SOLVABILITY_ANALYSIS,
    search_api_key: trimmed(s.SEARCH_API_KEY) || "",
    max_budget_per_task: s.MAX_BUDGET_PER_TASK,
    git_user_name: trimmed(s.GIT_USER_NAME) || "openhands",
    git_user_email: trimmed(s.GIT_USER_EMAIL) || "openhands@all-hands.dev",
  };
  return JSON.parse(JSON.stringify(body)) as Json;
}

let t: TestApp;
let b: Browser;
/** The UI's settings query cache: what the last GET /api/settings gave (DEFAULT_SETTINGS after a 404). */
let current: UiSettings;

/** Every secret stored so far, by where it lives: checked by value after each flow. */
const expected = {
  llmApiKey: null as string | null,
  searchApiKey: null as string | null,
  providerTokens: {} as Record<string, string>,
  customSecrets: {} as Record<string, string>,
  mcp: null as null | {
    sse: [string, string | null][];
    shttp: [string, string | null][];
    stdio: [string, Record<string, string>][];
  },
};

beforeAll(async () => {
  t = await startTestApp();
  const key = await t.keyFor(USER);
  b = new Browser(t.url);
  await b.signIn(key);
  b.log.length = 0;
});
afterAll(async () => {
  await t.close();
});

/** GET /api/settings as use-settings does, asserting the shape the UI reads; refreshes the query cache. */
async function refetchSettings(): Promise<Json> {
  const r = await b.request("GET", "/api/settings");
  expect(r.status).toBe(200);
  const api = r.body as Json;
  for (const f of FIELDS_READ) expect(api, f).toHaveProperty(f);
  expect(typeof api.llm_api_key_set).toBe("boolean");
  expect(typeof api.search_api_key_set).toBe("boolean");
  expect(typeof api.enable_default_condenser).toBe("boolean");
  expect(typeof api.enable_sound_notifications).toBe("boolean");
  expect(typeof api.provider_tokens_set).toBe("object");
  expect(api.llm_api_key ?? null).toBeNull();
  expect(api.search_api_key).toBeNull();
  // No secret ever comes back in clear.
  for (const secret of allSecretValues()) expect(r.text).not.toContain(secret);
  current = fromApi(api);
  return api;
}

/** useSaveSettings().mutate(patch): merge into the cached settings, post, then refetch (invalidate). */
async function save(patch: Json): Promise<Json> {
  const r = await b.request("POST", "/api/settings", toPostBody({ ...current, ...patch }));
  expect(r.status, r.text).toBe(200);
  return refetchSettings();
}

/** The MCP hooks: post {mcp_config} only, then refetch. */
async function saveMcp(config: McpConfig): Promise<Json> {
  const r = await b.request("POST", "/api/settings", { mcp_config: config });
  expect(r.status, r.text).toBe(200);
  return refetchSettings();
}

function allSecretValues(): string[] {
  const out: string[] = [];
  if (expected.llmApiKey) out.push(expected.llmApiKey);
  if (expected.searchApiKey) out.push(expected.searchApiKey);
  out.push(...Object.values(expected.providerTokens), ...Object.values(expected.customSecrets));
  for (const [, k] of [...(expected.mcp?.sse ?? []), ...(expected.mcp?.shttp ?? [])]) if (k) out.push(k);
  for (const [, env] of expected.mcp?.stdio ?? []) out.push(...Object.values(env));
  return out;
}

/** Every secret stored so far, read back by value from storage. */
async function expectNoSecretLost(): Promise<void> {
  const services = t.app.services;
  const conv = await services.settings.openConversationConfig(USER);
  expect(conv.llmApiKey).toBe(expected.llmApiKey);
  const doc = await t.storage.userData.get(USER);
  const sealedSearch = doc?.value.settings?.search_api_key;
  const search =
    typeof sealedSearch === "string"
      ? new SecretBox(t.encryptionKey).open(sealedSearch, `${USER}:search_api_key`)
      : null;
  expect(search).toBe(expected.searchApiKey);
  expect(Object.fromEntries(Object.entries(conv.providerTokens).map(([p, v]) => [p, v.token]))).toEqual(
    expected.providerTokens,
  );
  expect(await services.secrets.openAll(USER)).toEqual(expected.customSecrets);
  if (expected.mcp !== null) {
    const m = conv.mcpConfig;
    expect(m?.sse_servers.map((e) => [e.url, e.api_key])).toEqual(expected.mcp.sse);
    expect(m?.shttp_servers.map((e) => [e.url, e.api_key])).toEqual(expected.mcp.shttp);
    expect(m?.stdio_servers.map((e) => [e.name, e.env])).toEqual(expected.mcp.stdio);
  }
}

describe("UI replay: settings flows, in the order a new user meets them", () => {
  it("first run: config, settings 404, option lists, the AI-config modal's save", async () => {
    // root layout + PostHog wrapper: the config first; APP_MODE "oss" means signed in, so settings next.
    const config = await b.request("GET", "/api/options/config");
    expect(config.status).toBe(200);
    const c = config.body as { APP_MODE: string; FEATURE_FLAGS: Json; POSTHOG_CLIENT_KEY: string };
    expect(c.APP_MODE).toBe("oss");
    expect(Object.values(c.FEATURE_FLAGS).every((v) => v === false)).toBe(true);
    expect(c.POSTHOG_CLIENT_KEY).toBe("");
    const first = await b.request("GET", "/api/settings");
    expect(first.status).toBe(404); // the sidebar opens the settings modal on exactly this
    current = UI_DEFAULTS;
    // useAIConfigOptions: the modal's lists.
    const models = (await b.request("GET", "/api/options/models")).body as string[];
    const agents = (await b.request("GET", "/api/options/agents")).body as string[];
    const analyzers = (await b.request("GET", "/api/options/security-analyzers")).body as string[];
    expect(models).toContain("anthropic/claude-sonnet-4-5-20250929");
    expect(agents).toContain("CodeActAgent");
    expect(analyzers).toContain("llm");
    // The modal's form: provider + model + API key (extractSettings), merged into DEFAULT_SETTINGS.
    const api = await save({
      LLM_MODEL: "anthropic/claude-sonnet-4-5-20250929",
      LLM_API_KEY_SET: true,
      AGENT: "CodeActAgent",
      LANGUAGE: "en",
      LLM_BASE_URL: "",
      CONFIRMATION_MODE: false,
      SECURITY_ANALYZER: "llm",
      ENABLE_DEFAULT_CONDENSER: true,
      llm_api_key: "sk-ant-first",
    });
    expected.llmApiKey = "sk-ant-first";
    expect(api).toMatchObject({
      llm_model: "anthropic/claude-sonnet-4-5-20250929",
      agent: "CodeActAgent",
      language: "en",
      security_analyzer: "llm",
      llm_api_key_set: true,
      search_api_key_set: false,
      condenser_max_size: 120,
      max_budget_per_task: null,
      git_user_name: "openhands",
      git_user_email: "openhands@all-hands.dev",
      provider_tokens_set: {},
      mcp_config: { sse_servers: [], stdio_servers: [], shttp_servers: [] },
      // Never answered: the root layout opens the analytics consent modal on exactly this null.
      user_consents_to_analytics: null,
    });
    expect(b.log).toEqual([
      "GET /api/options/config",
      "GET /api/settings",
      "GET /api/options/models",
      "GET /api/options/agents",
      "GET /api/options/security-analyzers",
      "POST /api/settings",
      "GET /api/settings",
    ]);
    await expectNoSecretLost();
  });

  it("consent: the analytics modal's save", async () => {
    const api = await save({ user_consents_to_analytics: true });
    expect(api.user_consents_to_analytics).toBe(true);
    expect(current.USER_CONSENTS_TO_ANALYTICS).not.toBeNull(); // the modal stays closed
    await expectNoSecretLost();
  });

  it("LLM settings, basic view: new model, a search key, the API key field left empty", async () => {
    const api = await save({
      LLM_MODEL: "openai/gpt-5-2025-08-07",
      llm_api_key: null, // empty field: `finalApiKey || null`, then not sent
      SEARCH_API_KEY: "tvly-first",
      CONFIRMATION_MODE: false,
      SECURITY_ANALYZER: "llm",
      LLM_BASE_URL: "",
      AGENT: "CodeActAgent",
      ENABLE_DEFAULT_CONDENSER: true,
    });
    expected.searchApiKey = "tvly-first";
    expect(api).toMatchObject({
      llm_model: "openai/gpt-5-2025-08-07",
      llm_api_key_set: true,
      search_api_key_set: true,
      search_api_key: null, // so the form shows "" again next time, and posts ""
      llm_base_url: "",
    });
    await expectNoSecretLost();
  });

  it("LLM settings, advanced view: custom model and base URL, new API key, search field untouched", async () => {
    const api = await save({
      LLM_MODEL: "openai/my-model",
      LLM_BASE_URL: "http://127.0.0.1:9/v1",
      llm_api_key: "sk-advanced",
      SEARCH_API_KEY: current.SEARCH_API_KEY || "", // the field's defaultValue: "" (the key is never read back)
      AGENT: "CodeActAgent",
      CONFIRMATION_MODE: true,
      ENABLE_DEFAULT_CONDENSER: false,
      CONDENSER_MAX_SIZE: 50,
      SECURITY_ANALYZER: null, // "none"
    });
    expected.llmApiKey = "sk-advanced";
    expect(api).toMatchObject({
      llm_model: "openai/my-model",
      llm_base_url: "http://127.0.0.1:9/v1",
      confirmation_mode: true,
      enable_default_condenser: false,
      condenser_max_size: 50,
      security_analyzer: null,
      llm_api_key_set: true,
      search_api_key_set: true,
    });
    await expectNoSecretLost();
  });

  it("App settings: language, analytics, sounds, budget, git identity", async () => {
    const api = await save({
      LANGUAGE: "fr",
      user_consents_to_analytics: false,
      ENABLE_SOUND_NOTIFICATIONS: true,
      ENABLE_PROACTIVE_CONVERSATION_STARTERS: false,
      ENABLE_SOLVABILITY_ANALYSIS: false,
      MAX_BUDGET_PER_TASK: 7.5,
      GIT_USER_NAME: "Ada Lovelace",
      GIT_USER_EMAIL: "ada@example.com",
    });
    expect(api).toMatchObject({
      language: "fr",
      user_consents_to_analytics: false,
      enable_sound_notifications: true,
      enable_proactive_conversation_starters: false,
      enable_solvability_analysis: false,
      max_budget_per_task: 7.5,
      git_user_name: "Ada Lovelace",
      git_user_email: "ada@example.com",
      // The App save posts the LLM fields back as read: unchanged.
      llm_model: "openai/my-model",
      confirmation_mode: true,
      search_api_key_set: true,
      llm_api_key_set: true,
    });
    await expectNoSecretLost();
  });

  it("git settings: save tokens, save again with the fields empty, then disconnect", async () => {
    const form = (github: string, gitlab: string) => ({
      provider_tokens: {
        github: { token: github, host: "" },
        gitlab: { token: gitlab, host: "" },
        bitbucket: { token: "", host: "" },
        azure_devops: { token: "", host: "" },
      },
    });
    const saveTokens = async (github: string, gitlab: string) => {
      const r = await b.request("POST", "/api/add-git-providers", form(github, gitlab));
      expect(r.status, r.text).toBe(200);
      return refetchSettings();
    };
    let api = await saveTokens("ghp_replay_token", "");
    expected.providerTokens = { github: "ghp_replay_token" };
    expect(Object.keys(api.provider_tokens_set as Json)).toEqual(["github"]);
    await expectNoSecretLost();
    // The token inputs are always empty on the page: saving again (adding gitlab) keeps github.
    api = await saveTokens("", "glpat_replay_token");
    expected.providerTokens = { github: "ghp_replay_token", gitlab: "glpat_replay_token" };
    expect(Object.keys(api.provider_tokens_set as Json).sort()).toEqual(["github", "gitlab"]);
    await expectNoSecretLost();
    // An LLM save in between posts provider_tokens_set back (ignored): the tokens stay.
    await save({ LLM_MODEL: "openai/my-model", llm_api_key: null, SEARCH_API_KEY: "" });
    await expectNoSecretLost();
    // "Disconnect tokens" (use-logout in OSS mode, as the user menu's Logout): the tokens go, and the browser
    // session ends with them (docs/ui-web.md); the page reloads to the sign-in and the person signs in again.
    const r = await b.request("POST", "/api/unset-provider-tokens");
    expect(r.status).toBe(200);
    expect(b.cookies.size).toBe(0);
    expect((await b.request("GET", "/api/settings")).status).toBe(401);
    await b.signIn(await t.keyFor(USER));
    api = await refetchSettings();
    expected.providerTokens = {};
    expect(api.provider_tokens_set).toEqual({});
    await expectNoSecretLost();
  });

  it("MCP: add sse, stdio and shttp servers, edit (URL change), rename, delete", async () => {
    const list = (): McpConfig => structuredClone(current.MCP_CONFIG ?? UI_DEFAULTS.MCP_CONFIG) as McpConfig;
    // Add: each add posts the whole list as read, masks included, plus the new entry.
    let m = list();
    m.sse_servers.push({ url: "https://sse-one.example.com/sse", api_key: "sse-key-1" });
    await saveMcp(m);
    m = list();
    m.sse_servers.push({ url: "https://sse-two.example.com/sse" });
    await saveMcp(m);
    m = list();
    m.stdio_servers.push({
      name: "fs",
      command: "npx",
      args: ["-y", "@mcp/fs"],
      env: { FS_TOKEN: "stdio-secret" },
    });
    await saveMcp(m);
    m = list();
    m.shttp_servers.push({ url: "https://h.example.com/mcp", api_key: "shttp-key", timeout: 90 });
    let api = await saveMcp(m);
    expected.mcp = {
      sse: [
        ["https://sse-one.example.com/sse", "sse-key-1"],
        ["https://sse-two.example.com/sse", null],
      ],
      shttp: [["https://h.example.com/mcp", "shttp-key"]],
      stdio: [["fs", { FS_TOKEN: "stdio-secret" }]],
    };
    expect(api.mcp_config).toEqual({
      sse_servers: [
        { url: "https://sse-one.example.com/sse", api_key: MASK },
        { url: "https://sse-two.example.com/sse", api_key: null },
      ],
      stdio_servers: [{ name: "fs", command: "npx", args: ["-y", "@mcp/fs"], env: { FS_TOKEN: MASK } }],
      shttp_servers: [{ url: "https://h.example.com/mcp", api_key: MASK, timeout: 90 }],
    });
    await expectNoSecretLost();

    // Edit "sse-0": new URL, the api_key input still holds the mask it was filled with.
    m = list();
    m.sse_servers[0] = { url: "https://sse-moved.example.com/sse", api_key: MASK };
    m.shttp_servers[0] = { url: "https://h2.example.com/mcp", api_key: MASK, timeout: 120 };
    api = await saveMcp(m);
    expected.mcp.sse[0] = ["https://sse-moved.example.com/sse", "sse-key-1"];
    expected.mcp.shttp[0] = ["https://h2.example.com/mcp", "shttp-key"];
    await expectNoSecretLost();

    // Rename "stdio-0": the env textarea holds FS_TOKEN=********** and a new line.
    m = list();
    m.stdio_servers[0] = {
      name: "files",
      command: "npx",
      args: ["-y", "@mcp/fs"],
      env: { FS_TOKEN: MASK, FS_ROOT: "/work" },
    };
    api = await saveMcp(m);
    expected.mcp.stdio = [["files", { FS_TOKEN: "stdio-secret", FS_ROOT: "/work" }]];
    expect((api.mcp_config as McpConfig).stdio_servers[0]).toEqual({
      name: "files",
      command: "npx",
      args: ["-y", "@mcp/fs"],
      env: { FS_TOKEN: MASK, FS_ROOT: MASK },
    });
    await expectNoSecretLost();

    // Delete "sse-0": the list shifts, the remaining entry keeps what it had.
    m = list();
    m.sse_servers.splice(0, 1);
    api = await saveMcp(m);
    expected.mcp.sse = [["https://sse-two.example.com/sse", null]];
    expect((api.mcp_config as McpConfig).sse_servers).toEqual([
      { url: "https://sse-two.example.com/sse", api_key: null },
    ]);
    await expectNoSecretLost();

    // A full settings save afterwards posts the masked MCP list back: nothing changes.
    await save({ LANGUAGE: "de" });
    await expectNoSecretLost();
  });

  it("secrets: list, create, edit (rename + description), delete", async () => {
    const listSecrets = async () => {
      const r = await b.request("GET", "/api/secrets");
      expect(r.status).toBe(200);
      for (const v of allSecretValues()) expect(r.text).not.toContain(v);
      return (r.body as { custom_secrets: { name: string; description?: string }[] }).custom_secrets;
    };
    expect(await listSecrets()).toEqual([]);
    const created = await b.request("POST", "/api/secrets", {
      name: "OPENAI_KEY",
      value: "sk-custom-1",
      description: "for tools",
    });
    expect(created.status).toBe(201);
    const noDescription = await b.request("POST", "/api/secrets", { name: "DB_PASSWORD", value: "hunter2" });
    expect(noDescription.status).toBe(201);
    expected.customSecrets = { OPENAI_KEY: "sk-custom-1", DB_PASSWORD: "hunter2" };
    const listed = await listSecrets();
    expect(listed.map((s) => s.name).sort()).toEqual(["DB_PASSWORD", "OPENAI_KEY"]);
    expect(listed.find((s) => s.name === "OPENAI_KEY")?.description).toBe("for tools");
    await expectNoSecretLost();
    // Edit: PUT /api/secrets/{old name} {name, description}; the value is not sent and must stay.
    const edited = await b.request("PUT", "/api/secrets/OPENAI_KEY", {
      name: "OPENAI_API_KEY",
      description: "renamed",
    });
    expect(edited.status).toBe(200);
    expected.customSecrets = { OPENAI_API_KEY: "sk-custom-1", DB_PASSWORD: "hunter2" };
    expect((await listSecrets()).find((s) => s.name === "OPENAI_API_KEY")?.description).toBe("renamed");
    await expectNoSecretLost();
    const duplicate = await b.request("POST", "/api/secrets", { name: "DB_PASSWORD", value: "other" });
    expect(duplicate.status).toBe(400);
    await expectNoSecretLost();
    const deleted = await b.request("DELETE", "/api/secrets/DB_PASSWORD");
    expect(deleted.status).toBe(200);
    expected.customSecrets = { OPENAI_API_KEY: "sk-custom-1" };
    expect((await listSecrets()).map((s) => s.name)).toEqual(["OPENAI_API_KEY"]);
    // A settings save does not touch the custom secrets.
    await save({ ENABLE_SOUND_NOTIFICATIONS: false });
    await expectNoSecretLost();
  });

  it("a signed-out browser gets 401 JSON on every call of these flows, and changes nothing", async () => {
    const before = (await t.storage.userData.get(USER))?.value;
    const anon = new Browser(t.url);
    for (const [method, path, body] of [
      ["GET", "/api/settings", undefined],
      ["POST", "/api/settings", toPostBody({ ...current, LANGUAGE: "xx" })],
      ["POST", "/api/add-git-providers", { provider_tokens: {} }],
      ["POST", "/api/unset-provider-tokens", undefined],
      ["GET", "/api/secrets", undefined],
      ["POST", "/api/secrets", { name: "X", value: "y" }],
      ["PUT", "/api/secrets/OPENAI_API_KEY", { name: "Z" }],
      ["DELETE", "/api/secrets/OPENAI_API_KEY", undefined],
    ] as const) {
      const r = await anon.request(method, path, body);
      expect(r.status, `${method} ${path}`).toBe(401);
      expect(r.body).toEqual({ detail: "Unauthorized" });
    }
    expect((await t.storage.userData.get(USER))?.value).toEqual(before);
    await expectNoSecretLost();
  });
});

describe("UI replay: the first-run modal saved with its API key field left empty", () => {
  it('posts llm_api_key "" onto the defaults: 200, no key stored or reported, and a later key is kept', async () => {
    const user = "ui-user-no-key";
    const fresh = new Browser(t.url);
    await fresh.signIn(await t.keyFor(user));
    // The sidebar opens the modal on this 404; use-settings then answers DEFAULT_SETTINGS.
    expect((await fresh.request("GET", "/api/settings")).status).toBe(404);
    // SettingsForm → extractSettings: no advanced fields in this form, so base URL and analyzer are undefined
    // (left out of the JSON); an empty password input is "" and use-save-settings posts it as "".
    const modal = {
      LLM_MODEL: "anthropic/claude-sonnet-4-5-20250929",
      LLM_API_KEY_SET: false,
      AGENT: "CodeActAgent",
      LANGUAGE: "en",
      LLM_BASE_URL: undefined,
      CONFIRMATION_MODE: false,
      SECURITY_ANALYZER: undefined,
      ENABLE_DEFAULT_CONDENSER: true,
      llm_api_key: "",
    };
    const body = toPostBody({ ...UI_DEFAULTS, ...modal });
    expect(body.llm_api_key).toBe("");
    expect("llm_base_url" in body).toBe(false);
    const saved = await fresh.request("POST", "/api/settings", body);
    expect(saved.status, saved.text).toBe(200);
    expect(saved.body).toEqual({ message: "Settings stored" });
    const read = await fresh.request("GET", "/api/settings");
    expect(read.status).toBe(200); // the modal does not open again
    const api = read.body as Json;
    expect(api).toMatchObject({
      llm_model: "anthropic/claude-sonnet-4-5-20250929",
      llm_api_key: null,
      llm_api_key_set: false,
      search_api_key_set: false,
      llm_base_url: null,
    });
    // Nothing invented in storage: no sealed key, and a conversation would start without one.
    const stored = (await t.storage.userData.get(user))?.value.settings as Json | undefined;
    expect(stored).toBeDefined();
    expect(stored?.llm_api_key ?? null).toBeNull();
    expect((await t.app.services.settings.openConversationConfig(user)).llmApiKey).toBeNull();
    // The LLM page's later save with a key stores it, and the next App save (no llm_api_key) keeps it.
    const withKey = toPostBody({ ...fromApi(api), llm_api_key: "sk-later" });
    expect((await fresh.request("POST", "/api/settings", withKey)).status).toBe(200);
    const appSave = toPostBody({ ...fromApi((await fresh.request("GET", "/api/settings")).body as Json) });
    expect("llm_api_key" in appSave).toBe(false);
    expect((await fresh.request("POST", "/api/settings", appSave)).status).toBe(200);
    expect((await t.app.services.settings.openConversationConfig(user)).llmApiKey).toBe("sk-later");
  });
});
