// The README's quick start, run as written: the `sh` blocks between <!-- quickstart:begin --> and
// <!-- quickstart:end --> are run in order by one bash process against a server this test starts on its defaults
// (from source, on free ports, a fresh DATA_DIR, nothing else set). Only four things are replaced: the BASE and GRPC
// URLs and the KEY of the first block, with this server's ports and the key it printed at its first start, and the
// local model's address (Ollama's http://127.0.0.1:11434/v1) with a scripted fake model server on loopback (no test
// reaches outside this machine), which the built-in agent asks when it runs the conversation's first message. As
// sandboxes with networks of their own reach Ollama's port on the host's loopback by default (SANDBOX_HOST_PORTS),
// the server is told the fake model's port beside it. The
// git token check is on, as on every default server: the made-up token is refused (401 from GitHub, or 503 where
// GitHub cannot be reached, as here), which the README's `# →` line covers. Every `# → ...` comment of a block is an
// expected answer: its parts between `...` must appear, in order, in what that block printed.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ENV_DOC } from "../../src/server/env-doc.ts";
import { type FakeLlm, startFakeLlm } from "../helpers/fake-llm.ts";
import { LISTENING, type ServerProcess, spawnServer } from "../helpers/server-process.ts";

const root = join(import.meta.dirname, "..", "..");

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
/** The local model's address in the README (Ollama's), which the test points at its fake model server. */
const OLLAMA_URL = "http://127.0.0.1:11434/v1";
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
  let server: ServerProcess | undefined;
  let base = "";
  let grpc = "";
  let key = "";
  let llm: FakeLlm;
  let llmUrl = "";

  beforeAll(async () => {
    llm = await startFakeLlm();
    dir = mkdtempSync(join(tmpdir(), "aws-readme-"));
    const [port, grpcPort] = [await freePort(), await freePort()];
    base = `http://127.0.0.1:${port}`;
    grpc = `http://127.0.0.1:${grpcPort}`;
    server = spawnServer({
      env: {
        PATH: process.env.PATH ?? "",
        HOME: process.env.HOME ?? "/tmp",
        DATA_DIR: dir,
        PORT: String(port),
        GRPC_PORT: String(grpcPort),
        // The default (Ollama's 11434) and the fake model's port, which stands in for it.
        SANDBOX_HOST_PORTS: `11434,${new URL(llm.url).port}`,
      },
    });
    await server.waitFor(LISTENING, 60_000);
    key = /X-Session-API-Key: (ws_\S+)/.exec(server.output())?.[1] ?? "";
    expect(key, "the first start prints a key").not.toBe("");
  }, 90_000);

  afterAll(async () => {
    // Sandboxes outlive their server: delete what the quick start started, then stop the server.
    if (server !== undefined && server.proc.exitCode === null && key !== "") {
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
    await server?.stop({ killAfterMs: 15_000 });
    rmSync(dir, { recursive: true, force: true });
    await llm?.close();
  }, 60_000);

  it("has a marked section whose first block defines BASE, GRPC and KEY; its model is a local one", () => {
    expect(blocks.length).toBeGreaterThanOrEqual(6);
    expect(blocks.join("\n"), "a model a newcomer runs without a paid key").toContain(OLLAMA_URL);
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
    // The model's server: the fake one instead of Ollama's address. It answers the first message as a model would:
    // a command, then a message.
    const all = [first, ...blocks.slice(1)].map((b) => b.replaceAll(OLLAMA_URL, llm.url));
    expect(all.join("\n")).toContain(llm.url);
    llm.script(
      { toolCalls: [{ name: "terminal", arguments: { command: "ls -A" } }] },
      { content: "Only .git and .openhands so far: no project files yet." },
    );
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
      `block ${failed} failed:\n${all[failed]}\n--- output ---\n${out}\n--- server ---\n${server?.output()}`,
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
    // What the quick start promises, checked beyond the README's own comments: the answer as the chat shows it.
    expect(out).toMatch(/^RUNNING$/m);
    expect(out).toMatch(/^READY$/m);
    expect(out).toContain('"exit_code":0');
    expect(out).toContain("$ ls -A");
    expect(out).toContain("agent: Only .git and .openhands so far: no project files yet.");
    expect(out).toMatch(/^finished$/m);
    // The one refusal is the made-up git token's; nothing else answers an error.
    const gitBlock = all.findIndex((b) => b.includes("/api/add-git-providers"));
    expect(gitBlock).toBeGreaterThan(0);
    all.forEach((_, i) => {
      const printed = out.slice(out.indexOf(`@@begin ${i}@@`), out.indexOf(`@@end ${i}@@`));
      if (i !== gitBlock) expect(printed, `block ${i}`).not.toMatch(/\{"detail":|"error":/);
      else
        expect(printed).toMatch(
          /^\{"error":"(Invalid token\. Please make sure it is a valid github token\.|Could not reach github to verify the token\. Please try again later\.)"\}$/m,
        );
    });
    llmUrl = llm.url;
  }, 300_000);

  it("a conversation whose model cannot be reached says so in its status and in the chat", async () => {
    expect(llmUrl, "the quick start ran").not.toBe("");
    const headers = { "x-session-api-key": key, "content-type": "application/json" };
    const closed = await freePort();
    const set = await fetch(`${base}/api/settings`, {
      method: "POST",
      headers,
      body: JSON.stringify({ llm_base_url: `http://127.0.0.1:${closed}/v1` }),
    });
    expect(set.status).toBe(200);
    const task = (await (
      await fetch(`${base}/api/v1/app-conversations`, {
        method: "POST",
        headers,
        body: JSON.stringify({ initial_message: { content: [{ type: "text", text: "Hello?" }] } }),
      })
    ).json()) as { id: string };
    let id = "";
    let execution = "";
    // The model client retries a refused connection a few times (about 8 s) before the agent gives up.
    for (let i = 0; i < 240 && execution !== "error"; i++) {
      const [t] = (await (
        await fetch(`${base}/api/v1/app-conversations/start-tasks?ids=${task.id}`, { headers })
      ).json()) as { status: string; app_conversation_id: string | null }[];
      expect(t?.status).not.toBe("ERROR");
      id = t?.app_conversation_id ?? "";
      if (id !== "") {
        const [c] = (await (
          await fetch(`${base}/api/v1/app-conversations?ids=${id}`, { headers })
        ).json()) as { execution_status: string | null }[];
        execution = c?.execution_status ?? "";
      }
      if (execution !== "error") await new Promise((r) => setTimeout(r, 250));
    }
    expect(execution, "the conversation's listing").toBe("error");
    const chat = await runBash(
      `npm run --silent cli -- chat ${id} </dev/null`,
      {
        PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ""}`,
        HOME: process.env.HOME ?? "/tmp",
        WORKSPACE_URL: base,
        WORKSPACE_API_KEY: key,
        npm_config_update_notifier: "false",
      },
      60_000,
    );
    expect(chat.code, chat.out).toBe(0);
    expect(chat.out).toContain("✗ The model could not be reached.");
    expect(chat.out).toMatch(/Check llm_base_url .* and llm_api_key in your settings/);
  }, 120_000);
});
