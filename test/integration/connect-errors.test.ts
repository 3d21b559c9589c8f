// Connect errors are JSON Connect errors with a 4xx status for every client fault (wrong HTTP method, content type,
// corrupt compressed or binary bodies), and internal errors are masked the same way on Connect, gRPC-Web, gRPC and
// REST (the cause goes to the log, never to the client).

import { gzipSync } from "node:zlib";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import Fastify, { type FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SecretsService } from "../../src/gen/workspace/v1/secrets_pb.js";
import { connectPlugin } from "../../src/transports/connect/connect-plugin.ts";
import { createGrpcServer, type GrpcListener, listenGrpc } from "../../src/transports/grpc/grpc-server.ts";
import { headerKeyOf } from "../../src/transports/kit/browser-session.ts";
import { ConnectionGuard } from "../../src/transports/kit/connection-guard.ts";
import { bind } from "../../src/transports/kit/service-binding.ts";
import { toRestError } from "../../src/transports/rest/rest-errors.ts";
import { grpcClient } from "../helpers/rpc-clients.ts";
import { startTestApp, type TestApp } from "../helpers/test-app.ts";

describe("Connect client faults answer JSON Connect errors with a 4xx status", () => {
  let t: TestApp;
  let key: string;
  beforeAll(async () => {
    t = await startTestApp();
    key = await t.keyFor("errors");
  });
  afterAll(() => t.close());

  const expectConnectError = async (res: Response, status: number, code: string) => {
    const text = await res.text();
    expect(res.status, text).toBe(status);
    expect(res.headers.get("content-type")).toBe("application/json");
    const body = JSON.parse(text) as { code: string; message: string };
    expect(body.code).toBe(code);
    expect(body.message.length).toBeGreaterThan(0);
    return body;
  };

  it("405 for an HTTP method the RPC does not take, 415 for a content type it does not speak", async () => {
    const path = `${t.url}/workspace.v1.SettingsService/StoreSettings`;
    const headers = { "x-session-api-key": key };
    const get = await fetch(`${path}?encoding=json&message=%7B%7D`, { headers });
    const body = await expectConnectError(get, 405, "invalid_argument");
    expect(body.message).toMatch(/POST/);
    expect(get.headers.get("allow")).toBe("POST");
    await expectConnectError(
      await fetch(path, { method: "PUT", headers, body: "{}" }),
      405,
      "invalid_argument",
    );
    await expectConnectError(await fetch(path, { method: "DELETE", headers }), 405, "invalid_argument");
    for (const contentType of ["text/plain", "application/xml", "application/json; charset=latin1", ""]) {
      const res = await fetch(path, {
        method: "POST",
        headers: { ...headers, "content-type": contentType },
        body: "{}",
      });
      await expectConnectError(res, 415, "invalid_argument");
    }
    // A unary content type on a streaming method, and the other way round.
    const watch = await fetch(`${t.url}/workspace.v1.SandboxService/WatchSandboxes`, {
      method: "POST",
      headers: { ...headers, "content-type": "application/json" },
      body: "{}",
    });
    await expectConnectError(watch, 415, "invalid_argument");
    const unaryAsStream = await fetch(path, {
      method: "POST",
      headers: { ...headers, "content-type": "application/connect+json" },
      body: "{}",
    });
    await expectConnectError(unaryAsStream, 415, "invalid_argument");
  });

  it("400 invalid_argument for a truncated gzip body, a corrupt brotli body and an undecodable binary message", async () => {
    const path = `${t.url}/workspace.v1.SettingsService/StoreSettings`;
    const gz = gzipSync(JSON.stringify({ settings: { language: "fr" } }));
    for (const [encoding, body] of [
      ["gzip", gz.subarray(0, gz.length - 6)],
      ["gzip", Buffer.from("not gzip at all")],
      ["br", Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff])],
    ] as const) {
      const res = await fetch(path, {
        method: "POST",
        headers: {
          "x-session-api-key": key,
          "content-type": "application/json",
          "content-encoding": encoding,
        },
        body,
      });
      await expectConnectError(res, 400, "invalid_argument");
    }
    const binary = await fetch(path, {
      method: "POST",
      headers: { "x-session-api-key": key, "content-type": "application/proto" },
      body: new Uint8Array([0x0a, 0xff, 0x01]),
    });
    await expectConnectError(binary, 400, "invalid_argument");
    // connect-node's own client sees the same code.
    const client = createClient(
      SecretsService,
      createConnectTransport({ baseUrl: t.url, httpVersion: "1.1", useBinaryFormat: true }),
    );
    const err = await client.listSecrets({}, { headers: { "x-session-api-key": "nope" } }).catch((e) => e);
    expect(ConnectError.from(err).code).toBe(Code.Unauthenticated);
    // Nothing was stored by any of these.
    expect(await t.storage.userData.get("errors")).toBeNull();
  });
});

