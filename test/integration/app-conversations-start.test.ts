// Starting conversations without a repository, and streamed starts (REST stream-start, gRPC, Connect).
// Shared setup: test/helpers/app-conversations.ts.

import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newHexId } from "../../src/core/ids.ts";
import {
  AppConversationService,
  AppConversationStartTaskStatus,
  type StreamStartAppConversationResponse,
} from "../../src/gen/workspace/v1/app_conversation_pb.js";
import {
  api,
  getConversation,
  settle,
  sh,
  start,
  startConversationApp,
  stopConversationApp,
  type Task,
} from "../helpers/app-conversations.ts";
import { connectClient, grpcClient } from "../helpers/rpc-clients.ts";
import type { TestApp } from "../helpers/test-app.ts";
import { uiAgentBase } from "../helpers/ui-urls.ts";

let t: TestApp;
let bare: string;
beforeAll(async () => {
  ({ t, bare } = await startConversationApp());
});
afterAll(stopConversationApp);

describe("starting a conversation without a repository", () => {
  it("returns the task in WORKING at once (already persisted), then reaches READY with a live conversation", async () => {
    const key = await t.keyFor("alice");
    await api(key, "POST", "/api/settings", { llm_model: "openai/gpt-test", llm_api_key: "sk-secret-1" });
    await api(key, "POST", "/api/secrets", { name: "MY_SECRET", value: "v1" });
    await api(key, "POST", "/api/add-git-providers", {
      provider_tokens: { github: { token: "ghp_abc", host: null } },
    });

    const r = await api(key, "POST", "/api/v1/app-conversations", {
      initial_message: { content: [{ type: "text", text: "hello" }], run: false },
      trigger: "gui",
      pr_number: [7],
      conversation_id: "0f3b6b1e-8d3a-4c61-9d4a-2b7f3c9e1a55",
      processors: [{ kind: "SetTitleCallbackProcessor" }],
    });
    expect(r.status).toBe(200);
    const task = r.body as Task;
    expect(task).toMatchObject({
      status: "WORKING",
      created_by_user_id: "alice",
      detail: null,
      app_conversation_id: null,
      sandbox_id: null,
      agent_server_url: null,
    });
    expect(task.id).toMatch(/^[0-9a-f]{32}$/);
    expect(task.created_at).toMatch(/Z$/);
    expect(task.request).toEqual({
      sandbox_id: null,
      conversation_id: "0f3b6b1e-8d3a-4c61-9d4a-2b7f3c9e1a55",
      initial_message: {
        role: "user",
        content: [{ type: "text", text: "hello", cache_prompt: false }],
        run: false,
      },
      system_message_suffix: null,
      processors: [{ kind: "SetTitleCallbackProcessor" }],
      llm_model: null,
      selected_repository: null,
      selected_branch: null,
      git_provider: null,
      title: null,
      trigger: "gui",
      pr_number: [7],
      parent_conversation_id: null,
      agent_type: "default",
    });
    // Persisted before the answer: any server reading storage sees it.
    expect(await t.storage.startTasks.get(task.id, "alice")).not.toBeNull();

    const done = await settle(key, task.id);
    expect(done.status, done.detail ?? "").toBe("READY");
    expect(done.app_conversation_id).toBe("0f3b6b1e8d3a4c619d4a2b7f3c9e1a55");
    expect(done.sandbox_id).toBeTruthy();
    // The agent as clients reach it: this service's own origin (a relative URL the client resolves).
    expect(done.agent_server_url).toBe("/");
    expect(Date.parse(done.updated_at)).toBeGreaterThanOrEqual(Date.parse(done.created_at));

    const c = await getConversation(key, "0F3B6B1E-8D3A-4C61-9D4A-2B7F3C9E1A55");
    expect(c).toMatchObject({
      id: "0f3b6b1e8d3a4c619d4a2b7f3c9e1a55",
      created_by_user_id: "alice",
      sandbox_id: done.sandbox_id,
      title: "Conversation 0f3b6b1e8d3a4c619d4a2b7f3c9e1a55",
      trigger: "gui",
      pr_number: [7],
      llm_model: "openai/gpt-test",
      metrics: null,
      parent_conversation_id: null,
      sub_conversation_ids: [],
      sandbox_status: "RUNNING",
      // The agent runs the first message with the (fake) model at once.
      execution_status: expect.stringMatching(/^(running|finished)$/),
      conversation_url: "/api/conversations/0f3b6b1e8d3a4c619d4a2b7f3c9e1a55",
    });
    // The sandbox's session key names its sandbox (the agent proxy routes by it).
    expect(c?.session_api_key).toMatch(new RegExp(`^sbx_${done.sandbox_id}_[0-9A-Za-z]{43}$`));

    // The agent got the user's LLM settings, confirmation policy, custom secrets and the provider token: asked
    // as the UI asks it, at the host of conversation_url (this service's origin) with the sandbox's key.
    const agentAnswer = await fetch(
      `${uiAgentBase(c?.conversation_url, t.url)}/api/conversations/0f3b6b1e8d3a4c619d4a2b7f3c9e1a55`,
      { headers: { "x-session-api-key": c?.session_api_key ?? "" } },
    );
    expect(agentAnswer.status).toBe(200);
    const agentView = (await agentAnswer.json()) as Record<string, unknown>;
    expect(agentView).toMatchObject({
      agent: { llm: { model: "openai/gpt-test", api_key: "**********" } },
      confirmation_policy: { kind: "NeverConfirm" },
      initial_message: { role: "user", content: [{ type: "text", text: "hello" }] },
    });
    expect((agentView.secret_names as string[]).sort()).toEqual(["GITHUB_TOKEN", "MY_SECRET"]);
    // What was sent is the opened configuration (the agent only shows it redacted).
    expect(await t.app.services.settings.openConversationConfig("alice")).toMatchObject({
      llmModel: "openai/gpt-test",
      llmApiKey: "sk-secret-1",
      confirmationMode: false,
      providerTokens: { github: { token: "ghp_abc", host: null } },
    });
    // The workspace is a git repository.
    if (c === null) throw new Error("no conversation");
    expect((await sh(c, "git rev-parse --is-inside-work-tree")).stdout.trim()).toBe("true");

    // A chosen id that exists already: ERROR, not a second conversation.
    const again = await settle(
      key,
      (await start(key, { conversation_id: "0f3b6b1e8d3a4c619d4a2b7f3c9e1a55", sandbox_id: done.sandbox_id }))
        .id,
    );
    expect(again.status).toBe("ERROR");
    expect(again.detail).toContain("already exists");
  });

  it("start→READY is fast on the process runtime (measured, logged)", async () => {
    const key = await t.keyFor("speedy");
    const times: number[] = [];
    for (let i = 0; i < 8; i++) {
      const t0 = performance.now();
      const task = await settle(key, (await start(key)).id);
      times.push(performance.now() - t0);
      expect(task.status, task.detail ?? "").toBe("READY");
      await api(key, "DELETE", `/api/v1/sandboxes/${task.sandbox_id}`);
    }
    times.sort((a, b) => a - b);
    const p50 = times[Math.floor(times.length / 2)] ?? 0;
    console.log(
      `start→READY without a repository (process runtime, REST, polling): p50 ${p50.toFixed(0)} ms, ` +
        `min ${times[0]?.toFixed(0)} ms, max ${times.at(-1)?.toFixed(0)} ms over ${times.length} starts`,
    );
    expect(p50).toBeLessThan(3000);
  });
});

