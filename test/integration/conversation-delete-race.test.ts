// What belongs to a conversation goes with it: the agent's event webhook racing the conversation's DELETE leaves
// no event behind, neither in events search nor in /api/v1/events/count, and its start tasks go with it.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

let t: TestApp;
let key: string;

interface Task {
  id: string;
  status: string;
  app_conversation_id: string;
  sandbox_id: string;
}

async function startReady(body: Record<string, unknown>): Promise<Task> {
  const task = (await call(t.url, key, "POST", "/api/v1/app-conversations", body)).body as { id: string };
  for (let i = 0; i < 400; i++) {
    const [s] = (await call(t.url, key, "GET", `/api/v1/app-conversations/start-tasks?ids=${task.id}`))
      .body as Task[];
    if (s?.status === "READY") return s;
    if (s?.status === "ERROR") throw new Error(JSON.stringify(s));
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("start did not finish");
}

const event = (id: string, n: number) => ({
  kind: "MessageEvent",
  id,
  timestamp: `2025-11-28T10:00:${String(n % 60).padStart(2, "0")}.123456`,
  source: "agent",
});

beforeAll(async () => {
  t = await startTestApp({ llmModel: "openai/test-model" });
  key = await t.keyFor("race-alice");
}, 60_000);

afterAll(async () => {
  await t?.close();
});

describe("conversation delete against the event webhook", () => {
  it("webhooks posted before, during and after the DELETE leave no event of the deleted conversation", async () => {
    const first = await startReady({});
    // A second conversation in the same sandbox keeps the sandbox (and its webhook key) alive after the delete.
    const second = await startReady({ sandbox_id: first.sandbox_id });
    expect(second.sandbox_id).toBe(first.sandbox_id);
    const [sbx] = (await call(t.url, key, "GET", `/api/v1/sandboxes?id=${first.sandbox_id}`)).body as {
      session_api_key: string;
    }[];
    const sandboxKey = sbx?.session_api_key ?? "";
    const cid = first.app_conversation_id;
    const post = (n: number, conversation = cid) =>
      call(t.url, sandboxKey, "POST", `/api/v1/webhooks/${first.sandbox_id}/events/${conversation}`, [
        event(`race-${conversation.slice(0, 6)}-${n}`, n),
      ]);
    expect((await post(0)).status).toBe(200);

    // Webhooks in flight while the DELETE runs, and after it.
    const posts: Promise<{ status: number }>[] = [];
    for (let n = 1; n <= 30; n++) posts.push(post(n));
    const deleted = call(t.url, key, "DELETE", `/api/conversations/${cid}`);
    for (let n = 31; n <= 60; n++) posts.push(post(n));
    expect((await deleted).status).toBe(200);
    for (let n = 61; n <= 70; n++) posts.push(post(n));
    const statuses = (await Promise.all(posts)).map((r) => r.status);
    // Accepted or refused: never a server error.
    expect(statuses.every((s) => s < 500)).toBe(true);

    expect((await call(t.url, key, "GET", `/api/v1/events/count?conversation_id__eq=${cid}`)).body).toBe(0);
    const search = (await call(t.url, key, "GET", `/api/v1/events/search?conversation_id__eq=${cid}`))
      .body as { items: unknown[] };
    expect(search.items).toEqual([]);
    expect(await t.storage.events.count("race-alice", { conversationIdEq: cid })).toBe(0);
    // Its start task went with it; the other conversation keeps its own and its events.
    expect(await t.storage.startTasks.get(first.id, "race-alice")).toBeNull();
    expect(await t.storage.startTasks.get(second.id, "race-alice")).not.toBeNull();
    expect((await post(1, second.app_conversation_id)).status).toBe(200);
    expect(
      (
        await call(
          t.url,
          key,
          "GET",
          `/api/v1/events/count?conversation_id__eq=${second.app_conversation_id}&kind__eq=MessageEvent`,
        )
      ).body,
    ).toBe(1);
  }, 90_000);
});
