// The built-in agent's shutdown: on SIGTERM it closes every connection it holds and exits at once, well within the
// grace its runtime gives it (2 s, then SIGKILL), whether it listened itself (PORT) or was a warm agent whose early
// socket handed its connections over at the claim (SANDBOX_AGENT_CLAIM=stdin), with a kept-alive HTTP connection
// idle and a conversation's events websocket open. Deleting a conversation or a sandbox waits for this exit.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { Agent, request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { BUILTIN_AGENT_MAIN } from "../../agent/shared/builtin-agent.ts";

const KEY = "shutdown-test-key";
const dirs: string[] = [];
const children: ChildProcess[] = [];
afterAll(() => {
  for (const c of children) c.kill("SIGKILL");
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** Starts the agent, claimed at once or through stdin; resolves with its port once it listens. */
async function startAgent(claim: boolean): Promise<{ child: ChildProcess; port: number }> {
  const dir = mkdtempSync(join(tmpdir(), "agent-shutdown-"));
  dirs.push(dir);
  const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: dir, WORKSPACE_DIR: dir, PORT: "0" };
  const child = spawn(process.execPath, [BUILTIN_AGENT_MAIN], {
    cwd: dir,
    env: claim ? { ...env, SANDBOX_AGENT_CLAIM: "stdin" } : { ...env, SESSION_API_KEY: KEY },
    stdio: ["pipe", "pipe", "inherit"],
  });
  children.push(child);
  // The claim comes on stdin, which the runtime keeps open.
  if (claim) child.stdin?.write(`${JSON.stringify({ env: { ...env, SESSION_API_KEY: KEY }, cwd: dir })}\n`);
  const port = await new Promise<number>((resolve, reject) => {
    let out = "";
    child.stdout?.on("data", (chunk: Buffer) => {
      out += chunk.toString();
      const line = out.split("\n").find((l) => l.includes("sandbox agent listening"));
      if (line !== undefined) resolve((JSON.parse(line) as { port: number }).port);
    });
    child.once("exit", (code) => reject(new Error(`agent exited (${code}) before listening`)));
  });
  return { child, port };
}

/** One JSON request to the agent over `agent` (kept alive). */
function call(port: number, agent: Agent, method: string, path: string, body?: unknown): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: "127.0.0.1",
        port,
        path,
        method,
        agent,
        headers: { "x-session-api-key": KEY, "content-type": "application/json" },
      },
      (res) => {
        let text = "";
        res.on("data", (c: Buffer) => {
          text += c.toString();
        });
        res.on("end", () => resolve(JSON.parse(text)));
      },
    );
    req.on("error", reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

describe("built-in agent: SIGTERM with connections open", () => {
  for (const claim of [false, true]) {
    it(`exits within 500 ms (${claim ? "a warm agent's handed-over connections" : "its own listener"})`, async () => {
      const { child, port } = await startAgent(claim);
      const keepAlive = new Agent({ keepAlive: true });
      const conversation = (await call(port, keepAlive, "POST", "/api/conversations", {
        agent: { llm: { model: "openai/x" } },
      })) as { id: string };
      expect(typeof conversation.id).toBe("string");
      // The kept-alive connection is idle now; a websocket on the conversation's events stays open.
      const ws = new WebSocket(
        `ws://127.0.0.1:${port}/sockets/events/${conversation.id}?session_api_key=${KEY}`,
      );
      await new Promise<void>((resolve, reject) => {
        ws.once("message", () => resolve());
        ws.once("error", reject);
      });
      const socketClosed = new Promise<void>((resolve) => ws.once("close", () => resolve()));
      const exited = new Promise<{ code: number | null; ms: number }>((resolve) => {
        const t0 = performance.now();
        child.once("exit", (code) => resolve({ code, ms: performance.now() - t0 }));
      });
      child.kill("SIGTERM");
      const { code, ms } = await exited;
      await socketClosed;
      keepAlive.destroy();
      expect(code).toBe(0);
      expect(ms).toBeLessThan(500);
    });
  }
});
