import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code } from "@connectrpc/connect";
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newHexId } from "../../src/core/ids.ts";
import {
  AppConversationService,
  AppConversationStartTaskStatus,
  type StreamStartAppConversationResponse,
} from "../../src/gen/workspace/v1/app_conversation_pb.js";
import type { ConversationRecord, StartTaskRecord } from "../../src/ports/conversation-repository.ts";
import { createProcessRuntime, type ProcessRuntime } from "../../src/sandbox/process/process-runtime.ts";
import { defaultSpecs } from "../../src/server/sandbox-specs.ts";
import { INTERRUPTED_DETAIL } from "../../src/services/conversations/app-conversation-service.ts";
import { ProviderHostPolicy } from "../../src/services/git/provider-host.ts";
import { connectClient, grpcClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

interface Task {
  id: string;
  created_by_user_id: string;
  status: string;
  detail: string | null;
  app_conversation_id: string | null;
  sandbox_id: string | null;
  agent_server_url: string | null;
  request: Record<string, unknown>;
  created_at: string;
  updated_at: string;
}

interface Conversation {
  id: string;
  created_by_user_id: string;
  sandbox_id: string;
  selected_repository: string | null;
  selected_branch: string | null;
  git_provider: string | null;
  title: string;
  trigger: string | null;
  pr_number: number[];
  llm_model: string | null;
  metrics: unknown;
  parent_conversation_id: string | null;
  sub_conversation_ids: string[];
  created_at: string;
  updated_at: string;
  sandbox_status: string;
  execution_status: string | null;
  conversation_url: string | null;
  session_api_key: string | null;
}

interface Page<T> {
  items: T[];
  next_page_id: string | null;
}

let t: TestApp;
let gitDir: string;
let bare: string;
let runtime: ProcessRuntime;
let runtimeDir: string;
const api = (key: string | undefined, method: string, path: string, body?: unknown) =>
  call(t.url, key, method, path, body);

const git = (cwd: string, ...args: string[]) =>
  execFileSync("git", ["-c", "user.name=Test", "-c", "user.email=test@example.com", ...args], {
    cwd,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
  });

/** A bare repository with branches: main (setup + pre-commit scripts), feature, broken (failing setup), slow. */
function createRepository(root: string): string {
  const work = join(root, "work");
  const bareDir = join(root, "project.git");
  mkdirSync(work);
  git(root, "init", "-q", "--bare", "-b", "main", bareDir);
  git(work, "init", "-q", "-b", "main");
  writeFileSync(join(work, "README.md"), "# project\n");
  git(work, "add", ".");
  git(work, "commit", "-q", "-m", "initial");
  const onBranch = (branch: string, files: Record<string, string>) => {
    git(work, "checkout", "-q", "-b", branch, "main");
    for (const [name, content] of Object.entries(files)) {
      mkdirSync(join(work, name, ".."), { recursive: true });
      writeFileSync(join(work, name), content);
    }
    git(work, "add", ".");
    git(work, "commit", "-q", "-m", branch);
  };
  onBranch("feature", { "feature.txt": "feature work\n" });
  onBranch("broken", {
    ".openhands/setup.sh": '#!/bin/bash\necho "installing deps"\necho "npm ERR! boom" >&2\nexit 3\n',
  });
  onBranch("slow", { ".openhands/setup.sh": "#!/bin/bash\nsleep 30\n" });
  git(work, "checkout", "-q", "main");
  mkdirSync(join(work, ".openhands"));
  writeFileSync(
    join(work, ".openhands/setup.sh"),
    '#!/bin/bash\necho "setting up"\necho ok > setup-ran.txt\n',
  );
  writeFileSync(
    join(work, ".openhands/pre-commit.sh"),
    '#!/bin/bash\nif [ -f forbidden.txt ]; then echo "forbidden.txt must not be committed" >&2; exit 1; fi\n',
  );
  git(work, "add", ".");
  git(work, "commit", "-q", "-m", "openhands scripts");
  git(work, "remote", "add", "origin", bareDir);
  git(work, "push", "-q", "origin", "main", "feature", "broken", "slow");
  return bareDir;
}

/** Polls the start task until READY or ERROR. */
async function settle(key: string, id: string, ms = 20_000, app: TestApp = t): Promise<Task> {
  const deadline = Date.now() + ms;
  for (;;) {
    const r = await call(app.url, key, "GET", `/api/v1/app-conversations/start-tasks?ids=${id}`);
    const task = (r.body as (Task | null)[])[0];
    if (task && (task.status === "READY" || task.status === "ERROR")) return task;
    if (Date.now() > deadline) throw new Error(`task ${id} not settled: ${JSON.stringify(task)}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

async function start(key: string, body: unknown = {}): Promise<Task> {
  const r = await api(key, "POST", "/api/v1/app-conversations", body);
  expect(r.status, r.text).toBe(200);
  return r.body as Task;
}

async function startReady(
  key: string,
  body: unknown = {},
): Promise<{ task: Task; conversation: Conversation }> {
  const task = await settle(key, (await start(key, body)).id);
  expect(task.status, task.detail ?? "").toBe("READY");
  const conversation = await getConversation(key, task.app_conversation_id ?? "");
  if (conversation === null) throw new Error("conversation missing");
  return { task, conversation };
}

async function getConversation(key: string, id: string): Promise<Conversation | null> {
  const r = await api(key, "GET", `/api/v1/app-conversations?ids=${id}`);
  expect(r.status, r.text).toBe(200);
  return (r.body as (Conversation | null)[])[0] ?? null;
}

/** Runs a command in the conversation's sandbox through its agent (what the UI does with conversation_url). */
async function sh(c: Conversation, command: string, cwd?: string) {
  const base = (c.conversation_url ?? "").replace(/\/api\/conversations\/.*$/, "");
  const res = await fetch(`${base}/api/bash/execute_bash_command`, {
    method: "POST",
    headers: { "x-session-api-key": c.session_api_key ?? "", "content-type": "application/json" },
    body: JSON.stringify({ command, ...(cwd ? { cwd } : {}) }),
  });
  return (await res.json()) as { exit_code: number; stdout: string; stderr: string };
}

/** A sandbox spec whose "agent" answers /alive but never answers anything else (a hung agent). */
const HUNG_AGENT = [
  process.execPath,
  "-e",
  `require("node:http").createServer((q, s) => { if (q.url === "/alive" || q.url === "/health") { s.setHeader("content-type", "application/json"); s.end('{"status":"ok"}'); } }).listen(Number(process.env.PORT), "127.0.0.1")`,
];

beforeAll(async () => {
  gitDir = mkdtempSync(join(tmpdir(), "aws-git-"));
  bare = createRepository(gitDir);
  // These tests clone a repository of this machine's file system, owned by this test's user. Isolated sandboxes
  // see no host folder and run as their own uids (git refuses another user's repository), so this suite runs its
  // sandboxes unisolated; test/e2e/sandbox-isolation.test.ts covers isolation.
  runtimeDir = mkdtempSync(join(tmpdir(), "aws-conv-"));
  runtime = createProcessRuntime({ workspaceRoot: join(runtimeDir, "sandboxes"), isolation: "none" });
  t = await startTestApp({
    runtime,
    specs: [
      ...defaultSpecs({ kind: "process" }, new Date()),
      { id: "hung-agent", command: HUNG_AGENT, initialEnv: {}, workingDir: "", createdAt: new Date() },
    ],
    // A provider host on loopback (an unreachable port) must be allowed by the operator.
    git: { hosts: new ProviderHostPolicy(["127.0.0.1"]) },
  });
});
afterAll(async () => {
  await t?.close();
  await runtime?.killAll();
  rmSync(gitDir, { recursive: true, force: true });
  rmSync(runtimeDir, { recursive: true, force: true });
});

describe("starting a conversation without a repository", () => {
  it("returns the task in WORKING at once (already persisted), then reaches READY with a live conversation", async () => {
    const key = await t.keyFor("alice");
    await api(key, "POST", "/api/settings", { llm_model: "openai/gpt-test", llm_api_key: "sk-secret-1" });
    await api(key, "POST", "/api/secrets", { name: "MY_SECRET", value: "v1" });
    await api(key, "POST", "/api/add-git-providers", {
      provider_tokens: { github: { token: "ghp_abc", host: null } },
    });

    const r = await api(key, "POST", "/api/v1/app-conversations", {
      initial_message: { content: [{ type: "text", text: "hello" }], run: false },
      trigger: "gui",
      pr_number: [7],
      conversation_id: "0f3b6b1e-8d3a-4c61-9d4a-2b7f3c9e1a55",
      processors: [{ kind: "SetTitleCallbackProcessor" }],
    });
    expect(r.status).toBe(200);
    const task = r.body as Task;
    expect(task).toMatchObject({
      status: "WORKING",
      created_by_user_id: "alice",
      detail: null,
      app_conversation_id: null,
      sandbox_id: null,
      agent_server_url: null,
    });
    expect(task.id).toMatch(/^[0-9a-f]{32}$/);
    expect(task.created_at).toMatch(/Z$/);
    expect(task.request).toEqual({
      sandbox_id: null,
      conversation_id: "0f3b6b1e-8d3a-4c61-9d4a-2b7f3c9e1a55",
      initial_message: {
        role: "user",
        content: [{ type: "text", text: "hello", cache_prompt: false }],
        run: false,
      },
      system_message_suffix: null,
      processors: [{ kind: "SetTitleCallbackProcessor" }],
      llm_model: null,
      selected_repository: null,
      selected_branch: null,
      git_provider: null,
      title: null,
      trigger: "gui",
      pr_number: [7],
      parent_conversation_id: null,
      agent_type: "default",
    });
    // Persisted before the answer: any server reading storage sees it.
    expect(await t.storage.startTasks.get(task.id, "alice")).not.toBeNull();

    const done = await settle(key, task.id);
    expect(done.status, done.detail ?? "").toBe("READY");
    expect(done.app_conversation_id).toBe("0f3b6b1e8d3a4c619d4a2b7f3c9e1a55");
    expect(done.sandbox_id).toBeTruthy();
    expect(done.agent_server_url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(Date.parse(done.updated_at)).toBeGreaterThanOrEqual(Date.parse(done.created_at));

    const c = await getConversation(key, "0F3B6B1E-8D3A-4C61-9D4A-2B7F3C9E1A55");
    expect(c).toMatchObject({
      id: "0f3b6b1e8d3a4c619d4a2b7f3c9e1a55",
      created_by_user_id: "alice",
      sandbox_id: done.sandbox_id,
      title: "Conversation 0f3b6b1e8d3a4c619d4a2b7f3c9e1a55",
      trigger: "gui",
      pr_number: [7],
      llm_model: "openai/gpt-test",
      metrics: null,
      parent_conversation_id: null,
      sub_conversation_ids: [],
      sandbox_status: "RUNNING",
      execution_status: "idle",
      conversation_url: `${done.agent_server_url}/api/conversations/0f3b6b1e8d3a4c619d4a2b7f3c9e1a55`,
    });
    expect(c?.session_api_key).toBeTruthy();

    // The agent got the user's LLM settings, confirmation policy, custom secrets and the provider token.
    const agentView = (await (
      await fetch(c?.conversation_url ?? "", { headers: { "x-session-api-key": c?.session_api_key ?? "" } })
    ).json()) as Record<string, unknown>;
    expect(agentView).toMatchObject({
      agent: { llm: { model: "openai/gpt-test", api_key: "**********" } },
      confirmation_policy: { kind: "NeverConfirm" },
      initial_message: { role: "user", content: [{ type: "text", text: "hello" }] },
    });
    expect((agentView.secret_names as string[]).sort()).toEqual(["GITHUB_TOKEN", "MY_SECRET"]);
    // What was sent is the opened configuration (the agent only shows it redacted).
    expect(await t.app.services.settings.openConversationConfig("alice")).toMatchObject({
      llmModel: "openai/gpt-test",
      llmApiKey: "sk-secret-1",
      confirmationMode: false,
      providerTokens: { github: { token: "ghp_abc", host: null } },
    });
    // The workspace is a git repository.
    if (c === null) throw new Error("no conversation");
    expect((await sh(c, "git rev-parse --is-inside-work-tree")).stdout.trim()).toBe("true");

    // A chosen id that exists already: ERROR, not a second conversation.
    const again = await settle(
      key,
      (await start(key, { conversation_id: "0f3b6b1e8d3a4c619d4a2b7f3c9e1a55", sandbox_id: done.sandbox_id }))
        .id,
    );
    expect(again.status).toBe("ERROR");
    expect(again.detail).toContain("already exists");
  });

  it("start→READY is fast on the process runtime (measured, logged)", async () => {
    const key = await t.keyFor("speedy");
    const times: number[] = [];
    for (let i = 0; i < 8; i++) {
      const t0 = performance.now();
      const task = await settle(key, (await start(key)).id);
      times.push(performance.now() - t0);
      expect(task.status, task.detail ?? "").toBe("READY");
      await api(key, "DELETE", `/api/v1/sandboxes/${task.sandbox_id}`);
    }
    times.sort((a, b) => a - b);
    const p50 = times[Math.floor(times.length / 2)] ?? 0;
    console.log(
      `start→READY without a repository (process runtime, REST, polling): p50 ${p50.toFixed(0)} ms, ` +
        `min ${times[0]?.toFixed(0)} ms, max ${times.at(-1)?.toFixed(0)} ms over ${times.length} starts`,
    );
    expect(p50).toBeLessThan(3000);
  });
});

describe("starting a conversation with a repository (local bare repository)", () => {
  let key: string;
  beforeAll(async () => {
    key = await t.keyFor("carol");
  });

  it("clones a file:// URL, creates a working branch, runs the setup script and installs the pre-commit hook", async () => {
    const { task, conversation: c } = await startReady(key, { selected_repository: `file://${bare}` });
    expect(c.selected_repository).toBe(`file://${bare}`);
    expect(c.selected_branch).toBeNull();
    expect(task.request.selected_repository).toBe(`file://${bare}`);
    const branch = await sh(c, "git branch --show-current", "project");
    expect(branch.stdout.trim()).toMatch(/^openhands-workspace-[0-9A-Za-z]{16}$/);
    expect((await sh(c, "cat setup-ran.txt", "project")).stdout.trim()).toBe("ok");
    expect((await sh(c, "head -2 .git/hooks/pre-commit", "project")).stdout).toContain(
      "This hook was installed by OpenHands",
    );
    // The hook runs .openhands/pre-commit.sh: a commit with forbidden.txt is refused, one without passes.
    const commit = "git -c user.name=T -c user.email=t@example.com commit -q -m test";
    const refused = await sh(c, `touch forbidden.txt && git add forbidden.txt && ${commit}`, "project");
    expect(refused.exit_code).not.toBe(0);
    expect(refused.stderr).toContain("forbidden.txt must not be committed");
    const ok = await sh(
      c,
      `git rm -q --cached forbidden.txt && rm forbidden.txt && ${commit} --allow-empty`,
      "project",
    );
    expect(ok.exit_code, ok.stderr).toBe(0);
  });

  it("checks out selected_branch of a repository given as an absolute path", async () => {
    const { conversation: c } = await startReady(key, {
      selected_repository: bare,
      selected_branch: "feature",
    });
    expect(c.selected_branch).toBe("feature");
    expect((await sh(c, "git branch --show-current", "project")).stdout.trim()).toBe("feature");
    expect((await sh(c, "cat feature.txt", "project")).stdout).toBe("feature work\n");
  });

  it("a failing setup script ends in ERROR with its exit code and the tail of its output", async () => {
    const task = await settle(
      key,
      (await start(key, { selected_repository: bare, selected_branch: "broken" })).id,
    );
    expect(task.status).toBe("ERROR");
    expect(task.detail).toContain(".openhands/setup.sh failed with exit code 3");
    expect(task.detail).toContain("installing deps");
    expect(task.detail).toContain("npm ERR! boom");
    expect(task.app_conversation_id).toBeNull();
  });

  it("an unknown branch or repository ends in ERROR saying what to fix", async () => {
    const branch = await settle(
      key,
      (await start(key, { selected_repository: bare, selected_branch: "nope" })).id,
    );
    expect(branch.status).toBe("ERROR");
    expect(branch.detail).toContain("Could not check out branch nope");
    const repo = await settle(
      key,
      (await start(key, { selected_repository: join(gitDir, "missing.git") })).id,
    );
    expect(repo.status).toBe("ERROR");
    expect(repo.detail).toContain("Could not clone");
    // owner/repo goes to the provider's host with the token in the URL; the token never shows in the detail.
    await api(key, "POST", "/api/add-git-providers", {
      provider_tokens: { gitlab: { token: "glpat-SECRET-TOKEN", host: "127.0.0.1:1" } },
    });
    const remote = await settle(key, (await start(key, { selected_repository: "group/app" })).id);
    expect(remote.status).toBe("ERROR");
    expect(remote.detail).toContain("Could not clone group/app");
    expect(remote.detail).toContain("127.0.0.1");
    expect(remote.detail).not.toContain("SECRET");
    // A sandbox whose "project" folder holds another repository is not silently reused.
    const { conversation: first } = await startReady(key, { selected_repository: bare });
    const other = join(gitDir, "elsewhere", "project.git");
    git(gitDir, "clone", "-q", "--bare", bare, other);
    const taken = await settle(
      key,
      (await start(key, { selected_repository: other, sandbox_id: first.sandbox_id })).id,
    );
    expect(taken.status).toBe("ERROR");
    expect(taken.detail).toContain(`it holds a clone of ${bare}`);
    // The same repository again in that sandbox reuses the clone.
    const same = await settle(
      key,
      (await start(key, { selected_repository: bare, sandbox_id: first.sandbox_id })).id,
    );
    expect(same.status, same.detail ?? "").toBe("READY");
  });
});

