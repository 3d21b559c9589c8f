// Conversations started from a repository on the server's machine (an absolute path or a file:// URL) under the
// default isolation (bubblewrap): LOCAL_REPOSITORY_ROOTS are bound read-only into sandboxes and a clone from them
// works; a path elsewhere is refused up front (422, naming the variable); a start that fails after creating its
// sandbox pauses it (it stops holding a running slot) and its error names the real cause.
import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createProcessRuntime, type ProcessRuntime } from "../../src/sandbox/process/process-runtime.ts";
import { createRepository, type Task } from "../helpers/app-conversations.ts";
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
    const dirs: string[] = [];

    beforeAll(async () => {
      // World-traversable: as root, each isolated sandbox runs as a uid of its own.
      roots = mkdtempSync(join(tmpdir(), "aws-local-roots-"));
      chmodSync(roots, 0o755);
      mkdirSync(join(roots, "repos"), { mode: 0o755 });
      bare = createRepository(join(roots, "repos"));
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
    }, 60_000);
  },
);
