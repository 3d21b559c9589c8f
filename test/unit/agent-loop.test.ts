// The built-in agent's conversation side against a scripted OpenAI-compatible server: the agent loop, its events on
// the websocket and on the webhook (the service's event store), confirmation, pause/run, LLM failures, reconnects,
// and the workspace routes the UI calls.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { createAgentServer } from "../../agent/agent-server.ts";
import { Terminal } from "../../agent/tools/terminal.ts";
import { type FakeLlm, startFakeLlm } from "../helpers/fake-llm.ts";

const KEY = "loop-test-key";
const SECRET = "s3cr3t-value-42";
const workspace = mkdtempSync(join(tmpdir(), "agent-loop-"));
let llm: FakeLlm;
let agent: Server;
let base: string;
let hook: Server;
const hooked: { path: string; body: unknown }[] = [];

type Ev = { kind: string; id: string; source: string; key?: string; value?: unknown; [k: string]: unknown };

const listen = async (s: Server): Promise<string> => {
  await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));
  const address = s.address();
  if (typeof address !== "object" || address === null) throw new Error("no address");
  return `http://127.0.0.1:${address.port}`;
};

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

async function startConversation(extra: Record<string, unknown>, text: string): Promise<string> {
  const res = await call("POST", "/api/conversations", {
    agent: {
      kind: "Agent",
      llm: { model: "openai/fake-model", base_url: llm.url, api_key: "sk-fake", num_retries: 0 },
    },
    workspace: { kind: "LocalWorkspace", working_dir: workspace },
    secrets: { MY_SECRET: { kind: "StaticSecret", value: SECRET } },
    initial_message: { role: "user", content: [{ type: "text", text }], run: true },
    ...extra,
  });
  expect(res.status).toBe(200);
  return (res.json as { id: string }).id;
}

/** A websocket client keeping every event it receives. */
class Socket {
  readonly events: Ev[] = [];
  readonly ws: WebSocket;
  readonly opened: Promise<void>;
  closeCode: number | undefined;
  constructor(id: string, query = `resend_all=true&session_api_key=${KEY}`) {
    this.ws = new WebSocket(`${base.replace("http", "ws")}/sockets/events/${id}?${query}`);
    this.ws.on("message", (d) => this.events.push(JSON.parse(d.toString()) as Ev));
    this.ws.on("close", (code) => {
      this.closeCode = code;
    });
    this.opened = new Promise((resolve, reject) => {
      this.ws.once("open", () => resolve());
      this.ws.once("error", reject);
    });
  }
  async until(predicate: (events: Ev[]) => boolean, timeoutMs = 10_000): Promise<Ev[]> {
    const deadline = Date.now() + timeoutMs;
    while (!predicate(this.events)) {
      if (Date.now() > deadline)
        throw new Error(
          `timed out; got ${this.events.map((e) => `${e.kind}:${e.key ?? ""}${e.value ?? ""}`).join(", ")}`,
        );
      await new Promise((r) => setTimeout(r, 10));
    }
    return this.events;
  }
  untilStatus(status: string, after = 0): Promise<Ev[]> {
    return this.until((es) =>
      es.slice(after).some((e) => e.key === "execution_status" && e.value === status),
    );
  }
  close(): void {
    this.ws.close();
  }
}

const kinds = (events: Ev[]): string[] =>
  events.map((e) =>
    e.kind === "ConversationStateUpdateEvent"
      ? `state:${String(e.key === "full_state" ? "full" : e.value)}`
      : e.kind,
  );

function hookedEvents(id: string): Ev[] {
  return hooked.filter((p) => p.path === `/hooks/events/${id}`).flatMap((p) => p.body as Ev[]);
}

