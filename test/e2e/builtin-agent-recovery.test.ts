/**
 * A sandbox whose agent dies (kill -9) while its conversation runs, on the embedded default (process runtime,
 * built-in agent) with a scripted model: the sandbox reads ERROR, a resume (as the UI's) starts the agent again on
 * the same workspace, the conversation's events come back on the UI's websocket (resend_all), and a new message
 * gets a model answer with the whole history and the user's model key. A sandbox whose workspace is gone stays
 * ERROR and its resume says why.
 */
import { readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import WebSocket from "ws";
import { findSandboxProcesses } from "../../src/adapters/runtimes/process/sandbox-processes.ts";
import { agentProcesses, cmdline, killAgent } from "../helpers/agent-processes.ts";
import { useBuiltinAgentApp } from "../helpers/builtin-agent-app.ts";
import { uiAgentBase, uiSocketUrl } from "../helpers/ui-urls.ts";
import { until } from "../helpers/until.ts";

type Ev = { kind: string; id: string; key?: string; value?: unknown; [k: string]: unknown };
type AppConversation = {
  conversation_url: string | null;
  session_api_key: string | null;
  sandbox_id: string;
  sandbox_status: string;
};

const fx = useBuiltinAgentApp("builtin-agent-recovery-", "sk-recovery-key");
const { api, root } = fx;

const conversation = async (id: string): Promise<AppConversation> =>
  ((await api("GET", `/api/v1/app-conversations?ids=${id}`)).body as AppConversation[])[0] as AppConversation;

const sandboxStatus = async (id: string): Promise<string> =>
  ((await api("GET", `/api/v1/sandboxes?id=${id}`)).body as { status: string }[])[0]?.status ?? "none";

/** Starts a conversation on a new sandbox and waits until the agent runs its `sleep` (the conversation runs). */
async function startRunning(text: string): Promise<{ id: string; app: AppConversation; workspace: string }> {
  fx.llm.script(
    {
      content: "Writing it.",
      toolCalls: [{ name: "terminal", arguments: { command: "echo 42 > answer.txt" } }],
    },
    { content: "Waiting.", toolCalls: [{ name: "terminal", arguments: { command: "sleep 120" } }] },
  );
  const before = fx.llm.requests.length;
  const task = await fx.startSettled({
    initial_message: { role: "user", content: [{ type: "text", text }] },
  });
  expect(task.status).toBe("READY");
  const id = task.app_conversation_id ?? "";
  await fx.llm.waitForRequests(before + 2);
  const app = await conversation(id);
  const workspace = join(root, "sandboxes", app.sandbox_id);
  // The sleep runs in the sandbox.
  await until(
    () => findSandboxProcesses(workspace).some((p) => cmdline(p.pid).includes("sleep 120")),
    (v) => v,
  );
  return { id, app, workspace };
}

/** The UI's events websocket: at the host of conversation_url (relative: this service's own origin). */
function socket(app: AppConversation, id: string) {
  const events: Ev[] = [];
  expect(app.conversation_url).toBe(`/api/conversations/${id}`);
  const ws = new WebSocket(
    `${uiSocketUrl(id, app.conversation_url, fx.t.url)}?resend_all=true&session_api_key=${app.session_api_key}`,
  );
  ws.on("message", (d) => events.push(JSON.parse(d.toString()) as Ev));
  return { ws, events, opened: new Promise<void>((r, j) => ws.once("open", () => r()).once("error", j)) };
}

describe("a conversation whose agent was killed", () => {
  it("comes back on resume: its events on the websocket, and a new message continues it with the model", async () => {
    const { id, app, workspace } = await startRunning("Write 42 to answer.txt");
    const first = socket(app, id);
    await first.opened;
    await until(
      () => first.events,
      (es) => es.some((e) => e.kind === "ActionEvent" && JSON.stringify(e).includes("sleep 120")),
    );
    first.ws.close();
    const before = first.events.slice(1).map((e) => e.id); // after the full_state snapshot

    killAgent(workspace);
    // Read ERROR (not flapping back to RUNNING), through the sweep as well.
    await until(
      () => sandboxStatus(app.sandbox_id),
      (s) => s === "ERROR",
    );
    await fx.t.app.services.sandboxes.reconcileAll();
    expect(await sandboxStatus(app.sandbox_id)).toBe("ERROR");
    // The state folder holds no secret in clear.
    const stateDir = join(workspace, ".openhands", "conversations");
    // Beside the conversation's folder, the .gitignore that keeps them out of the workspace repository's changes.
    const saved = readdirSync(stateDir).filter((name) => name !== ".gitignore");
    expect(saved).toEqual([id.replaceAll("-", "")]);
    const onDisk = readdirSync(join(stateDir, saved[0] ?? ""))
      .map((f) => readFileSync(join(stateDir, saved[0] ?? "", f), "utf8"))
      .join("\n");
    expect(onDisk).toContain("Write 42 to answer.txt");
    expect(onDisk).not.toContain("sk-recovery-key");

    // The UI's resume of the conversation's sandbox.
    const resumed = await api("POST", `/api/v1/sandboxes/${app.sandbox_id}/resume`);
    expect(resumed.status).toBe(200);
    await until(
      () => sandboxStatus(app.sandbox_id),
      (s) => s === "RUNNING",
    );
    const again = await until(
      () => conversation(id),
      (c) => c.conversation_url !== null,
    );
    // One agent on the workspace; the sandbox keeps its session key.
    expect(agentProcesses(workspace).length).toBe(1);
    expect(again.session_api_key).toBe(app.session_api_key);

    const second = socket(again, id);
    await second.opened;
    await until(
      () => second.events,
      (es) => es.some((e) => e.kind === "ConversationErrorEvent"),
    );
    const shown = second.events.slice(1);
    // Every event from before the kill, in order, then the restart: the cut action answered, the conversation in
    // error until the user writes again.
    expect(shown.slice(0, before.length).map((e) => e.id)).toEqual(before);
    const after = shown.slice(before.length);
    expect(after.map((e) => (e.key === "execution_status" ? `state:${String(e.value)}` : e.kind))).toEqual([
      "AgentErrorEvent",
      "ConversationErrorEvent",
      "state:error",
    ]);

    fx.llm.script({ content: "Back again: the answer is 42." });
    const asked = fx.llm.requests.length;
    const sent = await fetch(
      `${uiAgentBase(again.conversation_url, fx.t.url)}/api/conversations/${id}/events`,
      {
        method: "POST",
        headers: { "x-session-api-key": again.session_api_key ?? "", "content-type": "application/json" },
        body: JSON.stringify({
          role: "user",
          content: [{ type: "text", text: "Are you there?" }],
          run: true,
        }),
      },
    );
    expect(sent.status).toBe(200);
    await until(
      () => second.events,
      (es) => es.some((e) => e.key === "execution_status" && e.value === "finished"),
    );
    second.ws.close();
    expect(fx.llm.requests.length).toBe(asked + 1);
    const request = fx.llm.requests.at(-1);
    // The user's model key, given back to the restarted agent sealed under its session key.
    expect(request?.authorization).toBe("Bearer sk-recovery-key");
    const history = JSON.stringify(request?.body.messages);
    expect(history).toContain("Write 42 to answer.txt");
    expect(history).toContain("echo 42 > answer.txt");
    expect(history).toContain("Are you there?");
    expect(
      second.events.some((e) => e.kind === "MessageEvent" && JSON.stringify(e).includes("Back again")),
    ).toBe(true);
    expect(readFileSync(join(workspace, "answer.txt"), "utf8")).toBe("42\n");
  }, 120_000);

  it("a new conversation started in it (sandbox_id) starts its agent again; the old conversation is there", async () => {
    const { id, app, workspace } = await startRunning("Write 42 once more");
    killAgent(workspace);
    await until(
      () => sandboxStatus(app.sandbox_id),
      (s) => s === "ERROR",
    );
    fx.llm.script({ content: "Hello in the same sandbox." });
    const task = await fx.startSettled({
      sandbox_id: app.sandbox_id,
      initial_message: { role: "user", content: [{ type: "text", text: "Hello again" }] },
    });
    expect(task).toMatchObject({ status: "READY" });
    expect(await sandboxStatus(app.sandbox_id)).toBe("RUNNING");
    expect(agentProcesses(workspace).length).toBe(1);
    const old = await until(
      () => conversation(id),
      (c) => c.conversation_url !== null,
    );
    const s = socket(old, id);
    await s.opened;
    await until(
      () => s.events,
      (es) => es.some((e) => e.kind === "MessageEvent" && JSON.stringify(e).includes("Write 42 once more")),
    );
    s.ws.close();
  }, 120_000);

  it("stays ERROR, with the reason, when its workspace is gone", async () => {
    const { app, workspace } = await startRunning("Write 42 again");
    killAgent(workspace);
    await until(
      () => sandboxStatus(app.sandbox_id),
      (s) => s === "ERROR",
    );
    rmSync(workspace, { recursive: true, force: true });
    const resumed = await api("POST", `/api/v1/sandboxes/${app.sandbox_id}/resume`);
    expect(resumed.status).toBeGreaterThanOrEqual(400);
    expect(resumed.status).toBeLessThan(500);
    expect(JSON.stringify(resumed.body)).toContain("workspace is gone");
    expect(await sandboxStatus(app.sandbox_id)).toBe("ERROR");
  }, 120_000);
});
