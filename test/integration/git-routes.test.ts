import { Writable } from "node:stream";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HttpGitProviderVerifier } from "../../src/adapters/git-providers/http-git-provider-verifier.ts";
import { ProviderHostPolicy } from "../../src/core/provider-host.ts";
import { GitService } from "../../src/gen/workspace/v1/git_pb.js";
import { ProviderType } from "../../src/gen/workspace/v1/provider_pb.js";
import {
  type FakeAccount,
  type FakeGitProvider,
  startFakeGitProvider,
} from "../helpers/fake-git-providers.ts";
import { connectClient, grpcClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

const TIMEOUT_MS = 400;
const repos = (owner: string, n: number, extra: Partial<{ org: boolean }> = {}) =>
  Array.from({ length: n }, (_, i) => ({
    name: `${owner}/repo-${i + 1}`,
    private: i % 2 === 0,
    branches: ["main", "dev", "feature-a", "feature-b", "fix-1"],
    ...extra,
  }));

const ALICE_GH = "ghp_alice_SECRET_1";
const BOB_GH = "ghp_bob_SECRET_2";
const ALICE_GL = "glpat_alice_SECRET_3";
const ALICE_BB = "bb_alice_SECRET_4";
const EXPIRED_GH = "ghp_expired_SECRET_5";
const RL_GL = "glpat_rl_SECRET_7";
const TOKENS = [
  ALICE_GH,
  BOB_GH,
  ALICE_GL,
  ALICE_BB,
  EXPIRED_GH,
  "ghp_dave_SECRET_6",
  RL_GL,
  "ghp_erin_SECRET_8",
];

const aliceGh: FakeAccount = {
  token: ALICE_GH,
  login: "alice",
  id: 101,
  repos: [
    ...repos("alice", 5),
    {
      name: "alice/.openhands",
      files: ["microagents/review.md", "microagents/README.md", "microagents/sub/x.md", "notes.txt"],
    },
    { name: "alice/tools", files: [".openhands/microagents/lint.md", ".openhands/microagents/data.json"] },
  ],
  installations: [{ id: 77, repos: ["alice/repo-1", "alice/repo-2"] }],
  protectedBranches: ["main", "fix-1"],
  prs: [
    { repo: "alice/repo-1", number: 12, title: "Fix the parser", conflicts: true },
    { repo: "alice/repo-2", number: 13, title: "Speed up", checks: "FAILURE", reviews: ["COMMENTED"] },
    { repo: "alice/repo-3", number: 14, title: "Docs", checks: "SUCCESS", reviews: ["CHANGES_REQUESTED"] },
    { repo: "alice/repo-4", number: 15, title: "Plain", checks: "SUCCESS", reviews: ["APPROVED"] },
    { repo: "alice/repo-5", number: 16, title: "Pending", checks: "PENDING" },
  ],
  issues: [["alice/repo-2", 7, "Crash on start"]],
};
const bobGh: FakeAccount = { token: BOB_GH, login: "bob", id: 202, repos: repos("bob", 2) };
const daveGh: FakeAccount = { token: "ghp_dave_SECRET_6", login: "dave", id: 404, repos: repos("dave", 1) };
const FRANK_GH = "ghp_frank_SECRET_9";
const frankGh: FakeAccount = {
  token: FRANK_GH,
  login: "frank",
  id: 606,
  orgs: ["acme-corp", "open-tools"],
  repos: [
    { name: "frank/parser-cli" },
    { name: "frank/notes" },
    { name: "acme-corp/parser-lib", org: true },
    { name: "acme-corp/website", org: true },
    { name: "acme-corp/infra", org: true },
    { name: "open-tools/lint", org: true },
    { name: "stranger/parser-x" },
  ],
};
const erinGh: FakeAccount = { token: "ghp_erin_SECRET_8", login: "erin", id: 505, repos: [] };

const expiredGh: FakeAccount = { token: EXPIRED_GH, login: "carol", id: 303, repos: [], expired: true };

let t: TestApp;
let gh: FakeGitProvider;
let gl: FakeGitProvider;
let bb: FakeGitProvider;
let alice: string;
let bob: string;
const logs: string[] = [];

beforeAll(async () => {
  gh = await startFakeGitProvider("github", [aliceGh, bobGh, expiredGh, daveGh, erinGh, frankGh]);
  gl = await startFakeGitProvider("gitlab", [
    {
      token: ALICE_GL,
      login: "alice-gl",
      id: 11,
      repos: [
        { name: "group/sub/proj-a", org: true, branches: ["main", "release", "wip"] },
        { name: "alice-gl/proj-b", private: true },
        { name: "group/proj-c", org: true },
      ],
      prs: [
        { repo: "group/sub/proj-a", number: 3, title: "Add CI", checks: "FAILURE" },
        { repo: "group/sub/proj-a", number: 4, title: "Rebase me", conflicts: true, checks: "FAILURE" },
        { repo: "group/proj-c", number: 5, title: "Review me", checks: "SUCCESS", unresolved: true },
        { repo: "group/proj-c", number: 6, title: "Ready", checks: "SUCCESS" },
      ],
      issues: [["group/proj-c", 9, "Broken link"]],
    },
    { token: RL_GL, login: "rl", id: 12, repos: [{ name: "group/proj-c", org: true }] },
  ]);
  bb = await startFakeGitProvider("bitbucket", [
    {
      token: ALICE_BB,
      login: "alice-bb",
      id: 21,
      workspaces: ["team-ws", "alice-ws"],
      repos: [
        {
          name: "team-ws/service",
          org: true,
          branches: ["main", "develop", "hotfix"],
          files: [".cursorrules", ".openhands/microagents/deploy.md"],
        },
        { name: "alice-ws/notes" },
        { name: "team-ws/web", org: true },
      ],
    },
  ]);
  // The fakes listen on 127.0.0.1: tests allow it explicitly, over plain HTTP.
  const hosts = new ProviderHostPolicy(["http://127.0.0.1"]);
  const sink = new Writable({
    write(chunk, _enc, done) {
      logs.push(String(chunk));
      done();
    },
  });
  t = await startTestApp({
    verifier: new HttpGitProviderVerifier({ timeoutMs: TIMEOUT_MS, hosts }),
    git: { hosts, timeoutMs: TIMEOUT_MS, repositoryCacheSeconds: 60 },
    logger: { level: "debug", stream: sink },
  });
  alice = await t.keyFor("alice");
  bob = await t.keyFor("bob");
  const stored = await api(alice, "POST", "/api/add-git-providers", {
    provider_tokens: {
      github: { token: ALICE_GH, host: gh.host },
      gitlab: { token: ALICE_GL, host: gl.host },
      bitbucket: { token: ALICE_BB, host: bb.host },
    },
  });
  expect(stored.status).toBe(200);
  expect(
    (
      await api(bob, "POST", "/api/add-git-providers", {
        provider_tokens: { github: { token: BOB_GH, host: gh.host } },
      })
    ).status,
  ).toBe(200);
});
afterAll(async () => {
  await t?.close();
  await Promise.all([gh?.close(), gl?.close(), bb?.close()]);
});

const bodies: string[] = [];
async function api(key: string | undefined, method: string, path: string, body?: unknown) {
  const r = await call(t.url, key, method, path, body);
  bodies.push(r.text);
  return r;
}
const get = (key: string, path: string) => api(key, "GET", path);

describe("GET /api/user/info", () => {
  it("answers the first provider's account in the reference's User shape", async () => {
    const r = await get(alice, "/api/user/info");
    expect(r.status).toBe(200);
    expect(r.body).toEqual({
      id: "101",
      login: "alice",
      avatar_url: "https://avatars.example/101",
      company: null,
      name: "alice name",
      email: "alice@example.com",
    });
  });

  it("401 with the reference's JSON string when no token is stored", async () => {
    const key = await t.keyFor("nobody");
    for (const path of [
      "/api/user/info",
      "/api/user/repositories",
      "/api/user/repository/branches?repository=a/b",
    ]) {
      const r = await get(key, path);
      expect(r.status, path).toBe(401);
      expect(r.headers.get("content-type")).toContain("application/json");
      expect(r.text).toBe('"Git provider token required. (such as GitHub)."');
    }
    const tasks = await get(key, "/api/user/suggested-tasks");
    expect([tasks.status, tasks.body]).toEqual([401, "No providers set."]);
  });
});

describe("GET /api/user/repositories", () => {
  it("pages GitHub with the provider's Link header the UI reads the next page from", async () => {
    const p1 = await get(
      alice,
      "/api/user/repositories?selected_provider=github&sort=pushed&page=1&per_page=2",
    );
    expect(p1.status).toBe(200);
    const list = p1.body as Record<string, unknown>[];
    expect(list.map((r) => r.full_name)).toEqual(["alice/repo-1", "alice/repo-2"]);
    expect(list[0]).toMatchObject({
      git_provider: "github",
      is_public: false,
      stargazers_count: 3,
      pushed_at: "2024-05-01T10:00:00Z",
      owner_type: "user",
      main_branch: "main",
    });
    expect(typeof list[0]?.id).toBe("string");
    // The UI's extractNextPageFromLink.
    const next = (link: unknown) =>
      /<[^>]*[?&]page=(\d+)(?:&[^>]*)?>; rel="next"/.exec(String(link))?.[1] ?? null;
    expect(next(list[0]?.link_header)).toBe("2");
    const p3 = (await get(alice, "/api/user/repositories?selected_provider=github&page=3&per_page=2"))
      .body as Record<string, unknown>[];
    expect(p3.map((r) => r.full_name)).toEqual(["alice/repo-5", "alice/.openhands"]);
    const p4 = (await get(alice, "/api/user/repositories?selected_provider=github&page=4&per_page=2"))
      .body as Record<string, unknown>[];
    expect(p4.map((r) => r.full_name)).toEqual(["alice/tools"]);
    expect(next(p4[0]?.link_header)).toBeNull();
  });

  it("GitLab and Bitbucket pages carry a next link too; Bitbucket lists a workspace (installation)", async () => {
    const g = (await get(alice, "/api/user/repositories?selected_provider=gitlab&page=1&per_page=2"))
      .body as Record<string, unknown>[];
    expect(g.map((r) => r.full_name)).toEqual(["group/sub/proj-a", "alice-gl/proj-b"]);
    expect(g[0]).toMatchObject({
      git_provider: "gitlab",
      is_public: true,
      owner_type: "organization",
      stargazers_count: 2,
    });
    expect(String(g[0]?.link_header)).toMatch(/[?&]page=2[^>]*>; rel="next"/);
    const b = await get(
      alice,
      "/api/user/repositories?selected_provider=bitbucket&page=1&per_page=1&installation_id=team-ws",
    );
    const bl = b.body as Record<string, unknown>[];
    expect(bl.map((r) => r.full_name)).toEqual(["team-ws/service"]);
    expect(bl[0]).toMatchObject({
      git_provider: "bitbucket",
      is_public: false,
      owner_type: "organization",
      main_branch: "main",
    });
    expect(String(bl[0]?.link_header)).toMatch(/[?&]page=2[^>]*>; rel="next"/);
  });

  it("without a provider: every provider's repositories, following each provider's paging", async () => {
    const before = gh.count("/api/v3/user/repos");
    const r = await get(alice, "/api/user/repositories?sort=updated");
    expect(r.status, r.text).toBe(200);
    const names = (r.body as { full_name: string }[]).map((x) => x.full_name);
    expect(names).toHaveLength(7 + 3 + 3);
    expect(names).toEqual(expect.arrayContaining(["alice/repo-5", "group/proj-c", "team-ws/web"]));
    expect(gh.count("/api/v3/user/repos") - before).toBe(1); // 5 repos fit one page of 100
  });

  it("422 in FastAPI's shape for bad query values; 422 when a provider is selected without paging", async () => {
    const bad = await get(alice, "/api/user/repositories?selected_provider=gitea");
    expect(bad.status).toBe(422);
    expect((bad.body as { detail: { loc: unknown[] }[] }).detail[0]?.loc).toEqual([
      "query",
      "selected_provider",
    ]);
    expect((await get(alice, "/api/user/repositories?page=abc")).status).toBe(422);
    expect((await get(alice, "/api/user/repositories?selected_provider=github")).status).toBe(422);
    expect((await get(alice, "/api/user/repositories?sort=stars")).status).toBe(422);
  });
});

describe("the per-user repository cache", () => {
  it("repeated listings cost one provider round trip per user; another user's listing is their own", async () => {
    const path = "/api/user/repositories?selected_provider=github&page=1&per_page=5";
    const before = gh.count("/api/v3/user/repos");
    const answers = await Promise.all([get(alice, path), get(alice, path), get(alice, path)]);
    answers.push(await get(alice, path), await get(alice, path));
    for (const a of answers) expect(a.body).toEqual(answers[0]?.body);
    expect(gh.count("/api/v3/user/repos") - before).toBe(1);
    const b = await get(bob, path);
    expect((b.body as { full_name: string }[]).map((x) => x.full_name)).toEqual(["bob/repo-1", "bob/repo-2"]);
    expect(gh.count("/api/v3/user/repos") - before).toBe(2);
  });

  it("a cache of 0 seconds sends every listing to the provider", async () => {
    const hosts = new ProviderHostPolicy(["http://127.0.0.1"]);
    const t2 = await startTestApp({ git: { hosts, timeoutMs: TIMEOUT_MS, repositoryCacheSeconds: 0 } });
    try {
      const k = await t2.keyFor("alice");
      await call(t2.url, k, "POST", "/api/add-git-providers", {
        provider_tokens: { github: { token: ALICE_GH, host: gh.host } },
      });
      const before = gh.count("/api/v3/user/repos");
      for (let i = 0; i < 3; i++)
        expect(
          (await call(t2.url, k, "GET", "/api/user/repositories?selected_provider=github&page=1&per_page=5"))
            .status,
        ).toBe(200);
      expect(gh.count("/api/v3/user/repos") - before).toBe(3);
    } finally {
      await t2.close();
    }
  });
});

describe("installations, branches, search, suggested tasks", () => {
  it("installations: GitHub ids, Bitbucket workspaces, 400 for GitLab", async () => {
    expect((await get(alice, "/api/user/installations?provider=github")).body).toEqual(["77"]);
    expect((await get(alice, "/api/user/installations?provider=bitbucket")).body).toEqual([
      "team-ws",
      "alice-ws",
    ]);
    const g = await get(alice, "/api/user/installations?provider=gitlab");
    expect([g.status, g.body]).toEqual([400, "Provider gitlab doesn't support installations"]);
    expect((await get(alice, "/api/user/installations")).status).toBe(422);
    const inst = (
      await get(
        alice,
        "/api/user/repositories?selected_provider=github&page=1&per_page=30&installation_id=77",
      )
    ).body as { full_name: string }[];
    expect(inst.map((r) => r.full_name)).toEqual(["alice/repo-1", "alice/repo-2"]);
  });

  it("repository/branches pages (PaginatedBranchesResponse) on GitHub, GitLab and Bitbucket", async () => {
    const p1 = await get(alice, "/api/user/repository/branches?repository=alice/repo-1&page=1&per_page=2");
    expect(p1.body).toEqual({
      branches: [
        {
          name: "main",
          commit_sha: expect.stringMatching(/^[0-9a-f]{40}$/),
          protected: true,
          last_push_date: null,
        },
        { name: "dev", commit_sha: expect.any(String), protected: false, last_push_date: null },
      ],
      has_next_page: true,
      current_page: 1,
      per_page: 2,
      total_count: null,
    });
    const p3 = (await get(alice, "/api/user/repository/branches?repository=alice/repo-1&page=3&per_page=2"))
      .body as {
      branches: { name: string }[];
      has_next_page: boolean;
    };
    expect([p3.branches.map((b) => b.name), p3.has_next_page]).toEqual([["fix-1"], false]);
    // Not on GitHub: GitLab has it (nested group path).
    const g = (
      await get(alice, "/api/user/repository/branches?repository=group/sub/proj-a&page=1&per_page=2")
    ).body;
    expect(g).toMatchObject({ has_next_page: true, total_count: 3, current_page: 1, per_page: 2 });
    expect((g as { branches: { last_push_date: string }[] }).branches[0]?.last_push_date).toBe(
      "2024-05-01T10:00:00Z",
    );
    const b = (await get(alice, "/api/user/repository/branches?repository=team-ws/service&page=2&per_page=2"))
      .body;
    expect(b).toMatchObject({ has_next_page: false, total_count: 3, branches: [{ name: "hotfix" }] });
    // Nowhere: the reference's empty page.
    expect((await get(alice, "/api/user/repository/branches?repository=nobody/none")).body).toEqual({
      branches: [],
      has_next_page: false,
      current_page: 1,
      per_page: 30,
      total_count: 0,
    });
    const bad = await get(alice, "/api/user/repository/branches?repository=../../admin");
    expect(bad.status).toBe(422);
  });

  it("search/branches on GitHub: partial names anywhere in the name, protection and head commit date (GraphQL)", async () => {
    const r = await get(
      alice,
      "/api/user/search/branches?repository=alice/repo-1&query=ix&selected_provider=github&per_page=5",
    );
    expect(r.status, r.text).toBe(200);
    expect(r.body).toEqual([
      {
        name: "fix-1",
        commit_sha: expect.stringMatching(/^[0-9a-f]{40}$/),
        protected: true,
        last_push_date: "2024-05-01T10:00:00Z",
      },
    ]);
    const ea = (await get(alice, "/api/user/search/branches?repository=alice/repo-1&query=ea")).body as {
      name: string;
      protected: boolean;
    }[];
    expect(ea).toEqual([
      expect.objectContaining({ name: "feature-a", protected: false }),
      expect.objectContaining({ name: "feature-b", protected: false }),
    ]);
    const sent = gh.requests.filter((q) => q.path === "/api/graphql" && q.body.includes("refs("));
    expect(sent.at(-1)?.body).toContain('"text":"ea"');
    // A repository GitHub does not have (GraphQL NOT_FOUND): no branches, as the reference.
    const none = await get(
      alice,
      "/api/user/search/branches?repository=alice/nope&query=a&selected_provider=github",
    );
    expect([none.status, none.body]).toEqual([200, []]);
  });

  it("search/repositories with a plain name on GitHub: the user's and each organisation's repositories", async () => {
    const key = await t.keyFor("frank");
    await api(key, "POST", "/api/add-git-providers", {
      provider_tokens: { github: { token: FRANK_GH, host: gh.host } },
    });
    const from = gh.requests.length;
    const r = await get(
      key,
      "/api/user/search/repositories?query=parser&selected_provider=github&per_page=10",
    );
    expect(r.status, r.text).toBe(200);
    const names = (r.body as { full_name: string }[]).map((x) => x.full_name).sort();
    expect(names).toEqual(["acme-corp/parser-lib", "frank/parser-cli"]);
    const qs = gh.requests
      .slice(from)
      .filter((q) => q.path.startsWith("/api/v3/search/repositories"))
      .map((q) => new URL(q.path, "http://x").searchParams.get("q"));
    expect(qs.sort()).toEqual(["in:name parser user:frank", "parser org:acme-corp", "parser org:open-tools"]);
    // A query resembling an organisation's name also brings that organisation's two most starred repositories.
    const acme = (await get(key, "/api/user/search/repositories?query=ACME&selected_provider=github"))
      .body as {
      full_name: string;
    }[];
    expect(acme.map((x) => x.full_name)).toEqual(["acme-corp/parser-lib", "acme-corp/website"]);
    const top = gh.requests.at(-1)?.path ?? "";
    expect(new URL(top, "http://x").searchParams.get("q")).toBe("org:acme-corp");
    expect(new URL(top, "http://x").searchParams.get("per_page")).toBe("2");
  });

  it("search/branches and search/repositories", async () => {
    const sr = await get(
      alice,
      "/api/user/search/branches?repository=alice/repo-1&query=feature&selected_provider=github",
    );
    expect(sr.status, sr.text).toBe(200);
    const s = sr.body as { name: string }[];
    expect(s.map((b) => b.name)).toEqual(["feature-a", "feature-b"]);
    const gls = (
      await get(
        alice,
        "/api/user/search/branches?repository=group/sub/proj-a&query=re&selected_provider=gitlab",
      )
    ).body as { name: string }[];
    expect(gls.map((b) => b.name)).toEqual(["release"]);
    const repos = (await get(alice, "/api/user/search/repositories?query=repo-3&selected_provider=github"))
      .body as {
      full_name: string;
    }[];
    expect(repos.map((r) => r.full_name)).toEqual(["alice/repo-3"]);
    expect(
      gh.requests.some((q) => q.path.includes("/search/repositories") && q.path.includes("user%3Aalice")),
    ).toBe(true);
    expect((await get(alice, "/api/user/search/repositories")).status).toBe(422);
  });

  it("suggested tasks: open PRs/MRs classified as the reference does (plain ones left out), assigned issues", async () => {
    const r = await get(alice, "/api/user/suggested-tasks");
    expect(r.status).toBe(200);
    const task = (
      git_provider: string,
      task_type: string,
      repo: string,
      issue_number: number,
      title: string,
    ) => ({
      git_provider,
      task_type,
      repo,
      issue_number,
      title,
    });
    // Bitbucket suggests nothing (as the reference); its API is not even asked.
    expect(r.body).toEqual([
      task("github", "MERGE_CONFLICTS", "alice/repo-1", 12, "Fix the parser"),
      task("github", "FAILING_CHECKS", "alice/repo-2", 13, "Speed up"),
      task("github", "UNRESOLVED_COMMENTS", "alice/repo-3", 14, "Docs"),
      task("github", "OPEN_ISSUE", "alice/repo-2", 7, "Crash on start"),
      task("gitlab", "FAILING_CHECKS", "group/sub/proj-a", 3, "Add CI"),
      task("gitlab", "MERGE_CONFLICTS", "group/sub/proj-a", 4, "Rebase me"),
      task("gitlab", "UNRESOLVED_COMMENTS", "group/proj-c", 5, "Review me"),
      task("gitlab", "OPEN_ISSUE", "group/proj-c", 9, "Broken link"),
    ]);
    // The UI's task types have no OPEN_PR.
    expect(JSON.stringify(r.body)).not.toContain("OPEN_PR");
    // GitHub through GraphQL (the user's login as variable), GitLab's issues with the reference's filter.
    const gql = gh.requests.filter((q) => q.method === "POST" && q.path === "/api/graphql");
    expect(gql.some((q) => q.body.includes("pullRequests(") && q.body.includes('"login":"alice"'))).toBe(
      true,
    );
    expect(
      gl.requests.some(
        (q) => q.path.startsWith("/api/v4/issues?") && q.path.includes("assignee_username=alice-gl"),
      ),
    ).toBe(true);
  });

  it("suggested tasks: GitHub GraphQL's RATE_LIMITED error is a 429 with the reset time", async () => {
    gh.set({ graphqlRateLimited: true });
    try {
      const key = await t.keyFor("tasks-rl");
      await api(key, "POST", "/api/add-git-providers", {
        provider_tokens: { github: { token: "ghp_erin_SECRET_8", host: gh.host } },
      });
      // Both GraphQL queries are refused (200 with errors): the only provider failed, so the limit is answered.
      const r = await get(key, "/api/user/suggested-tasks");
      expect(r.status, r.text).toBe(429);
      expect(Number(r.headers.get("retry-after"))).toBeGreaterThan(0);
    } finally {
      gh.set({ graphqlRateLimited: false });
    }
  });
});

describe("microagents", () => {
  it("lists .cursorrules and the microagent .md files as the reference does, from the provider that has them", async () => {
    const special = await get(alice, "/api/user/repository/alice/.openhands/microagents");
    expect(special.status, special.text).toBe(200);
    expect(special.body).toEqual([
      { name: "review", path: "microagents/review.md", created_at: expect.any(String) },
    ]);
    const tools = (await get(alice, "/api/user/repository/alice/tools/microagents")).body;
    expect(tools).toEqual([
      { name: "lint", path: ".openhands/microagents/lint.md", created_at: expect.any(String) },
    ]);
    const bbs = (await get(alice, "/api/user/repository/team-ws/service/microagents")).body;
    expect(bbs).toEqual([
      { name: "cursorrules", path: ".cursorrules", created_at: expect.any(String) },
      { name: "deploy", path: ".openhands/microagents/deploy.md", created_at: expect.any(String) },
    ]);
    const none = await get(alice, "/api/user/repository/alice/repo-1/microagents");
    expect([none.status, none.body]).toEqual([200, []]);
    const missing = await get(alice, "/api/user/repository/nobody/none/microagents");
    // As the reference: a repository no provider has is an empty list; a rejected token is 401 (see below).
    expect([missing.status, missing.body]).toEqual([200, []]);
  });
});

describe("provider failures", () => {
  it("an expired token: 401 as the reference answers the UI (JSON string)", async () => {
    const key = await t.keyFor("carol");
    // Stored unverified through settings (the token expires later).
    await api(key, "POST", "/api/settings", {
      secrets_store: { provider_tokens: { github: { token: EXPIRED_GH, host: gh.host } } },
    });
    const info = await get(key, "/api/user/info");
    expect([info.status, info.body]).toEqual([401, "Need valid provider token"]);
    const list = await get(key, "/api/user/repositories?selected_provider=github&page=1&per_page=5");
    expect(list.status).toBe(401);
    expect(typeof list.body).toBe("string");
    expect(String(list.body)).toContain("GitHub rejected the token");
    const agents = await get(key, "/api/user/repository/alice/tools/microagents");
    expect([agents.status, agents.body]).toEqual([401, "Unable to fetch microagents for alice/tools"]);
  });

  it("rate limited: 429 with the provider's Retry-After; later calls wait without reaching the provider", async () => {
    const key = await t.keyFor("rl");
    await api(key, "POST", "/api/add-git-providers", {
      provider_tokens: { gitlab: { token: RL_GL, host: gl.host } },
    });
    gl.set({ rateLimited: true });
    try {
      const r = await get(key, "/api/user/info");
      expect(r.status).toBe(429);
      expect(r.headers.get("retry-after")).toBe("30");
      expect((r.body as { error: string }).error).toMatch(/GitLab rate limit/);
      const before = gl.requests.length;
      const again = await get(key, "/api/user/repository/branches?repository=group/proj-c");
      expect(again.status).toBe(429);
      expect(gl.requests.length).toBe(before);
    } finally {
      gl.set({ rateLimited: false });
    }
  });

  it("GitHub's 403 with x-ratelimit-remaining: 0 is a rate limit (429), not a bad token", async () => {
    const key = await t.keyFor("rl-gh");
    await api(key, "POST", "/api/add-git-providers", {
      provider_tokens: { github: { token: daveGh.token, host: gh.host } },
    });
    gh.set({ rateLimited: true });
    try {
      const r = await get(key, "/api/user/repositories?selected_provider=github&page=1&per_page=3");
      expect(r.status).toBe(429);
      expect(Number(r.headers.get("retry-after"))).toBeGreaterThan(0);
    } finally {
      gh.set({ rateLimited: false });
    }
  });

  it("a hanging provider: 503 JSON within the timeout, never 500", async () => {
    const key = await t.keyFor("hang");
    await api(key, "POST", "/api/add-git-providers", {
      provider_tokens: { bitbucket: { token: ALICE_BB, host: bb.host } },
    });
    bb.set({ hang: true });
    try {
      const started = Date.now();
      const r = await get(key, "/api/user/repositories?selected_provider=bitbucket&page=1&per_page=5");
      expect(Date.now() - started).toBeLessThan(TIMEOUT_MS + 1500);
      expect(r.status).toBe(503);
      expect((r.body as { error: string }).error).toMatch(/Bitbucket did not answer within/);
    } finally {
      bb.set({ hang: false });
    }
  });

  it("one provider down while others answer: the listing keeps what answered", async () => {
    gl.set({ hang: true });
    try {
      const r = await get(alice, "/api/user/suggested-tasks");
      expect(r.status).toBe(200);
      expect((r.body as { git_provider: string }[]).every((x) => x.git_provider === "github")).toBe(true);
    } finally {
      gl.set({ hang: false });
    }
  });
});

describe("isolation and secrecy", () => {
  it("a user's calls carry only that user's token", async () => {
    const from = gh.requests.length;
    await get(bob, "/api/user/info");
    await get(bob, "/api/user/repository/branches?repository=alice/repo-1");
    await get(bob, "/api/user/suggested-tasks");
    const sent = gh.requests.slice(from);
    expect(sent.length).toBeGreaterThan(0);
    for (const q of sent) expect(q.auth).toBe(`token ${BOB_GH}`);
    // alice's repository is not bob's: an empty page, not alice's branches.
    expect((await get(bob, "/api/user/repository/branches?repository=alice/repo-1")).body).toMatchObject({
      branches: [],
    });
    expect(((await get(bob, "/api/user/info")).body as { login: string }).login).toBe("bob");
  });

  it("no token appears in any response or log line", () => {
    const all = bodies.join("\n") + logs.join("\n");
    for (const token of TOKENS) expect(all).not.toContain(token);
    expect(logs.length).toBeGreaterThan(0);
  });
});

describe("GitService over Connect and gRPC", () => {
  it("answers the same repositories as REST, and the same errors", async () => {
    const rest = (await get(alice, "/api/user/repositories?selected_provider=gitlab&page=1&per_page=10"))
      .body as {
      full_name: string;
    }[];
    const connect = connectClient(GitService, t.url, alice);
    const c = await connect.listRepositories({ selectedProvider: ProviderType.GITLAB, page: 1, perPage: 10 });
    expect(c.repositories.map((r) => r.fullName)).toEqual(rest.map((r) => r.full_name));
    const grpc = grpcClient(GitService, t.grpcAddress);
    try {
      const g = await grpc.unary<{ repositories: { fullName?: string; full_name?: string }[] }>(
        "ListBranches",
        { repository: "alice/repo-1", page: 1, perPage: 2 },
        alice,
      );
      expect(g).toBeDefined();
      const u = await connect.getUserInfo({});
      expect(u.user?.login).toBe("alice");
      const none = connectClient(GitService, t.url, await t.keyFor("nobody-rpc"));
      await expect(none.getUserInfo({})).rejects.toMatchObject({ code: Code.Unauthenticated });
      const err = await connect.listInstallations({ provider: ProviderType.GITLAB }).catch((e: unknown) => e);
      expect(ConnectError.from(err).code).toBe(Code.InvalidArgument);
    } finally {
      grpc.raw.close();
    }
  });
});

describe("malformed queries", () => {
  it("every git route answers bad query values with a JSON 4xx, never a 5xx", async () => {
    const values = [
      "",
      "%00",
      "abc",
      "-1",
      "0",
      "999999999999",
      "1.5",
      "../..",
      "a/b/../c",
      "\u{1F600}",
      "x".repeat(3000),
    ];
    const paths = (v: string) => {
      const e = encodeURIComponent(v);
      return [
        `/api/user/installations?provider=${e}`,
        `/api/user/repositories?selected_provider=github&page=${e}&per_page=${e}`,
        `/api/user/repositories?sort=${e}&installation_id=${e}`,
        `/api/user/repositories?selected_provider=github&page=1&per_page=5&installation_id=${e}`,
        `/api/user/search/repositories?query=${e}&per_page=${e}&order=${e}`,
        `/api/user/search/branches?repository=${e}&query=${e}`,
        `/api/user/repository/branches?repository=${e}&page=${e}`,
      ];
    };
    let checked = 0;
    for (const v of values) {
      for (const p of paths(v)) {
        const r = await get(alice, p);
        expect(r.status, `${p} → ${r.text.slice(0, 200)}`).toBeLessThan(500);
        expect(r.headers.get("content-type"), p).toContain("application/json");
        JSON.parse(r.text);
        checked++;
      }
    }
    expect(checked).toBe(values.length * 7);
  });
});
