import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HttpGitProviderVerifier } from "../../src/adapters/git-providers/http-git-provider-verifier.ts";
import { HttpGitProviderClients } from "../../src/adapters/git-providers/provider-clients.ts";
import { ProviderHostPolicy } from "../../src/core/provider-host.ts";
import { SettingsService } from "../../src/gen/workspace/v1/settings_pb.js";
import { GitProviderError } from "../../src/ports/git-provider.ts";
import { type FakeGitProvider, startFakeGitProvider } from "../helpers/fake-git-providers.ts";
import { connectClient, grpcClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

const TOKEN = "ghp_host_SECRET";
let fake: FakeGitProvider;
/** The operator allowed nothing: public domain names only. */
let strict: TestApp;
/** The operator allowed http://127.0.0.1 (the fake). */
let open: TestApp;

beforeAll(async () => {
  fake = await startFakeGitProvider("github", [{ token: TOKEN, login: "h", id: 1, repos: [] }]);
  const none = new ProviderHostPolicy();
  strict = await startTestApp({
    verifier: new HttpGitProviderVerifier({ timeoutMs: 500, hosts: none }),
    git: { hosts: none, timeoutMs: 500 },
  });
  const loop = new ProviderHostPolicy(["http://127.0.0.1"]);
  open = await startTestApp({
    verifier: new HttpGitProviderVerifier({ timeoutMs: 500, hosts: loop }),
    git: { hosts: loop, timeoutMs: 500 },
  });
});
afterAll(async () => {
  await strict?.close();
  await open?.close();
  await fake?.close();
});

const BAD_HOSTS = (port: number) => [
  `http://127.0.0.1:${port}/internal/admin/delete?confirm=1&`,
  `127.0.0.1:${port}`,
  "localhost",
  `localhost:${port}`,
  "2130706433",
  "0x7f.1",
  "[::1]:8080",
  "10.0.0.5",
  "169.254.169.254",
  "user:pw@github.example.com",
  "github.example.com/api",
  "github.example.com?x=1",
  "github.example.com#x",
  "https://github.example.com",
  "github.example.com:0",
  "github.example.com:99999",
  "metadata",
  "gitlab.internal",
  "bad_name.example.com",
  "a b.example.com",
];

describe("provider host validation (no operator allow list)", () => {
  it("add-git-providers: 422 at the host for every scheme, path, query, userinfo, IP or internal name; the provider is never called", async () => {
    const key = await strict.keyFor("mallory");
    const before = fake.requests.length;
    for (const host of BAD_HOSTS(fake.port)) {
      const r = await call(strict.url, key, "POST", "/api/add-git-providers", {
        provider_tokens: { github: { token: TOKEN, host } },
      });
      expect(r.status, host).toBe(422);
      const detail = (r.body as { detail: { loc: unknown[]; type: string }[] }).detail[0];
      expect(detail?.loc, host).toEqual(["body", "provider_tokens", "github", "host"]);
      expect(r.text).not.toContain(TOKEN);
    }
    expect(fake.requests.length).toBe(before);
    const settings = await call(strict.url, key, "GET", "/api/settings");
    expect(settings.status).toBe(404);
  });

  it("POST /api/settings secrets_store.provider_tokens: the same rule; nothing is stored", async () => {
    const key = await strict.keyFor("mallory2");
    await call(strict.url, key, "POST", "/api/settings", { language: "en" });
    for (const host of BAD_HOSTS(fake.port)) {
      const r = await call(strict.url, key, "POST", "/api/settings", {
        language: "fr",
        secrets_store: { provider_tokens: { gitlab: { token: "glpat-x", host } } },
      });
      expect(r.status, host).toBe(422);
      expect((r.body as { detail: { loc: unknown[] }[] }).detail[0]?.loc).toEqual([
        "body",
        "secrets_store",
        "provider_tokens",
        "gitlab",
        "host",
      ]);
    }
    const g = (await call(strict.url, key, "GET", "/api/settings")).body as Record<string, unknown>;
    expect(g.language).toBe("en");
    expect(g.provider_tokens_set).toEqual({});
  });

  it("host names with an optional port are accepted", async () => {
    const key = await strict.keyFor("ok");
    for (const host of ["gitlab.example.com", "git.example.com:8443", "GitHub.Example.COM"]) {
      const r = await call(strict.url, key, "POST", "/api/settings", {
        secrets_store: { provider_tokens: { gitlab: { token: "glpat-x", host } } },
      });
      expect(r.status, host).toBe(200);
    }
  });

  it("the RPC twins refuse the same hosts with INVALID_ARGUMENT (Connect and gRPC)", async () => {
    const key = await strict.keyFor("rpc");
    const client = connectClient(SettingsService, strict.url, key);
    const host = `http://127.0.0.1:${fake.port}/x`;
    const e1 = await client
      .addGitProviders({ providerTokens: { github: { token: TOKEN, host } } })
      .catch((e: unknown) => e);
    expect(ConnectError.from(e1).code).toBe(Code.InvalidArgument);
    const e2 = await client
      .storeSettings({
        settings: { secretsStore: { providerTokens: { github: { token: TOKEN, host: "localhost" } } } },
      })
      .catch((e: unknown) => e);
    expect(ConnectError.from(e2).code).toBe(Code.InvalidArgument);
    const g = grpcClient(SettingsService, strict.grpcAddress);
    try {
      const e3 = await g
        .unary("AddGitProviders", { providerTokens: { github: { token: TOKEN, host: "10.1.2.3" } } }, key)
        .catch((e: unknown) => e);
      expect((e3 as { code: number }).code).toBe(3); // INVALID_ARGUMENT
    } finally {
      g.raw.close();
    }
    expect(fake.requests.some((r) => r.path.startsWith("/x"))).toBe(false);
  });
});

describe("with GIT_PROVIDER_ALLOWED_HOSTS", () => {
  it("an allowed loopback host is used, and verification follows no redirect", async () => {
    const key = await open.keyFor("alice");
    const ok = await call(open.url, key, "POST", "/api/add-git-providers", {
      provider_tokens: { github: { token: TOKEN, host: fake.host } },
    });
    expect(ok.status).toBe(200);
    fake.set({ redirect: true });
    try {
      const r = await call(open.url, key, "POST", "/api/add-git-providers", {
        provider_tokens: {
          github: { token: TOKEN, host: `127.0.0.1:${fake.port}` },
          gitlab: { token: "x", host: fake.host },
        },
      });
      expect(r.status).toBe(503);
      const info = await call(open.url, key, "GET", "/api/user/info");
      expect(info.status).toBe(503);
      expect((info.body as { error: string }).error).toContain("redirect");
    } finally {
      fake.set({ redirect: false });
    }
    expect(fake.requests.some((q) => q.path.startsWith("/redirected"))).toBe(false);
  });

  it("a name resolving to a loopback or private address is refused unless allowed", async () => {
    const clients = new HttpGitProviderClients({
      hosts: new ProviderHostPolicy(),
      timeoutMs: 500,
      resolve: async (name) => (name === "git.rebind.example" ? ["127.0.0.1"] : ["10.9.8.7"]),
    });
    for (const host of ["git.rebind.example", "other.example"]) {
      const err = await clients
        .client("gitlab", TOKEN, host)
        .getUser()
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(GitProviderError);
      expect((err as GitProviderError).message).toContain("internal address");
      expect((err as GitProviderError).message).not.toContain(TOKEN);
    }
    // Allowed by the operator: the check passes (and the call then goes to the fake).
    const allowed = new HttpGitProviderClients({
      hosts: new ProviderHostPolicy([`http://git.rebind.example:${fake.port}`]),
      timeoutMs: 500,
      resolve: async () => ["127.0.0.1"],
    });
    const err = await allowed
      .client("github", TOKEN, `git.rebind.example:${fake.port}`)
      .getUser()
      .catch((e: unknown) => e);
    // The name does not resolve on this machine's real resolver (fetch uses it): unavailable, not "internal".
    expect((err as GitProviderError).message ?? "").not.toContain("internal address");
  });
});
