// Shared setup of the app-conversation integration suites (test/integration/app-conversations-*.test.ts): one
// test app per file on the process runtime with a "hung-agent" spec, a local bare git repository with branches,
// and REST helpers that start conversations and wait for their start tasks.

import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "vitest";
import { createProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime.ts";
import type { ProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime-types.ts";
import { ProviderHostPolicy } from "../../src/core/provider-host.ts";
import { defaultSpecs } from "../../src/server/sandbox-specs.ts";
import { type FakeLlm, startFakeLlm } from "./fake-llm.ts";
import { call, startTestApp, type TestApp } from "./test-app.ts";
import { uiAgentBase } from "./ui-urls.ts";

export interface Task {
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

export interface Conversation {
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

export interface Page<T> {
  items: T[];
  next_page_id: string | null;
}

/** The running app of the current test file, its git folder and its bare repository. */
export interface ConversationApp {
  t: TestApp;
  gitDir: string;
  bare: string;
  runtime: ProcessRuntime;
  runtimeDir: string;
  /** The users' model server: answers every call with a final message unless a test scripts it. */
  llm: FakeLlm;
}

let current: ConversationApp | null = null;

function conversationApp(): ConversationApp {
  if (current === null) throw new Error("startConversationApp() was not called (in beforeAll)");
  return current;
}

export const api = (key: string | undefined, method: string, path: string, body?: unknown) =>
  call(conversationApp().t.url, key, method, path, body);

export const git = (cwd: string, ...args: string[]) =>
  execFileSync("git", ["-c", "user.name=Test", "-c", "user.email=test@example.com", ...args], {
    cwd,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
  });

/**
 * A bare repository with branches: main (setup + pre-commit scripts), feature, broken (failing setup), slow, and
 * slow-once (a setup script that is slow only the first time it runs in a workspace).
 */
export function createRepository(root: string): string {
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
  onBranch("slow-once", {
    ".openhands/setup.sh": "#!/bin/bash\nif [ ! -f ../.slow-once ]; then touch ../.slow-once; sleep 30; fi\n",
  });
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
  git(work, "push", "-q", "origin", "main", "feature", "broken", "slow", "slow-once");
  return bareDir;
}

/** Polls the start task until READY or ERROR. */
export async function settle(
  key: string,
  id: string,
  ms = 20_000,
  app: TestApp = conversationApp().t,
): Promise<Task> {
  const deadline = Date.now() + ms;
  for (;;) {
    const r = await call(app.url, key, "GET", `/api/v1/app-conversations/start-tasks?ids=${id}`);
    const task = (r.body as (Task | null)[])[0];
    if (task && (task.status === "READY" || task.status === "ERROR")) return task;
    if (Date.now() > deadline) throw new Error(`task ${id} not settled: ${JSON.stringify(task)}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

export async function start(key: string, body: unknown = {}): Promise<Task> {
  const r = await api(key, "POST", "/api/v1/app-conversations", body);
  expect(r.status, r.text).toBe(200);
  return r.body as Task;
}

export async function startReady(
  key: string,
  body: unknown = {},
): Promise<{ task: Task; conversation: Conversation }> {
  const task = await settle(key, (await start(key, body)).id);
  expect(task.status, task.detail ?? "").toBe("READY");
  const conversation = await getConversation(key, task.app_conversation_id ?? "");
  if (conversation === null) throw new Error("conversation missing");
  return { task, conversation };
}

export async function getConversation(key: string, id: string): Promise<Conversation | null> {
  const r = await api(key, "GET", `/api/v1/app-conversations?ids=${id}`);
  expect(r.status, r.text).toBe(200);
  return (r.body as (Conversation | null)[])[0] ?? null;
}

/**
 * Runs a command in the conversation's sandbox through its agent, as the UI reaches it: at the host of
 * conversation_url, which is relative (the service's own origin, whose agent proxy forwards the call), with the
 * sandbox's session key.
 */
export async function sh(c: Conversation, command: string, cwd?: string, app: TestApp = conversationApp().t) {
  if (c.conversation_url === null) throw new Error(`conversation ${c.id} has no conversation_url`);
  const res = await fetch(
    new URL("/api/bash/execute_bash_command", uiAgentBase(c.conversation_url, app.url)),
    {
      method: "POST",
      headers: { "x-session-api-key": c.session_api_key ?? "", "content-type": "application/json" },
      body: JSON.stringify({ command, ...(cwd ? { cwd } : {}) }),
    },
  );
  const text = await res.text();
  expect(res.status, text).toBe(200);
  return JSON.parse(text) as { exit_code: number; stdout: string; stderr: string };
}

/** A sandbox spec whose "agent" answers /alive but never answers anything else (a hung agent). */
export const HUNG_AGENT = [
  process.execPath,
  "-e",
  `require("node:http").createServer((q, s) => { if (q.url === "/alive" || q.url === "/health") { s.setHeader("content-type", "application/json"); s.end('{"status":"ok"}'); } }).listen(Number(process.env.PORT), "127.0.0.1")`,
];

/** Creates the repository and starts the app (call in beforeAll; stop it with stopConversationApp in afterAll). */
export async function startConversationApp(): Promise<ConversationApp> {
  const gitDir = mkdtempSync(join(tmpdir(), "aws-git-"));
  const bare = createRepository(gitDir);
  // These tests clone a repository of this machine's file system, owned by this test's user. Isolated sandboxes
  // see no host folder and run as their own uids (git refuses another user's repository), so these suites run
  // their sandboxes unisolated; test/e2e/sandbox-isolation.test.ts covers isolation.
  const runtimeDir = mkdtempSync(join(tmpdir(), "aws-conv-"));
  const runtime = createProcessRuntime({ workspaceRoot: join(runtimeDir, "sandboxes"), isolation: "none" });
  const llm = await startFakeLlm();
  const t = await startTestApp({
    runtime,
    specs: [
      ...defaultSpecs({ kind: "process" }, new Date()),
      { id: "hung-agent", command: HUNG_AGENT, initialEnv: {}, workingDir: "", createdAt: new Date() },
    ],
    // A provider host on loopback (an unreachable port) must be allowed by the operator.
    git: { hosts: new ProviderHostPolicy(["127.0.0.1"]) },
    llmModel: "openai/test-model",
    llmBaseUrl: llm.url,
  });
  current = { t, gitDir, bare, runtime, runtimeDir, llm };
  return current;
}

export async function stopConversationApp(): Promise<void> {
  const app = current;
  current = null;
  if (app === null) return;
  await app.t.close();
  await app.runtime.killAll();
  await app.llm.close();
  rmSync(app.gitDir, { recursive: true, force: true });
  rmSync(app.runtimeDir, { recursive: true, force: true });
}