async function until<T>(f: () => T, ok: (v: T) => boolean, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = f();
    if (ok(v)) return v;
    if (Date.now() > deadline) throw new Error(`timed out: ${JSON.stringify(v).slice(0, 500)}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

beforeAll(async () => {
  llm = await startFakeLlm();
  hook = createServer((req, res) => {
    let text = "";
    req.on("data", (c: Buffer) => {
      text += c.toString();
    });
    req.on("end", () => {
      hooked.push({ path: req.url ?? "", body: JSON.parse(text) });
      res.writeHead(200, { "content-type": "application/json" }).end('{"success":true}');
    });
  });
  const hookBase = await listen(hook);
  agent = createAgentServer({
    sessionApiKey: KEY,
    workspaceDir: workspace,
    webhook: { baseUrl: `${hookBase}/hooks`, flushDelayMs: 10, bufferSize: 100 },
  });
  base = await listen(agent);
});

afterAll(async () => {
  agent.closeAllConnections();
  await new Promise((r) => agent.close(r));
  hook.closeAllConnections();
  await new Promise((r) => hook.close(r));
  await llm.close();
  rmSync(workspace, { recursive: true, force: true });
});

describe("agent loop: a task with tools", () => {
  it("runs tool calls then a final message; events in order on the websocket and the webhook; the file is written", async () => {
    const file = join(workspace, "hello.txt");
    llm.script(
      {
        content: "I will create the file.",
        toolCalls: [
          { name: "file_editor", arguments: { command: "create", path: file, file_text: "hello world\n" } },
        ],
      },
      {
        toolCalls: [
          { name: "terminal", arguments: { command: "cat hello.txt; echo token=$MY_SECRET; cd /tmp" } },
        ],
      },
      { toolCalls: [{ name: "terminal", arguments: { command: "pwd" } }] },
      { content: "Done: hello.txt holds hello world." },
    );
    const before = llm.requests.length;
    const id = await startConversation({}, "Create hello.txt with hello world");
    const socket = new Socket(id);
    await socket.opened;
    const events = await socket.untilStatus("finished");
    expect(kinds(events)).toEqual([
      "state:full",
      "MessageEvent",
      "state:idle",
      "state:running",
      "ActionEvent",
      "ObservationEvent",
      "ActionEvent",
      "ObservationEvent",
      "ActionEvent",
      "ObservationEvent",
      "MessageEvent",
      "state:finished",
    ]);
    expect(readFileSync(file, "utf8")).toBe("hello world\n");
    const [, user, , , create, created, cat, catOut, , pwdOut, final] = events as Ev[];
    expect(user).toMatchObject({ source: "user", llm_message: { role: "user" } });
    expect(create).toMatchObject({
      source: "agent",
      tool_name: "file_editor",
      thought: [{ type: "text", text: "I will create the file." }],
      action: { kind: "FileEditorAction", command: "create", path: file, file_text: "hello world\n" },
      security_risk: "UNKNOWN",
    });
    expect(created).toMatchObject({
      source: "environment",
      tool_name: "file_editor",
      tool_call_id: create?.tool_call_id,
      action_id: create?.id,
      observation: {
        kind: "FileEditorObservation",
        is_error: false,
        prev_exist: false,
        new_content: "hello world\n",
      },
    });
    expect(cat).toMatchObject({
      action: { kind: "TerminalAction", is_input: false, reset: false, timeout: null },
    });
    const catObservation = catOut?.observation as { content: { text: string }[] } | undefined;
    const catText = catObservation?.content[0]?.text ?? "";
    expect(catText).toContain("hello world");
    // The secret is an environment variable of the terminal, and masked in what is shown.
    expect(catText).toContain("token=<secret-hidden>");
    expect(JSON.stringify(events)).not.toContain(SECRET);
    expect(catOut?.observation).toMatchObject({ kind: "TerminalObservation", exit_code: 0, timeout: false });
    // The shell persists: the cd of the previous command holds.
    const pwdObservation = pwdOut?.observation as { content: { text: string }[] } | undefined;
    expect(pwdObservation?.content[0]?.text).toMatch(/^\/tmp\n/);
    expect(final).toMatchObject({
      kind: "MessageEvent",
      source: "agent",
      llm_message: {
        role: "assistant",
        content: [{ type: "text", text: "Done: hello.txt holds hello world." }],
      },
    });

    // The model got the user's model name, key, tools and the history with tool results.
    const sent = llm.requests.slice(before);
    expect(sent).toHaveLength(4);
    expect(sent[0]?.body.model).toBe("fake-model");
    expect(sent[0]?.authorization).toBe("Bearer sk-fake");
    expect(sent[0]?.body.tools?.map((t) => t.function.name)).toEqual([
      "terminal",
      "file_editor",
      "task_tracker",
      "think",
      "finish",
    ]);
    const last = sent[3]?.body.messages ?? [];
    expect(last.map((m) => m.role)).toEqual([
      "system",
      "user",
      "assistant",
      "tool",
      "assistant",
      "tool",
      "assistant",
      "tool",
    ]);
    expect(last[3]?.tool_call_id).toBe(create?.tool_call_id);

    // The webhook (the service's event store) got the same events, in the same order.
    const stored = await until(
      () => hookedEvents(id),
      (es) => es.length === events.length - 1,
    );
    expect(stored.map((e) => e.id)).toEqual(events.slice(1).map((e) => e.id));
    // And the conversation info with its status.
    const infos = hooked
      .filter((p) => p.path === "/hooks/conversations")
      .map((p) => p.body as { id: string; execution_status: string });
    expect(infos.filter((i) => i.id === id).map((i) => i.execution_status)).toEqual([
      "idle",
      "running",
      "finished",
    ]);
    expect(JSON.stringify(infos)).not.toContain("sk-fake");

    // The event search and count routes see the same list.
    const page = await call("GET", `/api/conversations/${id}/events/search?limit=5`);
    expect((page.json as { items: Ev[] }).items.map((e) => e.id)).toEqual(
      events.slice(1, 6).map((e) => e.id),
    );
    const next = (page.json as { next_page_id: string }).next_page_id;
    expect(next).toBe(events[6]?.id);
    const rest = await call("GET", `/api/conversations/${id}/events/search?page_id=${next}`);
    expect((rest.json as { items: Ev[] }).items).toHaveLength(events.length - 6);
    expect((await call("GET", `/api/conversations/${id}/events/count`)).json).toBe(events.length - 1);
    expect((await call("GET", `/api/conversations/${id}/events/search?limit=101`)).status).toBe(422);
    expect((await call("GET", `/api/conversations/${id}`)).json).toMatchObject({
      id,
      execution_status: "finished",
    });

    // A later message over the websocket runs the agent again.
    llm.script({ content: "Still here." });
    const mark = socket.events.length;
    socket.ws.send(JSON.stringify({ role: "user", content: [{ type: "text", text: "Are you there?" }] }));
    const more = await socket.untilStatus("finished", mark);
    expect(kinds(more.slice(mark))).toEqual([
      "state:idle",
      "MessageEvent",
      "state:running",
      "MessageEvent",
      "state:finished",
    ]);
    socket.close();
  });

  it("reconnects: resend_all replays every event with the same ids; without it only the state comes", async () => {
    llm.script({ content: "Hi." });
    const id = await startConversation({}, "Say hi");
    const first = new Socket(id);
    const events = await first.untilStatus("finished");
    first.close();
    const again = new Socket(id);
    const replay = await again.until((es) => es.length >= events.length);
    expect(replay.slice(1).map((e) => e.id)).toEqual(events.slice(1).map((e) => e.id));
    expect(replay[0]).toMatchObject({ key: "full_state", value: { execution_status: "finished" } });
    const bare = new Socket(id, `session_api_key=${KEY}`);
    await bare.until((es) => es.length >= 1);
    await new Promise((r) => setTimeout(r, 100));
    expect(kinds(bare.events)).toEqual(["state:full"]);
    again.close();
    bare.close();
  });

  it("refuses a websocket without the key and closes one for an unknown conversation with 4004", async () => {
    const refused = new Socket("0".repeat(32), "resend_all=true&session_api_key=wrong");
    await expect(refused.opened).rejects.toThrow(/403/);
    const unknown = new Socket("0".repeat(32));
    await unknown.opened;
    await until(
      () => unknown.closeCode,
      (c) => c !== undefined,
    );
    expect(unknown.closeCode).toBe(4004);
  });
});

describe("agent loop: confirmation", () => {
  it("waits for each action; accept runs it, reject answers with a UserRejectObservation", async () => {
    const accepted = join(workspace, "accepted.txt");
    const rejected = join(workspace, "rejected.txt");
    llm.script(
      { toolCalls: [{ name: "terminal", arguments: { command: `echo yes > ${accepted}` } }] },
      { content: "Wrote it." },
      { toolCalls: [{ name: "terminal", arguments: { command: `echo no > ${rejected}` } }] },
    );
    const id = await startConversation({ confirmation_policy: { kind: "AlwaysConfirm" } }, "write a file");
    const socket = new Socket(id);
    await socket.untilStatus("waiting_for_confirmation");
    expect(existsSync(accepted)).toBe(false);
    expect(kinds(socket.events).at(-2)).toBe("ActionEvent");
    let mark = socket.events.length;
    expect(
      (await call("POST", `/api/conversations/${id}/events/respond_to_confirmation`, { accept: true })).json,
    ).toEqual({
      success: true,
    });
    await socket.untilStatus("finished", mark);
    expect(kinds(socket.events.slice(mark))).toEqual([
      "state:running",
      "ObservationEvent",
      "MessageEvent",
      "state:finished",
    ]);
    expect(readFileSync(accepted, "utf8")).toBe("yes\n");

    mark = socket.events.length;
    await call("POST", `/api/conversations/${id}/events`, {
      role: "user",
      content: [{ type: "text", text: "now the other" }],
      run: true,
    });
    await socket.untilStatus("waiting_for_confirmation", mark);
    const action = socket.events.filter((e) => e.kind === "ActionEvent").at(-1) as Ev;
    mark = socket.events.length;
    await call("POST", `/api/conversations/${id}/events/respond_to_confirmation`, {
      accept: false,
      reason: "not that",
    });
    await socket.untilStatus("idle", mark);
    expect(kinds(socket.events.slice(mark))).toEqual(["UserRejectObservation", "state:idle"]);
    expect(socket.events[mark]).toMatchObject({
      source: "environment",
      tool_name: "terminal",
      tool_call_id: action.tool_call_id,
      action_id: action.id,
      rejection_reason: "not that",
    });
    expect(existsSync(rejected)).toBe(false);
    expect(
      (await call("POST", `/api/conversations/${id}/events/respond_to_confirmation`, { accept: "yes" }))
        .status,
    ).toBe(422);
    socket.close();
  });
});

describe("agent loop: pause and run", () => {
  it("pauses during a model call at once, keeps the answer, runs its actions on resume; a second run while running is 409", async () => {
    const before = llm.requests.length;
    llm.script(
      { toolCalls: [{ name: "terminal", arguments: { command: "echo kept-answer" } }], delayMs: 400 },
      { content: "Resumed and done." },
    );
    const id = await startConversation({}, "think long");
    const socket = new Socket(id);
    await socket.untilStatus("running");
    await llm.waitForRequests(before + 1);
    expect((await call("POST", `/api/conversations/${id}/run`)).status).toBe(409);
    const paused = socket.events.length;
    expect((await call("POST", `/api/conversations/${id}/pause`)).json).toEqual({ success: true });
    // Paused at once (the UI shows it), with the model call still in flight.
    await socket.untilStatus("paused", paused);
    expect(kinds(socket.events.slice(paused))).toEqual(["PauseEvent", "state:paused"]);
    // A second pause changes nothing.
    await call("POST", `/api/conversations/${id}/pause`);
    // The answer arrives: its action is shown, not run, and nothing more is asked of the model.
    await socket.until((es) => es.some((e) => e.kind === "ActionEvent"));
    await new Promise((r) => setTimeout(r, 300));
    expect(kinds(socket.events.slice(paused))).toEqual(["PauseEvent", "state:paused", "ActionEvent"]);
    expect(llm.requests.length).toBe(before + 1);
    const mark = socket.events.length;
    expect((await call("POST", `/api/conversations/${id}/run`)).json).toEqual({ success: true });
    await socket.untilStatus("finished", mark);
    expect(kinds(socket.events.slice(mark))).toEqual([
      "state:running",
      "ObservationEvent",
      "MessageEvent",
      "state:finished",
    ]);
    const observation = socket.events.find((e) => e.kind === "ObservationEvent");
    expect(JSON.stringify(observation?.observation)).toContain("kept-answer");
    // The model saw the kept call and its result, then answered.
    const last = llm.requests.at(-1)?.body.messages ?? [];
    expect(last.map((m) => m.role).slice(-3)).toEqual(["user", "assistant", "tool"]);
    socket.close();
  });

  it("a run while the paused call is still in flight just goes on", async () => {
    const before = llm.requests.length;
    llm.script({ content: "Went on.", delayMs: 400 });
    const id = await startConversation({}, "go on");
    const socket = new Socket(id);
    await llm.waitForRequests(before + 1);
    await call("POST", `/api/conversations/${id}/pause`);
    await socket.untilStatus("paused");
    const mark = socket.events.length;
    expect((await call("POST", `/api/conversations/${id}/run`)).json).toEqual({ success: true });
    await socket.untilStatus("finished", mark);
    expect(kinds(socket.events.slice(mark))).toEqual(["state:running", "MessageEvent", "state:finished"]);
    expect(llm.requests.length).toBe(before + 1);
    socket.close();
  });

  it("a pause after the turn ended changes nothing, and run then does not ask the model again", async () => {
    llm.script({ content: "The answer." });
    const before = llm.requests.length;
    const id = await startConversation({}, "answer once");
    const socket = new Socket(id);
    await socket.untilStatus("finished");
    expect(llm.requests.length).toBe(before + 1);
    const mark = socket.events.length;
    // The UI's stop button a moment late, then its play button: the agent-server pauses only an idle or running
    // conversation, and its run loop stops at once on a finished one.
    expect((await call("POST", `/api/conversations/${id}/pause`)).json).toEqual({ success: true });
    expect((await call("POST", `/api/conversations/${id}/run`)).json).toEqual({ success: true });
    await new Promise((r) => setTimeout(r, 300));
    expect(kinds(socket.events.slice(mark))).toEqual([]);
    expect(llm.requests.length).toBe(before + 1);
    const info = await call("GET", `/api/conversations/${id}`);
    expect((info.json as { execution_status: string }).execution_status).toBe("finished");
    // A new message is asked as usual.
    llm.script({ content: "The second answer." });
    await call("POST", `/api/conversations/${id}/events`, {
      role: "user",
      content: [{ type: "text", text: "and again" }],
      run: true,
    });
    await socket.untilStatus("finished", mark);
    expect(llm.requests.length).toBe(before + 2);
    expect(socket.events.filter((e) => e.kind === "MessageEvent" && e.source === "agent")).toHaveLength(2);
    socket.close();
  });

  it("run asks the model only for a user message it has not answered: an idle conversation paused then run stays quiet", async () => {
    const before = llm.requests.length;
    const res = await call("POST", "/api/conversations", {
      agent: {
        kind: "Agent",
        llm: { model: "openai/fake-model", base_url: llm.url, api_key: "sk-fake", num_retries: 0 },
      },
      workspace: { kind: "LocalWorkspace", working_dir: workspace },
    });
    const id = (res.json as { id: string }).id;
    const socket = new Socket(id);
    await socket.opened;
    // Idle with nothing to answer: paused (as the agent-server does), and run has nothing to ask the model.
    await call("POST", `/api/conversations/${id}/pause`);
    await socket.untilStatus("paused");
    const mark = socket.events.length;
    expect((await call("POST", `/api/conversations/${id}/run`)).json).toEqual({ success: true });
    await socket.untilStatus("idle", mark);
    await new Promise((r) => setTimeout(r, 300));
    expect(llm.requests.length).toBe(before);
    // A message queued without running, then a pause and run: that message is asked, once.
    llm.script({ content: "Queued answer." });
    await call("POST", `/api/conversations/${id}/events`, {
      role: "user",
      content: [{ type: "text", text: "queued" }],
      run: false,
    });
    await call("POST", `/api/conversations/${id}/pause`);
    await call("POST", `/api/conversations/${id}/run`);
    await socket.untilStatus("finished", mark);
    expect(llm.requests.length).toBe(before + 1);
    // Run again after that answer: nothing new, no model call.
    await call("POST", `/api/conversations/${id}/run`);
    await new Promise((r) => setTimeout(r, 300));
    expect(llm.requests.length).toBe(before + 1);
    socket.close();
  });

  it("in confirmation mode, actions kept by a pause still wait for the user's answer", async () => {
    llm.script(
      { toolCalls: [{ name: "terminal", arguments: { command: "echo confirmed" } }], delayMs: 300 },
      { content: "ok" },
    );
    const before = llm.requests.length;
    const id = await startConversation({ confirmation_policy: { kind: "AlwaysConfirm" } }, "careful");
    const socket = new Socket(id);
    await llm.waitForRequests(before + 1);
    await call("POST", `/api/conversations/${id}/pause`);
    await socket.until((es) => es.some((e) => e.kind === "ActionEvent"));
    const mark = socket.events.length;
    await call("POST", `/api/conversations/${id}/run`);
    await socket.untilStatus("waiting_for_confirmation", mark);
    expect(kinds(socket.events.slice(mark))).toEqual(["state:running", "state:waiting_for_confirmation"]);
    await call("POST", `/api/conversations/${id}/events/respond_to_confirmation`, { accept: true });
    await socket.untilStatus("finished", mark);
    expect(kinds(socket.events.slice(mark)).slice(2)).toEqual([
      "state:running",
      "ObservationEvent",
      "MessageEvent",
      "state:finished",
    ]);
    socket.close();
  });
});

describe("agent loop: model failures", () => {
  it.each([
    [401, /status 401.*API key/],
    [429, /status 429.*rate-limiting/],
    [500, /status 500.*provider failed/],
  ])(
    "a %i becomes a ConversationErrorEvent, and the agent answers the next message",
    async (status, pattern) => {
      llm.script({ status, error: "scripted failure" });
      const id = await startConversation({}, "hello");
      const socket = new Socket(id);
      const events = await socket.untilStatus("error");
      const error = events.find((e) => e.kind === "ConversationErrorEvent");
      expect(error?.detail).toMatch(pattern);
      expect(error?.detail).toContain("scripted failure");
      llm.script({ content: "Back again." });
      const mark = socket.events.length;
      await call("POST", `/api/conversations/${id}/events`, {
        content: [{ type: "text", text: "retry" }],
        run: true,
      });
      await socket.untilStatus("finished", mark);
      socket.close();
    },
  );

  it("a model that does not answer in time becomes an error event", async () => {
    llm.script({ hang: true });
    const res = await call("POST", "/api/conversations", {
      agent: { llm: { model: "fake", base_url: llm.url, api_key: "k", timeout: 1, num_retries: 0 } },
      initial_message: { content: [{ type: "text", text: "hi" }] },
    });
    const socket = new Socket((res.json as { id: string }).id);
    const events = await socket.untilStatus("error");
    expect(events.find((e) => e.kind === "ConversationErrorEvent")?.detail).toMatch(
      /timed out|did not answer in time/i,
    );
    socket.close();
  });

  it("a provider it cannot reach without a base URL is a readable error, not a crash", async () => {
    const res = await call("POST", "/api/conversations", {
      agent: { llm: { model: "bedrock/some-model", api_key: "k" } },
      initial_message: { content: [{ type: "text", text: "hi" }] },
    });
    const socket = new Socket((res.json as { id: string }).id);
    const events = await socket.untilStatus("error");
    expect(events.find((e) => e.kind === "ConversationErrorEvent")?.detail).toMatch(/base URL/);
    socket.close();
  });

  it("offers only the tools the request names (plus think and finish); a call to another is an AgentErrorEvent", async () => {
    llm.script(
      { toolCalls: [{ name: "terminal", arguments: { command: "echo no" } }] },
      { toolCalls: [{ name: "file_editor", arguments: "{not json" }] },
      { content: "ok" },
    );
    const before = llm.requests.length;
    const id = await startConversation(
      {
        agent: {
          kind: "Agent",
          llm: { model: "fake", base_url: llm.url, api_key: "k", num_retries: 0 },
          tools: [{ name: "file_editor" }, { name: "browser_tool_set" }],
        },
      },
      "edit",
    );
    const socket = new Socket(id);
    const events = await socket.untilStatus("finished");
    expect(llm.requests[before]?.body.tools?.map((t) => t.function.name)).toEqual([
      "file_editor",
      "think",
      "finish",
    ]);
    const errors = events.filter((e) => e.kind === "AgentErrorEvent");
    expect(errors.map((e) => [e.tool_name, e.source])).toEqual([
      ["terminal", "agent"],
      ["file_editor", "agent"],
    ]);
    expect(String(errors[0]?.error)).toMatch(/Tool 'terminal' not found/);
    expect(String(errors[1]?.error)).toMatch(/parsing the arguments/);
    // The model saw both errors as the results of its calls.
    const last = llm.requests.at(-1)?.body.messages ?? [];
    expect(last.filter((m) => m.role === "tool")).toHaveLength(2);
    socket.close();
  });

  it("stops at max_iterations", async () => {
    llm.script(
      { toolCalls: [{ name: "think", arguments: { thought: "a" } }] },
      { toolCalls: [{ name: "think", arguments: { thought: "b" } }] },
    );
    const id = await startConversation({ max_iterations: 2 }, "loop");
    const socket = new Socket(id);
    const events = await socket.untilStatus("error");
    expect(events.filter((e) => e.kind === "ActionEvent")).toHaveLength(2);
    expect(events.find((e) => e.kind === "ConversationErrorEvent")?.detail).toMatch(/max_iterations/);
    socket.close();
  });
});

describe("agent loop: working directory", () => {
  it("starts the tools in the request's workspace.working_dir when it is a folder in the workspace", async () => {
    const dir = join(workspace, "project-dir");
    mkdirSync(dir, { recursive: true });
    for (const [requested, expected] of [
      [dir, dir],
      ["/etc", workspace],
      [join(workspace, "missing"), workspace],
    ]) {
      llm.script({ toolCalls: [{ name: "terminal", arguments: { command: "pwd" } }] }, { content: "ok" });
      const id = await startConversation(
        { workspace: { kind: "LocalWorkspace", working_dir: requested } },
        "pwd",
      );
      expect((await call("GET", `/api/conversations/${id}`)).json).toMatchObject({
        workspace: { working_dir: expected },
      });
      const socket = new Socket(id);
      const events = await socket.untilStatus("finished");
      const observation = events.find((e) => e.kind === "ObservationEvent")?.observation as
        | { content: { text: string }[] }
        | undefined;
      expect(observation?.content[0]?.text).toMatch(new RegExp(`^${expected}\\n`));
      socket.close();
    }
  });

  it("takes the file editor's /workspace/project paths (the reference image's layout) as paths in the workspace", async () => {
    // Found with the real UI: a model writing /workspace/project/x got EACCES on the process runtime, and the
    // UI's Changes panel (which asks for /workspace/project) could never show the file.
    llm.script(
      {
        toolCalls: [
          {
            name: "file_editor",
            arguments: { command: "create", path: "/workspace/project/mapped.txt", file_text: "mapped\n" },
          },
        ],
      },
      {
        toolCalls: [
          {
            name: "file_editor",
            arguments: {
              command: "str_replace",
              path: "/workspace/mapped.txt",
              old_str: "mapped",
              new_str: "edited",
            },
          },
        ],
      },
      { content: "done" },
    );
    const id = await startConversation({}, "write mapped.txt");
    const socket = new Socket(id);
    const events = await socket.untilStatus("finished");
    const observations = events
      .filter((e) => e.kind === "ObservationEvent")
      .map((e) => e.observation as Record<string, unknown>);
    expect(observations).toMatchObject([
      { kind: "FileEditorObservation", path: "/workspace/project/mapped.txt", is_error: false },
      {
        kind: "FileEditorObservation",
        path: "/workspace/mapped.txt",
        is_error: false,
        new_content: "edited\n",
      },
    ]);
    expect(readFileSync(join(workspace, "mapped.txt"), "utf8")).toBe("edited\n");
    // The system prompt tells the model where such paths are (uploads are named /workspace/<name> in the chat).
    const system = llm.requests.at(-1)?.body.messages[0];
    expect(system?.role).toBe("system");
    expect(String(system?.content)).toContain(`/workspace/a both mean ${workspace}/a`);
    socket.close();
  });
});

describe("agent server: conversation routes the UI calls", () => {
  it("renames and deletes a conversation", async () => {
    llm.script({ content: "ok" });
    const id = await startConversation(
      {
        agent: {
          kind: "Agent",
          llm: { model: "fake", base_url: llm.url, api_key: "sk-fake", num_retries: 0 },
          mcp_config: {
            mcpServers: {
              s: { url: "https://mcp.example", headers: { Authorization: "Bearer mcp-secret" } },
            },
          },
        },
      },
      "hi",
    );
    // Credentials in the request stay out of the record the agent shows and posts.
    const record = JSON.stringify((await call("GET", `/api/conversations/${id}`)).json);
    expect(record).not.toContain("mcp-secret");
    expect(record).not.toContain("sk-fake");
    expect(record).not.toContain(SECRET);
    expect((await call("PATCH", `/api/conversations/${id}`, { title: "New name" })).json).toEqual({
      success: true,
    });
    expect((await call("GET", `/api/conversations/${id}`)).json).toMatchObject({ title: "New name" });
    expect((await call("PATCH", `/api/conversations/${id}`, { title: "" })).status).toBe(422);
    expect((await call("DELETE", `/api/conversations/${id}`)).json).toEqual({ success: true });
    expect((await call("GET", `/api/conversations/${id}`)).status).toBe(404);
    expect((await call("DELETE", `/api/conversations/${id}`)).status).toBe(400);
  });

  it("answers the VS Code URL as null, git changes and diffs, and file uploads into the workspace", async () => {
    expect((await call("GET", "/api/vscode/url")).json).toEqual({ url: null });
    const repo = join(workspace, "repo");
    mkdirSync(repo);
    const git = (...args: string[]) =>
      execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...args], { cwd: repo });
    git("init", "-q");
    writeFileSync(join(repo, "a.txt"), "one\n");
    writeFileSync(join(repo, "gone.txt"), "x\n");
    git("add", ".");
    git("commit", "-qm", "init");
    writeFileSync(join(repo, "a.txt"), "two\n");
    rmSync(join(repo, "gone.txt"));
    writeFileSync(join(repo, "new.txt"), "new\n");
    const changes = await call("GET", `/api/git/changes/${encodeURIComponent(repo)}`);
    expect(changes.json).toEqual([
      { status: "UPDATED", path: "a.txt" },
      { status: "DELETED", path: "gone.txt" },
      { status: "ADDED", path: "new.txt" },
    ]);
    // The workspace itself is no repository: the repositories directly below it are shown.
    const below = await call("GET", `/api/git/changes/${encodeURIComponent(workspace)}`);
    expect(below.json).toContainEqual({ status: "UPDATED", path: "repo/a.txt" });
    const diff = await call("GET", `/api/git/diff/${encodeURIComponent(join(repo, "a.txt"))}`);
    expect(diff.json).toEqual({ modified: "two\n", original: "one\n" });
    // A new file: original "" (as the SDK); a deleted one: modified null.
    const added = await call("GET", `/api/git/diff/${encodeURIComponent(join(repo, "new.txt"))}`);
    expect(added.json).toEqual({ modified: "new\n", original: "" });
    const gone = await call("GET", `/api/git/diff/${encodeURIComponent(join(repo, "gone.txt"))}`);
    expect((gone.json as { modified: unknown }).modified).toBeNull();
    expect((await call("GET", `/api/git/changes/${encodeURIComponent("/etc")}`)).status).toBe(400);

    const form = new FormData();
    form.append("file", new Blob(["uploaded bytes"]), "up.txt");
    const target = join(workspace, "uploads", "up.txt");
    const up = await fetch(`${base}/api/file/upload/${encodeURIComponent(target)}`, {
      method: "POST",
      headers: { "x-session-api-key": KEY },
      body: form,
    });
    expect(up.status).toBe(200);
    expect(readFileSync(target, "utf8")).toBe("uploaded bytes");
    // The UI's default /workspace/<name> lands in the workspace.
    const form2 = new FormData();
    form2.append("file", new Blob(["b"]), "b.txt");
    const mapped = await fetch(`${base}/api/file/upload/${encodeURIComponent("/workspace/b.txt")}`, {
      method: "POST",
      headers: { "x-session-api-key": KEY },
      body: form2,
    });
    expect(mapped.status).toBe(200);
    expect(readFileSync(join(workspace, "b.txt"), "utf8")).toBe("b");
    const outside = await fetch(`${base}/api/file/upload/${encodeURIComponent("/etc/x")}`, {
      method: "POST",
      headers: { "x-session-api-key": KEY },
      body: form2,
    });
    expect(outside.status).toBe(400);
    const noKey = await fetch(`${base}/api/vscode/url`);
    expect(noKey.status).toBe(401);
  });
});

describe("terminal tool", () => {
  const text = (o: Record<string, unknown>) => (o.content as { text: string }[])[0]?.text ?? "";

  it("stops a command past its timeout and keeps the shell, caps long output in the middle, refuses is_input", async () => {
    const terminal = new Terminal({
      shell: "bash",
      cwd: workspace,
      env: { PATH: process.env.PATH ?? "" },
      maxOutputChars: 1000,
    });
    try {
      await terminal.execute({ command: "export KEEP=kept; cd /tmp" });
      // A server started in the background before the slow command must outlive its timeout.
      await terminal.execute({ command: "sleep 300 & echo $! > /tmp/agent-loop-bg-$$.pid" });
      const bg = Number.parseInt(
        text(
          await terminal.execute({ command: "cat /tmp/agent-loop-bg-$$.pid; rm /tmp/agent-loop-bg-$$.pid" }),
        ),
        10,
      );
      const slow = await terminal.execute({
        command: "echo start; sleep 40 & echo $! > started.pid; sleep 30; echo never",
        timeout: 0.5,
      });
      expect(slow).toMatchObject({
        kind: "TerminalObservation",
        exit_code: -1,
        timeout: true,
        is_error: true,
      });
      expect(text(slow)).toMatch(/^start\n[\s\S]*stopped after 0.5 seconds[\s\S]*shell session goes on/);
      expect(text(slow)).not.toContain("never");
      const after = await terminal.execute({ command: "echo keep=$KEEP; pwd" });
      // The same shell: the exported variable and the directory stay.
      expect(text(after)).toMatch(/^keep=kept\n\/tmp\n/);
      expect(after).toMatchObject({ exit_code: 0, metadata: { working_dir: "/tmp", exit_code: 0 } });
      // The command's own background process is gone; the one from before runs on.
      const startedPid = Number.parseInt(
        text(await terminal.execute({ command: "cat started.pid; rm started.pid" })),
        10,
      );
      expect(() => process.kill(startedPid, 0)).toThrow();
      expect(process.kill(bg, 0)).toBe(true);
      process.kill(bg, "SIGKILL");
      // A command that does not parse runs nothing (not the previous command again).
      const broken = await terminal.execute({ command: "echo partial; if then" });
      expect(text(broken)).not.toContain("keep=");
      expect(text(broken)).toMatch(/syntax error/);
      expect(text(await terminal.execute({ command: "echo $KEEP" }))).toMatch(/^kept\n/);
      // A timed-out busy loop in the shell itself (no child process) stops too.
      const busy = await terminal.execute({ command: "while :; do :; done", timeout: 0.5 });
      expect(busy).toMatchObject({ timeout: true, exit_code: -1 });
      expect(text(await terminal.execute({ command: "echo $KEEP" }))).toMatch(/^kept\n/);
      const long = await terminal.execute({ command: "seq 1 20000" });
      const out = text(long);
      expect(out.startsWith("1\n2\n")).toBe(true);
      expect(out).toMatch(/\[\.\.\. \d+ characters of output cut \.\.\.\]/);
      expect(out).toContain("20000\n");
      expect(out.length).toBeLessThan(1200);
      expect((await terminal.execute({ command: "cat" })).exit_code).toBe(0); // no stdin: returns at once
      expect(await terminal.execute({ command: "y", is_input: true })).toMatchObject({ is_error: true });
      const exited = await terminal.execute({ command: "exit 3" });
      expect(text(exited)).toMatch(/shell exited/);
      expect(text(await terminal.execute({ command: "echo back" }))).toMatch(/^back\n/);
    } finally {
      terminal.close();
    }
  });
});

describe("agent server: webhook refusals", () => {
  it("drops a batch the service refuses for what it is (413) instead of holding back every later event", async () => {
    const posts: { path: string; count: number }[] = [];
    let refuse = true;
    const receiver = createServer((req, res) => {
      let text = "";
      req.on("data", (c: Buffer) => {
        text += c.toString();
      });
      req.on("end", () => {
        const body = JSON.parse(text) as unknown;
        if (req.url?.includes("/events/")) posts.push({ path: req.url, count: (body as unknown[]).length });
        if (req.url?.includes("/events/") && refuse) {
          refuse = false;
          res.writeHead(413, { "content-type": "application/json" }).end('{"detail":"too large"}');
        } else res.writeHead(200, { "content-type": "application/json" }).end("{}");
      });
    });
    const receiverBase = await listen(receiver);
    const other = createAgentServer({
      sessionApiKey: KEY,
      workspaceDir: workspace,
      webhook: { baseUrl: receiverBase, flushDelayMs: 10, bufferSize: 100, retryDelayMs: 10 },
    });
    const otherBase = await listen(other);
    try {
      const post = (path: string, body: unknown) =>
        fetch(`${otherBase}${path}`, {
          method: "POST",
          headers: { "x-session-api-key": KEY },
          body: JSON.stringify(body),
        });
      const id = ((await (await post("/api/conversations", {})).json()) as { id: string }).id;
      await until(
        () => posts.length,
        (n) => n >= 1,
      );
      await post(`/api/conversations/${id}/events`, { content: [{ type: "text", text: "later" }] });
      await until(
        () => posts.length,
        (n) => n >= 2,
      );
      await new Promise((r) => setTimeout(r, 100));
      // The refused batch (the state event) was not sent again; the later one went alone.
      expect(posts.map((p) => p.count)).toEqual([1, 1]);
    } finally {
      other.closeAllConnections();
      await new Promise((r) => other.close(r));
      receiver.closeAllConnections();
      await new Promise((r) => receiver.close(r));
    }
  });
});

describe("agent server: CORS for the UI's direct calls", () => {
  it("answers a localhost origin's preflight and requests, and refuses another origin's preflight", async () => {
    const preflight = await fetch(`${base}/api/conversations/x/pause`, {
      method: "OPTIONS",
      headers: {
        origin: "http://localhost:3000",
        "access-control-request-method": "POST",
        "access-control-request-headers": "x-session-api-key,content-type",
      },
    });
    expect(preflight.status).toBe(200);
    expect(preflight.headers.get("access-control-allow-origin")).toBe("http://localhost:3000");
    expect(preflight.headers.get("access-control-allow-headers")).toBe("x-session-api-key,content-type");
    expect(preflight.headers.get("access-control-allow-methods")).toContain("POST");
    const real = await fetch(`${base}/api/vscode/url`, {
      headers: { origin: "http://127.0.0.1:3000", "x-session-api-key": KEY },
    });
    expect(real.headers.get("access-control-allow-origin")).toBe("http://127.0.0.1:3000");
    expect(real.headers.get("access-control-allow-credentials")).toBe("true");
    const foreign = await fetch(`${base}/api/vscode/url`, {
      method: "OPTIONS",
      headers: { origin: "http://evil.example", "access-control-request-method": "GET" },
    });
    expect(foreign.status).toBe(400);
    expect(foreign.headers.get("access-control-allow-origin")).toBeNull();
    const foreignGet = await fetch(`${base}/api/vscode/url`, {
      headers: { origin: "http://evil.example", "x-session-api-key": KEY },
    });
    expect(foreignGet.headers.get("access-control-allow-origin")).toBeNull();
  });

  it("allows exactly the configured origins when some are given", async () => {
    const other = createAgentServer({
      sessionApiKey: KEY,
      workspaceDir: workspace,
      corsOrigins: ["https://ui.example"],
    });
    const otherBase = await listen(other);
    try {
      const ask = (origin: string) =>
        fetch(`${otherBase}/alive`, {
          method: "OPTIONS",
          headers: { origin, "access-control-request-method": "GET" },
        });
      expect((await ask("https://ui.example")).status).toBe(200);
      expect((await ask("http://localhost:3000")).status).toBe(400);
    } finally {
      other.closeAllConnections();
      await new Promise((r) => other.close(r));
    }
  });
});