describe("reusing sandboxes and sub-conversations", () => {
  let key: string;
  beforeAll(async () => {
    key = await t.keyFor("dave");
  });

  it("reuses a PAUSED sandbox: resumes it and continues to READY", async () => {
    const sb = (await api(key, "POST", "/api/v1/sandboxes")).body as { id: string };
    const deadline = Date.now() + 10_000;
    while (
      ((await api(key, "GET", `/api/v1/sandboxes?id=${sb.id}`)).body as { status: string }[])[0]?.status !==
      "RUNNING"
    ) {
      if (Date.now() > deadline) throw new Error("sandbox did not start");
      await new Promise((r) => setTimeout(r, 10));
    }
    await api(key, "POST", `/api/v1/sandboxes/${sb.id}/pause`, {});
    expect(
      ((await api(key, "GET", `/api/v1/sandboxes?id=${sb.id}`)).body as { status: string }[])[0]?.status,
    ).toBe("PAUSED");
    const { task, conversation } = await startReady(key, { sandbox_id: sb.id });
    expect(task.sandbox_id).toBe(sb.id);
    expect(conversation.sandbox_id).toBe(sb.id);
    expect(conversation.sandbox_status).toBe("RUNNING");

    // Paused again, the conversation reports it without asking the agent.
    await api(key, "POST", `/api/v1/sandboxes/${sb.id}/pause`, {});
    expect(await getConversation(key, conversation.id)).toMatchObject({
      sandbox_status: "PAUSED",
      execution_status: null,
      conversation_url: null,
      session_api_key: null,
    });
    // Deleted: MISSING.
    await api(key, "DELETE", `/api/v1/sandboxes/${sb.id}`);
    expect(await getConversation(key, conversation.id)).toMatchObject({ sandbox_status: "MISSING" });
  });

  it("an unknown or foreign sandbox_id ends in ERROR", async () => {
    const unknown = await settle(key, (await start(key, { sandbox_id: "doesNotExist" })).id);
    expect(unknown).toMatchObject({ status: "ERROR", detail: "Sandbox doesNotExist not found" });
    const bobs = (await api(await t.keyFor("bob"), "POST", "/api/v1/sandboxes")).body as { id: string };
    const foreign = await settle(key, (await start(key, { sandbox_id: bobs.id })).id);
    expect(foreign).toMatchObject({ status: "ERROR", detail: `Sandbox ${bobs.id} not found` });
    await api(await t.keyFor("bob"), "DELETE", `/api/v1/sandboxes/${bobs.id}`);
  });

  it("a sub-conversation inherits sandbox, repository, branch and model, and is recorded in its parent", async () => {
    const { conversation: parent } = await startReady(key, {
      selected_repository: bare,
      selected_branch: "feature",
      llm_model: "parent-model",
      git_provider: "gitlab",
    });
    const dashed = `${parent.id.slice(0, 8)}-${parent.id.slice(8, 12)}-${parent.id.slice(12, 16)}-${parent.id.slice(16, 20)}-${parent.id.slice(20)}`;
    const { task, conversation: child } = await startReady(key, { parent_conversation_id: dashed });
    expect(task.request.parent_conversation_id).toBe(parent.id);
    expect(child).toMatchObject({
      sandbox_id: parent.sandbox_id,
      selected_repository: bare,
      selected_branch: "feature",
      git_provider: "gitlab",
      llm_model: "parent-model",
      parent_conversation_id: parent.id,
      sandbox_status: "RUNNING",
    });
    // The clone already in the sandbox is reused.
    expect((await sh(child, "git branch --show-current", "project")).stdout.trim()).toBe("feature");
    expect((await getConversation(key, parent.id))?.sub_conversation_ids).toEqual([child.id]);

    const top = (await api(key, "GET", "/api/v1/app-conversations/search")).body as Page<Conversation>;
    expect(top.items.map((c) => c.id)).toContain(parent.id);
    expect(top.items.map((c) => c.id)).not.toContain(child.id);
    const all = (await api(key, "GET", "/api/v1/app-conversations/search?include_sub_conversations=true"))
      .body as Page<Conversation>;
    expect(all.items.map((c) => c.id)).toContain(child.id);
    expect((await api(key, "GET", "/api/v1/app-conversations/count")).body).toBe(top.items.length);
    expect(
      (await api(key, "GET", "/api/v1/app-conversations/count?include_sub_conversations=true")).body,
    ).toBe(all.items.length);
    // The start tasks of the child can be found by the conversation id.
    const byConversation = (
      await api(key, "GET", `/api/v1/app-conversations/start-tasks/search?conversation_id__eq=${child.id}`)
    ).body as Page<Task>;
    expect(byConversation.items.map((x) => x.id)).toEqual([task.id]);

    const unknown = await settle(key, (await start(key, { parent_conversation_id: newHexId() })).id);
    expect(unknown.status).toBe("ERROR");
    expect(unknown.detail).toMatch(/^Parent conversation [0-9a-f]{32} not found$/);
    // Another user's conversation cannot be a parent.
    const bob = await t.keyFor("bob");
    const foreign = await settle(bob, (await start(bob, { parent_conversation_id: parent.id })).id);
    expect(foreign).toMatchObject({ status: "ERROR", detail: `Parent conversation ${parent.id} not found` });
  });

  it("a slow agent never fails the listing: the execution status is left null", async () => {
    const sb = (await api(key, "POST", "/api/v1/sandboxes?sandbox_spec_id=hung-agent")).body as {
      id: string;
    };
    const deadline = Date.now() + 10_000;
    while (
      ((await api(key, "GET", `/api/v1/sandboxes?id=${sb.id}`)).body as { status: string }[])[0]?.status !==
      "RUNNING"
    ) {
      if (Date.now() > deadline) throw new Error("sandbox did not start");
      await new Promise((r) => setTimeout(r, 10));
    }
    const now = new Date();
    const record: ConversationRecord = {
      id: newHexId(),
      ownerId: "dave",
      sandboxId: sb.id,
      selectedRepository: null,
      selectedBranch: null,
      gitProvider: null,
      title: "hung",
      trigger: null,
      prNumber: [],
      llmModel: null,
      metrics: { model_name: "m", accumulated_cost: 1.5, accumulated_token_usage: { prompt_tokens: 10 } },
      parentConversationId: null,
      subConversationIds: [],
      createdAt: now,
      updatedAt: now,
    };
    await t.storage.conversations.insert(record);
    const t0 = Date.now();
    const c = await getConversation(key, record.id);
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(c).toMatchObject({ sandbox_status: "RUNNING", execution_status: null, title: "hung" });
    expect(c?.metrics).toEqual({
      model_name: "m",
      accumulated_cost: 1.5,
      max_budget_per_task: null,
      accumulated_token_usage: {
        model: "",
        prompt_tokens: 10,
        completion_tokens: 0,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        reasoning_tokens: 0,
        context_window: 0,
        per_turn_token: 0,
        response_id: "",
      },
    });
    await api(key, "DELETE", `/api/v1/sandboxes/${sb.id}`);
  });
});