describe("streaming starts", () => {
  it("POST /stream-start streams every state as one JSON array ending with READY", async () => {
    const key = await t.keyFor("erin");
    const res = await fetch(`${t.url}/api/v1/app-conversations/stream-start`, {
      method: "POST",
      headers: { "x-session-api-key": key, "content-type": "application/json" },
      body: JSON.stringify({ selected_repository: bare }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("application/json");
    const states = (await res.json()) as Task[];
    expect(states.map((s) => s.status)).toEqual([
      "WORKING",
      "WAITING_FOR_SANDBOX",
      "PREPARING_REPOSITORY",
      "RUNNING_SETUP_SCRIPT",
      "SETTING_UP_GIT_HOOKS",
      "SETTING_UP_SKILLS",
      "STARTING_CONVERSATION",
      "READY",
    ]);
    expect(new Set(states.map((s) => s.id)).size).toBe(1);
    expect(states.at(-1)?.app_conversation_id).toMatch(/^[0-9a-f]{32}$/);
    // A failing start streams to ERROR.
    const failed = (await (
      await fetch(`${t.url}/api/v1/app-conversations/stream-start`, {
        method: "POST",
        headers: { "x-session-api-key": key, "content-type": "application/json" },
        body: JSON.stringify({ sandbox_id: "gone" }),
      })
    ).json()) as Task[];
    expect(failed.map((s) => s.status)).toEqual(["WORKING", "ERROR"]);
    expect(failed.at(-1)?.detail).toBe("Sandbox gone not found");
  });

  it("StreamStartAppConversation over gRPC, StartAppConversation and batch gets over Connect", async () => {
    const key = await t.keyFor("erin");
    const g = grpcClient(AppConversationService, t.grpcAddress);
    const statuses: number[] = [];
    let conversationId = "";
    await new Promise<void>((resolve, reject) => {
      const stream = g.stream("StreamStartAppConversation", { request: { llmModel: "grpc-model" } }, key);
      stream.on("data", (m: StreamStartAppConversationResponse) => {
        if (m.task) {
          statuses.push(m.task.status);
          conversationId = m.task.appConversationId ?? "";
        }
      });
      stream.on("end", resolve);
      stream.on("error", reject);
    });
    expect(statuses[0]).toBe(AppConversationStartTaskStatus.WORKING);
    expect(statuses.at(-1)).toBe(AppConversationStartTaskStatus.READY);
    expect(statuses).toHaveLength(8);
    await expect(
      g.unary("StartAppConversation", { request: { conversationId: "not-a-uuid" } }, key),
    ).rejects.toMatchObject({ code: Code.InvalidArgument });
    await expect(
      g.unary("BatchGetStartTasks", { ids: Array.from({ length: 101 }, () => newHexId()) }, key),
    ).rejects.toMatchObject({ code: Code.InvalidArgument });
    g.close();

    const c = connectClient(AppConversationService, t.url, key);
    const started = await c.startAppConversation({ request: {} });
    const taskId = started.task?.id ?? "";
    expect(started.task?.status).toBe(AppConversationStartTaskStatus.WORKING);
    const done = await settle(key, taskId);
    expect(done.status).toBe("READY");
    const tasks = await c.batchGetStartTasks({ ids: [taskId, newHexId()] });
    expect(tasks.items[0]?.task?.status).toBe(AppConversationStartTaskStatus.READY);
    expect(tasks.items[1]?.task).toBeUndefined();
    const convs = await c.batchGetAppConversations({ ids: [conversationId] });
    expect(convs.items[0]?.conversation?.llmModel).toBe("grpc-model");
    expect((await c.countStartTasks({})).count).toBeGreaterThanOrEqual(4n);
  });
});
