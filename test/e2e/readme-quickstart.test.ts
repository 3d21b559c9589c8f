// The README's quick start, run as written: the `sh` blocks between <!-- quickstart:begin --> and
// <!-- quickstart:end --> are run in order by one bash process against a server this test starts (from source, on
// free ports, a fresh DATA_DIR, the default process runtime). Only three lines of the first block are replaced: the
// BASE and GRPC URLs and the KEY, with this server's ports and the key it printed at its first start. The server
// runs with GIT_PROVIDER_VERIFY=false (the README says a made-up token is refused otherwise; no provider is reachable
// here). The settings' model gets a base URL: a fake model server on loopback (no test reaches outside this
// machine), which the built-in agent asks when it runs the conversation's first message. Every `# → ...` comment of a block is an expected answer: its parts between `...` must appear, in order,
// in what that block printed.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ENV_DOC } from "../../src/server/config.ts";
import { type FakeLlm, startFakeLlm } from "../helpers/fake-llm.ts";

const root = join(import.meta.dirname, "..", "..");
const cli = join(root, "src", "cli", "main.ts");

/** The `sh` blocks of the README's marked quick-start section, in order. */
function quickstartBlocks(markdown: string): string[] {
  const begin = markdown.indexOf("<!-- quickstart:begin -->");
  const end = markdown.indexOf("<!-- quickstart:end -->");
  if (begin < 0 || end < begin) throw new Error("README.md has no <!-- quickstart:begin/end --> section");
  const section = markdown.slice(begin, end);
  return [...section.matchAll(/^```sh\n([\s\S]*?)^```$/gm)].map((m) => m[1] ?? "");
}

/** The expected answers of a block: each `# → ` comment split at `...` into parts that must appear in order. */
function expectations(block: string): string[][] {
  return block
    .split("\n")
    .filter((l) => l.startsWith("# → "))
    .map((l) =>
      l
        .slice("# → ".length)
        .split("...")
        .filter((p) => p !== ""),
    );
}

/** True when every part occurs in `text`, each after the previous one. */
function inOrder(text: string, parts: string[]): boolean {
  let at = 0;
  for (const p of parts) {
    const i = text.indexOf(p, at);
    if (i < 0) return false;
    at = i + p.length;
  }
  return true;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      const port = typeof a === "object" && a !== null ? a.port : 0;
      s.close(() => resolve(port));
    });
  });
}

