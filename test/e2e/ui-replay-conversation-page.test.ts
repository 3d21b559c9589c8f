/**
 * The conversation page of the OpenHands web UI (All-Hands-AI/OpenHands frontend at 156d0686) on the embedded
 * default (process runtime, built-in agent), replayed call by call from what scripts/ui-check.ts recorded in
 * headless Chromium (docs/testing.md): a browser signed in through the sign-in endpoint saves its LLM settings (the
 * advanced form's exact body, with a scripted fake model server), starts a conversation from the home page (the
 * legacy POST, the UI's default), opens the page (the service's calls, then the agent's websocket and git changes:
 * the conversation's `url` is relative, so the page sends them to its own origin (frontend/src/utils/websocket-url.ts)
 * with the sandbox's session key, and the cookie and Origin a browser adds to a same-origin request; the service
 * forwards them to the agent), types two tasks (a terminal command, a file edit), reloads (resend_all, and the event
 * count the page waits for), pauses while the model thinks and plays again. Every frame the page renders and every
 * field it reads is asserted.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import type { ProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime-types.ts";
import { directAgentUrl } from "../helpers/agent-address.ts";
import { Browser } from "../helpers/browser.ts";
import { type FakeLlm, startFakeLlm } from "../helpers/fake-llm.ts";
import { startTestApp, type TestApp } from "../helpers/test-app.ts";
import { uiAgentBase, uiSocketUrl } from "../helpers/ui-urls.ts";
import { until } from "../helpers/until.ts";

type Ev = {
  kind: string;
  id: string;
  timestamp: string;
  source: string;
  key?: string;
  value?: unknown;
  [k: string]: unknown;
};

const TASK = "Print a greeting in the terminal";
const REPLY = "The greeting was printed.";
const TASK_2 = "Now write it to a file";
const REPLY_2 = "I wrote greeting.txt.";
const TASK_3 = "Take your time";
const REPLY_3 = "Resumed and done.";

let t: TestApp;
let llm: FakeLlm;
let b: Browser;

/**
 * The page's events websocket (conversation-websocket-context.tsx), as Chromium opens it: the page's Origin, and its
 * cookies (the socket is on the page's own origin).
 */
class PageSocket {
  readonly frames: Ev[] = [];
  readonly ws: WebSocket;
  readonly opened: Promise<void>;
  constructor(url: string, origin: string, cookie: string | undefined) {
    this.ws = new WebSocket(url, { headers: { origin, ...(cookie === undefined ? {} : { cookie }) } });
    this.ws.on("message", (d) => this.frames.push(JSON.parse(d.toString()) as Ev));
    this.opened = new Promise((resolve, reject) => {
      this.ws.once("open", () => resolve());
      this.ws.once("error", reject);
    });
  }
  /** The chat box's send: a V1SendMessageRequest as JSON text. */
  send(text: string): void {
    this.ws.send(JSON.stringify({ role: "user", content: [{ type: "text", text }] }));
  }
  until(predicate: (frames: Ev[]) => boolean): Promise<Ev[]> {
    return until(
      () => this.frames,
      (f) => predicate(f),
    );
  }
  untilStatus(status: string, after: number): Promise<Ev[]> {
    return this.until((f) => f.slice(after).some((e) => e.key === "execution_status" && e.value === status));
  }
  /** Sends `text` and waits for the conversation to reach `status`; the frames that came meanwhile. */
  async sendUntil(text: string, status: string): Promise<Ev[]> {
    const mark = this.frames.length;
    this.send(text);
    await this.untilStatus(status, mark);
    return this.frames.slice(mark);
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

/** isBaseEvent (types/v1/type-guards.ts): what every frame needs for the page to take it as an event. */
function expectBaseEvent(e: Ev): void {
  expect(typeof e.id).toBe("string");
  expect(e.id.length).toBeGreaterThan(0);
  expect(e.timestamp).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}$/);
  expect(["agent", "user", "environment"]).toContain(e.source);
}

/** The text of a MessageEvent as the chat shows it (llm_message.content, text parts). */
const messageText = (e: Ev | undefined): string =>
  ((e?.llm_message as { content: { type: string; text: string }[] } | undefined)?.content ?? [])
    .filter((c) => c.type === "text")
    .map((c) => c.text)
    .join("");

