import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fromBinary } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SettingsService } from "../../src/gen/workspace/v1/settings_pb.js";
import { grpcClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

let t: TestApp;
let key: string;
beforeAll(async () => {
  t = await startTestApp();
  key = await t.keyFor("obs");
});
afterAll(async () => {
  await t.close();
});

interface ReflectionResponse {
  listServicesResponse?: { service: { name: string }[] };
  fileDescriptorResponse?: { fileDescriptorProto: Buffer[] };
  errorResponse?: { errorCode: number; errorMessage: string };
}

/** A gRPC reflection client (grpc.reflection.v1, or v1alpha), as grpcurl uses. */
function reflectionClient(address: string, version: "v1" | "v1alpha" = "v1") {
  const protoPath = join(
    dirname(createRequire(import.meta.url).resolve("@grpc/reflection/package.json")),
    `build/proto/grpc/reflection/${version}/reflection.proto`,
  );
  const def = protoLoader.loadSync(protoPath, { keepCase: false, longs: String, defaults: false });
  const pkg = grpc.loadPackageDefinition(def) as unknown as {
    grpc: {
      reflection: Record<
        "v1" | "v1alpha",
        {
          ServerReflection: new (
            a: string,
            c: grpc.ChannelCredentials,
          ) => grpc.Client & { ServerReflectionInfo(): grpc.ClientDuplexStream<unknown, ReflectionResponse> };
        }
      >;
    };
  };
  return new pkg.grpc.reflection[version].ServerReflection(address, grpc.credentials.createInsecure());
}

/** One reflection request on a new stream: its first answer. */
function reflect(address: string, request: Record<string, string>): Promise<ReflectionResponse> {
  const client = reflectionClient(address);
  return new Promise((resolve, reject) => {
    const stream = client.ServerReflectionInfo();
    stream.on("data", (m: ReflectionResponse) => {
      resolve(m);
      stream.end();
      client.close();
    });
    stream.on("error", reject);
    stream.write(request);
  });
}

describe("gRPC reflection", () => {
  it("lists every service without the proto files", async () => {
    const r = await reflect(t.grpcAddress, { listServices: "*" });
    const names = r.listServicesResponse?.service.map((s) => s.name) ?? [];
    for (const s of [
      "workspace.v1.SettingsService",
      "workspace.v1.SecretsService",
      "workspace.v1.SandboxService",
      "workspace.v1.SandboxSpecService",
    ]) {
      expect(names).toContain(s);
    }
  });

  it("describes a service: the file containing it, with its methods and dependencies", async () => {
    const r = await reflect(t.grpcAddress, { fileContainingSymbol: "workspace.v1.SettingsService" });
    const files = (r.fileDescriptorResponse?.fileDescriptorProto ?? []).map((b) =>
      fromBinary(FileDescriptorProtoSchema, b),
    );
    const settings = files.find((f) => f.name === "workspace/v1/settings.proto");
    expect(settings?.service[0]?.method.map((m) => m.name)).toEqual([
      "GetSettings",
      "StoreSettings",
      "AddGitProviders",
      "UnsetProviderTokens",
    ]);
    expect(files.map((f) => f.name)).toContain("workspace/v1/mcp.proto");
  });

  it("answers v1alpha too, and every request of a stream sent before the first answer, in order", async () => {
    const fresh = await startTestApp(); // reflection not loaded yet: the first requests wait for it
    try {
      for (const version of ["v1alpha", "v1"] as const) {
        const client = reflectionClient(fresh.grpcAddress, version);
        const answers = await new Promise<ReflectionResponse[]>((resolve, reject) => {
          const got: ReflectionResponse[] = [];
          const stream = client.ServerReflectionInfo();
          stream.on("data", (m: ReflectionResponse) => got.push(m));
          stream.on("end", () => resolve(got));
          stream.on("error", reject);
          stream.write({ listServices: "*" });
          stream.write({ fileByFilename: "workspace/v1/settings.proto" });
          stream.write({ fileContainingSymbol: "no.such.Symbol" });
          stream.end();
        });
        client.close();
        expect(answers).toHaveLength(3);
        expect(answers[0]?.listServicesResponse?.service.map((s) => s.name)).toContain(
          "workspace.v1.SettingsService",
        );
        expect(answers[1]?.fileDescriptorResponse?.fileDescriptorProto.length).toBeGreaterThan(0);
        expect(answers[2]?.errorResponse?.errorCode).toBe(5); // NOT_FOUND
      }
    } finally {
      await fresh.close();
    }
  });
});

describe("metrics, readiness, request ids", () => {
  it("/metrics counts REST requests by route and status, RPCs by method and code, sandboxes by status, storage latency", async () => {
    await call(t.url, key, "GET", "/api/settings");
    await call(t.url, "bad", "GET", "/api/settings");
    const g = grpcClient(SettingsService, t.grpcAddress);
    await g.unary("GetSettings", {}, key).catch(() => {});
    g.close();
    const res = await fetch(`${t.url}/metrics`, { headers: { "x-session-api-key": key } });
    expect(res.headers.get("content-type")).toContain("text/plain");
    const text = await res.text();
    expect(text).toMatch(/http_requests_total\{method="GET",route="\/api\/settings",status="404"\} 1/);
    expect(text).toMatch(/http_requests_total\{method="GET",route="\/api\/settings",status="401"\} 1/);
    expect(text).toMatch(
      /http_request_duration_seconds_bucket\{le="0.005",method="GET",route="\/api\/settings",status="404"\}/,
    );
    expect(text).toMatch(
      /rpc_requests_total\{protocol="grpc",method="workspace.v1.SettingsService\/GetSettings",code="NotFound"\} 1/,
    );
    expect(text).toMatch(/sandboxes\{status="RUNNING"\} 0/);
    expect(text).toMatch(
      /storage_operation_duration_seconds_count\{operation="userData.get",outcome="ok"\} \d+/,
    );
    expect(text).toContain("process_resident_memory_bytes");
  });

  it("/metrics counts start-task state changes and unfinished tasks by status", async () => {
    const r = await call(t.url, key, "POST", "/api/v1/app-conversations", { llm_model: "openai/test-model" });
    const id = (r.body as { id: string }).id;
    for (let i = 0; i < 400; i++) {
      const task = (
        (await call(t.url, key, "GET", `/api/v1/app-conversations/start-tasks?ids=${id}`)).body as {
          status: string;
        }[]
      )[0];
      if (task?.status === "READY" || task?.status === "ERROR") break;
      await new Promise((res) => setTimeout(res, 25));
    }
    const text = await (await fetch(`${t.url}/metrics`, { headers: { "x-session-api-key": key } })).text();
    for (const status of ["WAITING_FOR_SANDBOX", "PREPARING_REPOSITORY", "STARTING_CONVERSATION", "READY"]) {
      expect(text).toMatch(new RegExp(`start_task_transitions_total\\{status="${status}"\\} 1`));
    }
    expect(text).toContain("# TYPE start_tasks_in_progress gauge");
    expect(text).toMatch(
      /storage_operation_duration_seconds_count\{operation="startTasks.update",outcome="ok"\} \d+/,
    );
  });

  it("/ready checks storage and runtime, separately from /alive; 503 when storage is gone", async () => {
    const ready = await call(t.url, undefined, "GET", "/ready");
    expect(ready).toMatchObject({ status: 200, body: { status: "ready", storage: "ok", runtime: "ok" } });
    const other = await startTestApp();
    await other.storage.close(); // storage goes away behind the server
    const notReady = await call(other.url, undefined, "GET", "/ready");
    expect(notReady.status).toBe(503);
    expect((notReady.body as { storage: string }).storage).toMatch(/^unavailable/);
    expect((await call(other.url, undefined, "GET", "/alive")).status).toBe(200);
    await other.app.http.close();
    other.app.grpc.forceShutdown();
  });

  it("echoes x-request-id, or generates one", async () => {
    const given = await fetch(`${t.url}/alive`, { headers: { "x-request-id": "req-abc-123" } });
    expect(given.headers.get("x-request-id")).toBe("req-abc-123");
    const generated = await fetch(`${t.url}/alive`);
    expect(generated.headers.get("x-request-id")).toBeTruthy();
  });
});

describe("/metrics, /docs and /openapi.json: who reads them, on which port", () => {
  const TOKEN = "metrics-token-0123456789";
  it("on the HTTP port (default): /metrics wants an API key or the metrics token; the documents are public", async () => {
    const app = await startTestApp({ admin: { metricsToken: TOKEN } });
    try {
      const k = await app.keyFor("reader");
      const none = await fetch(`${app.url}/metrics`);
      expect(none.status).toBe(401);
      expect(await none.json()).toEqual({ detail: "Unauthorized" });
      const wrong = await fetch(`${app.url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}x` } });
      expect(wrong.status).toBe(401);
      expect((await fetch(`${app.url}/metrics`, { headers: { "x-session-api-key": k } })).status).toBe(200);
      const byToken = await fetch(`${app.url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
      expect(byToken.status).toBe(200);
      expect(await byToken.text()).toContain("http_requests_total");
      expect((await fetch(`${app.url}/openapi.json`)).status).toBe(200);
    } finally {
      await app.close();
    }
  });

  it("with an admin port, the HTTP port answers 404 for all three and the admin listener serves them", async () => {
    const app = await startTestApp({ admin: { port: 0, metricsToken: TOKEN } });
    try {
      const k = await app.keyFor("reader");
      for (const path of ["/metrics", "/openapi.json", "/docs"]) {
        const r = await fetch(`${app.url}${path}`, { headers: { "x-session-api-key": k } });
        expect(r.status, path).toBe(404);
        expect(await r.json()).toEqual({ detail: "Not Found" });
      }
      const admin = app.adminUrl ?? "";
      expect(admin).not.toBe("");
      expect((await fetch(`${admin}/metrics`)).status).toBe(401); // the token is the way in when set
      expect((await fetch(`${admin}/metrics`, { headers: { "x-session-api-key": k } })).status).toBe(401);
      const m = await fetch(`${admin}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
      expect(m.status).toBe(200);
      expect(await m.text()).toContain("http_requests_total");
      expect((await fetch(`${admin}/openapi.json`)).status).toBe(200);
      expect((await fetch(`${admin}/docs`, { redirect: "follow" })).status).toBe(200);
      expect((await fetch(`${admin}/api/settings`)).status).toBe(404);
    } finally {
      await app.close();
    }
  });
});

