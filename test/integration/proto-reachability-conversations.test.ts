// Every field of a conversation start request is reachable over REST and over RPC alike: walked from the
// AppConversationStartRequest descriptor, each field is sent over REST and over gRPC and read back from the start
// task's echo over both. A string field without a rule is checked with a derived value; every other field has its
// values in FIELDS, so a field added to the proto fails here until it is given its REST and proto values.
import { create, type DescField, fromJson, type JsonValue, ScalarType, toJson } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newHexId } from "../../src/core/ids.ts";
import {
  AppConversationService,
  type AppConversationStartRequest,
  AppConversationStartRequestSchema,
  BatchGetStartTasksRequestSchema,
  type BatchGetStartTasksResponse,
  StartAppConversationRequestSchema,
  type StartAppConversationResponse,
} from "../../src/gen/workspace/v1/app_conversation_pb.js";
import { conversationRecord } from "../helpers/conversation-fixtures.ts";
import { FakeSandboxRuntime } from "../helpers/fakes/sandbox-runtime.ts";
import { grpcClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

/** The values a field is checked with: sent over REST, echoed by REST, and its protobuf JSON (sent and echoed). */
interface Values {
  reason: string;
  rest: JsonValue;
  restEcho: JsonValue;
  proto: JsonValue;
}

const PARENT = newHexId();
const CHOSEN_ID = newHexId();
const dashed = (id: string) =>
  `${id.slice(0, 8)}-${id.slice(8, 12)}-${id.slice(12, 16)}-${id.slice(16, 20)}-${id.slice(20)}`;

const FIELDS: Record<string, Values> = {
  conversation_id: {
    reason: "a UUID; REST echoes it with dashes (the reference's UUID field)",
    rest: CHOSEN_ID,
    restEcho: dashed(CHOSEN_ID),
    proto: CHOSEN_ID,
  },
  initial_message: {
    reason:
      "roles by lower-case name, content parts told apart by type, cache_prompt echoed with its default",
    rest: { role: "user", content: [{ type: "text", text: "hello" }], run: true },
    restEcho: { role: "user", content: [{ type: "text", text: "hello", cache_prompt: false }], run: true },
    proto: {
      role: "MESSAGE_ROLE_USER",
      content: [{ text: { text: "hello", cache_prompt: false } }],
      run: true,
    },
  },
  processors: {
    reason: "free-form objects (google.protobuf.Struct)",
    rest: [{ kind: "example", n: 1 }],
    restEcho: [{ kind: "example", n: 1 }],
    proto: [{ kind: "example", n: 1 }],
  },
  selected_repository: {
    reason: "an owner/repo name or a repository URL (workspace-commands.ts rules)",
    rest: "owner/repo",
    restEcho: "owner/repo",
    proto: "owner/repo",
  },
  selected_branch: {
    reason: "a git branch name (workspace-commands.ts rules)",
    rest: "feature-x",
    restEcho: "feature-x",
    proto: "feature-x",
  },
  git_provider: {
    reason: "providers by lower-case name",
    rest: "gitlab",
    restEcho: "gitlab",
    proto: "PROVIDER_TYPE_GITLAB",
  },
  trigger: {
    reason: "triggers by lower-case name",
    rest: "openhands_api",
    restEcho: "openhands_api",
    proto: "CONVERSATION_TRIGGER_OPENHANDS_API",
  },
  pr_number: { reason: "a list of int32", rest: [7, 8], restEcho: [7, 8], proto: [7, 8] },
  parent_conversation_id: {
    reason: "one of the caller's conversations (a UUID), echoed as 32 hex",
    rest: dashed(PARENT),
    restEcho: PARENT,
    proto: PARENT,
  },
  agent_type: {
    reason: "agent types by lower-case name; unset is default",
    rest: "plan",
    restEcho: "plan",
    proto: "AGENT_TYPE_PLAN",
  },
  title: { reason: "1..200 characters", rest: "A title", restEcho: "A title", proto: "A title" },
};

function valuesOf(f: DescField): Values {
  const given = FIELDS[f.name];
  if (given !== undefined) return given;
  if (f.fieldKind === "scalar" && f.scalar === ScalarType.STRING) {
    const v = `${f.name}-value`;
    return { reason: "plain string", rest: v, restEcho: v, proto: v };
  }
  throw new Error(`${f.name}: give it its REST and proto values in FIELDS`);
}

const runtime = new FakeSandboxRuntime();
/** The fake sandboxes' health checks hang until the end: every start stays WAITING_FOR_SANDBOX, echoing its request. */
let settleHealth: (ok: boolean) => void = () => {};
let t: TestApp;
let g: ReturnType<typeof grpcClient>;
let key: string;

beforeAll(async () => {
  runtime.healthy = () =>
    new Promise<boolean>((resolve) => {
      settleHealth = resolve;
    });
  t = await startTestApp({ runtime, llmModel: "openai/test-model", maxSandboxesPerUser: 100 });
  key = await t.keyFor("reach");
  g = grpcClient(AppConversationService, t.grpcAddress);
  const at = new Date("2025-11-28T10:00:00Z");
  await t.storage.conversations.insert(
    conversationRecord({ id: PARENT, ownerId: "reach", title: "Parent", trigger: "gui", createdAt: at }),
  );
});
afterAll(async () => {
  settleHealth(false);
  g?.close();
  await t?.close();
});

/** The start task's request as REST echoes it and as RPC echoes it (protobuf JSON). */
async function echoes(
  taskId: string,
): Promise<{ rest: Record<string, unknown>; rpc: Record<string, unknown> }> {
  const r = await call(t.url, key, "GET", `/api/v1/app-conversations/start-tasks?ids=${taskId}`);
  expect(r.status, r.text).toBe(200);
  const rest = (r.body as { request: Record<string, unknown> }[])[0]?.request ?? {};
  const got = await g.unary<BatchGetStartTasksResponse>(
    "BatchGetStartTasks",
    create(BatchGetStartTasksRequestSchema, { ids: [taskId] }),
    key,
  );
  const request = got.items[0]?.task?.request as AppConversationStartRequest;
  const rpc = toJson(AppConversationStartRequestSchema, request, { useProtoFieldName: true }) as Record<
    string,
    unknown
  >;
  return { rest, rpc };
}

/** The field's protobuf JSON as RPC answers it (normalized through the message). */
const protoEcho = (name: string, proto: JsonValue): unknown =>
  (
    toJson(
      AppConversationStartRequestSchema,
      fromJson(AppConversationStartRequestSchema, { [name]: proto }),
      {
        useProtoFieldName: true,
      },
    ) as Record<string, unknown>
  )[name];

const cases = AppConversationStartRequestSchema.fields.map((f) => [f.name, f] as const);

describe("every start-request field is reachable over REST and RPC alike (walked from the descriptor)", () => {
  it.each(cases)("%s: started over REST, echoed by REST and gRPC", async (name, f) => {
    const v = valuesOf(f);
    // A chosen conversation id can start one conversation only.
    const rest = name === "conversation_id" ? newHexId() : v.rest;
    const started = await call(t.url, key, "POST", "/api/v1/app-conversations", { [name]: rest });
    expect(started.status, started.text).toBe(200);
    const { rest: restEcho, rpc } = await echoes((started.body as { id: string }).id);
    if (name === "conversation_id") {
      expect(restEcho[name]).toBe(dashed(rest as string));
      expect(rpc[name]).toBe(rest);
      return;
    }
    expect(restEcho[name], `REST echo of ${name}`).toEqual(v.restEcho);
    expect(rpc[name], `gRPC echo of ${name}`).toEqual(protoEcho(name, v.proto));
  });

  it.each(cases)("%s: started over gRPC, echoed by REST and gRPC", async (name, f) => {
    const v = valuesOf(f);
    const request = fromJson(AppConversationStartRequestSchema, { [name]: v.proto });
    const res = await g.unary<StartAppConversationResponse>(
      "StartAppConversation",
      create(StartAppConversationRequestSchema, { request }),
      key,
    );
    const { rest: restEcho, rpc } = await echoes(res.task?.id ?? "");
    expect(restEcho[name], `REST echo of ${name}`).toEqual(v.restEcho);
    expect(rpc[name], `gRPC echo of ${name}`).toEqual(protoEcho(name, v.proto));
  });
});