/**
 * The body the UI's LLM settings page posts (advanced view; recorded), with `changes`: the key only when the user
 * typed one.
 */
const uiSettingsBody = (changes: Record<string, unknown>) => ({
  llm_model: "openai/gpt-4o",
  llm_base_url: llm.url,
  agent: "CodeActAgent",
  language: "en",
  confirmation_mode: false,
  security_analyzer: "llm",
  remote_runtime_resource_factor: 1,
  enable_default_condenser: true,
  condenser_max_size: 120,
  enable_sound_notifications: false,
  provider_tokens_set: {},
  mcp_config: { sse_servers: [], stdio_servers: [], shttp_servers: [] },
  enable_proactive_conversation_starters: false,
  enable_solvability_analysis: false,
  search_api_key: "",
  max_budget_per_task: null,
  git_user_name: "openhands",
  git_user_email: "openhands@all-hands.dev",
  ...changes,
});

beforeAll(async () => {
  llm = await startFakeLlm();
  t = await startTestApp({});
  // The model stand-in is on the host's loopback: allowed to sandboxes with networks of their own.
  t.runtime.reachHost?.(llm.url);
  b = new Browser(t.url);
  await b.signIn(await t.keyFor("erin"));
  // The LLM settings page, advanced view, saved (the body the UI posted, recorded).
  const saved = await b.request(
    "POST",
    "/api/settings",
    uiSettingsBody({ confirmation_mode: false, llm_api_key: "sk-fake-ui-check" }),
  );
  expect(saved.status).toBe(200);
}, 60_000);

afterAll(async () => {
  await t?.close();
  await llm?.close();
});

