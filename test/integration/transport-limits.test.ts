// One limit per protocol, over real sockets: the same message size on REST, Connect, gRPC-Web and gRPC; stream caps
// per key and per server on every protocol; streams ended when their key is revoked; slow bodies dropped; a 401
// that does not wait for the body; a connection cap on both listeners.

import { connect as connectHttp2 } from "node:http2";
import { connect, type Socket } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { Code, ConnectError } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SandboxService } from "../../src/gen/workspace/v1/sandbox_pb.js";
import { SettingsService } from "../../src/gen/workspace/v1/settings_pb.js";
import { connectClient, grpcClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

const MiB = 1024 * 1024;

/** The open_streams gauge of a server. */
async function openStreams(t: TestApp): Promise<number> {
  const headers = { "x-session-api-key": await t.keyFor("metrics-reader") };
  const text = await (await fetch(`${t.url}/metrics`, { headers })).text();
  return Number(/^open_streams (\d+)$/m.exec(text)?.[1] ?? Number.NaN);
}

async function waitFor(check: () => Promise<boolean>, ms = 5_000): Promise<void> {
  const until = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > until) throw new Error("timed out waiting");
    await sleep(20);
  }
}

/** The first error (or end) of a Connect / gRPC-Web stream. */
async function streamOutcome(stream: AsyncIterable<unknown>): Promise<unknown> {
  try {
    for await (const _ of stream) {
      // messages are not the point here
    }
    return "ended";
  } catch (err) {
    return err;
  }
}

/** A raw TCP connection; resolves its close. */
function rawSocket(port: number): { socket: Socket; closed: Promise<number>; data: () => string } {
  const socket = connect(port, "127.0.0.1");
  const opened = Date.now();
  let received = "";
  socket.on("data", (d: Buffer) => {
    received += d.toString();
  });
  socket.on("error", () => {});
  const closed = new Promise<number>((resolve) => socket.on("close", () => resolve(Date.now() - opened)));
  return { socket, closed, data: () => received };
}

describe("message size: one limit on every protocol (1 MiB by default)", () => {
  let t: TestApp;
  let key: string;
  beforeAll(async () => {
    t = await startTestApp();
    key = await t.keyFor("big");
  });
  afterAll(() => t.close());

  it("refuses a 2 MiB message on REST, Connect, gRPC-Web and gRPC, each in its protocol's shape, storing nothing", async () => {
    const huge = "m".repeat(2 * MiB);
    const rest = await call(t.url, key, "POST", "/api/settings", { llm_model: huge });
    expect(rest.status).toBe(413);
    expect(rest.body).toEqual({ detail: "Request body too large (limit 1 MiB)" });

    for (const protocol of ["connect", "grpc-web"] as const) {
      const client = connectClient(SettingsService, t.url, key, protocol);
      const err = await client.storeSettings({ settings: { llmModel: huge } }).catch((e: unknown) => e);
      expect(err, protocol).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code, protocol).toBe(Code.ResourceExhausted);
    }

    const g = grpcClient(SettingsService, t.grpcAddress);
    const grpcErr = await g
      .unary("StoreSettings", { settings: { llmModel: huge } }, key)
      .catch((e: grpc.ServiceError) => e);
    g.close();
    expect((grpcErr as grpc.ServiceError).code).toBe(grpc.status.RESOURCE_EXHAUSTED);

    // Just under the limit is accepted (the limit is the same number everywhere, not a protocol's own default).
    const g2 = grpcClient(SettingsService, t.grpcAddress);
    await g2.unary("StoreSettings", { settings: { llmModel: "m".repeat(MiB - 1024) } }, key);
    g2.close();
    const stored = await call(t.url, key, "GET", "/api/settings");
    expect((stored.body as { llm_model: string }).llm_model).toHaveLength(MiB - 1024);
  });
});