describe("REST access log", () => {
  it("writes one line per request with the request id, as a request child logger would", async () => {
    const lines: Record<string, unknown>[] = [];
    const logged = await startTestApp({
      logger: { level: "info", stream: { write: (line: string) => lines.push(JSON.parse(line)) } },
    });
    try {
      const k = await logged.keyFor("rest-obs");
      const res = await fetch(`${logged.url}/api/settings`, {
        method: "POST",
        headers: { "x-session-api-key": k, "content-type": "application/json", "x-request-id": "rest-1" },
        body: JSON.stringify({ language: "fr" }),
      });
      expect(res.status).toBe(200);
      const mine = lines.filter((l) => l.reqId === "rest-1");
      expect(mine).toHaveLength(1);
      expect(mine[0]).toMatchObject({
        level: 30,
        msg: "request completed",
        method: "POST",
        url: "/api/settings",
        route: "/api/settings",
        statusCode: 200,
      });
      expect(Object.keys(mine[0] ?? {}).slice(0, 5)).toEqual(["level", "time", "pid", "hostname", "reqId"]);
      expect(typeof mine[0]?.ms).toBe("number");
    } finally {
      await logged.close();
    }
  });
});

describe("Connect calls on the HTTP port", () => {
  it("get request ids, one access-log line each and the HTTP and RPC metrics, as REST requests do", async () => {
    const lines: Record<string, unknown>[] = [];
    const logged = await startTestApp({
      logger: { level: "info", stream: { write: (line: string) => lines.push(JSON.parse(line)) } },
    });
    try {
      const k = await logged.keyFor("connect-obs");
      const path = "/workspace.v1.SettingsService/GetSettings";
      const post = (headers: Record<string, string>) =>
        fetch(`${logged.url}${path}`, {
          method: "POST",
          headers: { "content-type": "application/json", ...headers },
          body: "{}",
        });
      const given = await post({ "x-session-api-key": k, "x-request-id": "conn-1" });
      expect(given.status).toBe(404); // no settings stored yet: NotFound
      expect(await given.json()).toMatchObject({ code: "not_found" });
      expect(given.headers.get("x-request-id")).toBe("conn-1");
      const a = await post({ "x-session-api-key": "wrong" });
      const b = await post({ "x-session-api-key": "wrong" });
      expect(a.status).toBe(401);
      expect(a.headers.get("x-request-id")).toMatch(/^req-/);
      expect(a.headers.get("x-request-id")).not.toBe(b.headers.get("x-request-id"));

      const text = await (
        await fetch(`${logged.url}/metrics`, {
          headers: { "x-session-api-key": await logged.keyFor("metrics-reader") },
        })
      ).text();
      expect(text).toContain(`http_requests_total{method="POST",route="${path}",status="404"} 1`);
      expect(text).toContain(`http_requests_total{method="POST",route="${path}",status="401"} 2`);
      expect(text).toContain(
        'rpc_requests_total{protocol="connect",method="workspace.v1.SettingsService/GetSettings",code="NotFound"} 1',
      );
      expect(text).toContain(
        'rpc_requests_total{protocol="connect",method="workspace.v1.SettingsService/GetSettings",code="Unauthenticated"} 2',
      );
      const line = lines.find((l) => l.reqId === "conn-1");
      expect(line).toMatchObject({ msg: "request completed", route: path, statusCode: 404, method: "POST" });
      // An unknown path is not an RPC: Fastify answers it, in the REST error shape.
      const unknown = await fetch(`${logged.url}/workspace.v1.SettingsService/NoSuchMethod`, {
        method: "POST",
        body: "{}",
      });
      expect(unknown.status).toBe(404);
      expect(await unknown.json()).toStrictEqual({ detail: "Not Found" });
    } finally {
      await logged.close();
    }
  });
});
