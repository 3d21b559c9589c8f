/**
 * The conversation flows of the OpenHands web UI (All-Hands-AI/OpenHands frontend at 156d0686), replayed request by
 * request against a real server with real sandboxes (process runtime, built-in agent reporting its events through
 * the webhooks): create (V1 and legacy), open, the event count, rename, list, delete. Each request is the one the
 * UI's code sends (frontend/src/api/conversation-service/*, event-service, hooks/*), and every field the UI reads
 * is asserted. The first suite authenticates with the X-Session-API-Key header (as scripts do); the second is the
 * browser as the UI runs in it: signed in through the sign-in endpoint, then only the session cookie, with the
 * Origin header a browser adds to mutations, including the stop/resume flow and the conversation panel's
 * start-task search.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Browser } from "../helpers/browser.ts";
import { type FakeLlm, startFakeLlm } from "../helpers/fake-llm.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";
import { uiAgentBase } from "../helpers/ui-urls.ts";

let t: TestApp;
/** The model server of the users: it answers each call with a final message. */
let llm: FakeLlm;
/** What a first message run to its end stores: the message, idle, running, the agent's answer, finished. */
const RUN_EVENTS = 5;
let key: string;
let otherKey: string;
const api = (method: string, path: string, body?: unknown, k: string | undefined = key) =>
  call(t.url, k, method, path, body);

/** Polls `fn` every 100 ms until `done` holds (at most `ms`); returns the last value. */
async function until<T>(fn: () => Promise<T>, done: (v: T) => boolean, ms = 20_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (done(v) || Date.now() > deadline) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
}

interface ConversationInfo {
  conversation_id: string;
  title: string;
  last_updated_at: string;
  created_at: string;
  status: string;
  runtime_status: string | null;
  selected_repository: string | null;
  selected_branch: string | null;
  git_provider: string | null;
  trigger: string | null;
  url: string | null;
  session_api_key: string | null;
  pr_number: number[];
  conversation_version: string;
  sub_conversation_ids: string[];
  num_connections: number;
}

/** Every field of the legacy Conversation type the UI reads (open-hands.types.ts), with its type. */
function expectConversationShape(c: ConversationInfo): void {
  expect(Object.keys(c).sort()).toEqual(
    [
      "conversation_id",
      "conversation_version",
      "created_at",
      "git_provider",
      "last_updated_at",
      "num_connections",
      "pr_number",
      "runtime_status",
      "selected_branch",
      "selected_repository",
      "session_api_key",
      "status",
      "sub_conversation_ids",
      "title",
      "trigger",
      "url",
    ].sort(),
  );
  expect(c.conversation_id).toMatch(/^[0-9a-f]{32}$/);
  expect(typeof c.title).toBe("string");
  expect(new Date(c.created_at).toISOString()).toBe(c.created_at);
  expect(new Date(c.last_updated_at).toISOString()).toBe(c.last_updated_at);
  expect(["STARTING", "RUNNING", "STOPPED", "ARCHIVED", "ERROR"]).toContain(c.status);
  expect(c.conversation_version).toBe("V1");
  expect(Array.isArray(c.pr_number)).toBe(true);
  expect(Array.isArray(c.sub_conversation_ids)).toBe(true);
}

beforeAll(async () => {
  // Users who have set up their model, as the UI asks a person to before a first conversation.
  llm = await startFakeLlm();
  t = await startTestApp({ llmModel: "anthropic/claude-sonnet-4-5", llmBaseUrl: llm.url });
  key = await t.keyFor("alice");
  otherKey = await t.keyFor("bob");
}, 30_000);

afterAll(async () => {
  await t?.close();
  await llm?.close();
});

