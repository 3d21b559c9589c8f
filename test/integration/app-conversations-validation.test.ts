// Bad input on every conversation route, and the OpenAPI schemas of real requests and responses.
// Shared setup: test/helpers/app-conversations.ts.

import * as grpc from "@grpc/grpc-js";
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newHexId } from "../../src/core/ids.ts";
import { AppConversationService } from "../../src/gen/workspace/v1/app_conversation_pb.js";
import {
  api,
  settle,
  startConversationApp,
  stopConversationApp,
  type Task,
} from "../helpers/app-conversations.ts";
import { grpcClient } from "../helpers/rpc-clients.ts";
import { call, type TestApp } from "../helpers/test-app.ts";

let t: TestApp;
let bare: string;
beforeAll(async () => {
  ({ t, bare } = await startConversationApp());
});
afterAll(stopConversationApp);

describe("bad input", () => {
  it("every route answers 422 with pydantic's shape (never 5xx) and stores nothing", async () => {
    const key = await t.keyFor("mallory");
    const hex = newHexId();
    const many = Array.from({ length: 101 }, () => `ids=${newHexId()}`).join("&");
    const cases: [string, string, unknown, unknown[], string][] = [
      ["GET", "/api/v1/app-conversations", undefined, ["query", "ids"], "missing"],
      ["GET", "/api/v1/app-conversations?ids=nope", undefined, ["query", "ids", 0], "uuid_parsing"],
      ["GET", `/api/v1/app-conversations?ids=${hex}&ids=123`, undefined, ["query", "ids", 1], "uuid_parsing"],
      ["GET", `/api/v1/app-conversations?${many}`, undefined, ["query", "ids"], "too_long"],
      ["GET", "/api/v1/app-conversations/start-tasks", undefined, ["query", "ids"], "missing"],
      ["GET", "/api/v1/app-conversations/start-tasks?ids=zz", undefined, ["query", "ids", 0], "uuid_parsing"],
      ["GET", `/api/v1/app-conversations/start-tasks?${many}`, undefined, ["query", "ids"], "too_long"],
      [
        "GET",
        "/api/v1/app-conversations/search?limit=0",
        undefined,
        ["query", "limit"],
        "greater_than_equal",
      ],
      ["GET", "/api/v1/app-conversations/search?limit=101", undefined, ["query", "limit"], "less_than_equal"],
      ["GET", "/api/v1/app-conversations/search?limit=ten", undefined, ["query", "limit"], "int_parsing"],
      [
        "GET",
        "/api/v1/app-conversations/search?page_id=forged",
        undefined,
        ["query", "page_id"],
        "value_error",
      ],
      [
        "GET",
        "/api/v1/app-conversations/search?created_at__gte=yesterday",
        undefined,
        ["query", "created_at__gte"],
        "datetime_from_date_parsing",
      ],
      [
        "GET",
        "/api/v1/app-conversations/search?updated_at__lt=2024-13-01",
        undefined,
        ["query", "updated_at__lt"],
        "datetime_from_date_parsing",
      ],
      [
        "GET",
        "/api/v1/app-conversations/search?include_sub_conversations=maybe",
        undefined,
        ["query", "include_sub_conversations"],
        "bool_parsing",
      ],
      [
        "GET",
        "/api/v1/app-conversations/count?created_at__lt=01/02/2025",
        undefined,
        ["query", "created_at__lt"],
        "datetime_from_date_parsing",
      ],
      [
        "GET",
        "/api/v1/app-conversations/start-tasks/search?sort_order=NEWEST",
        undefined,
        ["query", "sort_order"],
        "enum",
      ],
      [
        "GET",
        "/api/v1/app-conversations/start-tasks/search?conversation_id__eq=xyz",
        undefined,
        ["query", "conversation_id__eq"],
        "uuid_parsing",
      ],
      [
        "GET",
        "/api/v1/app-conversations/start-tasks/search?limit=-1",
        undefined,
        ["query", "limit"],
        "greater_than_equal",
      ],
      [
        "GET",
        "/api/v1/app-conversations/start-tasks/count?created_at__gte=soon",
        undefined,
        ["query", "created_at__gte"],
        "datetime_from_date_parsing",
      ],
      ["POST", "/api/v1/app-conversations", undefined, ["body"], "missing"],
      ["POST", "/api/v1/app-conversations", [], ["body"], "model_attributes_type"],
      [
        "POST",
        "/api/v1/app-conversations",
        { conversation_id: "1234" },
        ["body", "conversation_id"],
        "uuid_parsing",
      ],
      [
        "POST",
        "/api/v1/app-conversations",
        { parent_conversation_id: 5 },
        ["body", "parent_conversation_id"],
        "uuid_type",
      ],
      ["POST", "/api/v1/app-conversations", { git_provider: "gitea" }, ["body", "git_provider"], "enum"],
      ["POST", "/api/v1/app-conversations", { trigger: "email" }, ["body", "trigger"], "enum"],
      // Titles: one rule on start and rename (1..200 characters).
      [
        "POST",
        "/api/v1/app-conversations",
        { title: "t".repeat(200_000) },
        ["body", "title"],
        "string_too_long",
      ],
      ["POST", "/api/v1/app-conversations", { title: "" }, ["body", "title"], "string_too_short"],
      ["POST", "/api/v1/app-conversations", { title: "   " }, ["body", "title"], "string_too_short"],
      [
        "POST",
        "/api/v1/app-conversations/stream-start",
        { title: "t".repeat(201) },
        ["body", "title"],
        "string_too_long",
      ],
      ["POST", "/api/v1/app-conversations", { agent_type: "smart" }, ["body", "agent_type"], "enum"],
      ["POST", "/api/v1/app-conversations", { pr_number: ["x"] }, ["body", "pr_number", 0], "int_parsing"],
      ["POST", "/api/v1/app-conversations", { sandbox_id: 5 }, ["body", "sandbox_id"], "string_type"],
      [
        "POST",
        "/api/v1/app-conversations",
        { selected_branch: "-f" },
        ["body", "selected_branch"],
        "value_error",
      ],
      [
        "POST",
        "/api/v1/app-conversations",
        { selected_repository: "not a repo" },
        ["body", "selected_repository"],
        "value_error",
      ],
      [
        "POST",
        "/api/v1/app-conversations",
        { initial_message: { role: "boss" } },
        ["body", "initial_message", "role"],
        "literal_error",
      ],
      [
        "POST",
        "/api/v1/app-conversations",
        { initial_message: { content: [{ type: "video" }] } },
        ["body", "initial_message", "content", 0],
        "union_tag_invalid",
      ],
      [
        "POST",
        "/api/v1/app-conversations",
        { initial_message: { content: [{ text: "no type" }] } },
        ["body", "initial_message", "content", 0],
        "union_tag_not_found",
      ],
      [
        "POST",
        "/api/v1/app-conversations",
        { initial_message: { content: [{ type: "text" }] } },
        ["body", "initial_message", "content", 0, "text", "text"],
        "missing",
      ],
      [
        "POST",
        "/api/v1/app-conversations",
        { initial_message: { content: [{ type: "image", image_urls: ["u"], extra: 1 }] } },
        ["body", "initial_message", "content", 0, "image", "extra"],
        "extra_forbidden",
      ],
      ["POST", "/api/v1/app-conversations", { processors: ["x"] }, ["body", "processors", 0], "dict_type"],
      [
        "POST",
        "/api/v1/app-conversations/stream-start",
        { conversation_id: "zz" },
        ["body", "conversation_id"],
        "uuid_parsing",
      ],
    ];
    const before = await t.storage.startTasks.count("mallory", {});
    for (const [method, path, body, loc, type] of cases) {
      const r = await api(key, method, path, body);
      expect(r.status, `${method} ${path} ${JSON.stringify(body)}: ${r.text}`).toBe(422);
      expect(r.headers.get("content-type")).toContain("application/json");
      const detail = (r.body as { detail: { loc: unknown[]; type: string; msg: string }[] }).detail;
      expect(detail[0], `${method} ${path} ${JSON.stringify(body)}`).toMatchObject({ loc, type });
      if (type === "uuid_parsing") expect(detail[0]?.msg).toMatch(/^Input should be a valid UUID, /);
    }
    // Every problem at once.
    const several = await api(key, "POST", "/api/v1/app-conversations", {
      conversation_id: "x",
      git_provider: "gitea",
      pr_number: [1, "two"],
    });
    expect((several.body as { detail: { loc: unknown[] }[] }).detail.map((d) => d.loc)).toEqual([
      ["body", "conversation_id"],
      ["body", "git_provider"],
      ["body", "pr_number", 1],
    ]);
    const invalidJson = await call(t.url, key, "POST", "/api/v1/app-conversations", undefined, "{nope");
    expect(invalidJson.status).toBe(422);
    expect((invalidJson.body as { detail: { type: string }[] }).detail[0]?.type).toBe("json_invalid");
    expect(await t.storage.startTasks.count("mallory", {})).toBe(before);
    // No key.
    for (const path of ["/api/v1/app-conversations/search", "/api/v1/app-conversations/start-tasks/count"])
      expect((await api(undefined, "GET", path)).status).toBe(401);
    expect((await api(undefined, "POST", "/api/v1/app-conversations", {})).status).toBe(401);
  });
});

