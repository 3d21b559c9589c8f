// Every field of the settings record is reachable over REST and over RPC alike: walked from the descriptor, so that
// a field added to settings.proto is checked here without a line of this file changing. A field whose REST value
// is not derived from its type is in EXCEPTIONS with its reason and the values it is checked with.
import {
  create,
  type DescField,
  fromJson,
  type JsonObject,
  type JsonValue,
  ScalarType,
  toJson,
} from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fieldFacts } from "../../src/core/field-behavior.ts";
import { SETTINGS_RULES } from "../../src/domain/settings/settings-rules.ts";
import {
  type GetSettingsResponse,
  GetSettingsResponseSchema,
  SettingsSchema,
  SettingsService,
  StoreSettingsRequestSchema,
} from "../../src/gen/workspace/v1/settings_pb.js";
import { settingsCodec } from "../../src/transports/rest/legacy-routes.ts";
import { connectClient, grpcClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

/** A field checked with given values instead of derived ones. */
interface Exception {
  reason: string;
  /** What REST sends. */
  rest: JsonValue;
  /** What GET /api/settings answers for it. */
  restAnswer: JsonValue;
  /** The field's protobuf JSON that RPC sends and GetSettings answers (proto names). */
  proto: JsonValue;
  protoAnswer: JsonValue;
}

const EXCEPTIONS: Record<string, Exception> = {
  secrets_store: {
    reason: "custom secrets and provider tokens are answered by name only (never a secret value)",
    rest: { custom_secrets: { S1: { secret: "s", description: "d" } } },
    restAnswer: { provider_tokens: {}, custom_secrets: { S1: { description: "d" } } },
    proto: { custom_secrets: { S1: { secret: "s", description: "d" } } },
    protoAnswer: { custom_secrets: { S1: { description: "d" } } },
  },
  mcp_config: {
    reason: "the reference's MCP model fills defaults; SHTTP timeout null is the message's 0",
    rest: {
      sse_servers: [{ url: "https://mcp.example.com/sse" }],
      shttp_servers: [{ url: "https://h.example" }],
    },
    restAnswer: {
      sse_servers: [{ url: "https://mcp.example.com/sse", api_key: null }],
      stdio_servers: [],
      shttp_servers: [{ url: "https://h.example", api_key: null, timeout: 60 }],
    },
    proto: {
      sse_servers: [{ url: "https://mcp.example.com/sse" }],
      shttp_servers: [{ url: "https://h.example" }],
    },
    protoAnswer: {
      sse_servers: [{ url: "https://mcp.example.com/sse" }],
      shttp_servers: [{ url: "https://h.example", timeout: 60 }],
    },
  },
};

/** A value of the field's type that differs from its default and passes its rule (if any), as REST JSON. */
function sample(f: DescField): JsonValue {
  if (f.fieldKind === "enum") {
    const v = f.enum.values.find((e) => e.number !== 0);
    if (v === undefined) throw new Error(`${f.name}: enum without values`);
    return v.name.slice(f.enum.sharedPrefix?.length ?? 0);
  }
  if (f.fieldKind !== "scalar") throw new Error(`${f.name}: add it to EXCEPTIONS with a reason and values`);
  switch (f.scalar) {
    case ScalarType.STRING:
      return `${f.name}-value`;
    case ScalarType.BOOL:
      return !(fieldFacts(f).defaultBool ?? false);
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return 2.5;
    case ScalarType.BYTES:
      throw new Error(`${f.name}: add it to EXCEPTIONS with a reason and values`);
    default:
      // Integers: above every rule's lower bound here (max_iterations >= 1, condenser_max_size >= 20).
      return 40;
  }
}

/** The field's protobuf JSON for a REST sample (enums by full name). */
function protoJson(f: DescField, rest: JsonValue): JsonValue {
  if (f.fieldKind !== "enum") return rest;
  return `${f.enum.sharedPrefix ?? ""}${rest as string}`.toUpperCase();
}

interface Case {
  field: DescField;
  rest: JsonValue;
  restAnswer: JsonValue;
  proto: JsonValue;
  protoAnswer: JsonValue | undefined;
}

const cases: Case[] = SettingsSchema.fields.map((field) => {
  const exception = EXCEPTIONS[field.name];
  if (exception !== undefined) return { field, ...exception };
  const rest = sample(field);
  const secret = fieldFacts(field).secret;
  return {
    field,
    rest,
    // Write-only secrets ((behavior).secret) are never answered.
    restAnswer: secret ? null : rest,
    proto: protoJson(field, rest),
    protoAnswer: secret ? undefined : protoJson(field, rest),
  };
});

let t: TestApp;
let g: ReturnType<typeof grpcClient>;
let n = 0;

beforeAll(async () => {
  t = await startTestApp();
  g = grpcClient(SettingsService, t.grpcAddress);
});
afterAll(async () => {
  g.close();
  await t.close();
});

/** The settings each RPC protocol answers for a key, as protobuf JSON with proto names. */
async function rpcAnswers(key: string): Promise<{ grpc: JsonObject; connect: JsonObject }> {
  const viaGrpc = await g.unary<GetSettingsResponse>("GetSettings", create(GetSettingsResponseSchema), key);
  const viaConnect = await connectClient(SettingsService, t.url, key).getSettings({});
  const json = (r: GetSettingsResponse) =>
    toJson(SettingsSchema, r.settings ?? create(SettingsSchema), { useProtoFieldName: true }) as JsonObject;
  return { grpc: json(viaGrpc), connect: json(viaConnect) };
}

/** What GET /api/settings answers, and the *_set flag of a write-only field if the response has one. */
async function restAnswer(key: string, c: Case): Promise<{ value: unknown; set: unknown }> {
  const got = await call(t.url, key, "GET", "/api/settings");
  expect(got.status, got.text).toBe(200);
  const body = got.body as Record<string, unknown>;
  expect(Object.hasOwn(body, c.field.name), `${c.field.name} missing from GET /api/settings`).toBe(true);
  return { value: body[c.field.name], set: body[`${c.field.name}_set`] };
}

async function expectReachable(key: string, c: Case): Promise<void> {
  const rest = await restAnswer(key, c);
  expect(rest.value, `REST answer of ${c.field.name}`).toEqual(c.restAnswer);
  if (fieldFacts(c.field).secret && rest.set !== undefined) expect(rest.set).toBe(true);
  const rpc = await rpcAnswers(key);
  expect(rpc.grpc[c.field.name], `gRPC answer of ${c.field.name}`).toEqual(c.protoAnswer);
  expect(rpc.connect[c.field.name], `Connect answer of ${c.field.name}`).toEqual(c.protoAnswer);
}

describe("every settings field is reachable over REST and RPC alike (walked from the descriptor)", () => {
  it("the REST model, the GET /api/settings answer and the RPC message hold the same fields", () => {
    const names = SettingsSchema.fields.map((f) => f.name);
    expect(settingsCodec.keys).toEqual(names);
    const props = Object.keys(
      (settingsCodec.model.jsonSchema() as { properties: Record<string, unknown> }).properties,
    );
    expect(props).toEqual(names);
    for (const name of Object.keys(EXCEPTIONS)) expect(names).toContain(name);
    for (const name of Object.keys(SETTINGS_RULES)) expect(names).toContain(name);
  });

  it.each(cases.map((c) => [c.field.name, c] as const))(
    "%s: stored over REST, answered by REST, gRPC and Connect",
    async (_name, c) => {
      const key = await t.keyFor(`reach-rest-${n++}`);
      const stored = await call(t.url, key, "POST", "/api/settings", { [c.field.name]: c.rest });
      expect(stored.status, stored.text).toBe(200);
      await expectReachable(key, c);
    },
  );

  it.each(cases.map((c) => [c.field.name, c] as const))(
    "%s: stored over gRPC and over Connect, answered by REST, gRPC and Connect",
    async (_name, c) => {
      const settings = fromJson(SettingsSchema, { [c.field.name]: c.proto });
      const viaGrpc = await t.keyFor(`reach-grpc-${n++}`);
      await g.unary("StoreSettings", create(StoreSettingsRequestSchema, { settings }), viaGrpc);
      await expectReachable(viaGrpc, c);
      const viaConnect = await t.keyFor(`reach-connect-${n++}`);
      await connectClient(SettingsService, t.url, viaConnect).storeSettings({ settings });
      await expectReachable(viaConnect, c);
    },
  );
});
