// The set-title race, forced through the real webhook: the agent server posts the conversation's first user
// message while its start call is still answering, so the events arrive before the conversation record exists
// (the start flow inserts it once that call returns). The title must still come from that message.

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentConversationInfo, AgentEndpoint } from "../../src/ports/agent-client.ts";
import { FakeAgentClient } from "../helpers/fakes/agent-client.ts";
import { FakeSandboxRuntime } from "../helpers/fakes/sandbox-runtime.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

const MESSAGE = "Add a health check endpoint to the API server";
let t: TestApp;
let key: string;
const runtime = new FakeSandboxRuntime();

/** What the agent saw when it posted: the webhook's status and whether the record existed yet. */
const posts: { status: number; recordExisted: boolean }[] = [];

/** An agent server that reports the first user message through the webhook before its start call answers. */
class EarlyPostingAgent extends FakeAgentClient {
  override async startConversation(
    agent: AgentEndpoint,
    request: Record<string, unknown>,
  ): Promise<AgentConversationInfo> {
    const info = await super.startConversation(agent, request);
    const sandboxId = runtime.started.at(-1)?.sandboxId ?? "";
    const events = [
      {
        kind: "ConversationStateUpdateEvent",
        id: `${info.id}-state`,
        timestamp: "2025-11-28T10:00:00.000001",
        source: "environment",
      },
      {
        kind: "MessageEvent",
        id: `${info.id}-m1`,
        timestamp: "2025-11-28T10:00:00.000002",
        source: "user",
        llm_message: { role: "user", content: [{ type: "text", text: MESSAGE }] },
      },
    ];
    const r = await call(
      t.url,
      agent.sessionApiKey,
      "POST",
      `/api/v1/webhooks/${sandboxId}/events/${info.id}`,
      events,
    );
    posts.push({
      status: r.status,
      recordExisted: (await t.storage.conversations.get(info.id, "alice")) !== null,
    });
    return info;
  }
}

beforeAll(async () => {
  t = await startTestApp({ runtime, agent: new EarlyPostingAgent(), llmModel: "openai/test-model" });
  key = await t.keyFor("alice");
});
afterAll(async () => {
  await t?.close();
});

/** Polls `fn` every 50 ms until `done` holds (at most 10 s); returns the last value. */
async function until<T>(fn: () => Promise<T>, done: (v: T) => boolean): Promise<T> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const v = await fn();
    if (done(v) || Date.now() > deadline) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("set-title when the first message arrives before the conversation record", () => {
  it("names the conversation from that message once the start has created the record", async () => {
    const created = await call(t.url, key, "POST", "/api/v1/app-conversations", {
      initial_message: { role: "user", content: [{ type: "text", text: MESSAGE }] },
    });
    expect(created.status).toBe(200);
    const taskId = (created.body as { id: string }).id;
    const task = await until(
      async () =>
        (
          (await call(t.url, key, "GET", `/api/v1/app-conversations/start-tasks?ids=${taskId}`)).body as {
            status: string;
            app_conversation_id: string | null;
          }[]
        )[0],
      (x) => x?.status === "READY" || x?.status === "ERROR",
    );
    expect(task?.status).toBe("READY");
    const id = task?.app_conversation_id ?? "";
    // The events were taken (and stored) while the record did not exist yet.
    expect(posts).toEqual([{ status: 200, recordExisted: false }]);
    expect((await call(t.url, key, "GET", `/api/v1/events/count?conversation_id__eq=${id}`)).body).toBe(2);
    const titled = await until(
      async () => (await call(t.url, key, "GET", `/api/conversations/${id}`)).body as { title: string },
      (c) => c.title !== `Conversation ${id}`,
    );
    expect(titled.title).toBe(MESSAGE);
    const [app] = (await call(t.url, key, "GET", `/api/v1/app-conversations?ids=${id}`)).body as {
      title: string;
    }[];
    expect(app?.title).toBe(MESSAGE);
  });
});