describe("UI replay: conversations", () => {
  let v1Id = "";
  let v1Sandbox = "";
  let legacyId = "";
  const firstMessage = "Add a health check endpoint to the API server";

  it("creates a V1 conversation as useCreateConversation does, polls its task, then opens it", async () => {
    // V1ConversationService.createConversation: undefined fields vanish from the JSON axios sends.
    const created = await api("POST", "/api/v1/app-conversations", {
      parent_conversation_id: null,
      initial_message: { role: "user", content: [{ type: "text", text: firstMessage }] },
    });
    expect(created.status).toBe(200);
    const task = created.body as { id: string; agent_server_url: string | null; status: string };
    expect(task.id).toMatch(/^[0-9a-f]{32}$/);
    expect(task.status).toBe("WORKING");
    expect("agent_server_url" in task).toBe(true);

    // useTaskPolling: GET start-tasks?ids=<id>, element 0, until READY or ERROR.
    const polled = await until(
      async () =>
        (await api("GET", `/api/v1/app-conversations/start-tasks?ids=${task.id}`)).body as {
          status: string;
          app_conversation_id: string | null;
          detail: string | null;
        }[],
      (b) => b[0]?.status === "READY" || b[0]?.status === "ERROR",
    );
    expect(polled[0]?.detail ?? null).toBeNull();
    expect(polled[0]?.status).toBe("READY");
    v1Id = polled[0]?.app_conversation_id ?? "";
    expect(v1Id).toMatch(/^[0-9a-f]{32}$/);

    // useUserConversation → ConversationService.getConversation.
    const opened = await api("GET", `/api/conversations/${v1Id}`);
    expect(opened.status).toBe(200);
    const c = opened.body as ConversationInfo;
    expectConversationShape(c);
    expect(c.conversation_id).toBe(v1Id);
    expect(c.status).toBe("RUNNING");
    expect(c.runtime_status).toBe("STATUS$READY");
    // Relative: the agent is reached through this service's own origin.
    expect(c.url).toBe(`/api/conversations/${v1Id}`);
    expect(c.session_api_key).toMatch(/^sbx_[0-9A-Za-z]+_[0-9A-Za-z]{43}$/);
    expect(c.selected_repository).toBeNull();
    expect(c.git_provider).toBeNull();
    expect(c.sub_conversation_ids).toEqual([]);

    // The UI then talks to the agent server at the host of `url` (websocket-url.ts: a relative `url` is the page's
    // own host, this service) with `session_api_key` (V1 conversation page).
    const agent = await fetch(`${uiAgentBase(c.url, t.url)}/api/conversations/${v1Id}`, {
      headers: { "x-session-api-key": c.session_api_key as string },
    });
    expect(agent.status).toBe(200);
    expect(((await agent.json()) as { id: string }).id).toBe(v1Id);

    // conversation-mutation-utils fetchV1ConversationData: batch get for sandbox_id / conversation_url.
    const batch = await api("GET", `/api/v1/app-conversations?ids=${v1Id}`);
    const [app] = batch.body as { sandbox_id: string; conversation_url: string; session_api_key: string }[];
    expect(app?.conversation_url).toBe(c.url);
    expect(app?.session_api_key).toBe(c.session_api_key);
    v1Sandbox = app?.sandbox_id ?? "";
    expect(v1Sandbox).not.toBe("");
    // The key names the conversation's sandbox.
    expect(c.session_api_key?.startsWith(`sbx_${v1Sandbox}_`)).toBe(true);
  }, 60_000);

  it("answers the event count the conversation page asks on connect, from the agent's webhooks", async () => {
    // EventService.getEventCount: GET /api/v1/events/count?conversation_id__eq=<id> → a bare integer.
    // The agent ran the first message with the (fake) model: the user's message, idle, running, the agent's
    // answer, finished.
    const counted = await until(
      async () => await api("GET", `/api/v1/events/count?conversation_id__eq=${v1Id}`),
      (r) => r.body === RUN_EVENTS,
    );
    expect(counted.status).toBe(200);
    expect(counted.text).toBe(String(RUN_EVENTS));
    // Dashed ids are accepted too.
    const dashed = `${v1Id.slice(0, 8)}-${v1Id.slice(8, 12)}-${v1Id.slice(12, 16)}-${v1Id.slice(16, 20)}-${v1Id.slice(20)}`;
    expect((await api("GET", `/api/v1/events/count?conversation_id__eq=${dashed}`)).body).toBe(RUN_EVENTS);
    // Another user sees none of them.
    expect(
      (await api("GET", `/api/v1/events/count?conversation_id__eq=${v1Id}`, undefined, otherKey)).body,
    ).toBe(0);

    const page = (await api("GET", `/api/v1/events/search?conversation_id__eq=${v1Id}`)).body as {
      items: { kind: string; id: string; source: string; timestamp: string; llm_message?: unknown }[];
      next_page_id: string | null;
    };
    expect(page.next_page_id).toBeNull();
    expect(page.items.map((e) => e.kind)).toEqual([
      "MessageEvent",
      "ConversationStateUpdateEvent",
      "ConversationStateUpdateEvent",
      "MessageEvent",
      "ConversationStateUpdateEvent",
    ]);
    expect(page.items.map((e) => e.source)).toEqual([
      "user",
      "environment",
      "environment",
      "agent",
      "environment",
    ]);
    const message = page.items[0];
    expect(message?.source).toBe("user");
    expect(message?.llm_message).toEqual({
      role: "user",
      content: [{ type: "text", text: firstMessage, cache_prompt: false }],
    });
    const byId = await api("GET", `/api/v1/events?id=${message?.id}&id=unknown`);
    expect(byId.body).toEqual([message, null]);
    const users = await api("GET", `/api/v1/events/search?conversation_id__eq=${v1Id}&kind__eq=MessageEvent`);
    // The user's message and the agent's answer.
    expect((users.body as { items: unknown[] }).items).toEqual([message, page.items[3]]);
  }, 30_000);

  it("names the conversation after its first user message (set-title), as the UI's 30 s poll then shows", async () => {
    const titled = await until(
      async () => (await api("GET", `/api/conversations/${v1Id}`)).body as ConversationInfo,
      (c) => c.title !== `Conversation ${v1Id}`,
    );
    expect(titled.title).toBe(firstMessage);
  }, 30_000);

  it("creates a conversation through the legacy POST (V1 flag off) and opens it while it starts", async () => {
    // ConversationService.createConversation: {repository, git_provider, selected_branch, initial_user_msg, ...}.
    const created = await api("POST", "/api/conversations", {
      initial_user_msg: "Hello from the legacy form",
    });
    expect(created.status).toBe(200);
    const r = created.body as {
      status: string;
      conversation_id: string;
      message: null;
      conversation_status: string;
    };
    expect(r).toEqual({
      status: "ok",
      conversation_id: expect.stringMatching(/^[0-9a-f]{32}$/),
      message: null,
      conversation_status: "STARTING",
    });
    legacyId = r.conversation_id;
    // The UI navigates to /conversations/<id> at once: the conversation must not read as "does not exist".
    const first = await api("GET", `/api/conversations/${legacyId}`);
    expect(first.status).toBe(200);
    const starting = first.body as ConversationInfo;
    expectConversationShape(starting);
    expect(starting.conversation_id).toBe(legacyId);
    expect(["STARTING", "RUNNING"]).toContain(starting.status);
    // useActiveConversation polls every 3 s while STARTING.
    const running = await until(
      async () => (await api("GET", `/api/conversations/${legacyId}`)).body as ConversationInfo,
      (c) => c.status !== "STARTING",
    );
    expect(running.status).toBe("RUNNING");
    expect(running.runtime_status).toBe("STATUS$READY");
    expect(running.url).toBe(`/api/conversations/${legacyId}`);
    expect(running.trigger).toBe("gui");
  }, 60_000);

  it("refuses unknown fields and unsupported options of the legacy create with 422, starting nothing", async () => {
    const before = (await api("GET", "/api/v1/app-conversations/start-tasks/count")).body;
    const bad = await api("POST", "/api/conversations", {
      initial_user_msg: "x",
      surprise: 1,
      replay_json: "[]",
    });
    expect(bad.status).toBe(422);
    const locs = (bad.body as { detail: { loc: unknown[]; type: string }[] }).detail.map((d) => d.loc);
    expect(locs).toContainEqual(["body", "surprise"]);
    expect(locs).toContainEqual(["body", "replay_json"]);
    expect((await api("GET", "/api/v1/app-conversations/start-tasks/count")).body).toBe(before);
  });

  it("lists conversations as usePaginatedConversations does (limit=20, then next_page_id)", async () => {
    const page = await api("GET", "/api/conversations?limit=20");
    expect(page.status).toBe(200);
    const body = page.body as { results: ConversationInfo[]; next_page_id: string | null };
    expect(Object.keys(body).sort()).toEqual(["next_page_id", "results"]);
    expect(body.results.map((c) => c.conversation_id)).toEqual([legacyId, v1Id]);
    for (const c of body.results) expectConversationShape(c);
    expect(body.next_page_id).toBeNull();
    const one = (await api("GET", "/api/conversations?limit=1")).body as typeof body;
    expect(one.results.map((c) => c.conversation_id)).toEqual([legacyId]);
    expect(typeof one.next_page_id).toBe("string");
    const next = (
      await api("GET", `/api/conversations?limit=1&page_id=${encodeURIComponent(one.next_page_id ?? "")}`)
    ).body as typeof body;
    expect(next.results.map((c) => c.conversation_id)).toEqual([v1Id]);
    // Another user's list is empty; their GET of this conversation answers null, as upstream.
    expect(
      ((await api("GET", "/api/conversations?limit=20", undefined, otherKey)).body as typeof body).results,
    ).toEqual([]);
    const foreign = await api("GET", `/api/conversations/${v1Id}`, undefined, otherKey);
    expect(foreign.status).toBe(200);
    expect(foreign.body).toBeNull();
  });

  it("renames as useUpdateConversation does (PATCH → true), and PATCH /api/v1/app-conversations/{id}", async () => {
    const renamed = await api("PATCH", `/api/conversations/${v1Id}`, { title: "  Health check  " });
    expect(renamed.status).toBe(200);
    expect(renamed.body).toBe(true);
    expect(((await api("GET", `/api/conversations/${v1Id}`)).body as ConversationInfo).title).toBe(
      "Health check",
    );
    const v1 = await api("PATCH", `/api/v1/app-conversations/${v1Id}`, { title: "Health check v2" });
    expect(v1.status).toBe(200);
    expect((v1.body as { id: string; title: string }).title).toBe("Health check v2");
    expect((v1.body as { id: string }).id).toBe(v1Id);
    // Bad titles: 422 and nothing changes; unknown or foreign ids: 404 in each family's shape.
    expect((await api("PATCH", `/api/conversations/${v1Id}`, { title: "" })).status).toBe(422);
    expect((await api("PATCH", `/api/conversations/${v1Id}`, { title: "   " })).status).toBe(422);
    expect((await api("PATCH", `/api/conversations/${v1Id}`, { title: "x".repeat(201) })).status).toBe(422);
    expect((await api("PATCH", `/api/conversations/${v1Id}`, { title: "ok", extra: 1 })).status).toBe(422);
    const foreign = await api("PATCH", `/api/conversations/${v1Id}`, { title: "mine now" }, otherKey);
    expect(foreign.status).toBe(404);
    expect(foreign.body).toEqual({
      status: "error",
      message: "Conversation not found",
      msg_id: "CONVERSATION$NOT_FOUND",
    });
    expect((await api("PATCH", `/api/v1/app-conversations/${v1Id}`, { title: "x" }, otherKey)).body).toEqual({
      detail: "Not Found",
    });
    expect(((await api("GET", `/api/conversations/${v1Id}`)).body as ConversationInfo).title).toBe(
      "Health check v2",
    );
  });

  it("filters the V1 search and count by sandbox_id__eq", async () => {
    const search = await api("GET", `/api/v1/app-conversations/search?sandbox_id__eq=${v1Sandbox}`);
    expect((search.body as { items: { id: string }[] }).items.map((c) => c.id)).toEqual([v1Id]);
    expect((await api("GET", `/api/v1/app-conversations/count?sandbox_id__eq=${v1Sandbox}`)).body).toBe(1);
    expect((await api("GET", "/api/v1/app-conversations/count?sandbox_id__eq=nope")).body).toBe(0);
    expect((await api("GET", "/api/v1/app-conversations/count")).body).toBe(2);
  });

  it("checks the sandbox's own key on webhooks (401, nothing stored); takes screenshot-sized batches; acknowledges refused ones", async () => {
    const event = { kind: "MessageEvent", id: "forged-1", timestamp: "2025-11-28T10:00:00", source: "user" };
    const path = `/api/v1/webhooks/${v1Sandbox}/events/${v1Id}`;
    const wrong = await call(t.url, "not-the-key", "POST", path, [event]);
    expect(wrong.status).toBe(401);
    expect(wrong.body).toEqual({ detail: "Unauthorized" });
    // A user's API key is not a sandbox key either.
    expect((await call(t.url, key, "POST", path, [event])).status).toBe(401);
    expect((await call(t.url, undefined, "POST", path, [event])).status).toBe(401);
    const sandboxKey = ((await api("GET", `/api/conversations/${v1Id}`)).body as ConversationInfo)
      .session_api_key;
    // A refused batch is answered 200 with success false: the agent-server re-sends any other answer for ever.
    const over = [{ ...event, id: "over", padding: "x".repeat(33 * 1024 * 1024) }];
    const tooBig = await call(t.url, sandboxKey ?? "", "POST", path, over);
    expect(tooBig.status).toBe(200);
    expect(tooBig.body).toMatchObject({ success: false, status: 413 });
    const malformed = await call(t.url, sandboxKey ?? "", "POST", path, [
      { ...event, timestamp: "yesterday" },
    ]);
    expect(malformed.status).toBe(200);
    expect(malformed.body).toMatchObject({ success: false, status: 422 });
    expect((await api("GET", `/api/v1/events/count?conversation_id__eq=${v1Id}`)).body).toBe(RUN_EVENTS);
    // A browser screenshot (base64, MiBs) in a batch is stored.
    const shot = [
      { ...event, id: "shot", source: "environment", screenshot_data: "A".repeat(3 * 1024 * 1024) },
    ];
    expect((await call(t.url, sandboxKey ?? "", "POST", path, shot)).body).toEqual({ success: true });
    expect((await api("GET", `/api/v1/events/count?conversation_id__eq=${v1Id}`)).body).toBe(RUN_EVENTS + 1);
    // The right key stores, once (a retried post does not duplicate).
    expect((await call(t.url, sandboxKey ?? "", "POST", path, [event])).body).toEqual({ success: true });
    expect((await call(t.url, sandboxKey ?? "", "POST", path, [event])).status).toBe(200);
    expect((await api("GET", `/api/v1/events/count?conversation_id__eq=${v1Id}`)).body).toBe(RUN_EVENTS + 2);
  });

  it("deletes as useDeleteConversation does: the conversation, its events, and its sandbox when unused", async () => {
    // A second conversation in the legacy conversation's sandbox keeps that sandbox alive on the first delete.
    const legacy = (await api("GET", `/api/v1/app-conversations?ids=${legacyId}`)).body as {
      sandbox_id: string;
    }[];
    const shared = legacy[0]?.sandbox_id ?? "";
    const again = (await api("POST", "/api/v1/app-conversations", { sandbox_id: shared })).body as {
      id: string;
    };
    const ready = await until(
      async () =>
        (await api("GET", `/api/v1/app-conversations/start-tasks?ids=${again.id}`)).body as {
          status: string;
          app_conversation_id: string;
        }[],
      (b) => b[0]?.status === "READY" || b[0]?.status === "ERROR",
    );
    const secondId = ready[0]?.app_conversation_id ?? "";
    expect(ready[0]?.status).toBe("READY");

    expect((await api("DELETE", `/api/conversations/${legacyId}`)).body).toBe(true);
    expect((await api("GET", `/api/conversations/${legacyId}`)).body).toBeNull();
    const kept = (await api("GET", `/api/v1/sandboxes?id=${shared}`)).body as ({ status: string } | null)[];
    expect(kept[0]?.status).toBe("RUNNING");
    expect((await api("DELETE", `/api/conversations/${secondId}`)).body).toBe(true);
    expect(((await api("GET", `/api/v1/sandboxes?id=${shared}`)).body as unknown[])[0]).toBeNull();

    // Another user cannot delete; an unknown id answers false.
    expect((await api("DELETE", `/api/conversations/${v1Id}`, undefined, otherKey)).body).toBe(false);
    expect((await api("DELETE", `/api/conversations/${v1Id}`)).body).toBe(true);
    expect((await api("DELETE", `/api/conversations/${v1Id}`)).body).toBe(false);
    expect((await api("GET", `/api/v1/events/count?conversation_id__eq=${v1Id}`)).body).toBe(0);
    expect(((await api("GET", `/api/v1/sandboxes?id=${v1Sandbox}`)).body as unknown[])[0]).toBeNull();
    expect(
      ((await api("GET", "/api/conversations?limit=20")).body as { results: unknown[] }).results,
    ).toEqual([]);
  }, 60_000);
});

