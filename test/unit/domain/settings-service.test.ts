// SettingsService over an in-memory user-data repository: merge semantics, secrets, MCP masking, provider tokens.
import { create, fromJson, type JsonObject, toJson } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { beforeEach, describe, expect, it } from "vitest";
import { MASK } from "../../../src/codec/settings-fields.ts";
import { ValidationError } from "../../../src/core/errors.ts";
import { SettingsService } from "../../../src/domain/settings/settings-service.ts";
import { UserDataStore } from "../../../src/domain/user-data-store.ts";
import {
  AddGitProvidersRequestSchema,
  GetSettingsRequestSchema,
  SettingsSchema,
  StoreSettingsRequestSchema,
} from "../../../src/gen/workspace/v1/settings_pb.js";
import {
  callAs,
  FakeGitVerifier,
  InMemoryUserDataRepository,
  testCrypto,
} from "../../helpers/fakes/index.ts";

let repo: InMemoryUserDataRepository;
let verifier: FakeGitVerifier;
let service: SettingsService;
const alice = callAs("alice");

beforeEach(() => {
  repo = new InMemoryUserDataRepository();
  verifier = new FakeGitVerifier();
  service = new SettingsService({ store: new UserDataStore(repo), box: testCrypto().box, verifier });
});

const store = (settings: JsonObject, resetFields: string[] = [], ctx = alice) =>
  service.storeSettings(
    create(StoreSettingsRequestSchema, { settings: fromJson(SettingsSchema, settings), resetFields }),
    ctx,
  );

async function read(ctx = alice) {
  const r = await service.getSettings(create(GetSettingsRequestSchema), ctx);
  return {
    settings: toJson(SettingsSchema, r.settings ?? create(SettingsSchema), {
      useProtoFieldName: true,
    }) as JsonObject,
    llmApiKeySet: r.llmApiKeySet,
    searchApiKeySet: r.searchApiKeySet,
    providerTokensSet: r.providerTokensSet,
  };
}

async function codeOf(p: Promise<unknown>): Promise<Code> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ConnectError);
  return (err as ConnectError).code;
}