describe("stream caps per key and per server, on every protocol", () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ limits: { maxStreams: 20 } });
  });
  afterAll(() => t.close());

  it("refuses the 17th open stream of a key on gRPC, Connect, gRPC-Web and REST stream-start; other keys go on", async () => {
    const key = await t.keyFor("streamer");
    const g = grpcClient(SandboxService, t.grpcAddress);
    const open: grpc.ClientReadableStream<unknown>[] = [];
    for (let i = 0; i < 16; i++) {
      const s = g.stream("WatchSandboxes", {}, key);
      s.on("error", () => {});
      open.push(s);
    }
    await waitFor(async () => (await openStreams(t)) === 16);

    const refused = await new Promise<grpc.ServiceError>((resolve) => {
      const s = g.stream("WatchSandboxes", {}, key);
      s.on("error", resolve);
    });
    expect(refused.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(refused.details).toMatch(/limit 16/);
    for (const protocol of ["connect", "grpc-web"] as const) {
      const err = await streamOutcome(connectClient(SandboxService, t.url, key, protocol).watchSandboxes({}));
      expect((err as ConnectError).code, protocol).toBe(Code.ResourceExhausted);
    }
    const rest = await call(t.url, key, "POST", "/api/v1/app-conversations/stream-start", {});
    expect(rest.status).toBe(429);
    expect(rest.body).toMatchObject({ message: expect.stringMatching(/limit 16/) });
    const tasks = await call(t.url, key, "GET", "/api/v1/app-conversations/start-tasks/search");
    expect((tasks.body as { items: unknown[] }).items).toHaveLength(0); // nothing was started

    // Another key still gets streams, up to the server-wide cap (20): 4 more, then the 21st is refused.
    const other = await t.keyFor("other");
    const more: grpc.ClientReadableStream<unknown>[] = [];
    for (let i = 0; i < 4; i++) {
      const s = g.stream("WatchSandboxes", {}, other);
      s.on("error", () => {});
      more.push(s);
    }
    await waitFor(async () => (await openStreams(t)) === 20);
    const third = await t.keyFor("third");
    const err = await streamOutcome(connectClient(SandboxService, t.url, third).watchSandboxes({}));
    expect((err as ConnectError).code).toBe(Code.ResourceExhausted);
    expect((err as ConnectError).rawMessage).toMatch(/on the server \(limit 20\)/);

    // Closed streams give their slots back.
    for (const s of [...open, ...more]) s.cancel();
    await waitFor(async () => (await openStreams(t)) === 0);
    const again = g.stream("WatchSandboxes", {}, key);
    again.on("error", () => {});
    await waitFor(async () => (await openStreams(t)) === 1);
    again.cancel();
    g.close();
  });
});

describe("streams of a revoked key", () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ limits: { keyRecheckMs: 200 } });
  });
  afterAll(() => t.close());

  it("are ended with UNAUTHENTICATED on gRPC, Connect and gRPC-Web once the key is revoked", async () => {
    const issued = await t.app.keys.issue("revoked-user");
    const key = issued.key;
    const g = grpcClient(SandboxService, t.grpcAddress);
    const grpcStream = g.stream("WatchSandboxes", {}, key);
    const grpcEnd = new Promise<grpc.ServiceError | "ended">((resolve) => {
      grpcStream.on("error", resolve);
      grpcStream.on("end", () => resolve("ended"));
      grpcStream.on("data", () => {});
    });
    const connectEnd = streamOutcome(connectClient(SandboxService, t.url, key).watchSandboxes({}));
    const webEnd = streamOutcome(connectClient(SandboxService, t.url, key, "grpc-web").watchSandboxes({}));
    await waitFor(async () => (await openStreams(t)) === 3);
    await sleep(500); // still open while the key is valid
    expect(await openStreams(t)).toBe(3);

    const revokedAt = Date.now();
    expect(await t.app.keys.revoke(issued.record.id)).toBe(true);
    const [grpcErr, connectErr, webErr] = await Promise.all([grpcEnd, connectEnd, webEnd]);
    expect(Date.now() - revokedAt).toBeLessThan(2_000);
    expect((grpcErr as grpc.ServiceError).code).toBe(grpc.status.UNAUTHENTICATED);
    expect((connectErr as ConnectError).code).toBe(Code.Unauthenticated);
    expect((webErr as ConnectError).code).toBe(Code.Unauthenticated);
    await waitFor(async () => (await openStreams(t)) === 0);
    g.close();
  });
});

