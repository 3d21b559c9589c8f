import { spawnSync } from "node:child_process";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { SettingsService } from "../../src/gen/workspace/v1/settings_pb.js";
import { grpcClient } from "../helpers/rpc-clients.ts";
import {
  BUILT_CLI,
  CLI,
  killServers,
  serviceEnv,
  spawnServer,
  startServer as startServerProcess,
} from "../helpers/server-process.ts";

const root = join(import.meta.dirname, "..", "..");
const dir = mkdtempSync(join(tmpdir(), "aws-e2e-"));
afterAll(() => {
  killServers();
  rmSync(dir, { recursive: true, force: true });
});

const baseEnv = (extra: Record<string, string> = {}) => serviceEnv(dir, extra);

const startServer = (extra: Record<string, string> = {}, entry: string = CLI) =>
  startServerProcess({ env: baseEnv(extra), entry }, 15_000);

/** Runs `serve` until it exits by itself (a start that fails); its stdout and stderr together. */
async function runServe(extra: Record<string, string>): Promise<{ code: number | null; output: string }> {
  const proc = spawnServer({ env: baseEnv(extra) });
  return { code: await proc.exited(30_000), output: proc.output() };
}

function runCli(args: string[], extra: Record<string, string> = {}) {
  const r = spawnSync(process.execPath, [CLI, ...args], { env: baseEnv(extra), encoding: "utf8" });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

const get = (url: string, key: string) =>
  fetch(`${url}/api/settings`, { headers: { "x-session-api-key": key } });

describe("the server as users run it", () => {
  let firstKey = "";

  it("first start: creates the key file (0600), prints a generated key once, serves REST and gRPC; SIGTERM stops cleanly", async () => {
    const s = await startServer();
    const m = /X-Session-API-Key: (\S+)/.exec(s.output());
    expect(m).not.toBeNull();
    firstKey = m?.[1] ?? "";
    expect(statSync(join(dir, "secret.key")).mode & 0o777).toBe(0o600);
    expect((await get(s.url, firstKey)).status).toBe(404);
    const post = await fetch(`${s.url}/api/settings`, {
      method: "POST",
      headers: { "x-session-api-key": firstKey, "content-type": "application/json" },
      body: JSON.stringify({ agent: "persisted", llm_api_key: "sk-1" }),
    });
    expect(post.status).toBe(200);
    const g = grpcClient(SettingsService, s.grpc);
    const viaGrpc = await g.unary<{ settings?: { agent?: string } }>("GetSettings", {}, firstKey);
    expect(viaGrpc.settings?.agent).toBe("persisted");
    g.close();
    const { code, output: out } = await s.stop();
    expect(code).toBe(0);
    expect(out).toContain("shutting down");
    expect(out).not.toContain("sk-1");
  });

  it("restart: no new key printed, the old key and the data survive", async () => {
    const s = await startServer();
    expect(s.output()).not.toContain("X-Session-API-Key:");
    const r = await get(s.url, firstKey);
    expect(r.status).toBe(200);
    expect(((await r.json()) as { agent: string; llm_api_key_set: boolean }).agent).toBe("persisted");
    expect((await s.stop()).code).toBe(0);
  });

  it("stopping names the sandboxes left running and the command that removes them; the next server takes them over", async () => {
    const headers = { "x-session-api-key": firstKey };
    const startSandbox = async (url: string) =>
      (await (await fetch(`${url}/api/v1/sandboxes`, { method: "POST", headers })).json()) as { id: string };
    const s = await startServer();
    const started = await startSandbox(s.url);
    const stopped = await s.stop();
    expect(stopped.code).toBe(0);
    const line = stopped.output.split("\n").find((l) => l.includes('"runningSandboxes"'));
    expect(line, stopped.output).toBeDefined();
    const purge = `DATA_DIR=${dir} npm run cli -- sandboxes purge`;
    expect(JSON.parse(line ?? "{}")).toMatchObject({
      runningSandboxes: 1,
      sandboxes: [{ id: started.id, user: "default" }],
      removeWith: purge,
    });
    expect(line).toContain(`stopped; 1 sandbox left running: ${started.id} (user default).`);
    expect(line).toContain(`Remove it, workspace included, with: ${purge}`);

    // The next server on the store takes it over (and deletes it here); a second one is left by its stop.
    const next = await startServer();
    const del = await fetch(`${next.url}/api/v1/sandboxes/${started.id}`, { method: "DELETE", headers });
    expect(del.status).toBe(200);
    const [a, b] = [await startSandbox(next.url), await startSandbox(next.url)];
    const out = (await next.stop()).output;
    const left = JSON.parse(out.split("\n").find((l) => l.includes('"runningSandboxes"')) ?? "{}") as {
      runningSandboxes: number;
      sandboxes: { id: string }[];
    };
    expect(left.runningSandboxes).toBe(2);
    expect(left.sandboxes.map((x) => x.id).sort()).toEqual([a.id, b.id].sort());
    const workspaces = readdirSync(join(dir, "sandboxes")).filter((f) => f.startsWith("ws-"));
    expect(workspaces.length).toBeGreaterThanOrEqual(2);

    // The command it named, run as written (the server's DATA_DIR): both go, processes and workspaces with them.
    const r = runCli(["sandboxes", "purge"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain(`using SQLite database ${join(dir, "workspace.sqlite")}`);
    expect(r.stdout).toContain(`deleted ${a.id} (user default, was RUNNING)`);
    expect(r.stdout).toContain(`deleted ${b.id} (user default, was RUNNING)`);
    expect(r.stdout).toContain("deleted 2 sandboxes");
    expect(readdirSync(join(dir, "sandboxes")).filter((f) => f.startsWith("ws-"))).toEqual([]);
    expect(runCli(["sandboxes", "purge"]).stdout).toContain("(no sandboxes)");
    const last = await startServer();
    const none = (await (await fetch(`${last.url}/api/v1/sandboxes/search`, { headers })).json()) as {
      items: unknown[];
    };
    expect(none.items).toEqual([]);
    expect((await last.stop()).output).not.toContain('"runningSandboxes"');
    // Without a store it creates none.
    const empty = runCli(["sandboxes", "purge"], { DATA_DIR: join(dir, "nothing-here") });
    expect(empty.code).toBe(1);
    expect(empty.stderr).toContain("error: no database yet");
    expect(existsSync(join(dir, "nothing-here", "workspace.sqlite"))).toBe(false);
  }, 60_000);

  it("CLI: keys create prints the key alone on the last line; list never shows keys; revoke locks it out", async () => {
    const created = runCli(["keys", "create", "--user", "alice", "--label", "laptop"]);
    expect(created.code).toBe(0);
    const aliceKey = created.stdout.trim().split("\n").at(-1) ?? "";
    expect(aliceKey).toMatch(/^ws_[A-Za-z0-9]{43}$/);
    const listed = runCli(["keys", "list", "--user", "alice", "--json"]);
    expect(listed.code).toBe(0);
    const rows = JSON.parse(listed.stdout) as { id: string; userId: string; label: string }[];
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ userId: "alice", label: "laptop" });
    expect(listed.stdout).not.toContain(aliceKey);
    const table = runCli(["keys", "list"]);
    expect(table.stdout).toContain("alice");

    const s = await startServer({ SESSION_API_KEY: "env-key-for-default" });
    expect((await get(s.url, aliceKey)).status).toBe(404); // alice has no settings: isolation from default
    expect((await get(s.url, "env-key-for-default")).status).toBe(200); // SESSION_API_KEY is user default's
    await s.stop();

    expect(runCli(["keys", "revoke", rows[0]?.id ?? ""]).code).toBe(0);
    expect(runCli(["keys", "revoke", rows[0]?.id ?? ""]).code).toBe(1);
    const s2 = await startServer();
    expect((await get(s2.url, aliceKey)).status).toBe(401);
    await s2.stop();
  });

  it("the compiled server (what npm start runs: npm run build, then dist/) serves and starts sandboxes", async () => {
    const build = spawnSync(
      process.execPath,
      [join(root, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.build.json"],
      {
        cwd: root,
        encoding: "utf8",
      },
    );
    expect(build.status, build.stdout + build.stderr).toBe(0);
    const s = await startServer({}, BUILT_CLI);
    const headers = { "x-session-api-key": firstKey };
    expect((await fetch(`${s.url}/api/settings`, { headers })).status).toBe(200);
    const started = (await (
      await fetch(`${s.url}/api/v1/sandboxes`, { method: "POST", headers })
    ).json()) as { id: string };
    let status = "";
    for (let i = 0; i < 200 && status !== "RUNNING"; i++) {
      const list = (await (
        await fetch(`${s.url}/api/v1/sandboxes?id=${started.id}`, { headers })
      ).json()) as { status: string }[];
      status = list[0]?.status ?? "";
      if (status !== "RUNNING") await new Promise((r) => setTimeout(r, 25));
    }
    expect(status).toBe("RUNNING"); // the compiled built-in agent (main.js) started
    await fetch(`${s.url}/api/v1/sandboxes/${started.id}`, { method: "DELETE", headers });
    expect((await s.stop()).code).toBe(0);
  });

  it("a taken gRPC port stops the start: exit 1 with the error, nothing left listening", async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
    const port = (taken.address() as { port: number }).port;
    try {
      const proc = spawnServer({ env: baseEnv({ GRPC_PORT: String(port) }) });
      const code = await proc.exited(30_000);
      const err = proc.stderr();
      expect(code).toBe(1);
      expect(err).toContain("EADDRINUSE");
      expect(err).toContain(`the gRPC listener cannot listen on port ${port} (GRPC_PORT)`);
    } finally {
      taken.close();
    }
  }, 40_000);

  it("a first start that fails (HTTP port taken) creates no key; the next, working start prints one that works", async () => {
    const fresh = mkdtempSync(join(tmpdir(), "aws-e2e-fresh-"));
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
    const port = (taken.address() as { port: number }).port;
    try {
      const failed = await runServe({ DATA_DIR: fresh, PORT: String(port) });
      expect(failed.code).toBe(1);
      expect(failed.output).toContain(`the HTTP listener cannot listen on port ${port} (PORT)`);
      expect(failed.output).not.toContain("X-Session-API-Key:");
      // Nothing was issued, so nothing was lost.
      const listed = runCli(["keys", "list", "--json"], { DATA_DIR: fresh });
      expect(listed.code, listed.stderr).toBe(0);
      expect(JSON.parse(listed.stdout)).toEqual([]);
    } finally {
      taken.close();
    }
    const s = await startServer({ DATA_DIR: fresh });
    const key = /X-Session-API-Key: (\S+)/.exec(s.output())?.[1] ?? "";
    expect(key).toMatch(/^ws_/);
    expect((await get(s.url, key)).status).toBe(404); // authenticated: user default has no settings yet
    expect((await s.stop()).code).toBe(0);
    rmSync(fresh, { recursive: true, force: true });
  }, 40_000);

  it("CLI usage errors exit 2 with help; bad configuration exits 1 with a clear message", () => {
    const help = runCli(["--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("keys create --user NAME");
    expect(help.stdout).toContain("MONGODB_URI");
    expect(runCli(["keys", "create"]).code).toBe(2);
    expect(runCli(["bogus"]).code).toBe(2);
    const bad = runCli(["serve"], { PORT: "not-a-port" });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain("PORT must be a port number");
  });
});

describe("npm start's build step (prestart: scripts/prestart.mjs)", () => {
  it("builds dist/ the first time, skips tsc when nothing changed, rebuilds after a change", () => {
    // A small project laid out as this one, so that the shared dist/ is left alone: the script, the version check,
    // a tsconfig pair, sources, and this checkout's node_modules (tsc).
    const project = mkdtempSync(join(tmpdir(), "aws-prestart-"));
    try {
      mkdirSync(join(project, "scripts"));
      copyFileSync(join(root, "scripts", "prestart.mjs"), join(project, "scripts", "prestart.mjs"));
      mkdirSync(join(project, "agent", "shared"), { recursive: true });
      copyFileSync(
        join(root, "agent", "shared", "require-node.mjs"),
        join(project, "agent", "shared", "require-node.mjs"),
      );
      mkdirSync(join(project, "src", "cli"), { recursive: true });
      writeFileSync(
        join(project, "src", "cli", "main.ts"),
        'const n: number = 1;\nconsole.log("main", n);\n',
      );
      writeFileSync(
        join(project, "tsconfig.json"),
        JSON.stringify({
          compilerOptions: {
            target: "es2024",
            lib: ["es2024"],
            module: "nodenext",
            moduleResolution: "nodenext",
            types: ["node"],
            strict: true,
            skipLibCheck: true,
            noEmit: true,
          },
          include: ["src"],
        }),
      );
      writeFileSync(
        join(project, "tsconfig.build.json"),
        JSON.stringify({
          extends: "./tsconfig.json",
          compilerOptions: { noEmit: false, outDir: "dist", rootDir: ".", allowJs: true },
          include: ["src"],
        }),
      );
      symlinkSync(join(root, "node_modules"), join(project, "node_modules"));
      const prestart = () => {
        const t0 = performance.now();
        const r = spawnSync(process.execPath, [join(project, "scripts", "prestart.mjs")], {
          cwd: project,
          encoding: "utf8",
        });
        return { code: r.status, stderr: r.stderr, ms: performance.now() - t0 };
      };
      const main = join(project, "dist", "src", "cli", "main.js");

      const first = prestart();
      expect(first.code, first.stderr).toBe(0);
      expect(first.stderr).toContain("prestart: building dist/ (tsc)");
      expect(readFileSync(main, "utf8")).toContain('console.log("main", n)');

      // Nothing changed: no tsc at all (it alone takes over a second here), nothing printed.
      const again = prestart();
      expect(again.code).toBe(0);
      expect(again.stderr).toBe("");
      expect(again.ms).toBeLessThan(Math.max(1000, first.ms / 2));

      writeFileSync(
        join(project, "src", "cli", "main.ts"),
        'const n: number = 2;\nconsole.log("changed", n);\n',
      );
      const changed = prestart();
      expect(changed.code, changed.stderr).toBe(0);
      expect(changed.stderr).toContain(
        "prestart: rebuilding dist/, changed since the last build: src/cli/main.ts",
      );
      expect(readFileSync(main, "utf8")).toContain('console.log("changed", n)');
      expect(prestart().stderr).toBe("");

      // A new file counts (its folder changed), and a build that fails stops the start and is tried again.
      writeFileSync(join(project, "src", "broken.ts"), 'export const s: number = "text";\n');
      const broken = prestart();
      expect(broken.code).not.toBe(0);
      expect(broken.stderr).toContain("prestart: rebuilding dist/, changed since the last build: src");
      expect(prestart().code).not.toBe(0);
      rmSync(join(project, "src", "broken.ts"));
      expect(prestart().code).toBe(0);
      expect(prestart().stderr).toBe("");

      // dist/ gone: built again from nothing (tsc's incremental state would otherwise emit nothing).
      rmSync(join(project, "dist", "src"), { recursive: true });
      const rebuilt = prestart();
      expect(rebuilt.code, rebuilt.stderr).toBe(0);
      expect(existsSync(main)).toBe(true);
    } finally {
      rmSync(project, { recursive: true, force: true });
    }
  }, 120_000);
});
