/**
 * The wire of the agent proxy's websocket relay (src/transports/agent-proxy/frame-relay.ts, through src/transports/agent-proxy/agent-sockets.ts):
 * the agent's frames passed through as they come, against agents that misbehave at the frame level: one that
 * names an extension it was not offered, one that sets RSV1 anyway, one whose message is over the limit (whole or
 * in fragments), and one that sends a frame larger than the machine's socket buffers to a client that does not
 * read. A well-behaved agent (`ws`, with permessage-deflate enabled but never offered) shows what passes: messages
 * both ways, pings end to end, close codes and reasons each way, and a close frame written between the agent's
 * frames, never inside one.
 */
import { createHash } from "node:crypto";
import { createServer, type IncomingMessage, request, type Server } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import type { Duplex } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket, { WebSocketServer } from "ws";
import { AgentSockets } from "../../src/transports/agent-proxy/agent-sockets.ts";
import { until } from "../helpers/until.ts";

const MAX_MESSAGE = 2 * 1024 * 1024;
/** The agent's limit: 64 times the client's. */
const AGENT_MAX = 64 * MAX_MESSAGE;

/** Every connection a server accepted, destroyed at the end. */
const accepted = new Set<Socket>();
let rawAgent: Server;
let wsAgentHttp: Server;
let wsAgent: WebSocketServer;
let service: Server;
let sockets: AgentSockets;
/** Sandboxes whose target reads PAUSED (the relay's check closes their sockets). */
const stopped = new Set<string>();
/** Upgrade requests each agent received. */
const upgrades = { raw: 0, ws: 0 };
/** The raw agent's socket for each mode, and the service's socket of each client (by the URL's mode). */
const agentSide = new Map<string, Duplex>();
/** Bytes of the huge frame each raw agent has handed to its socket. */
const agentProgress = new Map<string, { written: number }>();
const serviceSide = new Map<string, Duplex>();
/** What each raw agent received from the service after its handshake. */
const agentReceived = new Map<string, Buffer[]>();
const wsAgentEvents: string[] = [];

const accept = (key: string) =>
  createHash("sha1").update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest("base64");

/** A server's frame header (unmasked) for a payload of `length` bytes. */
function header(first: number, length: number): Buffer {
  if (length < 126) return Buffer.from([first, length]);
  if (length < 65536) {
    const b = Buffer.from([first, 126, 0, 0]);
    b.writeUInt16BE(length, 2);
    return b;
  }
  const b = Buffer.alloc(10);
  b[0] = first;
  b[1] = 127;
  b.writeUInt32BE(Math.floor(length / 2 ** 32), 2);
  b.writeUInt32BE(length % 2 ** 32, 6);
  return b;
}

/** A payload whose every byte says where it is (so that a reordered or lost piece shows). */
function pattern(length: number): Buffer {
  const b = Buffer.allocUnsafe(length);
  for (let i = 0; i < length; i++) b[i] = i % 251;
  return b;
}

/** The close frames (code, reason) in what the service sent an agent (its frames are masked). */
function closeFrames(bytes: Buffer): { code: number; reason: string }[] {
  const out: { code: number; reason: string }[] = [];
  for (let i = 0; i + 2 <= bytes.length; ) {
    const opcode = (bytes[i] as number) & 0x0f;
    let length = (bytes[i + 1] as number) & 0x7f;
    let at = i + 2;
    if (length === 126) {
      length = bytes.readUInt16BE(at);
      at += 2;
    } else if (length === 127) {
      length = bytes.readUInt32BE(at + 4);
      at += 8;
    }
    const mask = bytes.subarray(at, at + 4);
    at += 4;
    const payload = Buffer.from(bytes.subarray(at, at + length));
    for (let j = 0; j < payload.length; j++) payload[j] = (payload[j] as number) ^ (mask[j % 4] as number);
    if (opcode === 0x8) out.push({ code: payload.readUInt16BE(0), reason: payload.subarray(2).toString() });
    i = at + length;
  }
  return out;
}

/** The huge frame of the "huge" and "stop" modes: larger than the socket buffers between agent and client. */
let hugeLength = 0;
let huge: Buffer;

