// The server's own time of a call, per protocol: Connect and gRPC calls in rpc_duration_seconds{protocol, method,
// code}, REST requests in http_request_duration_seconds{method, route, status}, each timed from its request head to
// the end of its answer; a gRPC call's time includes the event-loop iteration Node takes to send its status (the
// trailers) after its message. Besides, every call answered OK on each protocol in
// rpc_answer_duration_seconds{protocol, method}, timed from its handler to its answer handed to the transport (gRPC:
// its message, before the trailers).

import { Code, ConnectError } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SettingsService } from "../../src/gen/workspace/v1/settings_pb.js";
import { createGrpcServer, type GrpcListener, listenGrpc } from "../../src/transports/grpc/grpc-server.ts";
import { ConnectionGuard } from "../../src/transports/kit/connection-guard.ts";
import { bind } from "../../src/transports/kit/service-binding.ts";
import { connectClient, grpcClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

describe("call metrics per protocol", () => {
  let t: TestApp;
  let key: string;
  beforeAll(async () => {
    t = await startTestApp();
    key = await t.keyFor("timing");
  });
  afterAll(() => t.close());

  it("a REST, a Connect and a gRPC settings read each count once, the RPCs with their code", async () => {
    expect((await call(t.url, key, "POST", "/api/settings", { llm_model: "a/b" })).status).toBe(200);
    expect((await call(t.url, key, "GET", "/api/settings")).status).toBe(200);
    await connectClient(SettingsService, t.url, key).getSettings({});
    const g = grpcClient(SettingsService, t.grpcAddress);
    await g.unary("GetSettings", {}, key);
    await g.unary("GetSettings", {}, "wrong").catch(() => {});
    g.close();
    expect((await call(t.url, "wrong", "GET", "/api/settings")).status).toBe(401);
    const text = await (await fetch(`${t.url}/metrics`, { headers: { "x-session-api-key": key } })).text();
    const count = (protocol: string, code: string) =>
      Number(
        new RegExp(
          `^rpc_duration_seconds_count\\{protocol="${protocol}",method="workspace.v1.SettingsService/GetSettings",code="${code}"\\} (\\d+)$`,
          "m",
        ).exec(text)?.[1] ?? 0,
      );
    expect([count("connect", "OK"), count("grpc", "OK"), count("grpc", "Unauthenticated")]).toEqual([
      1, 1, 1,
    ]);
    expect(text).toMatch(
      /^http_request_duration_seconds_count\{method="GET",route="\/api\/settings",status="200"\} 1$/m,
    );
    expect(text).toMatch(
      /^http_request_duration_seconds_count\{method="GET",route="\/api\/settings",status="401"\} 1$/m,
    );
    const answered = (protocol: string, method: string) =>
      Number(
        new RegExp(
          `^rpc_answer_duration_seconds_count\\{protocol="${protocol}",method="workspace.v1.SettingsService/${method}"\\} (\\d+)$`,
          "m",
        ).exec(text)?.[1] ?? 0,
      );
    // The refused calls (a wrong key) have no answer of their handler.
    expect([
      answered("rest", "GetSettings"),
      answered("rest", "StoreSettings"),
      answered("connect", "GetSettings"),
      answered("grpc", "GetSettings"),
    ]).toEqual([1, 1, 1, 1]);
  });
});

describe("a gRPC call is timed to its status", () => {
  const busy = (ms: number) => {
    const end = performance.now() + ms;
    while (performance.now() < end);
  };
  let listener: GrpcListener;
  const observed: { method: string; code: string; seconds: number }[] = [];
  const answered: { method: string; seconds: number }[] = [];
  beforeAll(async () => {
    const guard = new ConnectionGuard({ maxConnections: 10, firstRequestTimeoutMs: 10_000 });
    // GetSettings answers at once; every other method answers UNIMPLEMENTED.
    const impl: Record<string, () => unknown> = Object.fromEntries(
      SettingsService.methods.map((m) => [
        m.localName,
        () => {
          throw new ConnectError("not here", Code.Unimplemented);
        },
      ]),
    );
    impl.getSettings = () => {
      // The answer is written by Node's http2 session in this iteration's check phase, after which this immediate
      // holds the event loop; the trailers can only go out in the next iteration, after it.
      setImmediate(() => busy(120));
      return {};
    };
    const server = createGrpcServer({
      bindings: [bind(SettingsService, impl as never)],
      admission: () => ({ userId: "u", keyId: "k" }),
      maxMessageBytes: 1024,
      onCall: (method, code, seconds) => observed.push({ method, code, seconds }),
      onAnswer: (method, seconds) => answered.push({ method, seconds }),
      onCallStart: (peer) => guard.beginPeer(peer),
    });
    listener = await listenGrpc(server, "127.0.0.1", 0, guard);
  });
  afterAll(() => listener.close(100));

  it("includes the event-loop iteration between the answer's message and its trailers", async () => {
    const g = grpcClient(SettingsService, `127.0.0.1:${listener.port}`);
    await g.unary("GetSettings", {}, "k");
    g.close();
    expect(observed).toHaveLength(1);
    expect(observed[0]?.method).toBe("workspace.v1.SettingsService/GetSettings");
    expect(observed[0]?.code).toBe("OK");
    // Timed from the handler to its answer, the call took well under a millisecond; to its status, past the 120 ms
    // the loop was held between the two.
    expect(observed[0]?.seconds).toBeGreaterThanOrEqual(0.12);
    // Its answer, the message, was written before the loop was held.
    expect(answered.map((a) => a.method)).toEqual(["workspace.v1.SettingsService/GetSettings"]);
    expect(answered[0]?.seconds).toBeLessThan(0.12);
  });

  it("counts a call the server answers with an error status by that status", async () => {
    observed.length = 0;
    const g = grpcClient(SettingsService, `127.0.0.1:${listener.port}`);
    const err = (await g.unary("StoreSettings", {}, "k").catch((e: unknown) => e)) as grpc.ServiceError;
    g.close();
    expect(err.code).toBe(grpc.status.UNIMPLEMENTED);
    expect(observed.map((o) => [o.method, o.code])).toEqual([
      ["workspace.v1.SettingsService/StoreSettings", "Unimplemented"],
    ]);
    expect(answered).toHaveLength(1); // the OK call of the test before only
  });
});
