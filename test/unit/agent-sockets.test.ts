/**
 * The websocket relay of the agent proxy (src/transports/agent-proxy/agent-sockets.ts) against an agent whose handshake answer and
 * first frames arrive in one write, as a fast agent's snapshot (`resend_all`) does on a loaded machine or behind a
 * slow client: every frame must reach the client, none may be read before the relay listens.
 */
import { createHash } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, expect, it } from "vitest";
import WebSocket from "ws";
import { AgentSockets } from "../../src/transports/agent-proxy/agent-sockets.ts";

const FRAMES = 5;
let agent: Server;
let service: Server;
let sockets: AgentSockets;
/** Every connection either server accepted (upgraded ones included), destroyed at the end. */
const accepted = new Set<import("node:net").Socket>();

/** An unmasked text frame of under 126 bytes, as a server sends it. */
const frame = (text: string) =>
  Buffer.concat([Buffer.from([0x81, Buffer.byteLength(text)]), Buffer.from(text)]);

beforeAll(async () => {
  agent = createServer();
  agent.on("connection", (c) => accepted.add(c));
  agent.on("upgrade", (req, socket) => {
    const accept = createHash("sha1")
      .update(`${req.headers["sec-websocket-key"]}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`)
      .digest("base64");
    socket.write(
      Buffer.concat([
        Buffer.from(
          `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`,
        ),
        ...Array.from({ length: FRAMES }, (_, i) => frame(JSON.stringify({ i }))),
      ]),
    );
    socket.on("error", () => {});
  });
  await new Promise<void>((r) => agent.listen(0, "127.0.0.1", r));
  const agentUrl = `http://127.0.0.1:${(agent.address() as AddressInfo).port}`;
  sockets = new AgentSockets(
    {
      target: async () => ({ sandboxId: "sb1", ownerId: "u", status: "RUNNING", agentUrl }),
      userOf: async () => null,
      logger: { error: () => {}, warn: () => {} } as never,
    },
    {
      maxMessageBytes: 1 << 20,
      messagesPerSecond: 0,
      socketsPerUser: 1000,
      handshakeTimeoutMs: 5000,
      checkMs: 60_000,
    },
  );
  service = createServer();
  service.on("connection", (c) => accepted.add(c));
  service.on("upgrade", (req, socket, head) => sockets.upgrade(req, socket, head));
  await new Promise<void>((r) => service.listen(0, "127.0.0.1", r));
});

afterAll(async () => {
  sockets.close();
  for (const c of accepted) c.destroy();
  await new Promise((r) => service.close(r));
  await new Promise((r) => agent.close(r));
});

it("relays the frames that came with the agent's handshake answer, every time", async () => {
  const port = (service.address() as AddressInfo).port;
  const counts: number[] = [];
  for (let round = 0; round < 10; round++) {
    const ws = new WebSocket(
      `ws://127.0.0.1:${port}/sockets/events/c1?session_api_key=sbx_sb1_${"a".repeat(43)}&resend_all=true`,
    );
    const got: string[] = [];
    ws.on("message", (d) => got.push(d.toString()));
    await new Promise((r) => ws.once("open", r));
    const deadline = Date.now() + 2000;
    while (got.length < FRAMES && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    counts.push(got.length);
    if (round === 0) expect(got).toEqual(Array.from({ length: FRAMES }, (_, i) => JSON.stringify({ i })));
    ws.terminate();
  }
  expect(counts).toEqual(Array(10).fill(FRAMES));
});
