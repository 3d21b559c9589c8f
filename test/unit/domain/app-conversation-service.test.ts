// AppConversationService over in-memory repositories, a fake sandbox runtime and a fake agent client: the start
// task's state sequence, failures as details, validation, ownership, live status, recovery and shutdown.
import { create, fromJson, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, type ConnectError } from "@connectrpc/connect";
import { beforeEach, describe, expect, it } from "vitest";
import { ValidationError } from "../../../src/core/errors.ts";
import {
  AppConversationService,
  TOO_MANY_ATTEMPTS_DETAIL,
} from "../../../src/domain/conversations/app-conversation-service.ts";
import type { SandboxService } from "../../../src/domain/sandboxes/sandbox-service.ts";
import { SandboxSpecService } from "../../../src/domain/sandboxes/sandbox-spec-service.ts";
import { SecretsService } from "../../../src/domain/secrets/secrets-service.ts";
import { SettingsService } from "../../../src/domain/settings/settings-service.ts";
import { UserDataStore } from "../../../src/domain/user-data-store.ts";
import {
  AppConversationStartRequestSchema,
  AppConversationStartTaskStatus,
  BatchGetAppConversationsRequestSchema,
  BatchGetStartTasksRequestSchema,
  CountAppConversationsRequestSchema,
  SearchAppConversationsRequestSchema,
  StartAppConversationRequestSchema,
  StreamStartAppConversationRequestSchema,
} from "../../../src/gen/workspace/v1/app_conversation_pb.js";
import { SandboxStatus } from "../../../src/gen/workspace/v1/sandbox_pb.js";
import { SettingsSchema, StoreSettingsRequestSchema } from "../../../src/gen/workspace/v1/settings_pb.js";
import {
  callAs,
  FakeAgentClient,
  FakeSandboxRuntime,
  InMemoryChangeLog,
  InMemoryConversationRepository,
  InMemorySandboxRepository,
  InMemoryStartTaskRepository,
  InMemoryUserDataRepository,
  testChangeFeed,
  testCrypto,
} from "../../helpers/fakes/index.ts";
import { testSandboxService } from "../../helpers/sandbox-service.ts";

const alice = callAs("alice");
const bob = callAs("bob");

interface World {
  service: AppConversationService;
  sandboxes: SandboxService;
  settings: SettingsService;
  runtime: FakeSandboxRuntime;
  agent: FakeAgentClient;
  tasks: InMemoryStartTaskRepository;
  conversations: InMemoryConversationRepository;
}

let w: World;

function world(): World {
  const { box, tokens } = testCrypto();
  const runtime = new FakeSandboxRuntime();
  const agent = new FakeAgentClient();
  const specs = new SandboxSpecService(
    [{ id: "default", command: ["agent"], initialEnv: {}, workingDir: "/w", createdAt: new Date(0) }],
    tokens,
  );
  const log = new InMemoryChangeLog();
  const changes = testChangeFeed(log);
  const sandboxes = testSandboxService({
    repo: new InMemorySandboxRepository(log),
    runtime,
    specs,
    box,
    tokens,
    changes,
  });
  const store = new UserDataStore(new InMemoryUserDataRepository());
  const settings = new SettingsService({ store, box, verifier: null });
  const secrets = new SecretsService({ store, box });
  const tasks = new InMemoryStartTaskRepository(log);
  const conversations = new InMemoryConversationRepository();
  const service = new AppConversationService({
    conversations,
    startTasks: tasks,
    sandboxes,
    sandboxStarts: sandboxes,
    settings,
    secrets,
    agent,
    tokens,
    liveStatusTimeoutMs: 50,
    changes,
    leaseOwner: "server-a",
  });
  return { service, sandboxes, settings, runtime, agent, tasks, conversations };
}

beforeEach(async () => {
  w = world();
  // A conversation needs a model (see "no model" below): both users have one, as after the UI's first setup.
  for (const ctx of [alice, bob])
    await w.settings.storeSettings(
      create(StoreSettingsRequestSchema, { settings: fromJson(SettingsSchema, { llm_model: "m0" }) }),
      ctx,
    );
});

