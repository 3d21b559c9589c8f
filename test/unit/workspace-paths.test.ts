import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { inWorkspace, realInWorkspace } from "../../agent/workspace-paths.ts";

// The built-in agent's mapping of the UI's paths into the workspace, on the real file system: the check the workspace
// routes (git changes and diff, upload) make whatever the runtime's isolation, so also without bubblewrap.
const root = mkdtempSync(join(tmpdir(), "workspace-paths-"));
const ws = join(root, "ws");
const outside = join(root, "outside");
mkdirSync(join(ws, "project", "src"), { recursive: true });
mkdirSync(outside);
symlinkSync("/", join(ws, "to-root"));
symlinkSync(outside, join(ws, "project", "to-outside"));
symlinkSync(join(ws, "project", "src"), join(ws, "to-src"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("paths of the workspace routes", () => {
  it("maps the reference layout and refuses .. out of the workspace", () => {
    expect(inWorkspace("/workspace/project/a.txt", ws)).toBe(join(ws, "a.txt"));
    expect(inWorkspace("/workspace/b.txt", ws)).toBe(join(ws, "b.txt"));
    expect(inWorkspace(`${ws}/project/c.txt`, ws)).toBe(join(ws, "project", "c.txt"));
    for (const p of [
      "/workspace/../../etc/passwd",
      "/workspace/project/../../x",
      `${ws}/../outside/x`,
      "/etc/passwd",
    ])
      expect(realInWorkspace(p, ws), p).toBeNull();
  });

  it("refuses a path a symlink takes out of the workspace, existing or not; links that stay inside are fine", () => {
    for (const p of [
      `${ws}/to-root/etc/passwd`,
      "/workspace/to-root/etc/hostname",
      `${ws}/project/to-outside/new-file`,
      `${ws}/project/to-outside/new/deeper/file`,
    ])
      expect(realInWorkspace(p, ws), p).toBeNull();
    expect(realInWorkspace(`${ws}/to-src/new.ts`, ws)).toBe(join(ws, "to-src", "new.ts"));
    expect(realInWorkspace("/workspace/project/src/new.ts", ws)).toBe(join(ws, "src", "new.ts"));
    expect(realInWorkspace("/workspace", ws)).toBe(ws);
  });
});
