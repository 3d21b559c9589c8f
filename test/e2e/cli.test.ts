import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestApp, type TestApp } from "../helpers/test-app.ts";

const cli = join(import.meta.dirname, "..", "..", "src", "cli", "main.ts");
let t: TestApp;
let key: string;

beforeAll(async () => {
  t = await startTestApp();
  key = await t.keyFor("cli-user");
});
afterAll(async () => {
  await t.close();
});

/** Runs the CLI as a user would (async: the server runs in this process). */
function run(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [cli, ...args], { env: { PATH: process.env.PATH ?? "", ...env } });
    let stdout = "";
    let stderr = "";
    p.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    p.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    p.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

describe("CLI against a running server", () => {
  it("settings set/get: values parsed as JSON when they parse, table by default, --json for scripts", async () => {
    const set = await run([
      "--url",
      t.url,
      "--key",
      key,
      "settings",
      "set",
      "llm_model=m1",
      "max_iterations=42",
      "confirmation_mode=true",
    ]);
    expect(set).toMatchObject({ code: 0, stdout: "Settings stored\n" });
    const table = await run(["--url", t.url, "--key", key, "settings", "get"]);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/^SETTING\s+VALUE/);
    expect(table.stdout).toMatch(/max_iterations\s+42/);
    const json = await run(["--url", t.url, "settings", "get", "--json"], { WORKSPACE_API_KEY: key });
    expect(JSON.parse(json.stdout)).toMatchObject({
      llm_model: "m1",
      max_iterations: 42,
      confirmation_mode: true,
    });
  });

  it("validation errors are shown with their field and exit 1", async () => {
    const r = await run([
      "--url",
      t.url,
      "--key",
      key,
      "settings",
      "set",
      "max_iterations=ten",
      "enable_default_condenser=maybe",
    ]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("HTTP 422");
    expect(r.stderr).toContain("max_iterations: Input should be a valid integer");
    expect(r.stderr).toContain("enable_default_condenser: Input should be a valid boolean");
  });

  it("sandboxes start, list (table and JSON), pause, resume, delete", async () => {
    const started = await run(["--url", t.url, "--key", key, "sandboxes", "start", "--json"]);
    expect(started.code).toBe(0);
    const id = (JSON.parse(started.stdout) as { id: string }).id;
    const list = await run(["--url", t.url, "--key", key, "sandboxes", "list"]);
    expect(list.stdout).toMatch(/^ID\s+STATUS\s+SPEC/);
    expect(list.stdout).toContain(id);
    expect((await run(["--url", t.url, "--key", key, "sandboxes", "pause", id])).stdout).toBe(
      `paused ${id}\n`,
    );
    expect((await run(["--url", t.url, "--key", key, "sandboxes", "resume", id])).stdout).toBe(
      `resumed ${id}\n`,
    );
    const listed = JSON.parse(
      (await run(["--url", t.url, "--key", key, "sandboxes", "list", "--json"])).stdout,
    ) as { id: string; status: string; exposed_urls: { name: string; url: string }[] | null }[];
    expect(listed.map((s) => s.id)).toContain(id);
    // A running sandbox's AGENT URL: its AGENT_SERVER ("/", the server's own origin) resolved against --url.
    const mine = listed.find((s) => s.id === id);
    expect(mine?.status).toBe("RUNNING");
    expect(mine?.exposed_urls?.[0]).toMatchObject({ name: "AGENT_SERVER", url: "/" });
    const table = (await run(["--url", t.url, "--key", key, "sandboxes", "list"])).stdout;
    const row = table.split("\n").find((l) => l.startsWith(id));
    expect(row?.trimEnd().split(/\s+/).at(-1)).toBe(new URL(t.url).origin);
    expect((await run(["--url", t.url, "--key", key, "sandboxes", "delete", id])).code).toBe(0);
    const missing = await run(["--url", t.url, "--key", key, "sandboxes", "pause", id]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("Not Found");
  });

  it("clear errors: no key (2), bad key (1), unreachable server (3), unknown command (2)", async () => {
    const noKey = await run(["--url", t.url, "sandboxes", "list"]);
    expect(noKey.code).toBe(2);
    expect(noKey.stderr).toContain("needs an API key");
    const badKey = await run(["--url", t.url, "--key", "nope", "sandboxes", "list"]);
    expect(badKey.code).toBe(1);
    expect(badKey.stderr).toContain("Unauthorized");
    const down = await run(["--url", "http://127.0.0.1:1", "--key", key, "settings", "get"]);
    expect(down.code).toBe(3);
    expect(down.stderr).toContain("cannot reach the server");
    expect((await run(["sandboxes", "fly", "--key", key])).code).toBe(2);
    const help = await run(["--help"]);
    expect(help.stdout).toContain("sandboxes pause|resume|delete ID");
    expect(help.stdout).toContain("Exit codes");
  });
});

describe("CLI administration: which store, no silent new database, short usage errors", () => {
  const dataDir = mkdtempSync(join(tmpdir(), "aws-cli-store-"));
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));
  const db = join(dataDir, "workspace.sqlite");

  it("keys commands refuse to create a database (naming DATA_DIR and --init); --init creates it; each says which store", async () => {
    const refused = await run(["keys", "create", "--user", "alice"], { DATA_DIR: dataDir });
    expect(refused.code).toBe(1);
    expect(refused.stdout).toBe("");
    expect(refused.stderr).toBe(
      `error: no database yet: SQLite database ${db} (DATA_DIR=${dataDir}). Set DATA_DIR as the server has it, or pass --init to create a new, empty database there\n`,
    );
    expect(existsSync(db)).toBe(false);
    expect((await run(["keys", "list"], { DATA_DIR: dataDir })).code).toBe(1);
    expect(existsSync(db)).toBe(false);

    const created = await run(["keys", "create", "--user", "alice", "--init"], { DATA_DIR: dataDir });
    expect(created.code, created.stderr).toBe(0);
    expect(created.stderr).toBe(`using SQLite database ${db} (DATA_DIR=${dataDir})\n`);
    expect(created.stdout.trim().split("\n").at(-1)).toMatch(/^ws_/);
    const listed = await run(["keys", "list", "--json"], { DATA_DIR: dataDir });
    expect(listed.code).toBe(0);
    expect(listed.stderr).toContain(`using SQLite database ${db}`);
    expect(JSON.parse(listed.stdout)).toMatchObject([{ userId: "alice" }]);
  });

  it("MongoDB: the store is named by database and hosts, never with the URI's credentials", async () => {
    const { describeStorage } = await import("../../src/server/open-storage.ts");
    expect(
      describeStorage(
        { kind: "mongo", uri: "mongodb://u:secret@db1:27017,db2/prod?replicaSet=rs", dbName: undefined },
        "/d",
      ),
    ).toBe("MongoDB database prod at db1:27017,db2 (MONGODB_URI)");
    expect(describeStorage({ kind: "mongo", uri: "mongodb://db1", dbName: "x" }, "/d")).toBe(
      "MongoDB database x at db1 (MONGODB_URI, MONGODB_DB)",
    );
  });

  it("a usage error is one line that points to --help; bad configuration lists every problem at once", async () => {
    for (const args of [["keys", "create"], ["bogus"], ["keys", "list", "--colour"]]) {
      const r = await run(args, { DATA_DIR: dataDir });
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(/^error: .+ \(see --help\)\n$/);
    }
    const bad = await run(["serve"], {
      PORT: "3005",
      GRPC_PORT: "3005",
      LOG_LEVEL: "loud",
      DATA_DIR: dataDir,
    });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toBe(
      '2 configuration errors:\n  LOG_LEVEL "loud" is not a level\n  PORT and GRPC_PORT must differ (both are 3005): HTTP and gRPC each need a port of their own\n',
    );
  });
});
