// The built-in agent's working set for a long conversation: what each model call is built from (and sends) stays
// bounded however many turns the conversation has (MODEL_VIEW_TURNS user messages, at most MODEL_VIEW_EVENTS
// events, after a note with the user's first message), and the bounded view keeps every tool result next to its call,
// as the chat-completions API requires; and the agent as its own process (main.ts) holds at most twice its idle
// private memory after 200 turns.
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import type { Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { createAgentServer } from "../../agent/agent-server.ts";
import { MODEL_VIEW_TURNS } from "../../agent/model-view.ts";
import { type FakeLlm, type FakeRequest, startFakeLlm } from "../helpers/fake-llm.ts";
import { spawnServer } from "../helpers/server-process.ts";

const KEY = "working-set-key";
const workspace = mkdtempSync(join(tmpdir(), "agent-working-set-"));
let llm: FakeLlm;
let agent: Server;
let base: string;

async function call(
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; json: unknown }> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { "x-session-api-key": KEY, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : null };
}

async function status(id: string): Promise<string> {
  return String(
    ((await call("GET", `/api/conversations/${id}`)).json as { execution_status: string }).execution_status,
  );
}

beforeAll(async () => {
  llm = await startFakeLlm();
  agent = createAgentServer({ sessionApiKey: KEY, workspaceDir: workspace });
  await new Promise<void>((resolve) => agent.listen(0, "127.0.0.1", resolve));
  const address = agent.address();
  if (typeof address !== "object" || address === null) throw new Error("no address");
  base = `http://127.0.0.1:${address.port}`;
});

afterAll(async () => {
  agent.closeAllConnections();
  await new Promise((r) => agent.close(r));
  await llm.close();
  rmSync(workspace, { recursive: true, force: true });
});

/** The tool calls and results of a request are consistent: each result follows its call, each call gets one. */
function checkPairs(request: FakeRequest): void {
  const open = new Set<string>();
  for (const m of request.body.messages) {
    if (m.role === "tool") {
      expect(open.has(m.tool_call_id as string), `result ${m.tool_call_id} without its call`).toBe(true);
      open.delete(m.tool_call_id as string);
      continue;
    }
    expect([...open], "calls without a result before the next message").toEqual([]);
    for (const c of (m.tool_calls ?? []) as { id: string }[]) open.add(c.id);
  }
}

