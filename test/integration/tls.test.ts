/**
 * The server serving TLS itself (AppDeps.tls; TLS_CERT_FILE / TLS_KEY_FILE): REST, Connect and gRPC over TLS, plain
 * HTTP and cleartext gRPC refused, the browser session cookie `__Host-` and Secure, and sandboxes' webhooks on a
 * plain-HTTP loopback listener that serves nothing else.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SettingsService } from "../../src/gen/workspace/v1/settings_pb.js";
import { grpcServiceDefinition } from "../../src/transports/grpc/grpc-server.ts";
import { SECURE_SESSION_COOKIE } from "../../src/transports/kit/browser-session.ts";
import { type FakeLlm, startFakeLlm } from "../helpers/fake-llm.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

const opensslMissing = spawnSync("openssl", ["version"]).error !== undefined;
if (opensslMissing)
  console.warn(
    "tls.test.ts skipped: the openssl command is missing (it makes the test's self-signed certificate)",
  );

/** A self-signed certificate for localhost and 127.0.0.1, made with openssl in `dir`. */
function selfSigned(dir: string): { cert: Buffer; key: Buffer } {
  const r = spawnSync(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-keyout",
      join(dir, "k.pem"),
      "-out",
      join(dir, "c.pem"),
      "-days",
      "1",
      "-subj",
      "/CN=localhost",
      "-addext",
      "subjectAltName=DNS:localhost,IP:127.0.0.1",
    ],
    { encoding: "utf8" },
  );
  if (r.status !== 0) throw new Error(`openssl failed: ${r.stderr}`);
  return { cert: readFileSync(join(dir, "c.pem")), key: readFileSync(join(dir, "k.pem")) };
}

const FIRST_REQUEST_TIMEOUT_MS = 1_000;

interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  body: unknown;
}

