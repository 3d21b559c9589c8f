// Every AppConversation field is readable over REST and over RPC alike: walked from the AppConversation descriptor,
// a conversation with every stored field set, in a running sandbox whose agent reports an execution status, is read
// over REST (GET /api/v1/app-conversations?ids=) and over gRPC (BatchGetAppConversations); each field must be set
// in both answers, and REST must write what RPC holds. A field added to the proto fails here until the service
// fills it and both answers carry it.
import { create, type DescField, isFieldSet, ScalarType, toJson } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newHexId } from "../../src/core/ids.ts";
import {
  type AppConversation,
  AppConversationSchema,
  AppConversationService,
  BatchGetAppConversationsRequestSchema,
  type BatchGetAppConversationsResponse,
} from "../../src/gen/workspace/v1/app_conversation_pb.js";
import { FakeAgentClient } from "../helpers/fakes/agent-client.ts";
import { FakeSandboxRuntime } from "../helpers/fakes/sandbox-runtime.ts";
import { grpcClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

const runtime = new FakeSandboxRuntime();
const agent = new FakeAgentClient();
const ID = newHexId();
const PARENT = newHexId();
const CHILD = newHexId();
let t: TestApp;
let g: ReturnType<typeof grpcClient>;
let key: string;
let rest: Record<string, unknown>;
let rpc: AppConversation;

beforeAll(async () => {
  t = await startTestApp({ runtime, agent });
  key = await t.keyFor("answers");
  g = grpcClient(AppConversationService, t.grpcAddress);
  const sandbox = await call(t.url, key, "POST", "/api/v1/sandboxes");
  expect(sandbox.status, sandbox.text).toBe(200);
  const sandboxId = (sandbox.body as { id: string }).id;
  for (let i = 0; i < 100; i++) {
    const s = await call(t.url, key, "GET", `/api/v1/sandboxes?sandbox_ids=${sandboxId}`);
    if ((s.body as { status: string }[])[0]?.status === "RUNNING") break;
    await new Promise((r) => setTimeout(r, 20));
  }
  agent.executionStatus.set(ID, "running");
  const at = new Date("2025-11-28T10:00:00.123Z");
  await t.storage.conversations.insert({
    id: ID,
    ownerId: "answers",
    sandboxId,
    selectedRepository: "owner/repo",
    selectedBranch: "main",
    gitProvider: "gitlab",
    title: "Every field",
    trigger: "openhands_api",
    prNumber: [7, 8],
    llmModel: "openai/test-model",
    metrics: {
      model_name: "openai/test-model",
      accumulated_cost: 0.5,
      max_budget_per_task: 10,
      accumulated_token_usage: {
        model: "openai/test-model",
        prompt_tokens: 11,
        completion_tokens: 12,
        cache_read_tokens: 13,
        cache_write_tokens: 14,
        reasoning_tokens: 15,
        context_window: 16,
        per_turn_token: 17,
        response_id: "resp-1",
      },
    },
    parentConversationId: PARENT,
    subConversationIds: [CHILD],
    createdAt: at,
    updatedAt: new Date(at.getTime() + 1000),
  });
  const r = await call(t.url, key, "GET", `/api/v1/app-conversations?ids=${ID}`);
  expect(r.status, r.text).toBe(200);
  rest = (r.body as Record<string, unknown>[])[0] ?? {};
  const got = await g.unary<BatchGetAppConversationsResponse>(
    "BatchGetAppConversations",
    create(BatchGetAppConversationsRequestSchema, { ids: [ID] }),
    key,
  );
  rpc = got.items[0]?.conversation as AppConversation;
});
afterAll(async () => {
  g?.close();
  await t?.close();
});

/** What REST writes for the field's value in protobuf JSON (enums lower-case or unprefixed, 64-bit as numbers). */
function restOf(f: DescField, proto: unknown): unknown {
  if (f.fieldKind === "enum") {
    const name = String(proto).slice(f.enum.sharedPrefix?.length ?? 0);
    return rest[f.name] === name ? name : name.toLowerCase();
  }
  if (f.fieldKind === "message" && f.message.typeName === "google.protobuf.Timestamp")
    return new Date(String(proto)).toISOString();
  return proto;
}

const cases = AppConversationSchema.fields.map((f) => [f.name, f] as const);

describe("every AppConversation field is readable over REST and RPC alike (walked from the descriptor)", () => {
  it.each(cases)("%s", (name, f) => {
    expect(rpc, "gRPC answered the conversation").toBeDefined();
    expect(isFieldSet(rpc, f), `gRPC answer sets ${name}`).toBe(true);
    expect(rest[name], `REST answer has ${name}`).not.toBeNull();
    expect(rest[name], `REST answer has ${name}`).not.toBeUndefined();
    if (f.fieldKind === "list") expect((rest[name] as unknown[]).length, `REST ${name}`).toBeGreaterThan(0);
    const proto = (
      toJson(AppConversationSchema, rpc, { useProtoFieldName: true }) as Record<string, unknown>
    )[name];
    if (f.fieldKind === "message" && f.message.typeName === "workspace.v1.MetricsSnapshot") {
      // int64 fields are JSON strings in protobuf JSON and numbers in REST.
      const usage = (proto as { accumulated_token_usage: Record<string, unknown> }).accumulated_token_usage;
      const numeric = Object.fromEntries(
        Object.entries(usage).map(([k, v]) => [k, k === "model" || k === "response_id" ? v : Number(v)]),
      );
      expect(rest[name]).toEqual({ ...(proto as object), accumulated_token_usage: numeric });
      return;
    }
    if (f.fieldKind === "scalar" && f.scalar !== ScalarType.STRING)
      throw new Error(`${name}: compare its type`);
    expect(rest[name], `REST writes what RPC holds for ${name}`).toEqual(restOf(f, proto));
  });
});