type StartInit = MessageInitShape<typeof AppConversationStartRequestSchema>;
const request = (init: StartInit = {}) => create(AppConversationStartRequestSchema, init);

/** Streams a start to its end; answers the statuses seen and the last task. */
async function startToEnd(init: StartInit = {}, ctx = alice) {
  const statuses: AppConversationStartTaskStatus[] = [];
  let last: {
    detail?: string | undefined;
    appConversationId?: string | undefined;
    sandboxId?: string | undefined;
  } = {};
  for await (const r of w.service.streamStartAppConversation(
    create(StreamStartAppConversationRequestSchema, { request: request(init) }),
    ctx,
  )) {
    statuses.push(r.task?.status ?? AppConversationStartTaskStatus.UNSPECIFIED);
    last = r.task ?? {};
  }
  return { statuses, last };
}

const S = AppConversationStartTaskStatus;

describe("AppConversationService", () => {
  it("a start goes WORKING → WAITING_FOR_SANDBOX → ... → READY, saving every state, and records the conversation", async () => {
    const { statuses, last } = await startToEnd();
    expect(statuses).toEqual([
      S.WORKING,
      S.WAITING_FOR_SANDBOX,
      S.PREPARING_REPOSITORY,
      S.RUNNING_SETUP_SCRIPT,
      S.SETTING_UP_GIT_HOOKS,
      S.SETTING_UP_SKILLS,
      S.STARTING_CONVERSATION,
      S.READY,
    ]);
    const taskId = [...w.tasks.history.keys()][0] ?? "";
    expect(w.tasks.history.get(taskId)).toEqual([
      "WORKING",
      "WAITING_FOR_SANDBOX",
      "PREPARING_REPOSITORY",
      "RUNNING_SETUP_SCRIPT",
      "SETTING_UP_GIT_HOOKS",
      "SETTING_UP_SKILLS",
      "STARTING_CONVERSATION",
      "READY",
    ]);
    const id = last.appConversationId ?? "";
    expect(id).toMatch(/^[0-9a-f]{32}$/);
    const stored = await w.conversations.get(id, "alice");
    expect(stored?.sandboxId).toBe(last.sandboxId);
    // No setup script or pre-commit hook in the project: only the prepare command and the skills listing ran.
    expect(w.agent.commands).toHaveLength(2);
  });

  it("without a model the start ends in ERROR before any sandbox, saying what to set", async () => {
    const { statuses, last } = await startToEnd({}, callAs("carol"));
    expect(statuses).toEqual([S.WORKING, S.ERROR]);
    expect(last.detail).toMatch(/No LLM model is set: .*llm_model/);
    expect(w.agent.starts).toHaveLength(0);
    expect(w.runtime.started).toHaveLength(0);
  });

  it("StartAppConversation answers the task in WORKING at once, already stored", async () => {
    const r = await w.service.startAppConversation(
      create(StartAppConversationRequestSchema, { request: request() }),
      alice,
    );
    expect(r.task?.status).toBe(S.WORKING);
    expect(await w.tasks.get(r.task?.id ?? "", "alice")).not.toBeNull();
    await w.service.shutdown(5_000);
  });

  it("passes the user's LLM settings and custom secrets to the agent, and never leaks them into a failure detail", async () => {
    await w.settings.storeSettings(
      create(StoreSettingsRequestSchema, {
        settings: fromJson(SettingsSchema, { llm_model: "m1", llm_api_key: "sk-secret-key" }),
      }),
      alice,
    );
    await startToEnd();
    const body = w.agent.starts[0]?.request as { agent: { llm: { model: string; api_key: string } } };
    expect(body.agent.llm).toMatchObject({ model: "m1", api_key: "sk-secret-key" });

    w.agent.onStart = () => {
      throw new Error("agent echoed sk-secret-key");
    };
    const { statuses, last } = await startToEnd();
    expect(statuses.at(-1)).toBe(S.ERROR);
    expect(last.detail).not.toContain("sk-secret-key");
  });

  it("a failing setup script ends in ERROR with its exit code and output", async () => {
    w.agent.onCommand = (c) =>
      c.command.includes("setup.sh") && !c.command.includes("__OH_PROJECT_DIR__")
        ? { exitCode: 3, stdout: "boom happened", stderr: "" }
        : { exitCode: 0, stdout: "__OH_PROJECT_DIR__=/w/p\n__OH_HAS_SETUP_SCRIPT__\n", stderr: "" };
    const { statuses, last } = await startToEnd();
    expect(statuses.slice(-2)).toEqual([S.RUNNING_SETUP_SCRIPT, S.ERROR]);
    expect(last.detail).toMatch(/failed with exit code 3/);
    expect(last.detail).toContain("boom happened");
    expect(await w.conversations.count("alice", {})).toBe(0);
  });

  it("a sandbox that cannot start ends in ERROR saying so", async () => {
    w.runtime.healthy = false;
    const { statuses, last } = await startToEnd();
    expect(statuses.slice(-2)).toEqual([S.WAITING_FOR_SANDBOX, S.ERROR]);
    expect(last.detail).toMatch(/failed to start \(status ERROR\)/);
  });

  it("another user's sandbox or parent conversation behaves as absent", async () => {
    const { last } = await startToEnd();
    const foreignSandbox = await startToEnd({ sandboxId: last.sandboxId ?? "" }, bob);
    expect(foreignSandbox.last.detail).toBe(`Sandbox ${last.sandboxId} not found`);
    const foreignParent = await startToEnd({ parentConversationId: last.appConversationId ?? "" }, bob);
    expect(foreignParent.last.detail).toBe(`Parent conversation ${last.appConversationId} not found`);
    const got = await w.service.batchGetAppConversations(
      create(BatchGetAppConversationsRequestSchema, { ids: [last.appConversationId ?? ""] }),
      bob,
    );
    expect(got.items[0]?.conversation).toBeUndefined();
    const tasks = await w.service.batchGetStartTasks(
      create(BatchGetStartTasksRequestSchema, { ids: [...w.tasks.history.keys()] }),
      bob,
    );
    // bob sees his own two tasks only.
    expect(tasks.items.filter((t) => t.task !== undefined).map((t) => t.task?.createdByUserId)).toEqual([
      "bob",
      "bob",
    ]);
  });

  it("a sub-conversation reuses its parent's sandbox and is recorded in the parent", async () => {
    const parent = await startToEnd({ selectedRepository: "/srv/repo", llmModel: "pm" });
    const child = await startToEnd({ parentConversationId: parent.last.appConversationId ?? "" });
    expect(child.last.sandboxId).toBe(parent.last.sandboxId);
    const stored = await w.conversations.get(parent.last.appConversationId ?? "", "alice");
    expect(stored?.subConversationIds).toEqual([child.last.appConversationId]);
    const childRecord = await w.conversations.get(child.last.appConversationId ?? "", "alice");
    expect(childRecord).toMatchObject({ selectedRepository: "/srv/repo", llmModel: "pm" });
    // Searches leave sub-conversations out unless asked.
    const count = (include: boolean) =>
      w.service.countAppConversations(
        create(CountAppConversationsRequestSchema, { includeSubConversations: include }),
        alice,
      );
    expect((await count(false)).count).toBe(1n);
    expect((await count(true)).count).toBe(2n);
  });

  it("rejects malformed ids and repositories with field violations, storing nothing", async () => {
    const err = await w.service
      .startAppConversation(
        create(StartAppConversationRequestSchema, {
          request: request({ conversationId: "nope", selectedRepository: "-x", selectedBranch: "a..b" }),
        }),
        alice,
      )
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).violations.map((v) => [v.type, v.loc])).toEqual([
      ["uuid_parsing", ["conversation_id"]],
      ["value_error", ["selected_repository"]],
      ["value_error", ["selected_branch"]],
    ]);
    expect(await w.tasks.listUnfinished()).toEqual([]);
    const batch = await w.service
      .batchGetAppConversations(create(BatchGetAppConversationsRequestSchema, { ids: ["zz"] }), alice)
      .catch((e: unknown) => e);
    expect((batch as ValidationError).violations.map((v) => v.loc)).toEqual([["ids", 0]]);
  });

  it("listings show live status: the agent's execution status while RUNNING, none when the agent is slow", async () => {
    const { last } = await startToEnd();
    const id = last.appConversationId ?? "";
    w.agent.executionStatus.set(id, "running");
    const search = () => w.service.searchAppConversations(create(SearchAppConversationsRequestSchema), alice);
    let c = (await search()).items[0];
    expect(c?.sandboxStatus).toBe(SandboxStatus.RUNNING);
    expect(c?.executionStatus).toBeDefined();
    // Relative: the agent is reached through this service's own origin.
    expect(c?.conversationUrl).toBe(`/api/conversations/${id}`);
    expect(c?.sessionApiKey).toBeDefined();

    w.agent.onGetConversations = () => new Promise(() => {}); // never answers
    c = (await search()).items[0];
    expect(c?.executionStatus).toBeUndefined();

    await w.sandboxes.pause("alice", last.sandboxId ?? "");
    c = (await search()).items[0];
    expect(c?.sandboxStatus).toBe(SandboxStatus.PAUSED);
    expect(c?.conversationUrl).toBeUndefined();
    expect(c?.sessionApiKey).toBeUndefined();
  });

  it("a task whose lease expired is resumed from its saved step; one taken over too often ends ERROR", async () => {
    const now = new Date();
    const left = (id: string) =>
      w.tasks.insert({
        id,
        ownerId: "alice",
        status: "PREPARING_REPOSITORY",
        detail: null,
        appConversationId: null,
        sandboxId: null,
        agentServerUrl: null,
        request: {},
        createdAt: now,
        updatedAt: now,
      });
    // Left by a server that died: no lease held (as an expired one).
    await left("c".repeat(32));
    expect(await w.service.maintainLeases()).toBe(1);
    for (let i = 0; i < 200 && (await w.tasks.get("c".repeat(32), "alice"))?.status !== "READY"; i++)
      await new Promise((r) => setTimeout(r, 5));
    const resumed = await w.tasks.get("c".repeat(32), "alice");
    expect(resumed).toMatchObject({ status: "READY", detail: null });
    expect(await w.conversations.get(resumed?.appConversationId ?? "", "alice")).not.toBeNull();
    // Nothing left to take over; a lease held by this server is renewed, not claimed again.
    expect(await w.service.maintainLeases()).toBe(0);

    // Taken over three times by servers that each died at once (their leases expired immediately).
    await left("d".repeat(32));
    for (let i = 0; i < 3; i++) await w.tasks.claimExpired(`gone-${i}`, new Date(), new Date(0), 10);
    expect(await w.service.maintainLeases()).toBe(1);
    expect(await w.tasks.get("d".repeat(32), "alice")).toMatchObject({
      status: "ERROR",
      detail: TOO_MANY_ATTEMPTS_DETAIL,
    });
    // A server that lost its lease cannot write the task any more.
    expect(await w.tasks.update("d".repeat(32), { detail: "late" }, "gone-2")).toBe(false);
  });

  it("a resumed start whose sandbox was created and then deleted ends in ERROR; it does not create it again", async () => {
    const now = new Date();
    const task = {
      id: "e".repeat(32),
      ownerId: "alice",
      status: "PREPARING_REPOSITORY" as const,
      detail: null,
      appConversationId: null,
      sandboxId: "gone-sandbox",
      agentServerUrl: null,
      request: {},
      createdAt: now,
      updatedAt: now,
    };
    await w.tasks.insert(task, undefined, { sandboxId: "gone-sandbox", conversationId: "f".repeat(32) });
    expect(await w.service.maintainLeases()).toBe(1);
    for (let i = 0; i < 200 && (await w.tasks.get(task.id, "alice"))?.status !== "ERROR"; i++)
      await new Promise((r) => setTimeout(r, 5));
    expect(await w.tasks.get(task.id, "alice")).toMatchObject({
      status: "ERROR",
      detail: "Sandbox gone-sandbox was deleted while the conversation was starting",
    });
    expect(await w.sandboxes.get("alice", "gone-sandbox")).toBeNull();
  });

  it("shutdown refuses new starts", async () => {
    await w.service.shutdown(100);
    const err = await w.service
      .startAppConversation(create(StartAppConversationRequestSchema, { request: request() }), alice)
      .catch((e: unknown) => e);
    expect((err as ConnectError).code).toBe(Code.Unavailable);
  });
});
