// The built-in agent's conversations across a new agent process on the same state folder (in-process servers): a
// conversation waiting for confirmation is still waiting, and accepting runs the action the model asked for before
// the restart; a paused one keeps its pending action for the resume. Without a state folder nothing is written.
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import type { Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { createAgentServer } from "../../agent/agent-server.ts";
import { type FakeLlm, startFakeLlm } from "../helpers/fake-llm.ts";

type Ev = { kind: string; id: string; key?: string; value?: unknown; [k: string]: unknown };
const KEY = "restore-test-key";
const root = mkdtempSync(join(tmpdir(), "agent-restore-"));
const workspace = join(root, "ws");
const stateDir = join(root, "state");
mkdirSync(workspace);
let llm: FakeLlm;
const servers: Server[] = [];

beforeAll(async () => {
  llm = await startFakeLlm();
});
afterAll(async () => {
  for (const s of servers) {
    s.closeAllConnections();
    s.close();
  }
  await llm?.close();
  rmSync(root, { recursive: true, force: true });
});

async function boot(options: { stateDir?: string } = { stateDir }): Promise<string> {
  const server = createAgentServer({ sessionApiKey: KEY, workspaceDir: workspace, ...options });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const address = server.address();
  if (typeof address !== "object" || address === null) throw new Error("no address");
  return `http://127.0.0.1:${address.port}`;
}

async function stop(base: string): Promise<void> {
  const server = servers.find((s) => {
    const a = s.address();
    return typeof a === "object" && a !== null && base.endsWith(`:${a.port}`);
  });
  server?.closeAllConnections();
  await new Promise((r) => server?.close(r));
}

const call = async (base: string, method: string, path: string, body?: unknown) => {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { "x-session-api-key": KEY, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
};

function socket(base: string, id: string) {
  const events: Ev[] = [];
  const ws = new WebSocket(
    `${base.replace("http", "ws")}/sockets/events/${id}?resend_all=true&session_api_key=${KEY}`,
  );
  ws.on("message", (d) => events.push(JSON.parse(d.toString()) as Ev));
  const opened = new Promise<void>((r, j) => ws.once("open", () => r()).once("error", j));
  const until = async (ok: (es: Ev[]) => boolean) => {
    const deadline = Date.now() + 10_000;
    while (!ok(events)) {
      if (Date.now() > deadline) throw new Error(`timed out: ${events.map((e) => e.kind).join(",")}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  };
  return { ws, events, opened, until };
}

const status = (es: Ev[]) => es.filter((e) => e.key === "execution_status").map((e) => e.value);

describe("a conversation taken back by a new agent process", () => {
  it("waiting for confirmation: still waiting; accepting runs the action asked for before the restart", async () => {
    const first = await boot();
    llm.script({ toolCalls: [{ name: "terminal", arguments: { command: "echo confirmed > ok.txt" } }] });
    const start = await call(first, "POST", "/api/conversations", {
      agent: {
        kind: "Agent",
        llm: { model: "openai/fake", base_url: llm.url, api_key: "sk-x", num_retries: 0 },
      },
      confirmation_policy: { kind: "AlwaysConfirm" },
      initial_message: { role: "user", content: [{ type: "text", text: "write ok" }], run: true },
    });
    const id = String(start.json.id);
    const s1 = socket(first, id);
    await s1.opened;
    await s1.until((es) => status(es).includes("waiting_for_confirmation"));
    s1.ws.close();
    await stop(first);

    const second = await boot();
    expect((await call(second, "GET", `/api/conversations/${id}`)).json).toMatchObject({
      execution_status: "waiting_for_confirmation",
    });
    const s2 = socket(second, id);
    await s2.opened;
    await s2.until((es) => es.length >= s1.events.length);
    expect(s2.events.slice(1).map((e) => e.id)).toEqual(s1.events.slice(1).map((e) => e.id));
    llm.script({ content: "Written." });
    await call(second, "POST", `/api/conversations/${id}/events/respond_to_confirmation`, { accept: true });
    await s2.until((es) => status(es).includes("finished"));
    const observation = s2.events.find((e) => e.kind === "ObservationEvent");
    expect(observation?.tool_name).toBe("terminal");
    expect(existsSync(join(workspace, "ok.txt"))).toBe(true);
    s2.ws.close();
    await stop(second);
  });

  it("without a state folder nothing is written and a new process has no conversation", async () => {
    const dir = join(root, "unused");
    const first = await boot({});
    llm.script({ content: "Hi." });
    const start = await call(first, "POST", "/api/conversations", {
      agent: { kind: "Agent", llm: { model: "openai/fake", base_url: llm.url, api_key: "sk-x" } },
    });
    const id = String(start.json.id);
    await stop(first);
    const second = await boot({});
    expect((await call(second, "GET", `/api/conversations?ids=${id}`)).json).toEqual([null]);
    expect(existsSync(dir)).toBe(false);
    await stop(second);
  });
});