describe("UI replay: the conversation page with the built-in agent", () => {
  let id = "";
  let agentBase = "";
  let sessionKey = "";
  let socket: PageSocket;
  /** The frames of the first socket, to compare with the reload's. */
  let firstFrames: Ev[] = [];

  /**
   * A call the page makes to the agent (axios, the sandbox's key in the header) at the host of the conversation's
   * `url`: the page's own origin, so the browser sends its cookie (and, but for a GET, its Origin) and needs no
   * CORS grant to read the answer (the service gives none for an agent's answer).
   */
  const agent = async (method: string, path: string, body?: unknown) => {
    expect(agentBase).toBe(new URL(t.url).origin);
    const res = await b.request(method, path, body, { "x-session-api-key": sessionKey });
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
    return { status: res.status, body: res.body };
  };

  it("starts a conversation from the home page and opens it: the service's calls, then the agent's", async () => {
    // useCreateConversation with the V1 flag off (the default): the legacy POST with nothing in it.
    const created = await b.request("POST", "/api/conversations", {});
    expect(created.status).toBe(200);
    expect(created.body).toEqual({
      status: "ok",
      conversation_id: expect.stringMatching(/^[0-9a-f]{32}$/),
      message: null,
      conversation_status: "STARTING",
    });
    id = (created.body as { conversation_id: string }).conversation_id;
    expect((await b.request("GET", "/api/conversations?limit=10")).status).toBe(200);

    // useActiveConversation: every 3 s while STARTING. The page picks the V1 socket from conversation_version
    // and builds its URL from the host of `url` (relative: the page's own) and `session_api_key`.
    const c = await until(
      async () => (await b.request("GET", `/api/conversations/${id}`)).body as Record<string, unknown>,
      (x) => x.status !== "STARTING",
    );
    expect(c).toMatchObject({
      conversation_id: id,
      status: "RUNNING",
      runtime_status: "STATUS$READY",
      conversation_version: "V1",
      title: `Conversation ${id}`,
    });
    expect(c.url).toBe(`/api/conversations/${id}`);
    agentBase = uiAgentBase(c.url as string, t.url);
    sessionKey = c.session_api_key as string;
    expect(sessionKey).toMatch(/^sbx_[0-9A-Za-z]+_[0-9A-Za-z]{43}$/);

    // buildWebSocketUrl: ws://<host of url, else the page's>/sockets/events/<id>?resend_all=true&session_api_key=<key>.
    socket = new PageSocket(
      `${uiSocketUrl(id, c.url as string, t.url)}?resend_all=true&session_api_key=${encodeURIComponent(sessionKey)}`,
      t.url,
      b.cookieHeader(),
    );
    await socket.opened;
    await socket.until((f) => f.length >= 2);
    // The state first (useConversationWebSocket sets the execution status from value.execution_status), then the
    // one event so far.
    expect(kinds(socket.frames)).toEqual(["state:full", "state:idle"]);
    expect(socket.frames[0]?.value).toMatchObject({ id, execution_status: "idle" });
    for (const e of socket.frames) expectBaseEvent(e);

    // EventService.getEventCount: the page shows its history once that many frames came.
    const count = await b.request("GET", `/api/v1/events/count?conversation_id__eq=${id}`);
    expect(count.status).toBe(200);
    expect(count.body).toBeLessThanOrEqual(socket.frames.length);

    // useConversationConfig (V1): runtime_id is the sandbox the page asks for (VS Code and app URLs).
    const config = await b.request("GET", `/api/conversations/${id}/config`);
    expect(config.status).toBe(200);
    const runtimeId = (config.body as { runtime_id: string; session_id: string }).runtime_id;
    expect(config.body).toEqual({ runtime_id: expect.any(String), session_id: id });
    expect(sessionKey.startsWith(`sbx_${runtimeId}_`)).toBe(true);
    const batch = await b.request("GET", `/api/v1/app-conversations?ids=${id}`);
    const [app] = batch.body as { sandbox_id: string; conversation_url: string; session_api_key: string }[];
    expect(app).toMatchObject({
      sandbox_id: runtimeId,
      conversation_url: c.url,
      session_api_key: sessionKey,
    });
    // useBatchSandboxes: exposed_urls, where the page looks for VSCODE and WORKER_* (none here: no VS Code,
    // no worker ports; the page says the VS Code URL is not available). The agent is the service's own origin,
    // its own address beside it (its loopback port, or its address on port 8000 in a network of its own).
    const sandboxes = await b.request("GET", `/api/v1/sandboxes?id=${runtimeId}`);
    const [sandbox] = sandboxes.body as {
      id: string;
      status: string;
      exposed_urls: { name: string; url: string; port: number }[];
    }[];
    expect(sandbox).toMatchObject({ id: runtimeId, status: "RUNNING" });
    const port = sandbox?.exposed_urls[1]?.port;
    expect(sandbox?.exposed_urls).toEqual([
      { name: "AGENT_SERVER", url: "/", port: Number(new URL(t.url).port) },
      {
        name: "AGENT_SERVER_DIRECT",
        url: expect.stringMatching(directAgentUrl((t.runtime as ProcessRuntime).network)),
        port,
      },
    ]);
    expect(new URL(sandbox?.exposed_urls[1]?.url ?? "http://x").port).toBe(String(port));

    // The Changes tab (v1-git-service): /workspace/project, URL-encoded, on the agent. Nothing yet.
    const changes = await agent("GET", "/api/git/changes/%2Fworkspace%2Fproject");
    expect(changes).toEqual({ status: 200, body: [] });
  }, 60_000);

  it("runs a typed task: the frames the chat and the terminal render, in order, and the title", async () => {
    llm.script(
      { toolCalls: [{ name: "terminal", arguments: { command: "echo hello-from-the-terminal" } }] },
      { content: REPLY },
    );
    const run = await socket.sendUntil(TASK, "finished");
    expect(kinds(run)).toEqual([
      "MessageEvent",
      "state:running",
      "ActionEvent",
      "ObservationEvent",
      "MessageEvent",
      "state:finished",
    ]);
    for (const e of run) expectBaseEvent(e);
    const [user, , action, observation, reply] = run as [Ev, Ev, Ev, Ev, Ev, Ev];
    // isUserMessageEvent clears the optimistic message.
    expect(user).toMatchObject({ source: "user", llm_message: { role: "user" } });
    expect(messageText(user)).toBe(TASK);
    // isActionEvent + isExecuteBashActionEvent: the command goes to the terminal as input, "Ran <command>".
    expect(action).toMatchObject({
      source: "agent",
      tool_name: "terminal",
      tool_call_id: expect.any(String),
      action: { kind: "TerminalAction", command: "echo hello-from-the-terminal" },
    });
    // isObservationEvent + isExecuteBashObservationEvent: content's text parts go to the terminal as output;
    // getObservationResult: timeout / exit_code (or metadata.exit_code) 0 → the green check.
    expect(observation).toMatchObject({
      source: "environment",
      action_id: action.id,
      tool_call_id: action.tool_call_id,
      observation: {
        kind: "TerminalObservation",
        exit_code: 0,
        timeout: false,
        is_error: false,
        metadata: { exit_code: 0 },
      },
    });
    const output = (observation.observation as { content: { type: string; text: string }[] }).content;
    expect(output.filter((p) => p.type === "text").map((p) => p.text)).toEqual([
      "hello-from-the-terminal\n\n[The command completed with exit code 0.]",
    ]);
    expect(reply).toMatchObject({ source: "agent", llm_message: { role: "assistant" } });
    expect(messageText(reply)).toBe(REPLY);
    // The model got the key and the model name from the settings the page saved.
    expect(llm.requests.at(-2)?.authorization).toBe("Bearer sk-fake-ui-check");
    expect(llm.requests.at(-2)?.body.model).toBe("gpt-4o");

    // The service names the conversation after the first message; the page's 30 s poll shows it.
    const titled = await until(
      async () => (await b.request("GET", `/api/conversations/${id}`)).body as { title: string },
      (x) => x.title === TASK,
    );
    expect(titled.title).toBe(TASK);
  }, 60_000);

  it("runs a second task that edits a file under /workspace/project; the Changes tab asks again", async () => {
    llm.script(
      {
        toolCalls: [
          {
            name: "file_editor",
            arguments: { command: "create", path: "/workspace/project/greeting.txt", file_text: "hello\n" },
          },
        ],
      },
      { content: REPLY_2 },
    );
    const run = await socket.sendUntil(TASK_2, "finished");
    // A finished conversation becomes idle when a message comes, then runs.
    expect(kinds(run)).toEqual([
      "state:idle",
      "MessageEvent",
      "state:running",
      "ActionEvent",
      "ObservationEvent",
      "MessageEvent",
      "state:finished",
    ]);
    const action = run[3] as Ev;
    const observation = run[4] as Ev;
    // "Edited greeting.txt": FileEditorAction's command and path.
    expect(action.action).toMatchObject({
      kind: "FileEditorAction",
      command: "create",
      path: "/workspace/project/greeting.txt",
    });
    expect(observation.observation).toMatchObject({
      kind: "FileEditorObservation",
      command: "create",
      path: "/workspace/project/greeting.txt",
      is_error: false,
      new_content: "hello\n",
    });
    expect(messageText(run[5])).toBe(REPLY_2);
    // The file is in the sandbox's workspace.
    const root = join(t.dir, "sandboxes");
    const written = readdirSync(root)
      .filter((d) => !d.startsWith("."))
      .map((d) => join(root, d, "greeting.txt"))
      .filter((p) => {
        try {
          return readFileSync(p, "utf8") === "hello\n";
        } catch {
          return false;
        }
      });
    expect(written).toHaveLength(1);
    // handleActionEventCacheInvalidation refetches the changes (the workspace is a repository of its own); a
    // click on the file asks its diff at /workspace/project/<path> (useUnifiedGitDiff, no repository selected).
    expect(await agent("GET", "/api/git/changes/%2Fworkspace%2Fproject")).toEqual({
      status: 200,
      body: [{ status: "ADDED", path: "greeting.txt" }],
    });
    expect(await agent("GET", "/api/git/diff/%2Fworkspace%2Fproject%2Fgreeting.txt")).toEqual({
      status: 200,
      body: { modified: "hello\n", original: "" },
    });
    firstFrames = socket.frames.slice();
  }, 60_000);

  it("reloads: resend_all brings every event back in order, and the count the page waits for is reached", async () => {
    // The events reach the service through the webhook (batched): wait until it holds all of them.
    const events = firstFrames.filter((e) => e.key !== "full_state");
    const count = await until(
      async () => (await b.request("GET", `/api/v1/events/count?conversation_id__eq=${id}`)).body as number,
      (n) => n === events.length,
    );
    const reloaded = await b.request("GET", `/api/conversations/${id}`);
    expect(reloaded.status).toBe(200);
    const { url } = reloaded.body as { url: string };
    expect(url).toBe(`/api/conversations/${id}`);
    const again = new PageSocket(
      `${uiSocketUrl(id, url, t.url)}?resend_all=true&session_api_key=${encodeURIComponent(sessionKey)}`,
      t.url,
      b.cookieHeader(),
    );
    await again.opened;
    await again.until((f) => f.length >= events.length + 1);
    expect(again.frames[0]).toMatchObject({ key: "full_state", value: { execution_status: "finished" } });
    expect(again.frames.slice(1).map((e) => e.id)).toEqual(events.map((e) => e.id));
    // The page counts every frame while it loads its history: it is done once it has `count` of them.
    expect(again.frames.length).toBeGreaterThanOrEqual(count);
    // The service's copy is the same events (what the conversation list and other readers see).
    const stored = (await b.request("GET", `/api/v1/events/search?conversation_id__eq=${id}&limit=100`))
      .body as {
      items: Ev[];
    };
    expect(stored.items.map((e) => e.id)).toEqual(events.map((e) => e.id));
    again.close();
  }, 60_000);

  it("pauses while the model thinks (stop button) and plays again: the answer in flight is kept", async () => {
    llm.script(
      { toolCalls: [{ name: "terminal", arguments: { command: "echo after-pause" } }], delayMs: 1500 },
      { content: REPLY_3 },
    );
    const asked = llm.requests.length;
    const mark = socket.frames.length;
    socket.send(TASK_3);
    await socket.untilStatus("running", mark);
    await llm.waitForRequests(asked + 1);

    // The POST goes to the page's own origin: the browser sends no preflight (agent() checks the origin).
    // useUnifiedPauseConversation (V1): POST <agent>/api/conversations/<id>/pause with {}.
    expect(await agent("POST", `/api/conversations/${id}/pause`, {})).toEqual({
      status: 200,
      body: { success: true },
    });
    await socket.untilStatus("paused", mark);
    // The page shows the play button at once; the model's answer arrives later and is shown, not run.
    await socket.until((f) => f.slice(mark).some((e) => e.kind === "ActionEvent"));
    expect(kinds(socket.frames.slice(mark))).toEqual([
      "state:idle",
      "MessageEvent",
      "state:running",
      "PauseEvent",
      "state:paused",
      "ActionEvent",
    ]);
    expect(socket.frames.find((e) => e.kind === "PauseEvent")?.source).toBe("user");
    // The page keeps polling the conversation: still RUNNING (the sandbox), the agent paused.
    expect(((await b.request("GET", `/api/conversations/${id}`)).body as { status: string }).status).toBe(
      "RUNNING",
    );

    // useUnifiedResumeConversation (V1): POST <agent>/api/conversations/<id>/run with {}.
    const resumed = socket.frames.length;
    expect(await agent("POST", `/api/conversations/${id}/run`, {})).toEqual({
      status: 200,
      body: { success: true },
    });
    await socket.untilStatus("finished", resumed);
    const after = socket.frames.slice(resumed);
    expect(kinds(after)).toEqual(["state:running", "ObservationEvent", "MessageEvent", "state:finished"]);
    expect(JSON.stringify(after[1]?.observation)).toContain("after-pause");
    expect(messageText(after[2])).toBe(REPLY_3);
    // One model call for the paused step, one after it: the answer in flight was not asked again.
    expect(llm.requests.length).toBe(asked + 2);
  }, 60_000);

  it("shows a model failure (the banner shows the error's detail) and answers the next message", async () => {
    llm.script({ status: 401, error: "Incorrect API key provided" }, { content: "Back again." });
    const failed = await socket.sendUntil("Trigger a model failure", "error");
    expect(kinds(failed)).toEqual([
      "state:idle",
      "MessageEvent",
      "state:running",
      "ConversationErrorEvent",
      "state:error",
    ]);
    // isConversationErrorEvent → setErrorMessage(detail): the red banner above the input.
    expect(failed[3]).toMatchObject({ source: "environment", code: "AuthenticationError" });
    expect(failed[3]?.detail).toMatch(
      /^LLM request failed with status 401: .*Incorrect API key provided.*LLM settings/,
    );
    expect(kinds(await socket.sendUntil("Try again", "finished"))).toEqual([
      "MessageEvent",
      "state:running",
      "MessageEvent",
      "state:finished",
    ]);
    socket.close();
  }, 60_000);

  it("with confirmation mode saved, a new conversation waits for the user's yes; an attached file is uploaded and read", async () => {
    // The LLM settings page with the confirmation switch on (the body the UI posted).
    const saved = await b.request("POST", "/api/settings", uiSettingsBody({ confirmation_mode: true }));
    expect(saved.status).toBe(200);
    const created = await b.request("POST", "/api/conversations", {});
    const second = (created.body as { conversation_id: string }).conversation_id;
    const c = await until(
      async () => (await b.request("GET", `/api/conversations/${second}`)).body as Record<string, string>,
      (x) => x.status !== "STARTING",
    );
    expect(c.url).toBe(`/api/conversations/${second}`);
    const base = uiAgentBase(c.url, t.url);
    expect(base).toBe(new URL(t.url).origin);
    const key = c.session_api_key as string;
    const page = new PageSocket(
      `${uiSocketUrl(second, c.url, t.url)}?resend_all=true&session_api_key=${encodeURIComponent(key)}`,
      t.url,
      b.cookieHeader(),
    );
    await page.opened;
    await page.until((f) => f.length >= 2);
    expect(page.frames[0]?.value).toMatchObject({ confirmation_policy: { kind: "AlwaysConfirm" } });

    llm.script(
      { toolCalls: [{ name: "terminal", arguments: { command: "echo confirmed-run" } }] },
      { content: "Confirmed and done." },
    );
    const asked = await page.sendUntil("Run it only if I agree", "waiting_for_confirmation");
    // The confirmation buttons show while the status is waiting_for_confirmation, for the last agent event.
    expect(kinds(asked)).toEqual([
      "MessageEvent",
      "state:running",
      "ActionEvent",
      "state:waiting_for_confirmation",
    ]);
    // EventService.respondToConfirmation: POST <agent>/api/conversations/<id>/events/respond_to_confirmation.
    const res = await b.request(
      "POST",
      `/api/conversations/${second}/events/respond_to_confirmation`,
      { accept: true },
      { "x-session-api-key": key },
    );
    expect(res.status).toBe(200);
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
    expect(res.body).toEqual({ success: true });
    const confirmed = page.frames.length;
    await page.untilStatus("finished", confirmed);
    const after = page.frames.slice(confirmed);
    expect(kinds(after)).toEqual(["state:running", "ObservationEvent", "MessageEvent", "state:finished"]);
    expect(JSON.stringify(after[1]?.observation)).toContain("confirmed-run");

    // A file attached with the paperclip (useV1UploadFiles): multipart field `file` to /workspace/<name>, then the
    // message names it ("NEW FILES ADDED: /workspace/notes.txt"); the agent reads it there.
    const form = new FormData();
    form.append("file", new Blob(["uploaded-notes-content\n"], { type: "text/plain" }), "notes.txt");
    const up = await fetch(`${base}/api/file/upload/${encodeURIComponent("/workspace/notes.txt")}`, {
      method: "POST",
      headers: { origin: t.url, cookie: b.cookieHeader() ?? "", "x-session-api-key": key },
      body: form,
    });
    expect(up.status).toBe(200);
    expect(up.headers.get("access-control-allow-origin")).toBeNull();
    expect(await up.json()).toEqual({ success: true });
    llm.script(
      { toolCalls: [{ name: "file_editor", arguments: { command: "view", path: "/workspace/notes.txt" } }] },
      { content: "I read notes.txt." },
    );
    const uploadMark = page.frames.length;
    page.send("Read the file I attached\n\nNEW FILES ADDED: /workspace/notes.txt");
    await page.untilStatus("waiting_for_confirmation", uploadMark);
    const yes = await b.request(
      "POST",
      `/api/conversations/${second}/events/respond_to_confirmation`,
      { accept: true },
      { "x-session-api-key": key },
    );
    expect(yes.status).toBe(200);
    await page.untilStatus("finished", uploadMark + 4);
    const read = page.frames.slice(uploadMark).find((e) => e.kind === "ObservationEvent");
    expect(read?.observation).toMatchObject({ kind: "FileEditorObservation", is_error: false });
    expect(JSON.stringify(read?.observation)).toContain("uploaded-notes-content");
    page.close();
  }, 60_000);
});