describe("slow clients and connections", () => {
  let t: TestApp;
  let port: number;
  let grpcPort: number;
  beforeAll(async () => {
    t = await startTestApp({
      limits: { requestTimeoutMs: 1_000, headersTimeoutMs: 1_000, maxConnections: 5 },
    });
    port = Number(new URL(t.url).port);
    grpcPort = Number(t.grpcAddress.split(":")[1]);
  });
  afterAll(() => t.close());

  it("drops a request whose body does not arrive within REQUEST_TIMEOUT_MS", async () => {
    const key = await t.keyFor("slow");
    const c = rawSocket(port);
    c.socket.write(
      `POST /api/settings HTTP/1.1\r\nhost: x\r\nx-session-api-key: ${key}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"lang`,
    );
    const ms = await c.closed;
    expect(ms).toBeGreaterThanOrEqual(900);
    expect(ms).toBeLessThan(4_000);
    expect(c.data()).toMatch(/^HTTP\/1\.1 408/);
  });

  it("drops a connection whose headers do not arrive within the header timeout", async () => {
    const c = rawSocket(port);
    c.socket.write("GET /alive HTTP/1.1\r\nhost: x\r\n");
    const ms = await c.closed;
    expect(ms).toBeLessThan(4_000);
  });

  it("answers 401 at once and closes the connection instead of waiting for the rest of the body", async () => {
    for (const path of ["/api/settings", "/workspace.v1.SettingsService/StoreSettings"]) {
      const c = rawSocket(port);
      c.socket.write(
        `POST ${path} HTTP/1.1\r\nhost: x\r\nx-session-api-key: wrong-key\r\ncontent-type: application/json\r\ncontent-length: 1000000\r\n\r\n{"a":`,
      );
      const ms = await c.closed;
      expect(ms, path).toBeLessThan(900); // well before the request timeout
      expect(c.data(), path).toMatch(/^HTTP\/1\.1 401/);
      expect(c.data().toLowerCase(), path).toContain("connection: close");
    }
  });

  it("closes a connection that sends nothing within the header timeout, on the HTTP and the gRPC port", async () => {
    for (const p of [port, grpcPort]) {
      const ms = await rawSocket(p).closed;
      expect(ms, String(p)).toBeGreaterThanOrEqual(900);
      expect(ms, String(p)).toBeLessThan(2_500);
    }
  });

  it("closes an HTTP/2 connection with half a preface, or a preface and no stream, within the header timeout", async () => {
    const half = rawSocket(grpcPort);
    half.socket.write("PRI * HTTP/2.0\r\n");
    const whole = rawSocket(grpcPort);
    // The client preface, then an empty SETTINGS frame (length 0, type 4, flags 0, stream 0): a valid connection.
    whole.socket.write(
      Buffer.concat([
        Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
        Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]),
      ]),
    );
    for (const c of [half, whole]) {
      const ms = await c.closed;
      expect(ms).toBeGreaterThanOrEqual(900);
      expect(ms).toBeLessThan(2_500);
    }
  });

  it("closes a gRPC connection idle past the header timeout after its calls too (an unauthenticated one included)", async () => {
    const session = connectHttp2(`http://127.0.0.1:${grpcPort}`);
    session.on("error", () => {});
    const opened = Date.now();
    const closed = new Promise<number>((resolve) =>
      session.once("close", () => resolve(Date.now() - opened)),
    );
    const call = session.request({
      ":method": "POST",
      ":path": "/workspace.v1.SettingsService/GetSettings",
      "content-type": "application/grpc",
      te: "trailers",
    });
    call.on("error", () => {});
    // The status comes in the trailers, or in the headers of a trailers-only answer.
    let status: unknown;
    call.on("response", (h) => {
      status ??= h["grpc-status"];
    });
    call.on("trailers", (h) => {
      status ??= h["grpc-status"];
    });
    const ended = new Promise((resolve) => call.once("close", resolve));
    call.resume();
    call.end(Buffer.from([0, 0, 0, 0, 0])); // one empty message, no key
    await ended;
    expect(status).toBe(String(grpc.status.UNAUTHENTICATED));
    const calledAt = Date.now() - opened;
    const ms = await Promise.race([closed, sleep(6_000).then(() => -1)]);
    session.destroy();
    expect(ms, "still open 6 s after its call").not.toBe(-1);
    expect(ms - calledAt).toBeGreaterThanOrEqual(900);
    expect(ms - calledAt).toBeLessThan(3_000);
  });

  it("at MAX_CONNECTIONS a new client takes the place of the longest idle connection", async () => {
    const key = await t.keyFor("after-cap");
    for (const p of [port, grpcPort]) {
      const held = Array.from({ length: 5 }, () => rawSocket(p));
      await Promise.all(held.map((h) => new Promise((resolve) => h.socket.once("connect", resolve))));
      await sleep(100);
      if (p === port) {
        expect((await call(t.url, undefined, "GET", "/alive")).status).toBe(200);
      } else {
        const g = grpcClient(SettingsService, t.grpcAddress);
        const err = await g.unary("GetSettings", {}, key).catch((e: grpc.ServiceError) => e);
        expect((err as grpc.ServiceError).code).toBe(grpc.status.NOT_FOUND); // served
        g.close();
      }
      // The oldest idle connection made room, at once (well before the header timeout).
      expect(await Promise.race([held[0]?.closed, sleep(500).then(() => -1)]), String(p)).not.toBe(-1);
      for (const h of held) h.socket.destroy();
      await Promise.all(held.map((h) => h.closed));
    }
  });

  it("at MAX_CONNECTIONS with a request in flight on every connection, a new one is closed at once", async () => {
    const key = await t.keyFor("busy");
    const busy = Array.from({ length: 5 }, () => rawSocket(port));
    for (const b of busy)
      b.socket.write(
        `POST /api/settings HTTP/1.1\r\nhost: x\r\nx-session-api-key: ${key}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{`,
      );
    await sleep(200);
    const extra = rawSocket(port);
    const ms = await extra.closed;
    expect(ms).toBeLessThan(500); // well before the request timeout ends the busy ones
    for (const b of busy) b.socket.destroy();
    await Promise.all(busy.map((b) => b.closed));
  });
});