describe("built-in agent: bounded working set", () => {
  it("each model call is built from a bounded view of a long conversation, the task kept, calls paired", async () => {
    const turns = 3 * MODEL_VIEW_TURNS;
    const res = await call("POST", "/api/conversations", {
      agent: {
        kind: "Agent",
        llm: { model: "openai/fake", base_url: llm.url, api_key: "sk-fake", num_retries: 0 },
      },
      workspace: { kind: "LocalWorkspace", working_dir: workspace },
    });
    expect(res.status).toBe(200);
    const id = (res.json as { id: string }).id;
    const sizes: number[] = [];
    const counts: number[] = [];
    for (let i = 0; i < turns; i++) {
      // Every other turn the model thinks (a tool call and its observation) before it answers.
      if (i % 2 === 1)
        llm.script(
          { toolCalls: [{ name: "think", arguments: { thought: `step ${i}` } }] },
          { content: `done ${i}` },
        );
      else llm.script({ content: `ok ${i}` });
      const before = llm.requests.length;
      const text = i === 0 ? "THE TASK: keep this in view" : `message ${i}`;
      const sent = await call("POST", `/api/conversations/${id}/events`, {
        role: "user",
        content: [{ type: "text", text }],
        run: true,
      });
      expect(sent.status).toBe(200);
      const deadline = Date.now() + 10_000;
      while ((await status(id)) !== "finished" || llm.requests.length < before + (i % 2 === 1 ? 2 : 1)) {
        if (Date.now() > deadline) throw new Error(`turn ${i} did not finish`);
        await new Promise((r) => setTimeout(r, 5));
      }
      const last = llm.requests.at(-1) as FakeRequest;
      sizes.push(JSON.stringify(last.body.messages).length);
      counts.push(last.body.messages.length);
    }
    for (const request of llm.requests) checkPairs(request);
    // The view stops growing once the conversation is longer than it: the last request is no larger than the one
    // at MODEL_VIEW_TURNS + 5 (the turns' texts differ in length by a digit or so), whereas the whole history would
    // hold three times as many messages.
    const settled = MODEL_VIEW_TURNS + 5;
    expect(counts.at(-1)).toBeLessThanOrEqual((counts[settled] as number) + 2);
    expect(sizes.at(-1)).toBeLessThanOrEqual((sizes[settled] as number) * 1.1);
    expect(counts.at(-1)).toBeLessThanOrEqual(2 + 3 * MODEL_VIEW_TURNS + 2);
    // The task stays in view, with a note that the start is left out; the latest message is there too.
    const messages = (llm.requests.at(-1) as FakeRequest).body.messages;
    expect(String(messages[1]?.content)).toContain("left out of your view");
    expect(String(messages[1]?.content)).toContain("THE TASK: keep this in view");
    expect(messages.some((m) => m.content === `message ${turns - 1}`)).toBe(true);
    expect(messages.some((m) => m.content === `message ${turns - MODEL_VIEW_TURNS - 1}`)).toBe(false);
  }, 120_000);

  /** Private memory (pages only this process has) in MiB, from /proc. */
  const privateMiB = (pid: number): number => {
    const text = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
    const kb = (field: string): number => Number(new RegExp(`^${field}:\\s+(\\d+) kB$`, "m").exec(text)?.[1]);
    return (kb("Private_Clean") + kb("Private_Dirty")) / 1024;
  };

  it.skipIf(!existsSync("/proc/self/smaps_rollup"))(
    "the agent process holds at most twice its idle private memory after 200 turns",
    async () => {
      const home = mkdtempSync(join(tmpdir(), "agent-working-set-proc-"));
      const port = 20000 + Math.floor(Math.random() * 20000);
      const agent = spawnServer({
        entry: join(import.meta.dirname, "../../agent/main.ts"),
        args: [],
        cwd: home,
        env: {
          PATH: process.env.PATH ?? "/usr/bin:/bin",
          HOME: home,
          PORT: String(port),
          SESSION_API_KEY: KEY,
          WORKSPACE_DIR: home,
        },
      });
      const agentBase = `http://127.0.0.1:${port}`;
      try {
        for (const deadline = Date.now() + 15_000; ; ) {
          try {
            if ((await fetch(`${agentBase}/alive`)).ok) break;
          } catch {
            // not yet
          }
          if (Date.now() > deadline) throw new Error(`the agent did not start:\n${agent.output()}`);
          await new Promise((r) => setTimeout(r, 20));
        }
        await new Promise((r) => setTimeout(r, 2000));
        const idle = privateMiB(agent.proc.pid as number);
        const started = await fetch(`${agentBase}/api/conversations`, {
          method: "POST",
          headers: { "x-session-api-key": KEY, "content-type": "application/json" },
          body: JSON.stringify({
            agent: { kind: "Agent", llm: { model: "openai/fake", base_url: llm.url, api_key: "sk-fake" } },
            workspace: { kind: "LocalWorkspace", working_dir: home },
          }),
        });
        const id = ((await started.json()) as { id: string }).id;
        const ws = new WebSocket(`ws://127.0.0.1:${port}/sockets/events/${id}?session_api_key=${KEY}`);
        await new Promise((resolve, reject) => ws.once("open", resolve).once("error", reject));
        let finished = 0;
        ws.on("message", (d) => {
          const e = JSON.parse(d.toString()) as { key?: string; value?: unknown };
          if (e.key === "execution_status" && e.value === "finished") finished++;
        });
        for (let i = 0; i < 200; i++) {
          // As the benchmark: every other turn a terminal call, its observation, then the answer.
          if (i % 2 === 1)
            llm.script(
              { toolCalls: [{ name: "terminal", arguments: { command: `echo turn-${i}` } }] },
              { content: "done" },
            );
          else llm.script({ content: "ok" });
          const want = finished + 1;
          ws.send(JSON.stringify({ role: "user", content: [{ type: "text", text: `message ${i}` }] }));
          for (const deadline = Date.now() + 10_000; finished < want; ) {
            if (Date.now() > deadline) throw new Error(`turn ${i} did not finish`);
            await new Promise((r) => setTimeout(r, 2));
          }
          llm.requests.length = 0; // the fake model's record, in this process
        }
        ws.close();
        await new Promise((r) => setTimeout(r, 5000)); // idle past IDLE_COLLECT_MS, as the benchmark measures it
        const after = privateMiB(agent.proc.pid as number);
        expect(
          after,
          `idle ${idle.toFixed(1)} MiB, after 200 turns ${after.toFixed(1)} MiB`,
        ).toBeLessThanOrEqual(2 * idle);
      } finally {
        await agent.stop();
        rmSync(home, { recursive: true, force: true });
      }
    },
    130_000,
  );
});
