import { create, fromBinary } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import type * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BadRequestSchema } from "../../src/gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../../src/gen/google/rpc/status_pb.js";
import { SecretsService } from "../../src/gen/workspace/v1/secrets_pb.js";
import {
  type GetSettingsResponse,
  SettingsService,
  StoreSettingsRequestSchema,
} from "../../src/gen/workspace/v1/settings_pb.js";
import { connectClient, grpcClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

let t: TestApp;
let key: string;
let g: ReturnType<typeof grpcClient>;

beforeAll(async () => {
  t = await startTestApp();
  key = await t.keyFor("rpc-user");
  g = grpcClient(SettingsService, t.grpcAddress);
});
afterAll(async () => {
  g.close();
  await t.close();
});

describe("gRPC (@grpc/grpc-js client → HTTP/2 listener)", () => {
  it("UNAUTHENTICATED without a key or with a bad one", async () => {
    for (const k of [undefined, "nope"]) {
      await expect(g.unary("GetSettings", {}, k)).rejects.toMatchObject({ code: Code.Unauthenticated });
    }
  });

  it("NOT_FOUND before the first store, then StoreSettings/GetSettings round trip; same data over REST", async () => {
    await expect(g.unary("GetSettings", {}, key)).rejects.toMatchObject({
      code: Code.NotFound,
      details: "Settings not found",
    });
    const req = create(StoreSettingsRequestSchema, {
      settings: {
        language: "de",
        llmApiKey: "grpc-secret",
        maxIterations: 7,
        enableSoundNotifications: true,
      },
    });
    const stored = await g.unary<{ message: string }>("StoreSettings", req, key);
    expect(stored.message).toBe("Settings stored");
    const got = await g.unary<GetSettingsResponse>("GetSettings", {}, key);
    expect(got.settings?.language).toBe("de");
    expect(got.settings?.maxIterations).toBe(7);
    expect(got.settings?.llmApiKey).toBeUndefined();
    expect(got.llmApiKeySet).toBe(true);
    expect(got.settings?.enableDefaultCondenser).toBe(true);
    const rest = await call(t.url, key, "GET", "/api/settings");
    expect(rest.body).toMatchObject({
      language: "de",
      max_iterations: 7,
      llm_api_key_set: true,
      enable_sound_notifications: true,
    });
  });

  it("reset_fields resets to defaults; unknown names are INVALID_ARGUMENT with BadRequest field violations", async () => {
    await g.unary("StoreSettings", create(StoreSettingsRequestSchema, { resetFields: ["language"] }), key);
    expect((await g.unary<GetSettingsResponse>("GetSettings", {}, key)).settings?.language).toBeUndefined();
    const err = (await g
      .unary(
        "StoreSettings",
        create(StoreSettingsRequestSchema, { resetFields: ["nope"], settings: { condenserMaxSize: 3 } }),
        key,
      )
      .catch((e: unknown) => e)) as grpc.ServiceError;
    expect(err.code).toBe(Code.InvalidArgument);
    const bin = err.metadata.get("grpc-status-details-bin")[0] as Buffer;
    const status = fromBinary(StatusSchema, bin);
    const badRequest = anyUnpack(status.details[0]!, BadRequestSchema);
    expect(badRequest?.fieldViolations.map((v) => v.field)).toEqual([
      "reset_fields[0]",
      "condenser_max_size",
    ]);
  });

  it("validates MCP config sent over gRPC with the same rules as REST", async () => {
    const err = (await g
      .unary(
        "StoreSettings",
        create(StoreSettingsRequestSchema, {
          settings: {
            mcpConfig: { sseServers: [{ url: "gopher://x" }], stdioServers: [{ name: "a b", command: "x" }] },
          },
        }),
        key,
      )
      .catch((e: unknown) => e)) as grpc.ServiceError;
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.details).toContain("mcp_config.sse_servers[0].url");
    expect(err.details).toContain("mcp_config.stdio_servers[0].name");
  });
});

describe("Connect and gRPC-Web (connect-node clients → HTTP/1.1 listener)", () => {
  it("Connect: same service, same data, same auth", async () => {
    const c = connectClient(SettingsService, t.url, key);
    const got = await c.getSettings({});
    expect(got.llmApiKeySet).toBe(true);
    const bad = connectClient(SettingsService, t.url, "wrong");
    await expect(bad.getSettings({})).rejects.toMatchObject({ code: Code.Unauthenticated });
  });

  it("Connect: INVALID_ARGUMENT carries BadRequest details", async () => {
    const c = connectClient(SettingsService, t.url, key);
    const err = ConnectError.from(await c.storeSettings({ resetFields: ["bogus"] }).catch((e: unknown) => e));
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.findDetails(BadRequestSchema)[0]?.fieldViolations[0]?.field).toBe("reset_fields[0]");
  });

  it("gRPC-Web: secrets CRUD with ALREADY_EXISTS and NOT_FOUND", async () => {
    const s = connectClient(SecretsService, t.url, key, "grpc-web");
    expect((await s.createSecret({ name: "RPC", value: "v" })).message).toBe("Secret created successfully");
    await expect(s.createSecret({ name: "RPC", value: "v" })).rejects.toMatchObject({
      code: Code.AlreadyExists,
    });
    expect((await s.listSecrets({})).customSecrets.map((x) => x.name)).toEqual(["RPC"]);
    await expect(s.deleteSecret({ secretId: "none" })).rejects.toMatchObject({ code: Code.NotFound });
  });
});