beforeAll(async () => {
  // Whatever the kernel may buffer on the two loopback connections (each side's send and receive buffers), and
  // 16 MiB more, so that a relay that kept the frame in memory would let the agent finish writing it.
  const { readFileSync } = await import("node:fs");
  const max = (f: string) => Number(readFileSync(f, "utf8").trim().split(/\s+/).pop());
  const kernel = 2 * (max("/proc/sys/net/ipv4/tcp_rmem") + max("/proc/sys/net/ipv4/tcp_wmem"));
  hugeLength = Math.min(AGENT_MAX - 1, kernel + 16 * 1024 * 1024);
  huge = pattern(hugeLength);

  rawAgent = createServer();
  rawAgent.on("connection", (c) => accepted.add(c));
  rawAgent.on("upgrade", (req: IncomingMessage, socket: Duplex) => {
    upgrades.raw++;
    socket.on("error", () => {});
    const mode = new URL(req.url ?? "/", "http://a").pathname.split("/").pop() ?? "";
    agentSide.set(mode, socket);
    const received: Buffer[] = [];
    agentReceived.set(mode, received);
    socket.on("data", (d: Buffer) => received.push(d));
    const key = String(req.headers["sec-websocket-key"]);
    const extra =
      mode === "deflate"
        ? "Sec-WebSocket-Extensions: permessage-deflate\r\n"
        : mode === "protocol"
          ? "Sec-WebSocket-Protocol: chat\r\n"
          : "";
    socket.write(
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
        `Sec-WebSocket-Accept: ${mode === "badaccept" ? accept("x") : accept(key)}\r\n${extra}\r\n`,
    );
    if (mode === "rsv1") socket.write(Buffer.concat([header(0xc1, 5), Buffer.from("hello")]));
    if (mode === "overlimit") socket.write(Buffer.concat([header(0x82, AGENT_MAX + 1), Buffer.alloc(1000)]));
    if (mode === "fragments") {
      // A first fragment of 1 MiB, then a continuation whose header takes the message over the limit.
      socket.write(Buffer.concat([header(0x01, 1024 * 1024), Buffer.alloc(1024 * 1024, 120)]));
      socket.write(Buffer.concat([header(0x00, AGENT_MAX - 1024 * 1024 + 1), Buffer.alloc(1000, 120)]));
    }
    if (mode === "huge" || mode === "stop") {
      socket.write(Buffer.concat([header(0x81, 5), Buffer.from("small")]));
      // In pieces of 1 MiB, each once the one before is taken (as a streaming agent writes), counting what left.
      socket.write(header(0x82, hugeLength));
      const progress = { written: 0 };
      agentProgress.set(mode, progress);
      let offset = 0;
      const next = () => {
        while (offset < hugeLength) {
          const piece = huge.subarray(offset, offset + 1024 * 1024);
          offset += piece.length;
          const more = socket.write(piece, () => {
            progress.written += piece.length;
          });
          if (!more) return void socket.once("drain", next);
        }
        socket.write(Buffer.concat([header(0x81, 5), Buffer.from("after")]));
      };
      next();
    }
  });
  await new Promise<void>((r) => rawAgent.listen(0, "127.0.0.1", r));

  // A well-behaved agent that would deflate if asked.
  wsAgentHttp = createServer();
  wsAgentHttp.on("connection", (c) => accepted.add(c));
  wsAgent = new WebSocketServer({ noServer: true, perMessageDeflate: { threshold: 0 } });
  wsAgentHttp.on("upgrade", (req, socket, head) => {
    upgrades.ws++;
    wsAgent.handleUpgrade(req, socket, head, (ws) => {
      wsAgentEvents.push(`extensions:${ws.extensions}`);
      ws.send("first");
      ws.on("message", (d, isBinary) => {
        const text = d.toString();
        if (text === "close-me") return ws.close(4001, "done");
        if (text === "ping-me") return ws.ping("agent-ping");
        ws.send(d, { binary: isBinary });
      });
      ws.on("ping", (d) => wsAgentEvents.push(`ping:${d.toString()}`));
      ws.on("pong", (d) => wsAgentEvents.push(`pong:${d.toString()}`));
      ws.on("close", (code, reason) => wsAgentEvents.push(`close:${code}:${reason.toString()}`));
    });
  });
  await new Promise<void>((r) => wsAgentHttp.listen(0, "127.0.0.1", r));

  const urlOf = (s: Server) => `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
  sockets = new AgentSockets(
    {
      target: async (key: string) => {
        const sandboxId = key.split("_")[1] ?? "";
        return {
          sandboxId,
          ownerId: "u",
          status: stopped.has(sandboxId) ? "PAUSED" : "RUNNING",
          agentUrl: urlOf(sandboxId === "ws" ? wsAgentHttp : rawAgent),
        };
      },
      userOf: async () => null,
      logger: { error: () => {}, warn: () => {} } as never,
    },
    {
      maxMessageBytes: MAX_MESSAGE,
      messagesPerSecond: 0,
      socketsPerUser: 1000,
      handshakeTimeoutMs: 5000,
      checkMs: 100,
    },
  );
  service = createServer();
  service.on("connection", (c) => accepted.add(c));
  service.on("upgrade", (req, socket, head) => {
    serviceSide.set(new URL(req.url ?? "/", "http://a").pathname.split("/").pop() ?? "", socket);
    sockets.upgrade(req, socket, head);
  });
  await new Promise<void>((r) => service.listen(0, "127.0.0.1", r));
});

afterAll(async () => {
  sockets.close();
  wsAgent.close();
  for (const c of accepted) c.destroy();
  await new Promise((r) => service.close(r));
  await new Promise((r) => rawAgent.close(r));
  await new Promise((r) => wsAgentHttp.close(r));
});

/** A client of the service for `mode` on the raw agent's sandbox, or on the ws agent's with sandbox "ws". */
function client(mode: string, sandbox = "raw", headers: Record<string, string> = {}): WebSocket {
  const port = (service.address() as AddressInfo).port;
  return new WebSocket(
    `ws://127.0.0.1:${port}/sockets/events/${mode}?session_api_key=sbx_${sandbox}_${"a".repeat(43)}`,
    { headers },
  );
}