describe("titles over gRPC", () => {
  it("the same rule as REST: a start or rename with a 201-character title is INVALID_ARGUMENT, nothing started", async () => {
    const key = await t.keyFor("grpc-titles");
    const g = grpcClient(AppConversationService, t.grpcAddress);
    try {
      const long = "t".repeat(201);
      const start = await g
        .unary("StartAppConversation", { request: { title: long } }, key)
        .catch((e: grpc.ServiceError) => e);
      expect((start as grpc.ServiceError).code).toBe(grpc.status.INVALID_ARGUMENT);
      const rename = await g
        .unary("UpdateAppConversation", { id: newHexId(), title: long }, key)
        .catch((e: grpc.ServiceError) => e);
      expect((rename as grpc.ServiceError).code).toBe(grpc.status.INVALID_ARGUMENT);
      expect((await call(t.url, key, "GET", "/api/v1/app-conversations/start-tasks/count")).body).toBe(0);
    } finally {
      g.close();
    }
  });
});

describe("OpenAPI document", () => {
  it("real requests and responses of every conversation route match their documented schemas", async () => {
    type Op = {
      requestBody?: { content: { "application/json": { schema: object } } };
      responses: Record<string, { content?: { "application/json": { schema: object } } }>;
    };
    const doc = (await api(undefined, "GET", "/openapi.json")).body as {
      paths: Record<string, Record<string, Op>>;
      components: { schemas: Record<string, object> };
    };
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    (addFormats as unknown as (a: Ajv2020) => void)(ajv);
    const check = (schema: object, value: unknown, what: string) => {
      const validate = ajv.compile({ ...schema, components: doc.components });
      expect(
        validate(value),
        `${what}: ${ajv.errorsText(validate.errors)} ${JSON.stringify(value).slice(0, 300)}`,
      ).toBe(true);
    };
    const key = await t.keyFor("documented");
    const exchange = async (method: string, path: string, body?: unknown, invalidOnPurpose = false) => {
      const op = doc.paths[path.split("?")[0] ?? ""]?.[method.toLowerCase()];
      if (op === undefined) throw new Error(`${method} ${path} is not documented`);
      if (body !== undefined && op.requestBody && !invalidOnPurpose)
        check(op.requestBody.content["application/json"].schema, body, "request");
      const r = await api(key, method, path, body);
      const schema = op.responses[String(r.status)]?.content?.["application/json"]?.schema;
      expect(schema, `${method} ${path} ${r.status}`).toBeDefined();
      if (schema) check(schema, r.body, `${method} ${path} ${r.status}`);
      return r;
    };
    const body = {
      initial_message: {
        role: "user",
        content: [
          { type: "text", text: "hi" },
          { type: "image", image_urls: ["https://example.com/a.png"] },
        ],
        run: true,
      },
      selected_repository: bare,
      selected_branch: "feature",
      git_provider: "github",
      trigger: "openhands_api",
      pr_number: [1, 2],
      conversation_id: newHexId(),
      agent_type: "plan",
      processors: [{ kind: "SetTitleCallbackProcessor" }],
    };
    const task = (await exchange("POST", "/api/v1/app-conversations", body)).body as Task;
    const done = await settle(key, task.id);
    expect(done.status, done.detail ?? "").toBe("READY");
    await exchange("POST", "/api/v1/app-conversations/stream-start", { sandbox_id: done.sandbox_id });
    await exchange("POST", "/api/v1/app-conversations", { pr_number: ["x"] }, true); // 422
    await exchange("GET", `/api/v1/app-conversations/start-tasks?ids=${task.id}&ids=${newHexId()}`);
    await exchange("GET", "/api/v1/app-conversations/start-tasks/search?limit=1&sort_order=CREATED_AT");
    await exchange("GET", "/api/v1/app-conversations/start-tasks/count");
    await exchange("GET", `/api/v1/app-conversations?ids=${done.app_conversation_id}&ids=${newHexId()}`);
    await exchange("GET", "/api/v1/app-conversations/search?limit=5");
    await exchange("GET", "/api/v1/app-conversations/count");
    await exchange("GET", "/api/v1/app-conversations/search?limit=0"); // 422
  });
});
