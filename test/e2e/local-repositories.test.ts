// Conversations started from a repository on the server's machine (an absolute path or a file:// URL) under the
// default isolation (bubblewrap): LOCAL_REPOSITORY_ROOTS are bound read-only into sandboxes and a clone from them
// works, of a bare repository and of one with a working tree (a folder with .git) alike; a path elsewhere is
// refused up front (422, naming the variable); a start that fails after creating its sandbox pauses it (it stops
// holding a running slot), its error names the real cause, and the server logs it at warn with the ids. On the
// Docker runtime (where the engine and the agent-server stand-in image are up), both forms clone too: its
// containers run as a user of their own as well.
import { execFileSync, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createDockerRuntime,
  type DockerRuntime,
} from "../../src/adapters/runtimes/docker/docker-runtime.ts";
import { createProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime.ts";
import type { ProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime-types.ts";
import { defaultSpecs } from "../../src/server/sandbox-specs.ts";
import { createRepository, type Task } from "../helpers/app-conversations.ts";
import { dockerFromEnv, findAgentServerImage } from "../helpers/docker-env.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

const bwrapMissing = spawnSync("bwrap", ["--version"]).error;
const skip = bwrapMissing ? `bubblewrap (bwrap) is not installed: ${bwrapMissing.message}` : "";

describe.skipIf(skip !== "")(
  `local repositories under bubblewrap${skip ? ` (skipped: ${skip})` : ""}`,
  () => {
    let t: TestApp;
    let runtime: ProcessRuntime;
    let key: string;
    let roots: string;
    let outside: string;
    let bare: string;
    let worktree: string;
    const dirs: string[] = [];
    const logged: Record<string, unknown>[] = [];

    beforeAll(async () => {
      // World-traversable: as root, each isolated sandbox runs as a uid of its own.
      roots = mkdtempSync(join(tmpdir(), "aws-local-roots-"));
      chmodSync(roots, 0o755);
      mkdirSync(join(roots, "repos"), { mode: 0o755 });
      bare = createRepository(join(roots, "repos"));
      // A repository with a working tree, as people keep them: git checks its .git folder's owner.
      worktree = join(roots, "repos", "demo");
      execFileSync("git", ["clone", "-q", bare, worktree]);
      execFileSync("git", ["-C", worktree, "branch", "-q", "feature", "origin/feature"]);
      outside = mkdtempSync(join(tmpdir(), "aws-local-outside-"));
      const runtimeDir = mkdtempSync(join(tmpdir(), "aws-local-rt-"));
      dirs.push(roots, outside, runtimeDir);
      const allowed = join(roots, "repos");
      runtime = createProcessRuntime({
        workspaceRoot: join(runtimeDir, "sandboxes"),
        isolation: "bwrap",
        readOnlyPaths: [allowed],
        warmAgents: 0,
      });
      t = await startTestApp({
        runtime,
        conversations: { localRepositoryRoots: [allowed] },
        llmModel: "openai/test-model",
        logger: { level: "warn", stream: { write: (line: string) => logged.push(JSON.parse(line)) } },
      });
      key = await t.keyFor("dana");
    });
    afterAll(async () => {
      await t?.close();
      await runtime?.killAll();
      for (const d of dirs) rmSync(d, { recursive: true, force: true });
    });

    const api = (method: string, path: string, body?: unknown) => call(t.url, key, method, path, body);
    async function settle(id: string): Promise<Task> {
      const deadline = Date.now() + 30_000;
      for (;;) {
        const r = await api("GET", `/api/v1/app-conversations/start-tasks?ids=${id}`);
        const task = (r.body as (Task | null)[])[0];
        if (task && (task.status === "READY" || task.status === "ERROR")) return task;
        if (Date.now() > deadline) throw new Error(`task ${id} not settled: ${JSON.stringify(task)}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    }
    const sandboxStatus = async (id: string) =>
      ((await api("GET", `/api/v1/sandboxes?id=${id}`)).body as ({ status: string } | null)[])[0]?.status;

    it("clones a repository inside LOCAL_REPOSITORY_ROOTS, by path and by file:// URL, in an isolated sandbox", async () => {
      expect(runtime.isolation.mode).toBe("bwrap");
      for (const repo of [bare, `file://${bare}`]) {
        const r = await api("POST", "/api/v1/app-conversations", { selected_repository: repo });
        expect(r.status, r.text).toBe(200);
        const task = await settle((r.body as Task).id);
        expect(task.status, task.detail ?? "").toBe("READY");
      }
    }, 60_000);

    it("clones a repository with a working tree (a folder holding .git), by path and by file:// URL, in an isolated sandbox", async () => {
      for (const repo of [worktree, `file://${worktree}`]) {
        const r = await api("POST", "/api/v1/app-conversations", {
          selected_repository: repo,
          selected_branch: "feature",
        });
        expect(r.status, r.text).toBe(200);
        const task = await settle((r.body as Task).id);
        expect(task.status, task.detail ?? "").toBe("READY");
      }
    }, 60_000);

    it("a local path outside the roots (or one escaping them with ..) is refused up front with 422 naming LOCAL_REPOSITORY_ROOTS", async () => {
      const before = ((await api("GET", "/api/v1/sandboxes/search?limit=100")).body as { items: unknown[] })
        .items.length;
      for (const repo of [
        outside,
        `file://${outside}`,
        `${roots}/repos/../../${outside.split("/").at(-1)}`,
      ]) {
        const r = await api("POST", "/api/v1/app-conversations", { selected_repository: repo });
        expect(r.status, repo).toBe(422);
        expect(r.text).toContain("selected_repository is a local path outside LOCAL_REPOSITORY_ROOTS");
      }
      const after = ((await api("GET", "/api/v1/sandboxes/search?limit=100")).body as { items: unknown[] })
        .items.length;
      expect(after).toBe(before); // nothing was started
    });

    it("a start failing after its sandbox was created pauses that sandbox; the error names the cause, not a token", async () => {
      const r = await api("POST", "/api/v1/app-conversations", {
        selected_repository: join(roots, "repos", "nope.git"),
      });
      expect(r.status, r.text).toBe(200);
      const task = await settle((r.body as Task).id);
      expect(task.status).toBe("ERROR");
      expect(task.detail).toContain("Could not clone");
      expect(task.detail).toContain("Check that the path is a git repository inside LOCAL_REPOSITORY_ROOTS");
      expect(task.detail).not.toContain("token");
      expect(task.sandbox_id).not.toBeNull();
      expect(await sandboxStatus(task.sandbox_id ?? "")).toBe("PAUSED");
      // The server's log says so too, at warn, with the ids to look for and the cause.
      const line = logged.find((l) => l.msg === "conversation start failed" && l.taskId === task.id);
      expect(line, JSON.stringify(logged)).toBeDefined();
      expect(line?.level).toBe(40);
      expect(line?.sandboxId).toBe(task.sandbox_id);
      expect(line).toHaveProperty("conversationId");
      expect(String(line?.detail)).toContain("Could not clone");
    }, 60_000);
  },
);

/** Starts a conversation on `repo` and follows its start task to READY or ERROR. */
async function startOn(t: TestApp, key: string, body: Record<string, unknown>): Promise<Task> {
  const r = await call(t.url, key, "POST", "/api/v1/app-conversations", body);
  expect(r.status, r.text).toBe(200);
  const id = (r.body as Task).id;
  const deadline = Date.now() + 60_000;
  for (;;) {
    const task = (
      (await call(t.url, key, "GET", `/api/v1/app-conversations/start-tasks?ids=${id}`))
        .body as (Task | null)[]
    )[0];
    if (task && (task.status === "READY" || task.status === "ERROR")) return task;
    if (Date.now() > deadline) throw new Error(`task ${id} not settled: ${JSON.stringify(task)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const docker = dockerFromEnv();
const found = await findAgentServerImage(docker);
const dockerSkip = typeof found === "string" ? found : "";

describe.skipIf(dockerSkip !== "")(
  `local repositories on the Docker runtime${dockerSkip ? ` (skipped: ${dockerSkip})` : ""}`,
  () => {
    let t: TestApp;
    let runtime: DockerRuntime;
    let key: string;
    let root: string;

    beforeAll(async () => {
      root = mkdtempSync(join(tmpdir(), "aws-local-docker-"));
      chmodSync(root, 0o755);
      const repos = join(root, "repos");
      mkdirSync(repos, { mode: 0o755 });
      const bare = createRepository(repos);
      execFileSync("git", ["clone", "-q", bare, join(repos, "demo")]);
      runtime = createDockerRuntime({
        docker,
        network: "host",
        labels: { "workspace.test-run": randomBytes(4).toString("hex") },
        stopTimeoutSeconds: 2,
        readOnlyPaths: [repos],
      });
      t = await startTestApp({
        runtime,
        // The Docker runtime's default spec: the agent-server (its stand-in, with git, as the real image).
        specs: defaultSpecs(
          { kind: "docker", image: typeof found === "string" ? "unused" : found.image },
          new Date(),
        ),
        conversations: { localRepositoryRoots: [repos] },
        llmModel: "openai/test-model",
      });
      key = await t.keyFor("erin");
    }, 120_000);
    afterAll(async () => {
      await runtime?.removeAll();
      await t?.close();
      rmSync(root, { recursive: true, force: true });
    });

    it("clones a bare repository and one with a working tree, by path and by file:// URL", async () => {
      for (const path of [join(root, "repos", "project.git"), join(root, "repos", "demo")])
        for (const repo of [path, `file://${path}`]) {
          const task = await startOn(t, key, { selected_repository: repo });
          expect(task.status, `${repo}: ${task.detail ?? ""}`).toBe("READY");
        }
    }, 180_000);
  },
);