const opened = (ws: WebSocket) =>
  new Promise<void>((resolve, reject) => ws.once("open", () => resolve()).once("error", reject));
const closed = (ws: WebSocket) =>
  new Promise<{ code: number; reason: string }>((resolve) =>
    ws.once("close", (code, reason) => resolve({ code, reason: reason.toString() })),
  );
/** The HTTP answer to a refused upgrade: status and JSON body. */
const refusal = (ws: WebSocket) =>
  new Promise<{ status: number; body: { detail: string } }>((resolve, reject) => {
    ws.on("unexpected-response", (_req, res) => {
      let text = "";
      res.on("data", (c: Buffer) => {
        text += c.toString();
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
    });
    ws.on("open", () => reject(new Error("the upgrade was accepted")));
    ws.on("error", () => {});
  });

describe("a well-behaved agent", () => {
  it("is offered no extension, and its frames pass both ways, pings end to end", async () => {
    const ws = client("talk", "ws");
    const got: [string, boolean][] = [];
    ws.on("message", (d: Buffer, isBinary) => got.push([d.toString(), isBinary]));
    const pongs: string[] = [];
    ws.on("ping", (d) => pongs.push(`ping:${d.toString()}`));
    await opened(ws);
    expect(ws.extensions).toBe("");
    ws.send("hello");
    ws.send(Buffer.from("bin"), { binary: true });
    ws.send("x".repeat(200_000));
    ws.ping("client-ping");
    ws.send("ping-me");
    await until(
      () => ({ messages: got.length, controls: wsAgentEvents.filter((e) => e.startsWith("p")).length }),
      (n) => n.messages >= 4 && n.controls >= 2,
    );
    expect(got.slice(0, 3)).toEqual([
      ["first", false],
      ["hello", false],
      ["bin", true],
    ]);
    expect(got[3]?.[0]).toHaveLength(200_000);
    expect(wsAgentEvents).toContain("extensions:");
    expect(wsAgentEvents).toContain("ping:client-ping");
    expect(pongs).toEqual(["ping:agent-ping"]);
    // The client's automatic pong to the agent's ping crossed back.
    expect(wsAgentEvents).toContain("pong:agent-ping");
    const end = closed(ws);
    ws.close(4000, "bye");
    expect(await end).toEqual({ code: 4000, reason: "bye" });
    await until(
      () => wsAgentEvents,
      (e) => e.includes("close:4000:bye"),
    );
  });

  it("passes the agent's close code and reason to the client", async () => {
    const ws = client("closing", "ws");
    await opened(ws);
    const end = closed(ws);
    ws.send("close-me");
    expect(await end).toEqual({ code: 4001, reason: "done" });
    await until(
      () => sockets.size,
      (n) => n === 0,
    );
  });

  it("refuses a malformed client handshake before asking the agent (JSON)", async () => {
    const before = upgrades.ws;
    const answer = await new Promise<{ status: number; detail: string }>((resolve, reject) => {
      const req = request({
        host: "127.0.0.1",
        port: (service.address() as AddressInfo).port,
        path: `/sockets/events/v?session_api_key=sbx_ws_${"a".repeat(43)}`,
        headers: {
          connection: "Upgrade",
          upgrade: "websocket",
          "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
          "sec-websocket-version": "12",
        },
      });
      req.on("response", (res) => {
        let text = "";
        res.on("data", (c: Buffer) => {
          text += c.toString();
        });
        res.on("end", () =>
          resolve({ status: res.statusCode ?? 0, detail: (JSON.parse(text) as { detail: string }).detail }),
        );
      });
      req.on("upgrade", () => reject(new Error("the upgrade was accepted")));
      req.on("error", reject);
      req.end();
    });
    expect(answer.status).toBe(400);
    expect(answer.detail).toMatch(/Sec-WebSocket-Version/);
    expect(upgrades.ws).toBe(before);
  });
});

describe("an agent that breaks the protocol", () => {
  it("is refused when its handshake answer names an extension it was not offered (502, JSON)", async () => {
    const r = await refusal(client("deflate"));
    expect(r.status).toBe(502);
    expect(r.body.detail).toMatch(/extension it was not offered \(permessage-deflate\)/);
    expect((await refusal(client("protocol"))).body.detail).toMatch(/subprotocol/);
    expect((await refusal(client("badaccept"))).body.detail).toMatch(/Sec-WebSocket-Accept/);
  });

  it("is closed with 1002 when it sends a compressed frame anyway; the client gets 1011 and none of it", async () => {
    const ws = client("rsv1");
    const got: string[] = [];
    ws.on("message", (d) => got.push(d.toString()));
    const end = closed(ws);
    await opened(ws);
    expect((await end).code).toBe(1011);
    expect(got).toEqual([]);
    await until(
      () => closeFrames(Buffer.concat(agentReceived.get("rsv1") ?? [])),
      (f) => f.length > 0,
    );
    expect(closeFrames(Buffer.concat(agentReceived.get("rsv1") ?? []))[0]?.code).toBe(1002);
  });

  it("is closed with 1009 from the header taking a message over 64 times the client's limit, whole or in fragments", async () => {
    for (const mode of ["overlimit", "fragments"]) {
      const ws = client(mode);
      let bytes = 0;
      ws.on("message", (d: Buffer) => {
        bytes += d.length;
      });
      const end = closed(ws);
      await opened(ws);
      expect((await end).code).toBe(1011);
      expect(bytes).toBe(0);
      await until(
        () => closeFrames(Buffer.concat(agentReceived.get(mode) ?? [])),
        (f) => f.length > 0,
      );
      expect(closeFrames(Buffer.concat(agentReceived.get(mode) ?? []))[0]?.code).toBe(1009);
    }
  }, 30_000);
});

describe("an agent frame larger than the socket buffers, to a client that does not read", () => {
  /** Waits until the agent's written bytes stop going up (the relay holds it back, or took everything): those. */
  async function stalled(mode: string): Promise<number> {
    const progress = (await until(
      () => agentProgress.get(mode),
      (p) => p !== undefined,
    )) as { written: number };
    let last = -1;
    for (let i = 0; i < 100; i++) {
      await new Promise((r) => setTimeout(r, 200));
      if (progress.written === last) break;
      last = progress.written;
    }
    return last;
  }

  it("is passed as it comes: the agent waits, the service holds little, and every byte arrives in order", async () => {
    const ws = client("huge");
    const got: Buffer[] = [];
    ws.on("message", (d: Buffer) => got.push(d));
    await opened(ws);
    ws.pause();
    const written = await stalled("huge");
    // The agent could not write the frame: nothing between it and the paused client took it all (what it wrote is
    // in the kernel's socket buffers, and a little in the service's).
    expect(hugeLength - written).toBeGreaterThan(8 * 1024 * 1024);
    // What the service holds for the client in its own memory stays small (at most a read or two of the agent's).
    expect(serviceSide.get("huge")?.writableLength ?? 0).toBeLessThan(512 * 1024);
    ws.resume();
    await until(
      () => got.length,
      (n) => n >= 3,
      20_000,
    );
    expect(got[0]?.toString()).toBe("small");
    expect(got[1]?.length).toBe(hugeLength);
    expect(got[1]?.equals(huge)).toBe(true);
    expect(got[2]?.toString()).toBe("after");
    ws.close();
  }, 60_000);

  it("gets the relay's close frame after the frame in flight, never inside it", async () => {
    const ws = client("stop");
    const got: Buffer[] = [];
    ws.on("message", (d: Buffer) => got.push(d));
    const end = closed(ws);
    await opened(ws);
    ws.pause();
    expect(hugeLength - (await stalled("stop"))).toBeGreaterThan(8 * 1024 * 1024);
    // The sandbox stops while the frame is half way: the agent is told at once, the client after the frame.
    stopped.add("raw");
    await until(
      () => closeFrames(Buffer.concat(agentReceived.get("stop") ?? [])),
      (f) => f.length > 0,
    );
    expect(closeFrames(Buffer.concat(agentReceived.get("stop") ?? []))[0]?.code).toBe(1001);
    ws.resume();
    expect(await end).toEqual({ code: 1001, reason: "sandbox is not running" });
    stopped.delete("raw");
    expect(got[0]?.toString()).toBe("small");
    expect(got[1]?.length).toBe(hugeLength);
    expect(got[1]?.equals(huge)).toBe(true);
    // Nothing of the agent's after its close is passed on.
    expect(got).toHaveLength(2);
  }, 60_000);
});