describe("internal errors are masked the same way on every protocol", () => {
  const SECRET = "database password is hunter2";
  const logged: unknown[] = [];
  const binding = bind(SecretsService, {
    listSecrets() {
      throw new Error(SECRET);
    },
    createSecret() {
      throw new ConnectError(SECRET, Code.Internal);
    },
    updateSecret() {
      throw new ConnectError("no such secret", Code.NotFound);
    },
    deleteSecret() {
      return { $typeName: "workspace.v1.DeleteSecretResponse" } as never;
    },
  });
  let http: FastifyInstance;
  let grpcListener: GrpcListener;
  let baseUrl: string;
  beforeAll(async () => {
    const admission = () => ({ userId: "u", keyId: "k" });
    http = Fastify();
    await http.register(
      connectPlugin({
        bindings: [binding],
        admission,
        keyOf: headerKeyOf,
        maxMessageBytes: 1024,
        onCall: () => {},
        onError: (err) => logged.push(err),
        shutdownTimeoutMs: 100,
      }),
    );
    await http.listen({ host: "127.0.0.1", port: 0 });
    baseUrl = `http://127.0.0.1:${(http.server.address() as { port: number }).port}`;
    const guard = new ConnectionGuard({ maxConnections: 100, firstRequestTimeoutMs: 10_000 });
    const server = createGrpcServer({
      bindings: [binding],
      admission,
      maxMessageBytes: 1024,
      onError: (err) => logged.push(err),
      onCallStart: (peer) => guard.beginPeer(peer),
    });
    grpcListener = await listenGrpc(server, "127.0.0.1", 0, guard);
  });
  afterAll(async () => {
    await http.close();
    await grpcListener.close(100);
  });

  it("Connect, gRPC-Web, gRPC and REST answer INTERNAL with a generic message and log the cause", async () => {
    for (const transport of [
      createConnectTransport({ baseUrl, httpVersion: "1.1" }),
      createGrpcWebTransport({ baseUrl, httpVersion: "1.1" }),
    ]) {
      const client = createClient(SecretsService, transport);
      for (const call of [
        () => client.listSecrets({}),
        () => client.createSecret({ name: "a", value: "b" }),
      ]) {
        const err = ConnectError.from(await call().catch((e: unknown) => e));
        expect(err.code).toBe(Code.Internal);
        expect(err.rawMessage).toBe("Internal Server Error");
      }
      // Client-facing errors pass unchanged.
      const nf = ConnectError.from(await client.updateSecret({ name: "x" }).catch((e: unknown) => e));
      expect([nf.code, nf.rawMessage]).toEqual([Code.NotFound, "no such secret"]);
    }
    const g = grpcClient(SecretsService, `127.0.0.1:${grpcListener.port}`);
    for (const method of ["ListSecrets", "CreateSecret"]) {
      const err = (await g.unary(method, {}, "k").catch((e: unknown) => e)) as grpc.ServiceError;
      expect(err.code).toBe(grpc.status.INTERNAL);
      expect(err.details).toBe("Internal Server Error");
    }
    g.close();
    for (const dialect of ["v1", "legacy"] as const) {
      expect(toRestError(new Error(SECRET), dialect)).toEqual({
        status: 500,
        body: { detail: "Internal Server Error" },
      });
      expect(toRestError(new ConnectError(SECRET, Code.Internal), dialect).body).toEqual({
        detail: "Internal Server Error",
      });
    }
    expect(logged.length).toBe(6); // 2 per protocol, with their causes
    expect(logged.every((e) => String(e).includes(SECRET))).toBe(true);
  });
});