describe("UI replay: conversations as a signed-in browser (session cookie only)", () => {
  let b: Browser;
  let v1Id = "";
  let v1Sandbox = "";
  let legacyId = "";
  let taskId = "";
  const firstMessage = "Write a README for the deploy scripts";

  interface StartTask {
    id: string;
    created_by_user_id: string | null;
    status: string;
    detail: string | null;
    app_conversation_id: string | null;
    sandbox_id: string | null;
    agent_server_url: string | null;
    request: {
      title?: string | null;
      selected_repository?: string | null;
      selected_branch?: string | null;
      git_provider?: string | null;
    };
    created_at: string;
    updated_at: string;
  }

  interface AppConversation {
    id: string;
    sandbox_id: string;
    title: string | null;
    sandbox_status: string;
    execution_status: string | null;
    conversation_url: string | null;
    session_api_key: string | null;
  }

  /** The conversation panel's useStartTasks(): limit 10, created in the last 20 minutes. */
  const searchStartTasks = async (since = new Date(Date.now() - 20 * 60 * 1000)) => {
    const params = new URLSearchParams();
    params.append("limit", "10");
    params.append("created_at__gte", since.toISOString());
    const r = await b.request("GET", `/api/v1/app-conversations/start-tasks/search?${params.toString()}`);
    expect(r.status).toBe(200);
    return r.body as { items: StartTask[]; next_page_id: string | null };
  };

  /** conversation-mutation-utils fetchV1ConversationData: the batch get, element 0. */
  const fetchV1ConversationData = async (id: string) => {
    const r = await b.request("GET", `/api/v1/app-conversations?ids=${id}`);
    expect(r.status).toBe(200);
    const [app] = r.body as (AppConversation | null)[];
    expect(app).not.toBeNull();
    return app as AppConversation;
  };

  const getConversation = async (id: string) => {
    const r = await b.request("GET", `/api/conversations/${id}`);
    expect(r.status).toBe(200);
    return r.body as ConversationInfo;
  };

  beforeAll(async () => {
    b = new Browser(t.url);
    // The sign-in page posts the key once; from then on the browser holds only the HttpOnly cookie.
    await b.signIn(await t.keyFor("carol"));
    expect([...b.cookies.keys()]).toEqual(["aws_session"]);
    b.log.length = 0;
  });

  it("creates a V1 conversation, finds its task in the conversation panel's search, and opens it", async () => {
    const created = await b.request("POST", "/api/v1/app-conversations", {
      parent_conversation_id: null,
      initial_message: { role: "user", content: [{ type: "text", text: firstMessage }] },
    });
    expect(created.status).toBe(200);
    const task = created.body as StartTask;
    taskId = task.id;
    expect(task.status).toBe("WORKING");
    expect(task.created_by_user_id).toBe("carol");

    // The panel lists the caller's recent tasks (it hides READY and ERROR ones itself): every field it reads.
    const panel = await searchStartTasks();
    expect(panel.next_page_id).toBeNull();
    const listed = panel.items.find((x) => x.id === taskId);
    expect(listed).toBeDefined();
    for (const field of ["id", "status", "detail", "created_at", "request"] as const)
      expect(listed, field).toHaveProperty(field);
    expect(new Date(listed?.created_at ?? "").toISOString()).toBe(listed?.created_at);
    // StartTaskCard: request.title || detail || ..., and the repository line from request's three fields.
    expect(listed?.request).toMatchObject({
      title: null,
      selected_repository: null,
      selected_branch: null,
      git_provider: null,
    });
    expect(listed?.detail ?? null).toBeNull();
    // created_at__gte filters: a task from before the bound is not listed.
    expect((await searchStartTasks(new Date(Date.now() + 60_000))).items).toEqual([]);

    // useTaskPolling: start-tasks?ids=<id> until READY.
    const polled = await until(
      async () =>
        (await b.request("GET", `/api/v1/app-conversations/start-tasks?ids=${taskId}`)).body as StartTask[],
      (x) => x[0]?.status === "READY" || x[0]?.status === "ERROR",
    );
    expect(polled[0]?.detail ?? null).toBeNull();
    expect(polled[0]?.status).toBe("READY");
    v1Id = polled[0]?.app_conversation_id ?? "";
    expect(v1Id).toMatch(/^[0-9a-f]{32}$/);
    // Once READY the panel's search still answers it, with the status it filters on.
    expect((await searchStartTasks()).items.find((x) => x.id === taskId)?.status).toBe("READY");

    // useActiveConversation, then (runtime ready) useConversationConfig and the event count.
    const c = await getConversation(v1Id);
    expectConversationShape(c);
    expect(c.status).toBe("RUNNING");
    expect(c.runtime_status).toBe("STATUS$READY");
    expect(c.url).toBe(`/api/conversations/${v1Id}`);
    const app = await fetchV1ConversationData(v1Id);
    v1Sandbox = app.sandbox_id;
    expect(c.session_api_key).toMatch(new RegExp(`^sbx_${v1Sandbox}_[0-9A-Za-z]{43}$`));
    const config = await b.request("GET", `/api/conversations/${v1Id}/config`);
    expect(config.status).toBe(200);
    expect(config.body).toEqual({ runtime_id: v1Sandbox, session_id: v1Id });
    const count = await until(
      async () => (await b.request("GET", `/api/v1/events/count?conversation_id__eq=${v1Id}`)).body,
      (n) => n === RUN_EVENTS,
    );
    expect(count).toBe(RUN_EVENTS);
    // Named after the first message, read by the 30 s poll.
    const titled = await until(
      () => getConversation(v1Id),
      (x) => x.title !== `Conversation ${v1Id}`,
    );
    expect(titled.title).toBe(firstMessage);
  }, 60_000);

  it("creates through the legacy POST and opens it while it starts", async () => {
    // ConversationService.createConversation with only a message: the undefined fields are not sent.
    const created = await b.request("POST", "/api/conversations", {
      initial_user_msg: "Hello from a browser",
    });
    expect(created.status).toBe(200);
    legacyId = (created.body as { conversation_id: string }).conversation_id;
    expect(created.body).toEqual({
      status: "ok",
      conversation_id: expect.stringMatching(/^[0-9a-f]{32}$/),
      message: null,
      conversation_status: "STARTING",
    });
    const first = await getConversation(legacyId);
    expectConversationShape(first);
    expect(["STARTING", "RUNNING"]).toContain(first.status);
    const running = await until(
      () => getConversation(legacyId),
      (x) => x.status !== "STARTING",
    );
    expect(running.status).toBe("RUNNING");
    expect(running.runtime_status).toBe("STATUS$READY");
  }, 60_000);

  it("renames (PATCH → true) and lists (limit=20) with the cookie", async () => {
    const renamed = await b.request("PATCH", `/api/conversations/${v1Id}`, { title: "Deploy README" });
    expect(renamed.status).toBe(200);
    expect(renamed.body).toBe(true);
    const list = await b.request("GET", "/api/conversations?limit=20");
    expect(list.status).toBe(200);
    const body = list.body as { results: ConversationInfo[]; next_page_id: string | null };
    expect(body.results.map((x) => [x.conversation_id, x.title])).toEqual([
      [legacyId, expect.any(String)],
      [v1Id, "Deploy README"],
    ]);
    for (const x of body.results) expectConversationShape(x);
    expect(body.next_page_id).toBeNull();
  });

  it("refuses every cookie mutation from a foreign origin (CSRF) and changes nothing", async () => {
    const evil = new Browser(t.url, "http://evil.example");
    for (const [name, value] of b.cookies) evil.cookies.set(name, value);
    // Reads with the cookie are allowed (SameSite keeps other sites from making them); writes are not.
    for (const [method, path, body] of [
      ["PATCH", `/api/conversations/${v1Id}`, { title: "pwned" }],
      ["DELETE", `/api/conversations/${v1Id}`, undefined],
      ["POST", `/api/v1/sandboxes/${v1Sandbox}/pause`, {}],
      ["POST", "/api/conversations", { initial_user_msg: "x" }],
      ["POST", "/api/v1/app-conversations", {}],
    ] as const) {
      const r = await evil.request(method, path, body);
      expect(r.status, `${method} ${path}`).toBe(403);
      expect(JSON.stringify(r.body)).toContain("Cross-origin request refused");
    }
    const c = await getConversation(v1Id);
    expect(c.title).toBe("Deploy README");
    expect(c.status).toBe("RUNNING");
    expect(
      ((await b.request("GET", "/api/conversations?limit=20")).body as { results: unknown[] }).results,
    ).toHaveLength(2);
    expect((await b.request("GET", "/api/v1/app-conversations/start-tasks/count")).body).toBe(2);
  });

  it("stops as useUnifiedPauseConversationSandbox does: the conversation reads STOPPED with no runtime", async () => {
    const before = b.log.length;
    const { sandbox_id } = await fetchV1ConversationData(v1Id);
    expect(sandbox_id).toBe(v1Sandbox);
    const paused = await b.request("POST", `/api/v1/sandboxes/${sandbox_id}/pause`, {});
    expect(paused.status).toBe(200);
    expect(paused.body).toEqual({ success: true });
    // onSettled: the conversation, the list and the batch get are fetched again.
    const c = await getConversation(v1Id);
    expectConversationShape(c);
    expect(c.status).toBe("STOPPED");
    expect(c.runtime_status).toBeNull();
    expect(c.url).toBeNull();
    expect(c.session_api_key).toBeNull();
    const listed = (
      (await b.request("GET", "/api/conversations?limit=20")).body as { results: ConversationInfo[] }
    ).results;
    expect(listed.find((x) => x.conversation_id === v1Id)?.status).toBe("STOPPED");
    expect(listed.find((x) => x.conversation_id === legacyId)?.status).toBe("RUNNING");
    const app = await fetchV1ConversationData(v1Id);
    expect(app.sandbox_status).toBe("PAUSED");
    expect(app.execution_status).toBeNull();
    expect(app.conversation_url).toBeNull();
    expect(app.session_api_key).toBeNull();
    // The config still names the sandbox (the conversation exists).
    expect((await b.request("GET", `/api/conversations/${v1Id}/config`)).body).toEqual({
      runtime_id: v1Sandbox,
      session_id: v1Id,
    });
    expect(b.log.slice(before)).toEqual([
      `GET /api/v1/app-conversations?ids=${v1Id}`,
      `POST /api/v1/sandboxes/${v1Sandbox}/pause`,
      `GET /api/conversations/${v1Id}`,
      "GET /api/conversations?limit=20",
      `GET /api/v1/app-conversations?ids=${v1Id}`,
      `GET /api/conversations/${v1Id}/config`,
    ]);
  }, 30_000);

  it("resumes as useUnifiedResumeConversationSandbox does: RUNNING again, with its agent reachable", async () => {
    const { sandbox_id } = await fetchV1ConversationData(v1Id);
    const resumed = await b.request("POST", `/api/v1/sandboxes/${sandbox_id}/resume`, {});
    expect(resumed.status).toBe(200);
    expect(resumed.body).toEqual({ success: true });
    // useActiveConversation polls every 3 s while STARTING.
    const c = await until(
      () => getConversation(v1Id),
      (x) => x.status === "RUNNING",
    );
    expectConversationShape(c);
    expect(c.status).toBe("RUNNING");
    expect(c.runtime_status).toBe("STATUS$READY");
    expect(c.url).toBe(`/api/conversations/${v1Id}`);
    const app = await fetchV1ConversationData(v1Id);
    expect(app.sandbox_status).toBe("RUNNING");
    expect(app.conversation_url).toBe(c.url);
    expect(app.session_api_key).toBe(c.session_api_key);
    // The agent had answered the first message before the sandbox was stopped.
    expect(app.execution_status).toBe("finished");
    // The page's call to the agent: same origin as the page (the relative `url`), so the browser sends its session
    // cookie along with the sandbox's key; the cookie's user owns the sandbox.
    expect(uiAgentBase(c.url, t.url)).toBe(new URL(t.url).origin);
    const agent = await b.request("GET", `/api/conversations/${v1Id}`, undefined, {
      "x-session-api-key": c.session_api_key as string,
    });
    expect(agent.status).toBe(200);
    expect((agent.body as { id: string }).id).toBe(v1Id);
  }, 30_000);

  it("deletes both conversations with the cookie; the list ends empty", async () => {
    for (const id of [legacyId, v1Id]) {
      const r = await b.request("DELETE", `/api/conversations/${id}`);
      expect(r.status).toBe(200);
      expect(r.body).toBe(true);
      expect((await b.request("GET", `/api/conversations/${id}`)).body).toBeNull();
      expect((await b.request("GET", `/api/conversations/${id}/config`)).status).toBe(404);
    }
    expect(
      ((await b.request("GET", "/api/conversations?limit=20")).body as { results: unknown[] }).results,
    ).toEqual([]);
    expect(((await b.request("GET", `/api/v1/sandboxes?id=${v1Sandbox}`)).body as unknown[])[0]).toBeNull();
    // Not one request of this browser carried the user's API key: each was authenticated by the cookie alone (the
    // agent call carried the sandbox's session key, as the page's does).
    expect((await b.request("GET", "/api/auth/session")).body).toEqual({
      user_id: "carol",
      authenticated_by: "cookie",
    });
  }, 30_000);
});