describe("SettingsService", () => {
  it("is NOT_FOUND until the caller first stores settings, and UNAUTHENTICATED without a caller", async () => {
    expect(await codeOf(read())).toBe(Code.NotFound);
    expect(await codeOf(read(callAs(null)))).toBe(Code.Unauthenticated);
    expect(await codeOf(store({ language: "en" }, [], callAs(null)))).toBe(Code.Unauthenticated);
    expect(repo.writes).toBe(0);
  });

  it("merges: absent fields keep their value, present ones replace, reset fields go back to the default", async () => {
    await store({ language: "en", llm_model: "gpt-4o", max_iterations: 30, enable_default_condenser: false });
    await store({ llm_model: "claude" });
    let s = (await read()).settings;
    expect(s).toMatchObject({ language: "en", llm_model: "claude", max_iterations: 30 });
    expect(s.enable_default_condenser).toBe(false);
    await store({}, ["language", "max_iterations"]);
    s = (await read()).settings;
    expect(s.language).toBeUndefined();
    expect(s.max_iterations).toBeUndefined();
    expect(s.llm_model).toBe("claude");
    // Boolean fields with a default read as the default until stored.
    await store({}, []);
    expect((await read()).settings.enable_sound_notifications).toBe(false);
  });

  it("secrets are write-only and sealed: absent keeps, '' clears (search_api_key keeps), a new value replaces", async () => {
    await store({ llm_api_key: "sk-one", search_api_key: "tv-1" });
    const stored = repo.peek("alice")?.value.settings ?? {};
    expect(stored.llm_api_key).toMatch(/^v1\./); // sealed, never the plaintext
    expect(JSON.stringify(repo.peek("alice"))).not.toContain("sk-one");
    let view = await read();
    expect(view.settings.llm_api_key).toBeUndefined();
    expect(view).toMatchObject({ llmApiKeySet: true, searchApiKeySet: true });
    await store({ language: "fr" }); // absent: kept
    expect((await service.openConversationConfig("alice")).llmApiKey).toBe("sk-one");
    await store({ llm_api_key: "sk-two" });
    expect((await service.openConversationConfig("alice")).llmApiKey).toBe("sk-two");
    // "" (or blank) clears, except search_api_key, which the UI sends as "" with every save: it keeps.
    await store({ llm_api_key: "", search_api_key: "  " });
    view = await read();
    expect(view).toMatchObject({ llmApiKeySet: false, searchApiKeySet: true });
    expect((await service.openConversationConfig("alice")).llmApiKey).toBeNull();
  });

  it("MCP values are shown masked; posting the mask back keeps the stored value, a new value replaces it", async () => {
    await store({
      mcp_config: {
        sse_servers: [{ url: "https://sse.example", api_key: "sse-secret" }],
        stdio_servers: [{ name: "fs", command: "npx", args: ["fs"], env: { TOKEN: "env-secret" } }],
        shttp_servers: [{ url: "https://h.example", api_key: "h-secret", timeout: 30 }],
      },
    });
    const shown = (await read()).settings.mcp_config as JsonObject;
    expect(JSON.stringify(shown)).not.toMatch(/secret/);
    expect(shown).toMatchObject({
      sse_servers: [{ url: "https://sse.example", api_key: MASK }],
      stdio_servers: [{ name: "fs", env: { TOKEN: MASK } }],
      shttp_servers: [{ url: "https://h.example", api_key: MASK, timeout: 30 }],
    });
    // The client posts back what it was shown, changing one value.
    const back = structuredClone(shown) as {
      sse_servers: { api_key: string }[];
      shttp_servers: { api_key: string }[];
    };
    (back.shttp_servers[0] as { api_key: string }).api_key = "h-new";
    await store({ mcp_config: back as unknown as JsonObject });
    const mcp = (await service.openConversationConfig("alice")).mcpConfig;
    expect(mcp?.sse_servers[0]?.api_key).toBe("sse-secret");
    expect(mcp?.stdio_servers[0]?.env).toEqual({ TOKEN: "env-secret" });
    expect(mcp?.shttp_servers[0]?.api_key).toBe("h-new");
  });

  it("a mask for a server not stored before keeps nothing (no value is invented)", async () => {
    await store({ mcp_config: { sse_servers: [{ url: "https://new.example", api_key: MASK }] } });
    const mcp = (await service.openConversationConfig("alice")).mcpConfig;
    expect(mcp?.sse_servers).toEqual([{ url: "https://new.example", api_key: null }]);
  });

  it("rejects bad input with every field violation and stores nothing", async () => {
    const err = await store(
      { condenser_max_size: 5, secrets_store: { provider_tokens: { gitea: { token: "t" } } } },
      ["no_such_field"],
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ValidationError);
    const v = (err as ValidationError).violations.map((x) => ({ type: x.type, loc: x.loc }));
    expect(v).toEqual(
      expect.arrayContaining([
        { type: "value_error", loc: ["reset_fields", 0] },
        { type: "value_error", loc: ["condenser_max_size"] },
        { type: "enum", loc: ["secrets_store", "provider_tokens", "gitea", "[key]"] },
      ]),
    );
    expect(v).toHaveLength(3);
    expect((err as ConnectError).code).toBe(Code.InvalidArgument);
    expect(repo.writes).toBe(0);
  });

  it("secrets_store in StoreSettings merges provider tokens and custom secrets, keeping the ones not named", async () => {
    await store({
      secrets_store: {
        provider_tokens: { github: { token: "ghp_1" } },
        custom_secrets: { A: { secret: "a", description: "first" } },
      },
    });
    await store({
      secrets_store: {
        provider_tokens: { gitlab: { token: "glpat", host: "gitlab.example" } },
        custom_secrets: { A: { description: "renamed" } },
      },
    });
    const data = repo.peek("alice")?.value;
    expect(Object.keys(data?.providerTokens ?? {}).sort()).toEqual(["github", "gitlab"]);
    expect(data?.customSecrets.A?.description).toBe("renamed");
    const view = await read();
    expect(view.providerTokensSet.github).toBeDefined();
    expect(view.providerTokensSet.gitlab?.host).toBe("gitlab.example");
    expect(view.settings.secrets_store).toEqual({
      provider_tokens: { github: {}, gitlab: { host: "gitlab.example" } },
      custom_secrets: { A: { description: "renamed" } },
    });
    expect((await service.openConversationConfig("alice")).providerTokens).toEqual({
      github: { token: "ghp_1", host: null },
      gitlab: { token: "glpat", host: "gitlab.example" },
    });
  });

  it("AddGitProviders verifies tokens, replaces the provider map and keeps a stored token for an empty one", async () => {
    const add = (tokens: Record<string, { token?: string; host?: string }>) =>
      service.addGitProviders(create(AddGitProvidersRequestSchema, { providerTokens: tokens }), alice);
    await add({ github: { token: "good" }, gitlab: { token: "gl" } });
    expect(verifier.checks.map((c) => c.token).sort()).toEqual(["gl", "good"]);
    await add({ github: { token: "" } }); // empty: keeps the stored token; gitlab is removed
    expect(Object.keys(repo.peek("alice")?.value.providerTokens ?? {})).toEqual(["github"]);
    expect((await service.openConversationConfig("alice")).providerTokens.github?.token).toBe("good");

    verifier.outcomes.set("bad", "invalid");
    verifier.outcomes.set("far", "unreachable");
    const before = repo.writes;
    expect(await codeOf(add({ github: { token: "bad" } }))).toBe(Code.Unauthenticated);
    expect(await codeOf(add({ github: { token: "far" } }))).toBe(Code.Unavailable);
    expect(repo.writes).toBe(before); // a failed request changes nothing
    expect((await service.openConversationConfig("alice")).providerTokens.github?.token).toBe("good");

    // A stored token whose host changes is verified again against the new host.
    verifier.checks.length = 0;
    await add({ github: { host: "ghe.example" } });
    expect(verifier.checks).toEqual([{ provider: "github", token: "good", host: "ghe.example" }]);
  });

  it("UnsetProviderTokens removes every token and keeps custom secrets", async () => {
    await store({
      secrets_store: { provider_tokens: { github: { token: "t" } }, custom_secrets: { K: { secret: "v" } } },
    });
    await service.unsetProviderTokens({}, alice);
    const data = repo.peek("alice")?.value;
    expect(data?.providerTokens).toEqual({});
    expect(Object.keys(data?.customSecrets ?? {})).toEqual(["K"]);
  });

  it("users are isolated: another user's settings behave as absent", async () => {
    await store({ language: "en", llm_api_key: "k" });
    expect(await codeOf(read(callAs("bob")))).toBe(Code.NotFound);
    expect((await service.openConversationConfig("bob")).llmApiKey).toBeNull();
  });

  it("answers GetSettings from its cache while the store's change token is unchanged, and reads again after a write", async () => {
    await store({ language: "en" });
    const first = await read();
    const reads = repo.reads;
    expect(await read()).toStrictEqual(first);
    expect(repo.reads).toBe(reads); // no read: the token did not change
    // A write the service did not make (another server): the store's token changes, the next answer reads it.
    const doc = repo.peek("alice");
    if (doc === undefined) throw new Error("missing");
    repo.put("alice", { ...doc.value, settings: { ...doc.value.settings, language: "fr" } });
    expect((await read()).settings).toMatchObject({ language: "fr" });
    expect(repo.reads).toBe(reads + 1);
    // Settings deleted under the cache (an operator's repair): NOT_FOUND, not the cached answer.
    repo.put("alice", { ...doc.value, settings: null });
    expect(await codeOf(read())).toBe(Code.NotFound);
  });

  it("a write that loses a compare-and-set race is re-applied on the fresh document (no lost update)", async () => {
    await store({ language: "en" });
    // A competing writer changes llm_model between our read and our write.
    repo.beforeNextCompareAndSet = () => {
      const doc = repo.peek("alice");
      if (doc === undefined) throw new Error("missing");
      repo.put("alice", { ...doc.value, settings: { ...doc.value.settings, llm_model: "theirs" } });
    };
    await store({ max_iterations: 7 });
    expect(repo.conflicts).toBe(1);
    expect((await read()).settings).toMatchObject({ language: "en", llm_model: "theirs", max_iterations: 7 });
  });
});
