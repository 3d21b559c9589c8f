import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProviderHostPolicy } from "../../src/core/provider-host.ts";
import {
  type FakeAccount,
  type FakeGitProvider,
  type FakeKind,
  startFakeGitProvider,
} from "../helpers/fake-git-providers.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

/**
 * Repository listings across provider pages: Octokit's paginator (GitHub Link headers), GitLab's X-Next-Page,
 * Bitbucket's `next` URLs; the 1,000-repository cap per provider; paging links to another host; expired tokens.
 */
const repos = (owner: string, n: number) =>
  Array.from({ length: n }, (_, i) => ({ name: `${owner}/r${String(i + 1).padStart(4, "0")}`, org: true }));
const PROVIDERS: FakeKind[] = ["github", "gitlab", "bitbucket"];
const token = (kind: FakeKind, what: string) => `${kind}_${what}_SECRET`;
const LIST_PATH: Record<FakeKind, string> = {
  github: "/api/v3/user/repos",
  gitlab: "/api/v4/projects",
  bitbucket: "/2.0/repositories",
};

const fakes = {} as Record<FakeKind, FakeGitProvider>;
let t: TestApp;

beforeAll(async () => {
  for (const kind of PROVIDERS) {
    const accounts: FakeAccount[] = [
      { token: token(kind, "some"), login: `${kind}-some`, id: 1, repos: repos("ws", 250) },
      { token: token(kind, "many"), login: `${kind}-many`, id: 2, repos: repos("ws", 1_050) },
      { token: token(kind, "expired"), login: `${kind}-old`, id: 3, repos: repos("ws", 1), expired: true },
      { token: token(kind, "foreign"), login: `${kind}-f`, id: 4, repos: repos("ws", 150) },
    ];
    fakes[kind] = await startFakeGitProvider(kind, accounts);
  }
  const hosts = new ProviderHostPolicy(["http://127.0.0.1"]);
  t = await startTestApp({ git: { hosts, timeoutMs: 3_000, repositoryCacheSeconds: 0 } });
});
afterAll(async () => {
  await t?.close();
  await Promise.all(PROVIDERS.map((k) => fakes[k]?.close()));
});

/** A user holding the `what` token of every provider. */
async function user(what: string): Promise<string> {
  const key = await t.keyFor(what);
  const r = await call(t.url, key, "POST", "/api/settings", {
    secrets_store: {
      provider_tokens: Object.fromEntries(
        PROVIDERS.map((k) => [k, { token: token(k, what), host: (fakes[k] as FakeGitProvider).host }]),
      ),
    },
  });
  expect(r.status).toBe(200);
  return key;
}

const listed = (body: unknown, provider: FakeKind) =>
  (body as { full_name: string; git_provider: string }[]).filter((r) => r.git_provider === provider);
const counts = () =>
  Object.fromEntries(PROVIDERS.map((k) => [k, (fakes[k] as FakeGitProvider).count(LIST_PATH[k])]));

describe("GET /api/user/repositories without a provider: every page of every provider", () => {
  it("250 repositories each: three pages of 100 from each provider, all listed in order", async () => {
    const key = await user("some");
    const before = counts();
    const r = await call(t.url, key, "GET", "/api/user/repositories?sort=pushed");
    expect(r.status, r.text).toBe(200);
    for (const kind of PROVIDERS) {
      const names = listed(r.body, kind).map((x) => x.full_name);
      expect(names, kind).toEqual(repos("ws", 250).map((x) => x.name));
      expect((counts()[kind] ?? 0) - (before[kind] ?? 0), kind).toBe(3);
    }
    // Each provider's own paging: Octokit followed Link headers, GitLab X-Next-Page, Bitbucket `next` URLs.
    const gh = (fakes.github as FakeGitProvider).requests.filter((q) => q.path.startsWith(LIST_PATH.github));
    expect(gh.slice(-3).map((q) => new URL(q.path, "http://x").searchParams.get("page"))).toEqual([
      null,
      "2",
      "3",
    ]);
    const gl = (fakes.gitlab as FakeGitProvider).requests.filter((q) => q.path.startsWith(LIST_PATH.gitlab));
    expect(gl.slice(-3).map((q) => new URL(q.path, "http://x").searchParams.get("page"))).toEqual([
      "1",
      "2",
      "3",
    ]);
    const bb = (fakes.bitbucket as FakeGitProvider).requests.filter((q) =>
      q.path.startsWith(LIST_PATH.bitbucket),
    );
    expect(bb.slice(-3).map((q) => new URL(q.path, "http://x").searchParams.get("page"))).toEqual([
      null,
      "2",
      "3",
    ]);
  });

  it("1,050 repositories each: the listing stops at 1,000 per provider (ten pages), without asking for more", async () => {
    const key = await user("many");
    const before = counts();
    const r = await call(t.url, key, "GET", "/api/user/repositories");
    expect(r.status, r.text).toBe(200);
    for (const kind of PROVIDERS) {
      const names = listed(r.body, kind).map((x) => x.full_name);
      expect(names.length, kind).toBe(1_000);
      expect(names.at(-1), kind).toBe("ws/r1000");
      expect((counts()[kind] ?? 0) - (before[kind] ?? 0), kind).toBe(10);
    }
  });
});

describe("paging links to another host are not followed", () => {
  it("a page's link_header keeps only links on the API's host; the full listing stops at the first page", async () => {
    const key = await user("foreign");
    for (const kind of ["github", "bitbucket"] as const) {
      const fake = fakes[kind] as FakeGitProvider;
      fake.set({ foreignLinks: true });
      try {
        const page = await call(
          t.url,
          key,
          "GET",
          `/api/user/repositories?selected_provider=${kind}&page=1&per_page=50`,
        );
        expect(page.status, page.text).toBe(200);
        const first = (page.body as { link_header: string | null }[])[0];
        expect(first?.link_header ?? null, kind).toBeNull();
        const before = fake.requests.length;
        const all = await call(t.url, key, "GET", "/api/user/repositories");
        expect(all.status, all.text).toBe(200);
        expect(listed(all.body, kind).length, kind).toBe(100);
        expect(fake.requests.length - before, kind).toBe(1);
      } finally {
        fake.set({ foreignLinks: false });
      }
    }
  });
});

describe("expired tokens", () => {
  it("GitLab and Bitbucket (like GitHub): 401 with a JSON string naming the provider", async () => {
    const key = await user("expired");
    for (const [kind, label] of [
      ["gitlab", "GitLab"],
      ["bitbucket", "Bitbucket"],
      ["github", "GitHub"],
    ] as const) {
      const r = await call(
        t.url,
        key,
        "GET",
        `/api/user/repositories?selected_provider=${kind}&page=1&per_page=5`,
      );
      expect(r.status, kind).toBe(401);
      expect(r.body, kind).toBe(`${label} rejected the token (invalid, expired or revoked)`);
    }
    // Every provider rejected its token: the account is 401 too, in the reference's words.
    const info = await call(t.url, key, "GET", "/api/user/info");
    expect([info.status, info.body]).toEqual([401, "Need valid provider token"]);
  });
});