describe("streaming starts", () => {
  it("POST /stream-start streams every state as one JSON array ending with READY", async () => {
    const key = await t.keyFor("erin");
    const res = await fetch(`${t.url}/api/v1/app-conversations/stream-start`, {
      method: "POST",
      headers: { "x-session-api-key": key, "content-type": "application/json" },
      body: JSON.stringify({ selected_repository: bare }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("application/json");
    const states = (await res.json()) as Task[];
    expect(states.map((s) => s.status)).toEqual([
      "WORKING",
      "WAITING_FOR_SANDBOX",
      "PREPARING_REPOSITORY",
      "RUNNING_SETUP_SCRIPT",
      "SETTING_UP_GIT_HOOKS",
      "SETTING_UP_SKILLS",
      "STARTING_CONVERSATION",
      "READY",
    ]);
    expect(new Set(states.map((s) => s.id)).size).toBe(1);
    expect(states.at(-1)?.app_conversation_id).toMatch(/^[0-9a-f]{32}$/);
    // A failing start streams to ERROR.
    const failed = (await (
      await fetch(`${t.url}/api/v1/app-conversations/stream-start`, {
        method: "POST",
        headers: { "x-session-api-key": key, "content-type": "application/json" },
        body: JSON.stringify({ sandbox_id: "gone" }),
      })
    ).json()) as Task[];
    expect(failed.map((s) => s.status)).toEqual(["WORKING", "ERROR"]);
    expect(failed.at(-1)?.detail).toBe("Sandbox gone not found");
  });

  it("StreamStartAppConversation over gRPC, StartAppConversation and batch gets over Connect", async () => {
    const key = await t.keyFor("erin");
    const g = grpcClient(AppConversationService, t.grpcAddress);
    const statuses: number[] = [];
    let conversationId = "";
    await new Promise<void>((resolve, reject) => {
      const stream = g.stream("StreamStartAppConversation", { request: { llmModel: "grpc-model" } }, key);
      stream.on("data", (m: StreamStartAppConversationResponse) => {
        if (m.task) {
          statuses.push(m.task.status);
          conversationId = m.task.appConversationId ?? "";
        }
      });
      stream.on("end", resolve);
      stream.on("error", reject);
    });
    expect(statuses[0]).toBe(AppConversationStartTaskStatus.WORKING);
    expect(statuses.at(-1)).toBe(AppConversationStartTaskStatus.READY);
    expect(statuses).toHaveLength(8);
    await expect(
      g.unary("StartAppConversation", { request: { conversationId: "not-a-uuid" } }, key),
    ).rejects.toMatchObject({ code: Code.InvalidArgument });
    await expect(
      g.unary("BatchGetStartTasks", { ids: Array.from({ length: 101 }, () => newHexId()) }, key),
    ).rejects.toMatchObject({ code: Code.InvalidArgument });
    g.close();

    const c = connectClient(AppConversationService, t.url, key);
    const started = await c.startAppConversation({ request: {} });
    const taskId = started.task?.id ?? "";
    expect(started.task?.status).toBe(AppConversationStartTaskStatus.WORKING);
    const done = await settle(key, taskId);
    expect(done.status).toBe("READY");
    const tasks = await c.batchGetStartTasks({ ids: [taskId, newHexId()] });
    expect(tasks.items[0]?.task?.status).toBe(AppConversationStartTaskStatus.READY);
    expect(tasks.items[1]?.task).toBeUndefined();
    const convs = await c.batchGetAppConversations({ ids: [conversationId] });
    expect(convs.items[0]?.conversation?.llmModel).toBe("grpc-model");
    expect((await c.countStartTasks({})).count).toBeGreaterThanOrEqual(4n);
  });
});

describe("paging and filters", () => {
  const owner = "pager";
  const base = Date.parse("2025-01-01T00:00:00Z");
  const at = (minutes: number) => new Date(base + minutes * 60_000);
  const convs: ConversationRecord[] = [];
  let key: string;

  beforeAll(async () => {
    key = await t.keyFor(owner);
    for (let i = 0; i < 250; i++) {
      const c: ConversationRecord = {
        id: newHexId(),
        ownerId: owner,
        sandboxId: "no-such-sandbox",
        selectedRepository: null,
        selectedBranch: null,
        gitProvider: i % 2 === 0 ? "github" : null,
        title: i % 10 === 0 ? `Deploy ${i}` : `Conversation ${i}`,
        trigger: null,
        prNumber: [],
        llmModel: null,
        metrics: null,
        parentConversationId: i % 25 === 1 ? (convs[0]?.id ?? null) : null,
        subConversationIds: [],
        createdAt: at(i),
        updatedAt: at(1000 - i),
      };
      convs.push(c);
      await t.storage.conversations.insert(c);
    }
    for (let i = 0; i < 130; i++) {
      const task: StartTaskRecord = {
        id: newHexId(),
        ownerId: owner,
        status: "READY",
        detail: null,
        appConversationId: convs[i % 5]?.id ?? null,
        sandboxId: null,
        agentServerUrl: null,
        request: {},
        createdAt: at(i),
        updatedAt: at(i),
      };
      await t.storage.startTasks.insert(task);
    }
  });

  it("pages through every conversation newest first, without duplicates, with stable page ids", async () => {
    const top = convs.filter((c) => c.parentConversationId === null);
    const seen: string[] = [];
    let pageId: string | null = null;
    let pages = 0;
    do {
      const q: string = pageId === null ? "" : `&page_id=${encodeURIComponent(pageId)}`;
      const r = await api(key, "GET", `/api/v1/app-conversations/search?limit=100${q}`);
      expect(r.status, r.text).toBe(200);
      const page = r.body as Page<Conversation>;
      seen.push(...page.items.map((c) => c.id));
      pageId = page.next_page_id;
      pages++;
      if (pages === 1) {
        expect(page.items[0]).toMatchObject({
          sandbox_status: "MISSING",
          execution_status: null,
          conversation_url: null,
          session_api_key: null,
        });
      }
    } while (pageId !== null && pages < 10);
    expect(pages).toBe(3);
    expect(seen).toEqual([...top].reverse().map((c) => c.id));
    expect((await api(key, "GET", "/api/v1/app-conversations/count")).body).toBe(top.length);
    expect(
      (await api(key, "GET", "/api/v1/app-conversations/count?include_sub_conversations=true")).body,
    ).toBe(250);
  });

  it("filters by title, created_at and updated_at (search and count agree)", async () => {
    const ids = async (q: string) =>
      (
        (await api(key, "GET", `/api/v1/app-conversations/search?include_sub_conversations=true&${q}`))
          .body as Page<Conversation>
      ).items.map((c) => c.id);
    const deploy = convs
      .filter((c) => c.title?.startsWith("Deploy"))
      .reverse()
      .map((c) => c.id);
    expect(await ids("title__contains=deploy")).toEqual(deploy);
    expect(
      (
        await api(
          key,
          "GET",
          "/api/v1/app-conversations/count?title__contains=deploy&include_sub_conversations=1",
        )
      ).body,
    ).toBe(deploy.length);
    const gte = encodeURIComponent(at(240).toISOString());
    expect(await ids(`created_at__gte=${gte}`)).toEqual(
      convs
        .slice(240)
        .reverse()
        .map((c) => c.id),
    );
    expect(
      await ids(`created_at__gte=2025-01-01T04:00:00%2B00:00&created_at__lt=2025-01-01T04:03:00Z`),
    ).toEqual(
      convs
        .slice(240, 243)
        .reverse()
        .map((c) => c.id),
    );
    // updated_at runs the other way round: updated_at < at(755) means i > 245.
    expect(await ids(`updated_at__lt=${encodeURIComponent(at(755).toISOString())}`)).toEqual(
      convs
        .slice(246)
        .reverse()
        .map((c) => c.id),
    );
    expect(await ids(`updated_at__gte=${encodeURIComponent(at(999).toISOString())}`)).toEqual([
      convs[1]?.id,
      convs[0]?.id,
    ]);
    expect(await ids("created_at__lt=2025-01-01")).toEqual([]);
  });

  it("pages start tasks in both directions and filters them", async () => {
    const collect = async (sort: string) => {
      const out: string[] = [];
      let pageId: string | null = null;
      do {
        const q: string = pageId === null ? "" : `&page_id=${encodeURIComponent(pageId)}`;
        const page = (
          await api(
            key,
            "GET",
            `/api/v1/app-conversations/start-tasks/search?limit=50&sort_order=${sort}${q}`,
          )
        ).body as Page<Task>;
        out.push(...page.items.map((x) => x.created_at));
        pageId = page.next_page_id;
      } while (pageId !== null);
      return out;
    };
    const asc = await collect("CREATED_AT");
    expect(asc).toHaveLength(130);
    expect(asc).toEqual([...asc].sort());
    expect(await collect("CREATED_AT_DESC")).toEqual([...asc].reverse());
    expect(await collect("UPDATED_AT_DESC")).toEqual([...asc].reverse());
    expect(await collect("UPDATED_AT")).toEqual(asc);
    const byConv = (
      await api(
        key,
        "GET",
        `/api/v1/app-conversations/start-tasks/search?conversation_id__eq=${convs[2]?.id}`,
      )
    ).body as Page<Task>;
    expect(byConv.items).toHaveLength(26);
    expect(byConv.items.every((x) => x.app_conversation_id === convs[2]?.id)).toBe(true);
    expect(
      (
        await api(
          key,
          "GET",
          `/api/v1/app-conversations/start-tasks/count?conversation_id__eq=${convs[2]?.id}`,
        )
      ).body,
    ).toBe(26);
    const since = encodeURIComponent(at(100).toISOString());
    expect(
      (await api(key, "GET", `/api/v1/app-conversations/start-tasks/count?created_at__gte=${since}`)).body,
    ).toBe(30);
    expect((await api(key, "GET", "/api/v1/app-conversations/start-tasks/count")).body).toBe(130);
    // A page id is bound to its listing and its direction.
    const first = (await api(key, "GET", "/api/v1/app-conversations/start-tasks/search?limit=10"))
      .body as Page<Task>;
    const next = encodeURIComponent(first.next_page_id ?? "");
    expect(
      (
        await api(
          key,
          "GET",
          `/api/v1/app-conversations/start-tasks/search?page_id=${next}&sort_order=CREATED_AT`,
        )
      ).status,
    ).toBe(422);
    expect((await api(key, "GET", `/api/v1/app-conversations/search?page_id=${next}`)).status).toBe(422);
  });

  it("isolation: another user sees none of it", async () => {
    const other = await t.keyFor("outsider");
    const someConv = convs[5]?.id ?? "";
    const conv = await api(other, "GET", `/api/v1/app-conversations?ids=${someConv}`);
    expect(conv.body).toEqual([null]);
    expect(
      ((await api(other, "GET", "/api/v1/app-conversations/search")).body as Page<Conversation>).items,
    ).toEqual([]);
    expect(
      (await api(other, "GET", "/api/v1/app-conversations/count?include_sub_conversations=true")).body,
    ).toBe(0);
    const tasks = (await api(key, "GET", "/api/v1/app-conversations/start-tasks/search?limit=1"))
      .body as Page<Task>;
    const taskId = tasks.items[0]?.id ?? "";
    expect((await api(other, "GET", `/api/v1/app-conversations/start-tasks?ids=${taskId}`)).body).toEqual([
      null,
    ]);
    expect((await api(key, "GET", `/api/v1/app-conversations/start-tasks?ids=${taskId}`)).body).toMatchObject(
      [{ id: taskId }],
    );
    expect(
      ((await api(other, "GET", "/api/v1/app-conversations/start-tasks/search")).body as Page<Task>).items,
    ).toEqual([]);
    expect(
      (await api(other, "GET", `/api/v1/app-conversations/start-tasks/count?conversation_id__eq=${someConv}`))
        .body,
    ).toBe(0);
    const g = grpcClient(AppConversationService, t.grpcAddress);
    const r = await g.unary<{ items: { conversation?: unknown }[] }>(
      "BatchGetAppConversations",
      { ids: [someConv] },
      other,
    );
    expect(r.items[0]?.conversation).toBeUndefined();
    g.close();
  });
});

describe("bad input", () => {
  it("every route answers 422 with pydantic's shape (never 5xx) and stores nothing", async () => {
    const key = await t.keyFor("mallory");
    const hex = newHexId();
    const many = Array.from({ length: 101 }, () => `ids=${newHexId()}`).join("&");
    const cases: [string, string, unknown, unknown[], string][] = [
      ["GET", "/api/v1/app-conversations", undefined, ["query", "ids"], "missing"],
      ["GET", "/api/v1/app-conversations?ids=nope", undefined, ["query", "ids", 0], "uuid_parsing"],
      ["GET", `/api/v1/app-conversations?ids=${hex}&ids=123`, undefined, ["query", "ids", 1], "uuid_parsing"],
      ["GET", `/api/v1/app-conversations?${many}`, undefined, ["query", "ids"], "too_long"],
      ["GET", "/api/v1/app-conversations/start-tasks", undefined, ["query", "ids"], "missing"],
      ["GET", "/api/v1/app-conversations/start-tasks?ids=zz", undefined, ["query", "ids", 0], "uuid_parsing"],
      ["GET", `/api/v1/app-conversations/start-tasks?${many}`, undefined, ["query", "ids"], "too_long"],
      [
        "GET",
        "/api/v1/app-conversations/search?limit=0",
        undefined,
        ["query", "limit"],
        "greater_than_equal",
      ],
      ["GET", "/api/v1/app-conversations/search?limit=101", undefined, ["query", "limit"], "less_than_equal"],
      ["GET", "/api/v1/app-conversations/search?limit=ten", undefined, ["query", "limit"], "int_parsing"],
      [
        "GET",
        "/api/v1/app-conversations/search?page_id=forged",
        undefined,
        ["query", "page_id"],
        "value_error",
      ],
      [
        "GET",
        "/api/v1/app-conversations/search?created_at__gte=yesterday",
        undefined,
        ["query", "created_at__gte"],
        "datetime_from_date_parsing",
      ],
      [
        "GET",
        "/api/v1/app-conversations/search?updated_at__lt=2024-13-01",
        undefined,
        ["query", "updated_at__lt"],
        "datetime_from_date_parsing",
      ],
      [
        "GET",
        "/api/v1/app-conversations/search?include_sub_conversations=maybe",
        undefined,
        ["query", "include_sub_conversations"],
        "bool_parsing",
      ],
      [
        "GET",
        "/api/v1/app-conversations/count?created_at__lt=01/02/2025",
        undefined,
        ["query", "created_at__lt"],
        "datetime_from_date_parsing",
      ],
      [
        "GET",
        "/api/v1/app-conversations/start-tasks/search?sort_order=NEWEST",
        undefined,
        ["query", "sort_order"],
        "enum",
      ],
      [
        "GET",
        "/api/v1/app-conversations/start-tasks/search?conversation_id__eq=xyz",
        undefined,
        ["query", "conversation_id__eq"],
        "uuid_parsing",
      ],
      [
        "GET",
        "/api/v1/app-conversations/start-tasks/search?limit=-1",
        undefined,
        ["query", "limit"],
        "greater_than_equal",
      ],
      [
        "GET",
        "/api/v1/app-conversations/start-tasks/count?created_at__gte=soon",
        undefined,
        ["query", "created_at__gte"],
        "datetime_from_date_parsing",
      ],
      ["POST", "/api/v1/app-conversations", undefined, ["body"], "missing"],
      ["POST", "/api/v1/app-conversations", [], ["body"], "model_attributes_type"],
      [
        "POST",
        "/api/v1/app-conversations",
        { conversation_id: "1234" },
        ["body", "conversation_id"],
        "uuid_parsing",
      ],
      [
        "POST",
        "/api/v1/app-conversations",
        { parent_conversation_id: 5 },
        ["body", "parent_conversation_id"],
        "uuid_type",
      ],
      ["POST", "/api/v1/app-conversations", { git_provider: "gitea" }, ["body", "git_provider"], "enum"],
      ["POST", "/api/v1/app-conversations", { trigger: "email" }, ["body", "trigger"], "enum"],
      ["POST", "/api/v1/app-conversations", { agent_type: "smart" }, ["body", "agent_type"], "enum"],
      ["POST", "/api/v1/app-conversations", { pr_number: ["x"] }, ["body", "pr_number", 0], "int_parsing"],
      ["POST", "/api/v1/app-conversations", { sandbox_id: 5 }, ["body", "sandbox_id"], "string_type"],
      [
        "POST",
        "/api/v1/app-conversations",
        { selected_branch: "-f" },
        ["body", "selected_branch"],
        "value_error",
      ],
      [
        "POST",
        "/api/v1/app-conversations",
        { selected_repository: "not a repo" },
        ["body", "selected_repository"],
        "value_error",
      ],
      [
        "POST",
        "/api/v1/app-conversations",
        { initial_message: { role: "boss" } },
        ["body", "initial_message", "role"],
        "literal_error",
      ],
      [
        "POST",
        "/api/v1/app-conversations",
        { initial_message: { content: [{ type: "video" }] } },
        ["body", "initial_message", "content", 0],
        "union_tag_invalid",
      ],
      [
        "POST",
        "/api/v1/app-conversations",
        { initial_message: { content: [{ text: "no type" }] } },
        ["body", "initial_message", "content", 0],
        "union_tag_not_found",
      ],
      [
        "POST",
        "/api/v1/app-conversations",
        { initial_message: { content: [{ type: "text" }] } },
        ["body", "initial_message", "content", 0, "text", "text"],
        "missing",
      ],
      [
        "POST",
        "/api/v1/app-conversations",
        { initial_message: { content: [{ type: "image", image_urls: ["u"], extra: 1 }] } },
        ["body", "initial_message", "content", 0, "image", "extra"],
        "extra_forbidden",
      ],
      ["POST", "/api/v1/app-conversations", { processors: ["x"] }, ["body", "processors", 0], "dict_type"],
      [
        "POST",
        "/api/v1/app-conversations/stream-start",
        { conversation_id: "zz" },
        ["body", "conversation_id"],
        "uuid_parsing",
      ],
    ];
    const before = await t.storage.startTasks.count("mallory", {});
    for (const [method, path, body, loc, type] of cases) {
      const r = await api(key, method, path, body);
      expect(r.status, `${method} ${path} ${JSON.stringify(body)}: ${r.text}`).toBe(422);
      expect(r.headers.get("content-type")).toContain("application/json");
      const detail = (r.body as { detail: { loc: unknown[]; type: string; msg: string }[] }).detail;
      expect(detail[0], `${method} ${path} ${JSON.stringify(body)}`).toMatchObject({ loc, type });
      if (type === "uuid_parsing") expect(detail[0]?.msg).toMatch(/^Input should be a valid UUID, /);
    }
    // Every problem at once.
    const several = await api(key, "POST", "/api/v1/app-conversations", {
      conversation_id: "x",
      git_provider: "gitea",
      pr_number: [1, "two"],
    });
    expect((several.body as { detail: { loc: unknown[] }[] }).detail.map((d) => d.loc)).toEqual([
      ["body", "conversation_id"],
      ["body", "git_provider"],
      ["body", "pr_number", 1],
    ]);
    const invalidJson = await call(t.url, key, "POST", "/api/v1/app-conversations", undefined, "{nope");
    expect(invalidJson.status).toBe(422);
    expect((invalidJson.body as { detail: { type: string }[] }).detail[0]?.type).toBe("json_invalid");
    expect(await t.storage.startTasks.count("mallory", {})).toBe(before);
    // No key.
    for (const path of ["/api/v1/app-conversations/search", "/api/v1/app-conversations/start-tasks/count"])
      expect((await api(undefined, "GET", path)).status).toBe(401);
    expect((await api(undefined, "POST", "/api/v1/app-conversations", {})).status).toBe(401);
  });
});

describe("OpenAPI document", () => {
  it("real requests and responses of every conversation route match their documented schemas", async () => {
    type Op = {
      requestBody?: { content: { "application/json": { schema: object } } };
      responses: Record<string, { content?: { "application/json": { schema: object } } }>;
    };
    const doc = (await api(undefined, "GET", "/openapi.json")).body as {
      paths: Record<string, Record<string, Op>>;
      components: { schemas: Record<string, object> };
    };
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    (addFormats as unknown as (a: Ajv2020) => void)(ajv);
    const check = (schema: object, value: unknown, what: string) => {
      const validate = ajv.compile({ ...schema, components: doc.components });
      expect(
        validate(value),
        `${what}: ${ajv.errorsText(validate.errors)} ${JSON.stringify(value).slice(0, 300)}`,
      ).toBe(true);
    };
    const key = await t.keyFor("documented");
    const exchange = async (method: string, path: string, body?: unknown, invalidOnPurpose = false) => {
      const op = doc.paths[path.split("?")[0] ?? ""]?.[method.toLowerCase()];
      if (op === undefined) throw new Error(`${method} ${path} is not documented`);
      if (body !== undefined && op.requestBody && !invalidOnPurpose)
        check(op.requestBody.content["application/json"].schema, body, "request");
      const r = await api(key, method, path, body);
      const schema = op.responses[String(r.status)]?.content?.["application/json"]?.schema;
      expect(schema, `${method} ${path} ${r.status}`).toBeDefined();
      if (schema) check(schema, r.body, `${method} ${path} ${r.status}`);
      return r;
    };
    const body = {
      initial_message: {
        role: "user",
        content: [
          { type: "text", text: "hi" },
          { type: "image", image_urls: ["https://example.com/a.png"] },
        ],
        run: true,
      },
      selected_repository: bare,
      selected_branch: "feature",
      git_provider: "github",
      trigger: "openhands_api",
      pr_number: [1, 2],
      conversation_id: newHexId(),
      agent_type: "plan",
      processors: [{ kind: "SetTitleCallbackProcessor" }],
    };
    const task = (await exchange("POST", "/api/v1/app-conversations", body)).body as Task;
    const done = await settle(key, task.id);
    expect(done.status, done.detail ?? "").toBe("READY");
    await exchange("POST", "/api/v1/app-conversations/stream-start", { sandbox_id: done.sandbox_id });
    await exchange("POST", "/api/v1/app-conversations", { pr_number: ["x"] }, true); // 422
    await exchange("GET", `/api/v1/app-conversations/start-tasks?ids=${task.id}&ids=${newHexId()}`);
    await exchange("GET", "/api/v1/app-conversations/start-tasks/search?limit=1&sort_order=CREATED_AT");
    await exchange("GET", "/api/v1/app-conversations/start-tasks/count");
    await exchange("GET", `/api/v1/app-conversations?ids=${done.app_conversation_id}&ids=${newHexId()}`);
    await exchange("GET", "/api/v1/app-conversations/search?limit=5");
    await exchange("GET", "/api/v1/app-conversations/count");
    await exchange("GET", "/api/v1/app-conversations/search?limit=0"); // 422
  });
});

describe("restart safety", () => {
  it("a start cut off by a shutdown ends in ERROR; unfinished tasks found at start-up are marked ERROR", async () => {
    const dir = mkdtempSync(join(tmpdir(), "aws-restart-"));
    const encryptionKey = randomBytes(32);
    const unisolated = () =>
      createProcessRuntime({ workspaceRoot: join(dir, "sandboxes"), isolation: "none" });
    const first = await startTestApp({
      dir,
      encryptionKey,
      runtime: unisolated(),
      keepSandboxes: true,
      conversations: { shutdownGraceMs: 50 },
    });
    const key = await first.keyFor("frank");
    const r = await call(first.url, key, "POST", "/api/v1/app-conversations", {
      selected_repository: bare,
      selected_branch: "slow",
    });
    const id = (r.body as Task).id;
    const deadline = Date.now() + 10_000;
    for (;;) {
      const task = (
        (await call(first.url, key, "GET", `/api/v1/app-conversations/start-tasks?ids=${id}`)).body as Task[]
      )[0];
      if (task?.status === "RUNNING_SETUP_SCRIPT") break;
      if (Date.now() > deadline) throw new Error(`setup script not reached: ${JSON.stringify(task)}`);
      await new Promise((r) => setTimeout(r, 10));
    }
    const stopping = Date.now();
    await first.close();
    expect(Date.now() - stopping).toBeLessThan(5000);

    const secondRuntime = unisolated();
    const second = await startTestApp({ dir, encryptionKey, runtime: secondRuntime });
    try {
      const key2 = await second.keyFor("frank");
      const cut = await settle(key2, id, 1000, second);
      expect(cut.status).toBe("ERROR");
      expect(cut.detail).toContain("the server shut down");
      // A task left behind by a process that died without a shutdown (written directly, as it would be found).
      const orphan: StartTaskRecord = {
        id: newHexId(),
        ownerId: "frank",
        status: "PREPARING_REPOSITORY",
        detail: null,
        appConversationId: null,
        sandboxId: cut.sandbox_id,
        agentServerUrl: null,
        request: {},
        createdAt: new Date(),
        updatedAt: new Date(),
      };
      await second.storage.startTasks.insert(orphan);
      expect(await second.app.services.conversations.recoverInterrupted()).toBe(1);
      const recovered = await settle(key2, orphan.id, 1000, second);
      expect(recovered).toMatchObject({ status: "ERROR", detail: INTERRUPTED_DETAIL });
      expect(await second.app.services.conversations.recoverInterrupted()).toBe(0);
      // The sandbox kept across the restart is still the user's and can be removed.
      expect((await call(second.url, key2, "DELETE", `/api/v1/sandboxes/${cut.sandbox_id}`)).body).toEqual({
        success: true,
      });
      // New starts work on the restarted server.
      const again = await settle(
        key2,
        ((await call(second.url, key2, "POST", "/api/v1/app-conversations", {})).body as Task).id,
        20_000,
        second,
      );
      expect(again.status).toBe("READY");
    } finally {
      await second.close();
      await secondRuntime.killAll();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