describe.skipIf(opensslMissing)("a server serving TLS itself", () => {
  let dir = "";
  let ca: Buffer;
  let t: TestApp;
  let key: string;
  let llm: FakeLlm;

  /** A request over https trusting only the test's certificate. */
  const https = (
    method: string,
    path: string,
    headers: Record<string, string> = {},
    body?: unknown,
    agent?: HttpsAgent,
  ): Promise<Reply & { reusedSocket: boolean }> =>
    new Promise((resolve, reject) => {
      const url = new URL(path, t.url);
      const payload = body === undefined ? undefined : JSON.stringify(body);
      const req = httpsRequest(
        {
          host: url.hostname,
          port: url.port,
          method,
          path: `${url.pathname}${url.search}`,
          ca,
          ...(agent === undefined ? {} : { agent }),
          headers: { ...(payload === undefined ? {} : { "content-type": "application/json" }), ...headers },
        },
        (res) => {
          let text = "";
          res.setEncoding("utf8");
          res.on("data", (c: string) => {
            text += c;
          });
          res.on("end", () => {
            let parsed: unknown = text;
            try {
              parsed = JSON.parse(text);
            } catch {
              // not JSON
            }
            resolve({
              status: res.statusCode ?? 0,
              headers: res.headers,
              text,
              body: parsed,
              reusedSocket: req.reusedSocket,
            });
          });
        },
      );
      req.on("error", reject);
      req.end(payload);
    });

  const grpcSettings = (credentials: grpc.ChannelCredentials) => {
    const Ctor = grpc.makeGenericClientConstructor(grpcServiceDefinition(SettingsService), "SettingsService");
    return new Ctor(t.grpcAddress, credentials) as unknown as grpc.Client & {
      GetSettings(
        req: unknown,
        md: grpc.Metadata,
        options: grpc.CallOptions,
        cb: (err: grpc.ServiceError | null, res: unknown) => void,
      ): void;
    };
  };
  const getSettings = (client: ReturnType<typeof grpcSettings>): Promise<unknown> =>
    new Promise((resolve, reject) => {
      const md = new grpc.Metadata();
      md.set("x-session-api-key", key);
      client.GetSettings({}, md, { deadline: Date.now() + 10_000 }, (err, res) =>
        err ? reject(err) : resolve(res),
      );
    });

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "aws-tls-"));
    const tls = selfSigned(dir);
    ca = tls.cert;
    // A short first-request timeout: the keep-alive test waits past it.
    t = await startTestApp({ tls, limits: { headersTimeoutMs: FIRST_REQUEST_TIMEOUT_MS } });
    key = (await t.app.keys.issue("alice")).key;
    llm = await startFakeLlm();
    // A user has settings once stored (GetSettings is NOT_FOUND before).
    const stored = await https(
      "POST",
      "/api/settings",
      { "x-session-api-key": key },
      { agent: "CodeActAgent" },
    );
    expect(stored.status).toBe(200);
  });
  afterAll(async () => {
    await t?.close();
    await llm?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("serves REST over https", async () => {
    expect(t.url.startsWith("https://127.0.0.1:")).toBe(true);
    expect((await https("GET", "/alive")).body).toEqual({ status: "ok" });
    const r = await https("GET", "/api/settings", { "x-session-api-key": key });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ agent: "CodeActAgent" });
  });

  it("keeps a TLS connection that has served a request open past the first-request timeout", async () => {
    const agent = new HttpsAgent({ keepAlive: true, ca, maxSockets: 1 });
    try {
      expect((await https("GET", "/alive", {}, undefined, agent)).reusedSocket).toBe(false);
      await new Promise((r) => setTimeout(r, FIRST_REQUEST_TIMEOUT_MS * 1.5));
      const again = await https("GET", "/alive", {}, undefined, agent);
      expect(again.status).toBe(200);
      expect(again.reusedSocket).toBe(true);
    } finally {
      agent.destroy();
    }
  });

  it("refuses plain HTTP on the HTTPS port", async () => {
    const plainUrl = t.url.replace(/^https:/, "http:");
    await expect(fetch(`${plainUrl}/alive`)).rejects.toThrow();
  });

  it("refuses a client that does not trust the certificate", async () => {
    // Global fetch trusts only the system's CAs, not the self-signed certificate.
    await expect(fetch(`${t.url}/alive`)).rejects.toThrow();
  });

  it("serves Connect over https", async () => {
    const client = createClient(
      SettingsService,
      createConnectTransport({
        baseUrl: t.url,
        httpVersion: "1.1",
        nodeOptions: { ca },
        interceptors: [
          (next) => async (req) => {
            req.header.set("x-session-api-key", key);
            return next(req);
          },
        ],
      }),
    );
    const res = await client.getSettings({});
    expect(res.settings).toBeDefined();
  });

  it("serves gRPC over TLS; a cleartext gRPC client fails", async () => {
    const secure = grpcSettings(grpc.credentials.createSsl(ca));
    try {
      expect(await getSettings(secure)).toMatchObject({ settings: expect.anything() });
    } finally {
      secure.close();
    }
    const insecure = grpcSettings(grpc.credentials.createInsecure());
    try {
      await expect(getSettings(insecure)).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
    } finally {
      insecure.close();
    }
  });

  it("signs a browser in with a __Host- Secure cookie that authenticates what follows", async () => {
    const signIn = await https("POST", "/api/auth/session", {}, { key });
    expect(signIn.status).toBe(200);
    const setCookie = [signIn.headers["set-cookie"] ?? []].flat();
    expect(setCookie).toHaveLength(1);
    const sc = setCookie[0] ?? "";
    expect(sc.startsWith(`${SECURE_SESSION_COOKIE}=`)).toBe(true);
    expect(sc).toMatch(/; Secure/);
    expect(sc).toMatch(/; HttpOnly/);
    expect(sc).toMatch(/; Path=\//);
    const cookie = sc.split(";")[0] ?? "";
    const who = await https("GET", "/api/auth/session", { cookie });
    expect(who.status).toBe(200);
    expect(who.body).toMatchObject({ user_id: "alice" });
    expect((await https("GET", "/api/settings", { cookie })).status).toBe(200);
    // The server's own origin is https: a cookie mutation from it passes, one from http://<same host> does not.
    const own = new URL(t.url).origin;
    const ok = await https("POST", "/api/settings", { cookie, origin: own }, { agent: "CodeActAgent" });
    expect(ok.status).toBe(200);
    const plainOrigin = own.replace(/^https:/, "http:");
    const refused = await https("POST", "/api/settings", { cookie, origin: plainOrigin }, { agent: "X" });
    expect(refused.status).toBe(403);
  });

  describe("the webhook listener", () => {
    it("is plain HTTP on 127.0.0.1 and answers the webhook paths", async () => {
      expect(t.webhookUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      const r = await call(
        t.webhookUrl ?? "",
        "not-a-sandbox-key",
        "POST",
        "/api/v1/webhooks/0123456789abcdef0123456789abcdef/events/0123456789abcdef0123456789abcdef",
        [],
      );
      // The webhook route's own refusal (not this sandbox's key), not the listener's 404.
      expect(r.status).toBe(401);
      expect(r.body).not.toEqual({ detail: "Not Found" });
      expect(r.headers.get("x-request-id")).toMatch(/^req-/);
    });

    it("answers every other path with a JSON 404, with a valid key too", async () => {
      for (const path of [
        "/api/settings",
        "/alive",
        "/",
        "/api/v1/webhooks",
        "/workspace.v1.SettingsService/GetSettings",
      ]) {
        const r = await call(t.webhookUrl ?? "", key, "GET", path);
        expect(r.status, path).toBe(404);
        expect(r.body, path).toEqual({ detail: "Not Found" });
      }
      // Dot segments as sent (fetch and a URL string would resolve them before sending).
      for (const path of [
        "/api/v1/webhooks/../../api/settings",
        "/api/v1/webhooks/%2e%2e/%2e%2e/api/settings",
      ]) {
        const status = await new Promise<number>((resolve, reject) => {
          const { hostname, port } = new URL(t.webhookUrl ?? "");
          const req = httpRequest(
            { host: hostname, port, path, headers: { "x-session-api-key": key } },
            (res) => {
              res.resume();
              resolve(res.statusCode ?? 0);
            },
          );
          req.on("error", reject);
          req.end();
        });
        expect(status, path).toBe(404);
      }
    });

    it("receives a sandbox's events: a conversation's agent posts them there", async () => {
      const settings = await https(
        "POST",
        "/api/settings",
        { "x-session-api-key": key },
        { llm_model: "openai/test-model", llm_base_url: llm.url },
      );
      expect(settings.status).toBe(200);
      const task = (await https("POST", "/api/v1/app-conversations", { "x-session-api-key": key }, {}))
        .body as { id: string };
      let conversationId = "";
      for (let i = 0; i < 400 && conversationId === ""; i++) {
        const [s] = (
          await https("GET", `/api/v1/app-conversations/start-tasks?ids=${task.id}`, {
            "x-session-api-key": key,
          })
        ).body as { status: string; app_conversation_id: string; detail?: string }[];
        if (s?.status === "ERROR") throw new Error(`conversation start failed: ${s.detail}`);
        if (s?.status === "READY") conversationId = s.app_conversation_id;
        else await new Promise((r) => setTimeout(r, 50));
      }
      expect(conversationId).not.toBe("");
      // The agent's own first event (its state update) arrives through its webhook.
      let count = 0;
      for (let i = 0; i < 200 && count === 0; i++) {
        const r = await https("GET", `/api/v1/events/count?conversation_id__eq=${conversationId}`, {
          "x-session-api-key": key,
        });
        count = r.body as number;
        if (count === 0) await new Promise((r) => setTimeout(r, 50));
      }
      expect(count).toBeGreaterThan(0);
    }, 60_000);
  });
});
