// GET /api/conversations/{id}/config, which the UI's V1 conversation page asks for (useConversationConfig →
// V1ConversationService.getConversationConfig): {runtime_id: the sandbox id, session_id: the conversation id} as
// the reference answers for V1 conversations, and its 404 for anything else.

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newHexId } from "../../src/core/ids.ts";
import { conversationRecord } from "../helpers/conversation-fixtures.ts";
import { FakeSandboxRuntime } from "../helpers/fakes/sandbox-runtime.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

let t: TestApp;
let alice: string;
let bob: string;
const runtime = new FakeSandboxRuntime();
/** Settles the fake sandboxes' health checks, which hang until then (a start stays WAITING_FOR_SANDBOX). */
let settleHealth: (ok: boolean) => void = () => {};
const conversation = conversationRecord({
  ownerId: "alice",
  title: "Mine",
  trigger: "gui",
  createdAt: new Date("2025-11-28T10:00:00Z"),
});
const dashed = (id: string) =>
  `${id.slice(0, 8)}-${id.slice(8, 12)}-${id.slice(12, 16)}-${id.slice(16, 20)}-${id.slice(20)}`;

beforeAll(async () => {
  runtime.healthy = () =>
    new Promise<boolean>((resolve) => {
      settleHealth = resolve;
    });
  t = await startTestApp({ runtime, llmModel: "openai/test-model" });
  alice = await t.keyFor("alice");
  bob = await t.keyFor("bob");
  await t.storage.conversations.insert(conversation);
});
afterAll(async () => {
  settleHealth(false);
  await t?.close();
});

describe("GET /api/conversations/{id}/config", () => {
  it("answers the conversation's sandbox as runtime_id and its id as session_id", async () => {
    const r = await call(t.url, alice, "GET", `/api/conversations/${conversation.id}/config`);
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ runtime_id: conversation.sandboxId, session_id: conversation.id });
    expect(r.headers.get("content-type")).toMatch(/^application\/json/);
    // The UUID with dashes names the same conversation.
    const d = await call(t.url, alice, "GET", `/api/conversations/${dashed(conversation.id)}/config`);
    expect(d.body).toEqual({ runtime_id: conversation.sandboxId, session_id: conversation.id });
  });

  it("answers the reference's 404 for another user's conversation and an unknown one alike", async () => {
    const foreign = await call(t.url, bob, "GET", `/api/conversations/${conversation.id}/config`);
    expect(foreign.status).toBe(404);
    expect(foreign.body).toEqual({ detail: `Conversation ${conversation.id} not found` });
    const unknown = newHexId();
    const missing = await call(t.url, alice, "GET", `/api/conversations/${unknown}/config`);
    expect(missing.status).toBe(404);
    expect(missing.body).toEqual({ detail: `Conversation ${unknown} not found` });
  });

  it("refuses a malformed id with 422 at the path, and a request without a key with 401", async () => {
    const bad = await call(t.url, alice, "GET", "/api/conversations/not-an-id/config");
    expect(bad.status).toBe(422);
    const detail = (bad.body as { detail: { loc: unknown[]; type: string; input: unknown }[] }).detail;
    expect(detail).toHaveLength(1);
    expect(detail[0]?.loc).toEqual(["path", "conversation_id"]);
    expect(detail[0]?.input).toBe("not-an-id");
    const anonymous = await call(t.url, undefined, "GET", `/api/conversations/${conversation.id}/config`);
    expect(anonymous.status).toBe(401);
    expect(anonymous.body).toEqual({ detail: "Unauthorized" });
  });

  it("has no config for a conversation whose start is still running (404), as the reference", async () => {
    const created = await call(t.url, alice, "POST", "/api/conversations", { initial_user_msg: "hi" });
    expect(created.status).toBe(200);
    const id = (created.body as { conversation_id: string }).conversation_id;
    // The legacy GET already shows it STARTING (the sandbox's health check hangs) ...
    const starting = await call(t.url, alice, "GET", `/api/conversations/${id}`);
    expect((starting.body as { status: string }).status).toBe("STARTING");
    // ... but there is no conversation to configure yet.
    const config = await call(t.url, alice, "GET", `/api/conversations/${id}/config`);
    expect(config.status).toBe(404);
    expect(config.body).toEqual({ detail: `Conversation ${id} not found` });
  });
});
