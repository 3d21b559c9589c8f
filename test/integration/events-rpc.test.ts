/**
 * EventService over Connect and gRPC: the same events the REST routes serve (stored through a sandbox's webhook),
 * search/count/batch get with the caller's scope, and the server-streaming watch of a conversation (stored events,
 * then each new one as its webhook is stored).
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventService, EventSortOrder } from "../../src/gen/workspace/v1/event_pb.js";
import { connectClient, grpcClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

let t: TestApp;
let key: string;
let otherKey: string;
let conversationId = "";
let sandboxId = "";
let sandboxKey = "";

const event = (id: string, second: number, kind = "MessageEvent") => ({
  kind,
  id,
  timestamp: `2025-11-28T10:00:${String(second).padStart(2, "0")}.123456`,
  source: "agent",
  extra: { nested: [1, "two", null] },
});
const post = (events: unknown[]) =>
  call(t.url, sandboxKey, "POST", `/api/v1/webhooks/${sandboxId}/events/${conversationId}`, events);

beforeAll(async () => {
  t = await startTestApp({ llmModel: "openai/test-model" });
  key = await t.keyFor("alice");
  otherKey = await t.keyFor("bob");
  const task = (await call(t.url, key, "POST", "/api/v1/app-conversations", {})).body as { id: string };
  for (let i = 0; i < 200; i++) {
    const [s] = (await call(t.url, key, "GET", `/api/v1/app-conversations/start-tasks?ids=${task.id}`))
      .body as {
      status: string;
      app_conversation_id: string;
      sandbox_id: string;
    }[];
    if (s?.status === "READY") {
      conversationId = s.app_conversation_id;
      sandboxId = s.sandbox_id;
      break;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  const [sbx] = (await call(t.url, key, "GET", `/api/v1/sandboxes?id=${sandboxId}`)).body as {
    session_api_key: string;
  }[];
  sandboxKey = sbx?.session_api_key ?? "";
  // Wait for the agent's own event (its state update; no initial message here), then add ours.
  for (let i = 0; i < 100; i++) {
    const n = (await call(t.url, key, "GET", `/api/v1/events/count?conversation_id__eq=${conversationId}`))
      .body;
    if (n === 1) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  expect((await post([event("rpc-1", 1), event("rpc-2", 2, "ActionEvent")])).status).toBe(200);
}, 60_000);

afterAll(async () => {
  await t?.close();
});

describe("EventService over RPC", () => {
  it("searches, counts and batch-gets over Connect with the caller's scope", async () => {
    const client = connectClient(EventService, t.url, key);
    const res = await client.searchEvents({ conversationIdEq: conversationId, kindEq: "ActionEvent" });
    expect(res.items.map((e) => e.id)).toEqual(["rpc-2"]);
    const e = res.items[0];
    expect(e?.conversationId).toBe(conversationId);
    expect(e?.kind).toBe("ActionEvent");
    expect(e?.body).toEqual(event("rpc-2", 2, "ActionEvent"));
    expect(e?.timestamp?.nanos).toBe(123_456_000);
    const desc = await client.searchEvents({
      conversationIdEq: conversationId,
      sortOrder: EventSortOrder.TIMESTAMP_DESC,
      limit: 1,
    });
    expect(desc.items).toHaveLength(1);
    expect(desc.nextPageId).toBeDefined();
    expect((await client.countEvents({ conversationIdEq: conversationId })).count).toBe(3n);
    const batch = await client.batchGetEvents({ id: ["rpc-1", "nope"] });
    expect(batch.items.map((i) => i.event?.id ?? null)).toEqual(["rpc-1", null]);
    const other = connectClient(EventService, t.url, otherKey);
    expect((await other.countEvents({ conversationIdEq: conversationId })).count).toBe(0n);
    await expect(client.searchEvents({ limit: 101 })).rejects.toMatchObject({ code: Code.InvalidArgument });
    await expect(client.countEvents({ conversationIdEq: "not-a-uuid" })).rejects.toMatchObject({
      code: Code.InvalidArgument,
    });
    await expect(connectClient(EventService, t.url, "wrong").countEvents({})).rejects.toMatchObject({
      code: Code.Unauthenticated,
    });
  });

  it("answers the same over gRPC", async () => {
    const client = grpcClient(EventService, t.grpcAddress);
    try {
      const res = await client.unary<{ count: string }>(
        "CountEvents",
        { conversationIdEq: conversationId },
        key,
      );
      expect(Number(res.count)).toBe(3);
    } finally {
      client.close();
    }
  });

  it("watches a conversation over Connect: stored events first, then each new one as it is stored", async () => {
    const client = connectClient(EventService, t.url, key);
    const abort = new AbortController();
    const seen: string[] = [];
    const stream = client.watchConversationEvents({ conversationId }, { signal: abort.signal });
    const done = (async () => {
      try {
        for await (const m of stream) {
          seen.push(m.event?.id ?? "");
          if (seen.length === 5) abort.abort();
        }
      } catch (err) {
        if (!(err instanceof ConnectError && err.code === Code.Canceled)) throw err;
      }
    })();
    for (let i = 0; i < 100 && seen.length < 3; i++) await new Promise((r) => setTimeout(r, 20));
    // Oldest first: ours carry 2025 timestamps, the agent's own state update is newer.
    expect(seen).toEqual(["rpc-1", "rpc-2", expect.any(String)]);
    expect((await post([event("rpc-3", 3), event("rpc-1", 1)])).status).toBe(200);
    expect((await post([event("rpc-4", 4)])).status).toBe(200);
    await done;
    expect(seen.filter((id) => id.startsWith("rpc-"))).toEqual(["rpc-1", "rpc-2", "rpc-3", "rpc-4"]);
    expect(seen).toHaveLength(5);
  });

  it("resumes a watch after a given event over gRPC, and refuses another user's conversation", async () => {
    const client = grpcClient(EventService, t.grpcAddress);
    try {
      const first = await new Promise<string>((resolve, reject) => {
        const s = client.stream("WatchConversationEvents", { conversationId, afterEventId: "rpc-3" }, key);
        s.on("data", (m: { event: { id: string } }) => {
          resolve(m.event.id);
          s.cancel();
        });
        s.on("error", (e: { code: number }) => {
          if (e.code !== 1) reject(e);
        });
      });
      expect(first).toBe("rpc-4");
      const viaConnect = connectClient(EventService, t.url, otherKey).watchConversationEvents({
        conversationId,
      });
      await expect(viaConnect[Symbol.asyncIterator]().next()).rejects.toMatchObject({ code: Code.NotFound });
      const denied = await new Promise<number>((resolve) => {
        const s = client.stream("WatchConversationEvents", { conversationId }, otherKey);
        s.on("data", () => resolve(-1));
        s.on("error", (e: { code: number }) => resolve(e.code));
      });
      expect(denied).toBe(5); // NOT_FOUND
    } finally {
      client.close();
    }
  });
});