function runBash(script: string, env: NodeJS.ProcessEnv, timeoutMs: number) {
  return new Promise<{ code: number | null; out: string }>((resolve) => {
    const p = spawn("bash", ["-c", script], { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    p.stdout.on("data", (d: Buffer) => {
      out += d.toString();
    });
    p.stderr.on("data", (d: Buffer) => {
      out += d.toString();
    });
    const timer = setTimeout(() => p.kill("SIGKILL"), timeoutMs);
    p.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

const readme = readFileSync(join(root, "README.md"), "utf8");
const blocks = quickstartBlocks(readme);

describe("the README's configuration", () => {
  it("names every environment variable the server reads (ENV_DOC, which --help prints)", () => {
    const config = readme.slice(readme.indexOf("## Configuration"), readme.indexOf("## Security model"));
    const missing = ENV_DOC.map(([name]) => name).filter((name) => !config.includes(`\`${name}\``));
    expect(missing).toEqual([]);
  });
});

describe("the README's quick start", () => {
  let dir = "";
  let server: ChildProcess | undefined;
  let output = "";
  let base = "";
  let grpc = "";
  let key = "";
  let llm: FakeLlm;

  beforeAll(async () => {
    llm = await startFakeLlm();
    dir = mkdtempSync(join(tmpdir(), "aws-readme-"));
    const [port, grpcPort] = [await freePort(), await freePort()];
    base = `http://127.0.0.1:${port}`;
    grpc = `http://127.0.0.1:${grpcPort}`;
    server = spawn(process.execPath, [cli, "serve"], {
      env: {
        PATH: process.env.PATH ?? "",
        HOME: process.env.HOME ?? "/tmp",
        DATA_DIR: dir,
        PORT: String(port),
        GRPC_PORT: String(grpcPort),
        GIT_PROVIDER_VERIFY: "false",
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    server.stdout?.on("data", (d: Buffer) => {
      output += d.toString();
    });
    server.stderr?.on("data", (d: Buffer) => {
      output += d.toString();
    });
    const deadline = Date.now() + 60_000;
    while (!output.includes('"agent workspace service listening"')) {
      if (Date.now() > deadline || server.exitCode !== null)
        throw new Error(`server did not start:\n${output}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    key = /X-Session-API-Key: (ws_\S+)/.exec(output)?.[1] ?? "";
    expect(key, "the first start prints a key").not.toBe("");
  }, 90_000);

  afterAll(async () => {
    // Sandboxes outlive their server: delete what the quick start started, then stop the server.
    if (server !== undefined && server.exitCode === null && key !== "") {
      const headers = { "x-session-api-key": key };
      try {
        const page = (await (await fetch(`${base}/api/v1/sandboxes/search`, { headers })).json()) as {
          items: { id: string }[];
        };
        for (const s of page.items)
          await fetch(`${base}/api/v1/sandboxes/${s.id}`, { method: "DELETE", headers });
      } catch {
        // the test already failed; the suite's leftover check reports what remains
      }
    }
    if (server !== undefined && server.exitCode === null) {
      const exited = new Promise((r) => server?.once("exit", r));
      server.kill("SIGTERM");
      await Promise.race([exited, new Promise((r) => setTimeout(r, 15_000))]);
      if (server.exitCode === null) server.kill("SIGKILL");
    }
    rmSync(dir, { recursive: true, force: true });
    await llm?.close();
  }, 60_000);

  it("has a marked section whose first block defines BASE, GRPC and KEY", () => {
    expect(blocks.length).toBeGreaterThanOrEqual(6);
    for (const name of ["BASE", "GRPC", "KEY"])
      expect(blocks[0], `${name}= line in the first block`).toMatch(new RegExp(`^${name}=`, "m"));
  });

  it("matches expected answers strictly: parts must all appear, in order", () => {
    expect(expectations('x\n# → {"a":1,...,"b":2}\n')).toEqual([['{"a":1,', ',"b":2}']]);
    expect(inOrder('{"a":1,"c":3,"b":2}', ['{"a":1,', ',"b":2}'])).toBe(true);
    expect(inOrder('{"b":2,"a":1,}', ['{"a":1,', ',"b":2}'])).toBe(false);
    expect(inOrder('{"a":1,', ['{"a":1,', ',"b":2}'])).toBe(false);
  });

  it("runs every block in order with bash; each exits 0 and prints what its # → lines show", async () => {
    const first = (blocks[0] ?? "")
      .replace(/^BASE=\S*/m, `BASE=${base}`)
      .replace(/^GRPC=\S*/m, `GRPC=${grpc}`)
      .replace(/^KEY=\S*/m, `KEY=${key}`);
    // The model's server: the fake one (its `llm_base_url` beside the README's key).
    const all = [first, ...blocks.slice(1)].map((b) =>
      b.replace('"llm_api_key":"sk-ant-..."', `"llm_api_key":"sk-ant-...","llm_base_url":"${llm.url}"`),
    );
    expect(all.join("\n")).toContain(llm.url);
    const script = [
      "set -e -o pipefail",
      ...all.flatMap((b, i) => [`echo "@@begin ${i}@@"`, b, `echo "@@end ${i}@@"`]),
    ].join("\n");
    const env = {
      PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ""}`,
      HOME: process.env.HOME ?? "/tmp",
      TMPDIR: tmpdir(),
      npm_config_update_notifier: "false",
    };
    const { code, out } = await runBash(script, env, 240_000);
    const failed = [...out.matchAll(/@@begin (\d+)@@/g)].map((m) => Number(m[1])).at(-1) ?? 0;
    expect(
      code,
      `block ${failed} failed:\n${all[failed]}\n--- output ---\n${out}\n--- server ---\n${output}`,
    ).toBe(0);
    all.forEach((block, i) => {
      const printed = out.slice(out.indexOf(`@@begin ${i}@@`), out.indexOf(`@@end ${i}@@`));
      expect(out, `block ${i} ran to its end`).toContain(`@@end ${i}@@`);
      for (const parts of expectations(block))
        expect(
          inOrder(printed, parts),
          `block ${i}: expected ${JSON.stringify(parts)} in order in:\n${printed}`,
        ).toBe(true);
    });
    // What the quick start promises, checked beyond the README's own comments.
    expect(out).toMatch(/^RUNNING$/m);
    expect(out).toMatch(/^READY$/m);
    expect(out).toContain('"exit_code":0');
    expect(out).not.toMatch(/\{"detail":|"error":/);
  }, 300_000);
});
