// Issue 38, F3 (and F1's NODE_OPTIONS): what root does in a sandbox's workspace never follows a link the sandbox
// planted. The working directory made on a resume (`makeCwd`), the handing of a workspace to another uid
// (`chownTreeAt`), the sandbox's log, and the built-in agent's environment. The chown checks need root.
import { spawnSync } from "node:child_process";
import {
  closeSync,
  linkSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  chownTreeAt,
  LinkRefused,
  makeDirsAt,
  openAppendAt,
} from "../../src/adapters/runtimes/process/no-follow.ts";
import {
  type LaunchContext,
  SandboxLauncher,
  withoutInspector,
} from "../../src/adapters/runtimes/process/sandbox-launch.ts";

const asRoot = process.getuid?.() === 0;
const root = mkdtempSync(join(tmpdir(), "sandbox-root-fs-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const SANDBOX = { uid: 1_999_999_001, gid: 1_999_999_001 };

/** A launcher with what makeCwd and env use (as root, isolated). */
const launcher = (compileCacheDir: string | null = null) =>
  new SandboxLauncher({
    asRoot,
    baseEnv: { PATH: "/usr/bin:/bin" },
    host: "127.0.0.1",
    compileCacheDir,
  } as unknown as LaunchContext);

/** A workspace and, outside it, a host folder and file root owns. */
function layout(name: string): { ws: string; victim: string; victimFile: string } {
  const ws = join(root, name, "ws");
  const victim = join(root, name, "host-dir");
  mkdirSync(ws, { recursive: true });
  mkdirSync(victim, { recursive: true });
  const victimFile = join(victim, "file");
  writeFileSync(victimFile, "host");
  return { ws, victim, victimFile };
}

describe("root in a sandbox's workspace (issue 38, F3)", () => {
  it.skipIf(!asRoot)(
    "makeCwd refuses a working directory (or a folder on its way) that the sandbox replaced with a symlink, and chowns nothing outside",
    () => {
      const { ws, victim, victimFile } = layout("cwd");
      symlinkSync(victim, join(ws, "project"));
      mkdirSync(join(ws, "a"));
      symlinkSync(victim, join(ws, "a", "b"));
      for (const rel of ["project", "project/sub", "a/b/c"]) {
        let error: unknown = null;
        try {
          launcher().makeCwd(ws, rel, SANDBOX, true);
        } catch (e: unknown) {
          error = e;
        }
        expect(statSync(victim).uid, rel).toBe(0);
        expect(statSync(victimFile).uid, rel).toBe(0);
        expect(String(error), rel).toMatch(/symlink/);
      }
      expect(lstatSync(join(victim, "sub"), { throwIfNoEntry: false })).toBeUndefined();
      // A plain path is made and handed to the sandbox's user, the workspace with it.
      const cwd = launcher().makeCwd(ws, "x/y", SANDBOX, true);
      expect(cwd).toBe(join(ws, "x", "y"));
      for (const dir of [ws, join(ws, "x"), cwd]) expect(statSync(dir).uid).toBe(SANDBOX.uid);
    },
  );

  it.skipIf(!asRoot)("handing a workspace to another uid changes links, not what they point to", () => {
    const { ws, victim, victimFile } = layout("tree");
    mkdirSync(join(ws, "d"));
    writeFileSync(join(ws, "d", "f"), "mine");
    symlinkSync(victim, join(ws, "d", "to-host"));
    symlinkSync(victimFile, join(ws, "to-file"));
    chownTreeAt(ws, SANDBOX.uid, SANDBOX.gid);
    for (const p of [ws, join(ws, "d"), join(ws, "d", "f")]) expect(statSync(p).uid).toBe(SANDBOX.uid);
    for (const p of [join(ws, "d", "to-host"), join(ws, "to-file")])
      expect(lstatSync(p).uid).toBe(SANDBOX.uid);
    expect(statSync(victim).uid).toBe(0);
    expect(statSync(victimFile).uid).toBe(0);
    // The workspace itself must be a folder, not a link.
    symlinkSync(victim, join(root, "tree", "ws-link"));
    expect(() => chownTreeAt(join(root, "tree", "ws-link"), SANDBOX.uid, SANDBOX.gid)).toThrow(LinkRefused);
    expect(statSync(victim).uid).toBe(0);
  });

  it("the log is opened only as a regular file of its own: not through a symlink, a FIFO or a hard link", () => {
    const { ws, victim, victimFile } = layout("log");
    const dir = makeDirsAt(ws, "logs", null);
    try {
      symlinkSync(victimFile, join(ws, "logs", "through-link"));
      linkSync(victimFile, join(ws, "logs", "hard-link"));
      expect(spawnSync("mkfifo", [join(ws, "logs", "fifo")]).status).toBe(0);
      for (const name of ["through-link", "hard-link", "fifo"])
        expect(() => openAppendAt(dir, name, name), name).toThrow(LinkRefused);
      const fd = openAppendAt(dir, "ok.log", "ok.log");
      writeSync(fd, "line\n");
      closeSync(fd);
      expect(readFileSync(join(ws, "logs", "ok.log"), "utf8")).toBe("line\n");
      expect(readFileSync(victimFile, "utf8")).toBe("host");
    } finally {
      closeSync(dir);
    }
    // A folder on the way that is a link is refused.
    symlinkSync(victim, join(ws, "link-dir"));
    expect(() => makeDirsAt(ws, "link-dir/logs", null)).toThrow(LinkRefused);
  });
});

describe("the built-in agent's environment (issue 38, F1)", () => {
  it("drops every option of NODE_OPTIONS that would open the inspector, and keeps the others", () => {
    expect(withoutInspector("--inspect")).toBeUndefined();
    expect(
      withoutInspector(
        "--max-old-space-size=512 --inspect=0.0.0.0:9229 --inspect-brk --inspect-port 9230 --inspect-wait --debug-port=1 --enable-source-maps",
      ),
    ).toBe("--max-old-space-size=512 --enable-source-maps");
    const spec = (command: string[]) => ({
      id: "s",
      command,
      initialEnv: { NODE_OPTIONS: "--inspect=9229 --no-warnings" },
      workingDir: "",
    });
    const env = launcher("/cache").env("/ws", "/ws", spec([]), "key", 1234, true);
    expect(env.NODE_OPTIONS).toBe("--no-warnings");
    // Another command's environment is the spec's.
    expect(launcher().env("/ws", "/ws", spec(["/bin/sh"]), "key", 1234, false).NODE_OPTIONS).toBe(
      "--inspect=9229 --no-warnings",
    );
  });
});
