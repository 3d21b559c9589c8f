// The OpenHands UI's home screen on a server with LOCAL_REPOSITORY_ROOTS, replayed call by call as the UI makes them
// (a browser signed in with the session cookie, the UI's query strings): without a git provider token the settings
// offer the picker (provider `enterprise_sso`), the listing and the search find the local repositories, the branch
// dropdown lists and searches their branches, Launch starts the conversation on the branch picked; the
// conversation names the repository `@local/<folder>`, so that the Changes tab's folder (the UI's getGitPath) holds
// the clone and an edit shows up with its diff, asked of the agent through the service with the sandbox's key.
// With a token whose provider is unreachable, the search still finds the local repositories.
import { execFileSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime.ts";
import type { ProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime-types.ts";
import { ProviderHostPolicy } from "../../src/core/provider-host.ts";
import { createRepository, type Task } from "../helpers/app-conversations.ts";
import { Browser } from "../helpers/browser.ts";
import { startTestApp, type TestApp } from "../helpers/test-app.ts";

/** The UI's getGitPath (frontend/src/utils/get-git-path.ts): the folder it asks the Changes of. */
function uiGitPath(selectedRepository: string | null): string {
  if (!selectedRepository) return "/workspace/project";
  const parts = selectedRepository.split("/");
  return `/workspace/project/${parts.length > 1 ? parts[1] : parts[0]}`;
}

async function until<T>(f: () => Promise<T>, ok: (v: T) => boolean, ms = 30_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (ok(v)) return v;
    if (Date.now() > deadline) throw new Error(`timed out: ${JSON.stringify(v).slice(0, 800)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("UI replay: local repositories from the home screen", () => {
  let root: string;
  let repos: string;
  let runtime: ProcessRuntime;
  let t: TestApp;
  let b: Browser;
  let conversationId = "";

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), "aws-ui-local-"));
    chmodSync(root, 0o755);
    repos = join(root, "repos");
    mkdirSync(repos, { mode: 0o755 });
    // project.git (bare) and work (its working copy) from the helper, and demo: a repository with a working tree
    // and a second local branch, as people keep them.
    const bare = createRepository(repos);
    execFileSync("git", ["clone", "-q", bare, join(repos, "demo")]);
    execFileSync("git", ["-C", join(repos, "demo"), "branch", "-q", "feature", "origin/feature"]);
    const workspaceRoot = join(root, "sandboxes");
    runtime = createProcessRuntime({ workspaceRoot, readOnlyPaths: [repos], warmAgents: 0 });
    if (runtime.isolation.singleUser)
      runtime = createProcessRuntime({ workspaceRoot, isolation: "none", warmAgents: 0 });
    t = await startTestApp({
      runtime,
      conversations: { localRepositoryRoots: [repos] },
      llmModel: "openai/test-model",
      // Loopback provider hosts must be allowed by the operator; port 9 answers nothing.
      git: { hosts: new ProviderHostPolicy(["127.0.0.1"]), timeoutMs: 2000 },
    });
    b = new Browser(t.url);
    await b.signIn(await t.keyFor("lena"));
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await runtime?.killAll();
    rmSync(root, { recursive: true, force: true });
  });

  it("without a token: the picker is offered, lists and finds the local repositories, picks a branch and launches", async () => {
    // useUserProviders: the picker shows only for a provider in PROVIDER_TOKENS_SET.
    const settings = await b.request("GET", "/api/settings");
    expect(settings.status).toBe(200);
    expect((settings.body as { provider_tokens_set: unknown }).provider_tokens_set).toEqual({
      enterprise_sso: null,
    });
    // With a provider the sidebar asks for the git user and the home screen for suggested tasks: no error toasts.
    expect(await b.request("GET", "/api/user/info")).toMatchObject({
      status: 200,
      body: { id: "lena", login: "lena", avatar_url: "", company: null, name: null, email: null },
    });
    expect(await b.request("GET", "/api/user/suggested-tasks")).toMatchObject({ status: 200, body: [] });

    // GitRepoDropdown → useGitRepositories: the provider's first page, sorted by push.
    const listed = await b.request(
      "GET",
      "/api/user/repositories?selected_provider=enterprise_sso&sort=pushed&page=1&per_page=30",
    );
    expect(listed.status, listed.text).toBe(200);
    const entry = (name: string) => ({
      id: name,
      full_name: name,
      git_provider: "enterprise_sso",
      is_public: false,
      stargazers_count: null,
      link_header: null,
      pushed_at: null,
      owner_type: "user",
      main_branch: "main",
    });
    expect(listed.body).toEqual([entry("@local/demo"), entry("@local/project"), entry("@local/work")]);

    // Typing "dem" (debounced): useSearchRepositories, 100 a page, the selected provider.
    const found = await b.request(
      "GET",
      "/api/user/search/repositories?query=dem&per_page=100&selected_provider=enterprise_sso",
    );
    expect(found).toMatchObject({ status: 200, body: [entry("@local/demo")] });

    // Picked: GitBranchDropdown → useRepositoryBranchesPaginated, then the default branch (main_branch) selected.
    const branches = await b.request(
      "GET",
      `/api/user/repository/branches?repository=${encodeURIComponent("@local/demo")}&page=1&per_page=30`,
    );
    expect(branches.status, branches.text).toBe(200);
    expect(branches.body).toMatchObject({
      branches: [
        { name: "feature", commit_sha: expect.stringMatching(/^[0-9a-f]{40}$/), protected: false },
        { name: "main", commit_sha: expect.stringMatching(/^[0-9a-f]{40}$/), protected: false },
      ],
      has_next_page: false,
      current_page: 1,
      per_page: 30,
      total_count: 2,
    });
    expect((branches.body as { branches: { last_push_date: string }[] }).branches[0]?.last_push_date).toMatch(
      /^\d{4}-\d\d-\d\dT/,
    );
    // Typing "feat" in the branch field: useSearchBranches.
    const feature = await b.request(
      "GET",
      `/api/user/search/branches?repository=${encodeURIComponent("@local/demo")}&query=feat&per_page=30&selected_provider=enterprise_sso`,
    );
    expect(feature).toMatchObject({ status: 200, body: [{ name: "feature", protected: false }] });

    // Launch (useCreateConversation, the V1 flag off: the legacy create with the picked repository and branch).
    const created = await b.request("POST", "/api/conversations", {
      repository: "@local/demo",
      git_provider: "enterprise_sso",
      selected_branch: "feature",
    });
    expect(created.status, created.text).toBe(200);
    conversationId = (created.body as { conversation_id: string }).conversation_id;
    const c = await until(
      async () =>
        (await b.request("GET", `/api/conversations/${conversationId}`)).body as Record<string, unknown>,
      (x) => x.status !== "STARTING",
    );
    // The chips (repo and branch, shown with a provider) and the conversation card.
    expect(c).toMatchObject({
      status: "RUNNING",
      selected_repository: "@local/demo",
      selected_branch: "feature",
      git_provider: "enterprise_sso",
    });
  }, 60_000);

  it("the Changes tab of that conversation: the folder the UI derives holds the clone, on the branch picked", async () => {
    const c = (await b.request("GET", `/api/conversations/${conversationId}`)).body as {
      selected_repository: string;
      session_api_key: string;
    };
    const agent = (method: string, path: string, body?: unknown) =>
      b.request(method, path, body, { "x-session-api-key": c.session_api_key });
    const folder = uiGitPath(c.selected_repository);
    expect(folder).toBe("/workspace/project/demo");
    expect(await agent("GET", `/api/git/changes/${encodeURIComponent(folder)}`)).toMatchObject({
      status: 200,
      body: [],
    });
    const edit = await agent("POST", "/api/bash/execute_bash_command", {
      command: "cd demo && git rev-parse --abbrev-ref HEAD && echo more >> README.md",
    });
    expect(edit.body).toMatchObject({ exit_code: 0, stdout: "feature\n" });
    expect(await agent("GET", `/api/git/changes/${encodeURIComponent(folder)}`)).toMatchObject({
      status: 200,
      body: [{ status: "UPDATED", path: "README.md" }],
    });
    expect(await agent("GET", `/api/git/diff/${encodeURIComponent(`${folder}/README.md`)}`)).toMatchObject({
      status: 200,
      body: { modified: "# project\nmore\n", original: "# project\n" },
    });
  }, 60_000);

  it("a conversation started by the repository's path carries its name too, and its Changes find the clone", async () => {
    const r = await b.request("POST", "/api/v1/app-conversations", {
      selected_repository: join(repos, "demo"),
    });
    expect(r.status, r.text).toBe(200);
    const task = await until(
      async () =>
        (
          (await b.request("GET", `/api/v1/app-conversations/start-tasks?ids=${(r.body as Task).id}`))
            .body as Task[]
        )[0],
      (x) => x?.status === "READY" || x?.status === "ERROR",
    );
    expect(task?.status, task?.detail ?? "").toBe("READY");
    const [conversation] = (
      await b.request("GET", `/api/v1/app-conversations?ids=${task?.app_conversation_id}`)
    ).body as { selected_repository: string; git_provider: string; session_api_key: string }[];
    expect(conversation).toMatchObject({
      selected_repository: "@local/demo",
      git_provider: "enterprise_sso",
    });
    const key = { "x-session-api-key": conversation?.session_api_key ?? "" };
    const folder = uiGitPath(conversation?.selected_repository ?? null);
    await b.request(
      "POST",
      "/api/bash/execute_bash_command",
      { command: "cd demo && touch new-file.txt" },
      key,
    );
    // (The setup script of main ran there too: its output file and the scripts it made executable show as well.)
    const changes = await b.request("GET", `/api/git/changes/${encodeURIComponent(folder)}`, undefined, key);
    expect(changes.status).toBe(200);
    expect(changes.body).toEqual(expect.arrayContaining([{ status: "ADDED", path: "new-file.txt" }]));
  }, 60_000);

  it("with a token whose provider does not answer, the search and the first page still offer the local repositories", async () => {
    const m = new Browser(t.url);
    await m.signIn(await t.keyFor("max"));
    const stored = await m.request("POST", "/api/add-git-providers", {
      provider_tokens: { github: { token: "ghp_unreachable", host: "127.0.0.1:9" } },
    });
    expect(stored.status, stored.text).toBe(200);
    // A user with a token sees that provider only (no second provider to choose).
    expect(
      ((await m.request("GET", "/api/settings")).body as { provider_tokens_set: unknown })
        .provider_tokens_set,
    ).toEqual({ github: "127.0.0.1:9" });
    const found = await m.request(
      "GET",
      "/api/user/search/repositories?query=demo&per_page=100&selected_provider=github",
    );
    expect(found).toMatchObject({
      status: 200,
      body: [{ full_name: "@local/demo", git_provider: "enterprise_sso" }],
    });
    const listed = await m.request(
      "GET",
      "/api/user/repositories?selected_provider=github&sort=pushed&page=1&per_page=30",
    );
    expect(listed.status).toBe(200);
    expect((listed.body as { full_name: string }[]).map((r) => r.full_name)).toEqual([
      "@local/demo",
      "@local/project",
      "@local/work",
    ]);
    const branches = await m.request(
      "GET",
      `/api/user/search/branches?repository=${encodeURIComponent("@local/demo")}&query=ma&per_page=30&selected_provider=github`,
    );
    expect(branches).toMatchObject({ status: 200, body: [{ name: "main" }] });
  }, 60_000);
});
