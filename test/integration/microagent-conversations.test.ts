// GET /api/microagent-management/conversations, as the UI's microagent management page calls it
// (MicroagentManagementService.getMicroagentManagementConversations: axios params {limit: 100,
// selected_repository}): the caller's conversations with trigger microagent_management of exactly that repository,
// newest first, without those whose last pull request the provider reports closed or merged.

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProviderHostPolicy } from "../../src/core/provider-host.ts";
import { AppConversationService } from "../../src/gen/workspace/v1/app_conversation_pb.js";
import type { ConversationRecord } from "../../src/ports/conversation-repository.ts";
import { conversationRecord } from "../helpers/conversation-fixtures.ts";
import { type FakeGitProvider, startFakeGitProvider } from "../helpers/fake-git-providers.ts";
import { connectClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

const ALICE_GH = "ghp_alice_microagents";
const BOB_GH = "ghp_bob_microagents";
const ALICE_GL = "glpat_alice_microagents";
const ALICE_BB = "bb_alice_microagents";
const PATH = "/api/microagent-management/conversations";

let t: TestApp;
let gh: FakeGitProvider;
let gl: FakeGitProvider;
let bb: FakeGitProvider;
let alice: string;
let bob: string;
const base = Date.parse("2025-11-28T10:00:00Z");

function conversation(
  ownerId: string,
  minute: number,
  over: Partial<ConversationRecord> = {},
): ConversationRecord {
  return conversationRecord({
    ownerId,
    selectedRepository: "alice/app",
    selectedBranch: "main",
    gitProvider: "github",
    title: `Microagent ${minute}`,
    trigger: "microagent_management",
    createdAt: new Date(base + minute * 60_000),
    ...over,
  });
}

// alice/app, oldest first.
const openPr = conversation("alice", 1, { prNumber: [5] });
const mergedLast = conversation("alice", 2, { prNumber: [3, 6] }); // #3 is open, but the last one counts
const noPr = conversation("alice", 3);
const noProvider = conversation("alice", 4, { gitProvider: null, prNumber: [9] });
const unknownPr = conversation("alice", 5, { prNumber: [404] }); // the provider does not know it: kept
const closedPr = conversation("alice", 6, { prNumber: [7] });
const gui = conversation("alice", 7, { trigger: "gui" });
const otherRepo = conversation("alice", 8, { selectedRepository: "alice/other" });
const sub = conversation("alice", 9, { parentConversationId: openPr.id });
const bobs = conversation("bob", 10, { prNumber: [5] });
// Merged on GitLab, but bob has no GitLab token: the state cannot be told, so it is kept.
const bobGl = conversation("bob", 15, {
  selectedRepository: "group/proj",
  gitProvider: "gitlab",
  prNumber: [2],
});
// GitLab and Bitbucket repositories.
const glMerged = conversation("alice", 11, {
  selectedRepository: "group/proj",
  gitProvider: "gitlab",
  prNumber: [2],
});
const glOpen = conversation("alice", 12, {
  selectedRepository: "group/proj",
  gitProvider: "gitlab",
  prNumber: [3],
});
const bbDeclined = conversation("alice", 13, {
  selectedRepository: "team-ws/service",
  gitProvider: "bitbucket",
  prNumber: [4],
});
const bbOpen = conversation("alice", 14, {
  selectedRepository: "team-ws/service",
  gitProvider: "bitbucket",
  prNumber: [8],
});

beforeAll(async () => {
  const pullRequests = {
    "alice/app#5": "open",
    "alice/app#3": "open",
    "alice/app#6": "merged",
    "alice/app#7": "closed",
  };
  gh = await startFakeGitProvider("github", [
    { token: ALICE_GH, login: "alice", id: 1, repos: [{ name: "alice/app" }], pullRequests },
    { token: BOB_GH, login: "bob", id: 2, repos: [{ name: "alice/app" }], pullRequests },
  ]);
  gl = await startFakeGitProvider("gitlab", [
    {
      token: ALICE_GL,
      login: "alice-gl",
      id: 3,
      repos: [{ name: "group/proj" }],
      pullRequests: { "group/proj#2": "merged", "group/proj#3": "opened" },
    },
  ]);
  bb = await startFakeGitProvider("bitbucket", [
    {
      token: ALICE_BB,
      login: "alice-bb",
      id: 4,
      repos: [{ name: "team-ws/service" }],
      pullRequests: { "team-ws/service#4": "DECLINED", "team-ws/service#8": "OPEN" },
    },
  ]);
  const hosts = new ProviderHostPolicy(["http://127.0.0.1"]);
  t = await startTestApp({ git: { hosts, timeoutMs: 2000, repositoryCacheSeconds: 0 } });
  alice = await t.keyFor("alice");
  bob = await t.keyFor("bob");
  const stored = await call(t.url, alice, "POST", "/api/add-git-providers", {
    provider_tokens: {
      github: { token: ALICE_GH, host: gh.host },
      gitlab: { token: ALICE_GL, host: gl.host },
      bitbucket: { token: ALICE_BB, host: bb.host },
    },
  });
  expect(stored.status).toBe(200);
  await call(t.url, bob, "POST", "/api/add-git-providers", {
    provider_tokens: { github: { token: BOB_GH, host: gh.host } },
  });
  for (const c of [
    openPr,
    mergedLast,
    noPr,
    noProvider,
    unknownPr,
    closedPr,
    gui,
    otherRepo,
    sub,
    bobs,
    bobGl,
    glMerged,
    glOpen,
    bbDeclined,
    bbOpen,
  ])
    await t.storage.conversations.insert(c);
});
afterAll(async () => {
  await t?.close();
  await Promise.all([gh?.close(), gl?.close(), bb?.close()]);
});

interface ResultSet {
  results: {
    conversation_id: string;
    title: string;
    status: string;
    conversation_version: string;
    pr_number: number[];
    selected_repository: string | null;
    trigger: string | null;
  }[];
  next_page_id: string | null;
}

/** The UI's call: axios params {limit, selected_repository} (and page_id when paging). */
const list = (key: string, repo: string, extra = "") =>
  call(t.url, key, "GET", `${PATH}?limit=100&selected_repository=${encodeURIComponent(repo)}${extra}`);

describe("GET /api/microagent-management/conversations", () => {
  it("answers the caller's microagent conversations of the repository, newest first, without closed PRs", async () => {
    const r = await list(alice, "alice/app");
    expect(r.status).toBe(200);
    const body = r.body as ResultSet;
    expect(Object.keys(body).sort()).toEqual(["next_page_id", "results"]);
    expect(body.results.map((c) => c.conversation_id)).toEqual([
      unknownPr.id,
      noProvider.id,
      noPr.id,
      openPr.id,
    ]);
    expect(body.next_page_id).toBeNull();
    const first = body.results[0];
    // The legacy ConversationInfo the page's cards read.
    expect(first).toMatchObject({
      title: unknownPr.title,
      selected_repository: "alice/app",
      trigger: "microagent_management",
      pr_number: [404],
      conversation_version: "V1",
      status: "ARCHIVED", // its sandbox is gone
    });
    // The PR states were asked with alice's own token, only where a conversation names repository, provider and PR.
    const asked = gh.requests.filter((q) => q.path.includes("/pulls/"));
    expect(asked.map((q) => q.path).sort()).toEqual([
      "/api/v3/repos/alice/app/pulls/404",
      "/api/v3/repos/alice/app/pulls/5",
      "/api/v3/repos/alice/app/pulls/6",
      "/api/v3/repos/alice/app/pulls/7",
    ]);
    expect(new Set(asked.map((q) => q.auth))).toEqual(new Set([`token ${ALICE_GH}`]));
  });

  it("checks merge requests on GitLab and pull requests on Bitbucket with their own state words", async () => {
    expect(
      ((await list(alice, "group/proj")).body as ResultSet).results.map((c) => c.conversation_id),
    ).toEqual([glOpen.id]);
    expect(
      ((await list(alice, "team-ws/service")).body as ResultSet).results.map((c) => c.conversation_id),
    ).toEqual([bbOpen.id]);
  });

  it("is owner-scoped: bob sees only his own; a PR on a provider he has no token for is kept", async () => {
    const r = await list(bob, "alice/app");
    expect((r.body as ResultSet).results.map((c) => c.conversation_id)).toEqual([bobs.id]);
    const gitlabRequests = gl.requests.length;
    expect(((await list(bob, "group/proj")).body as ResultSet).results.map((c) => c.conversation_id)).toEqual(
      [bobGl.id],
    );
    expect(gl.requests.length).toBe(gitlabRequests);
  });

  it("pages over the matching conversations; closed PRs are left out of each page (pages may be short)", async () => {
    const seen: string[][] = [];
    let pageId: string | null = null;
    do {
      const extra: string = pageId === null ? "" : `&page_id=${encodeURIComponent(pageId)}`;
      const r = await call(t.url, alice, "GET", `${PATH}?limit=2&selected_repository=alice%2Fapp${extra}`);
      expect(r.status).toBe(200);
      const body = r.body as ResultSet;
      seen.push(body.results.map((c) => c.conversation_id));
      pageId = body.next_page_id;
    } while (pageId !== null && seen.length < 10);
    // Newest first in storage: [closed, unknown], [noProvider, noPr], [mergedLast, openPr].
    expect(seen).toEqual([[unknownPr.id], [noProvider.id, noPr.id], [openPr.id]]);
  });

  it("answers 422 for a missing repository and bad paging, 401 without a key, and stores nothing", async () => {
    const missing = await call(t.url, alice, "GET", `${PATH}?limit=100`);
    expect(missing.status).toBe(422);
    expect((missing.body as { detail: unknown[] }).detail).toEqual([
      expect.objectContaining({ type: "missing", loc: ["query", "selected_repository"] }),
    ]);
    const empty = await call(t.url, alice, "GET", `${PATH}?selected_repository=`);
    expect(empty.status).toBe(422);
    for (const [query, loc, type] of [
      ["limit=0", "limit", "greater_than_equal"],
      ["limit=101", "limit", "less_than_equal"],
      ["limit=ten", "limit", "int_parsing"],
      ["page_id=forged", "page_id", "value_error"],
    ] as const) {
      const r = await call(t.url, alice, "GET", `${PATH}?selected_repository=alice%2Fapp&${query}`);
      expect(r.status, query).toBe(422);
      expect((r.body as { detail: { loc: unknown[]; type: string }[] }).detail[0]).toMatchObject({
        loc: ["query", loc],
        type,
      });
    }
    // A page_id of another repository's listing is not accepted for this one.
    const other = (await call(t.url, alice, "GET", `${PATH}?limit=1&selected_repository=team-ws%2Fservice`))
      .body as ResultSet;
    expect(other.next_page_id).not.toBeNull();
    const crossed = await call(
      t.url,
      alice,
      "GET",
      `${PATH}?selected_repository=alice%2Fapp&page_id=${encodeURIComponent(other.next_page_id ?? "")}`,
    );
    expect(crossed.status).toBe(422);
    const anonymous = await call(t.url, undefined, "GET", `${PATH}?selected_repository=alice%2Fapp`);
    expect(anonymous.status).toBe(401);
    expect(anonymous.body).toEqual({ detail: "Unauthorized" });
    expect(await t.storage.conversations.count("alice", { includeSubConversations: true })).toBe(13);
    expect(await t.storage.conversations.count("bob", { includeSubConversations: true })).toBe(2);
  });

  it("is an RPC too (Connect), with the same filter", async () => {
    const client = connectClient(AppConversationService, t.url, alice);
    const r = await client.searchMicroagentConversations({ selectedRepository: "alice/app", limit: 100 });
    expect(r.items.map((c) => c.id)).toEqual([unknownPr.id, noProvider.id, noPr.id, openPr.id]);
  });
});
