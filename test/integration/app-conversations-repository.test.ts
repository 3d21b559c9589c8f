// Starting conversations in a repository: clone, branch, setup script, git hooks, and their failures.
// Shared setup: test/helpers/app-conversations.ts.

import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  api,
  git,
  settle,
  sh,
  start,
  startConversationApp,
  startReady,
  stopConversationApp,
} from "../helpers/app-conversations.ts";
import type { TestApp } from "../helpers/test-app.ts";

let t: TestApp;
let gitDir: string;
let bare: string;
beforeAll(async () => {
  ({ t, gitDir, bare } = await startConversationApp());
});
afterAll(stopConversationApp);

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