describe("many idle connections", () => {
  it("400 idle sockets on each listener (MAX_CONNECTIONS 200) keep no new client out", async () => {
    const t = await startTestApp({ limits: { maxConnections: 200 } });
    try {
      const key = await t.keyFor("crowd");
      const grpcPort = Number(t.grpcAddress.split(":")[1]);
      for (const p of [Number(new URL(t.url).port), grpcPort]) {
        const idle = Array.from({ length: 400 }, () => rawSocket(p));
        await Promise.all(
          idle.map((h) => new Promise((resolve) => h.socket.once("connect", resolve).once("close", resolve))),
        );
        for (let i = 0; i < 3; i++) {
          if (p === grpcPort) {
            const g = grpcClient(SettingsService, t.grpcAddress);
            const err = await g.unary("GetSettings", {}, key).catch((e: grpc.ServiceError) => e);
            expect((err as grpc.ServiceError).code, `gRPC client ${i}`).toBe(grpc.status.NOT_FOUND);
            g.close();
          } else {
            const r = await fetch(`${t.url}/alive`, { headers: { connection: "close" } });
            expect(r.status, `HTTP client ${i}`).toBe(200);
          }
        }
        for (const h of idle) h.socket.destroy();
        await Promise.all(idle.map((h) => h.closed));
      }
    } finally {
      await t.close();
    }
  });
});
