// Reusing sandboxes, sub-conversations, and the live status of listings.
// Shared setup: test/helpers/app-conversations.ts.

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newHexId } from "../../src/core/ids.ts";
import {
  api,
  type Conversation,
  getConversation,
  type Page,
  settle,
  sh,
  start,
  startConversationApp,
  startReady,
  stopConversationApp,
  type Task,
} from "../helpers/app-conversations.ts";
import { conversationRecord } from "../helpers/conversation-fixtures.ts";
import type { TestApp } from "../helpers/test-app.ts";

let t: TestApp;
let bare: string;
beforeAll(async () => {
  ({ t, bare } = await startConversationApp());
});
afterAll(stopConversationApp);

describe("reusing sandboxes and sub-conversations", () => {
  let key: string;
  beforeAll(async () => {
    key = await t.keyFor("dave");
  });

  it("reuses a PAUSED sandbox: resumes it and continues to READY", async () => {
    const sb = (await api(key, "POST", "/api/v1/sandboxes")).body as { id: string };
    const deadline = Date.now() + 10_000;
    while (
      ((await api(key, "GET", `/api/v1/sandboxes?id=${sb.id}`)).body as { status: string }[])[0]?.status !==
      "RUNNING"
    ) {
      if (Date.now() > deadline) throw new Error("sandbox did not start");
      await new Promise((r) => setTimeout(r, 10));
    }
    await api(key, "POST", `/api/v1/sandboxes/${sb.id}/pause`, {});
    expect(
      ((await api(key, "GET", `/api/v1/sandboxes?id=${sb.id}`)).body as { status: string }[])[0]?.status,
    ).toBe("PAUSED");
    const { task, conversation } = await startReady(key, { sandbox_id: sb.id });
    expect(task.sandbox_id).toBe(sb.id);
    expect(conversation.sandbox_id).toBe(sb.id);
    expect(conversation.sandbox_status).toBe("RUNNING");

    // Paused again, the conversation reports it without asking the agent.
    await api(key, "POST", `/api/v1/sandboxes/${sb.id}/pause`, {});
    expect(await getConversation(key, conversation.id)).toMatchObject({
      sandbox_status: "PAUSED",
      execution_status: null,
      conversation_url: null,
      session_api_key: null,
    });
    // Deleted: MISSING.
    await api(key, "DELETE", `/api/v1/sandboxes/${sb.id}`);
    expect(await getConversation(key, conversation.id)).toMatchObject({ sandbox_status: "MISSING" });
  });

  it("an unknown or foreign sandbox_id ends in ERROR", async () => {
    const unknown = await settle(key, (await start(key, { sandbox_id: "doesNotExist" })).id);
    expect(unknown).toMatchObject({ status: "ERROR", detail: "Sandbox doesNotExist not found" });
    const bobs = (await api(await t.keyFor("bob"), "POST", "/api/v1/sandboxes")).body as { id: string };
    const foreign = await settle(key, (await start(key, { sandbox_id: bobs.id })).id);
    expect(foreign).toMatchObject({ status: "ERROR", detail: `Sandbox ${bobs.id} not found` });
    await api(await t.keyFor("bob"), "DELETE", `/api/v1/sandboxes/${bobs.id}`);
  });

  it("a sub-conversation inherits sandbox, repository, branch and model, and is recorded in its parent", async () => {
    const { conversation: parent } = await startReady(key, {
      selected_repository: bare,
      selected_branch: "feature",
      llm_model: "parent-model",
      git_provider: "gitlab",
    });
    const dashed = `${parent.id.slice(0, 8)}-${parent.id.slice(8, 12)}-${parent.id.slice(12, 16)}-${parent.id.slice(16, 20)}-${parent.id.slice(20)}`;
    const { task, conversation: child } = await startReady(key, { parent_conversation_id: dashed });
    expect(task.request.parent_conversation_id).toBe(parent.id);
    expect(child).toMatchObject({
      sandbox_id: parent.sandbox_id,
      selected_repository: bare,
      selected_branch: "feature",
      git_provider: "gitlab",
      llm_model: "parent-model",
      parent_conversation_id: parent.id,
      sandbox_status: "RUNNING",
      // Its own agent conversation, reached through this service's origin with the shared sandbox's key.
      conversation_url: `/api/conversations/${child.id}`,
      session_api_key: parent.session_api_key,
    });
    // The clone already in the sandbox is reused.
    expect((await sh(child, "git branch --show-current", "project")).stdout.trim()).toBe("feature");
    expect((await getConversation(key, parent.id))?.sub_conversation_ids).toEqual([child.id]);

    const top = (await api(key, "GET", "/api/v1/app-conversations/search")).body as Page<Conversation>;
    expect(top.items.map((c) => c.id)).toContain(parent.id);
    expect(top.items.map((c) => c.id)).not.toContain(child.id);
    const all = (await api(key, "GET", "/api/v1/app-conversations/search?include_sub_conversations=true"))
      .body as Page<Conversation>;
    expect(all.items.map((c) => c.id)).toContain(child.id);
    expect((await api(key, "GET", "/api/v1/app-conversations/count")).body).toBe(top.items.length);
    expect(
      (await api(key, "GET", "/api/v1/app-conversations/count?include_sub_conversations=true")).body,
    ).toBe(all.items.length);
    // The start tasks of the child can be found by the conversation id.
    const byConversation = (
      await api(key, "GET", `/api/v1/app-conversations/start-tasks/search?conversation_id__eq=${child.id}`)
    ).body as Page<Task>;
    expect(byConversation.items.map((x) => x.id)).toEqual([task.id]);

    const unknown = await settle(key, (await start(key, { parent_conversation_id: newHexId() })).id);
    expect(unknown.status).toBe("ERROR");
    expect(unknown.detail).toMatch(/^Parent conversation [0-9a-f]{32} not found$/);
    // Another user's conversation cannot be a parent.
    const bob = await t.keyFor("bob");
    const foreign = await settle(bob, (await start(bob, { parent_conversation_id: parent.id })).id);
    expect(foreign).toMatchObject({ status: "ERROR", detail: `Parent conversation ${parent.id} not found` });
  });

  it("a slow agent never fails the listing: the execution status is left null", async () => {
    const sb = (await api(key, "POST", "/api/v1/sandboxes?sandbox_spec_id=hung-agent")).body as {
      id: string;
    };
    const deadline = Date.now() + 10_000;
    while (
      ((await api(key, "GET", `/api/v1/sandboxes?id=${sb.id}`)).body as { status: string }[])[0]?.status !==
      "RUNNING"
    ) {
      if (Date.now() > deadline) throw new Error("sandbox did not start");
      await new Promise((r) => setTimeout(r, 10));
    }
    const record = conversationRecord({
      ownerId: "dave",
      sandboxId: sb.id,
      title: "hung",
      metrics: { model_name: "m", accumulated_cost: 1.5, accumulated_token_usage: { prompt_tokens: 10 } },
    });
    await t.storage.conversations.insert(record);
    const t0 = Date.now();
    const c = await getConversation(key, record.id);
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(c).toMatchObject({ sandbox_status: "RUNNING", execution_status: null, title: "hung" });
    expect(c?.metrics).toEqual({
      model_name: "m",
      accumulated_cost: 1.5,
      max_budget_per_task: null,
      accumulated_token_usage: {
        model: "",
        prompt_tokens: 10,
        completion_tokens: 0,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        reasoning_tokens: 0,
        context_window: 0,
        per_turn_token: 0,
        response_id: "",
      },
    });
    await api(key, "DELETE", `/api/v1/sandboxes/${sb.id}`);
  });
});
