/**
 * A minimal server side of RFC 6455 over node:http's `upgrade` event (the stand-in has no npm dependencies): the
 * handshake, text frames out, text frames in (masked, possibly fragmented), ping/pong and the close handshake.
 * Binary frames are delivered as text, as the stand-in only speaks JSON.
 */
import { createHash } from "node:crypto";
import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/** Largest message accepted from a client; a longer one closes the connection with 1009. */
const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

export class WsConnection {
  readonly #socket: Duplex;
  #buffer: Buffer = Buffer.alloc(0);
  #fragments: Buffer[] = [];
  #fragmentBytes = 0;
  #closed = false;
  #onMessage: (text: string) => void = () => undefined;
  #onClose: () => void = () => undefined;

  constructor(socket: Duplex) {
    this.#socket = socket;
    socket.on("data", (chunk: Buffer) => this.#receive(chunk));
    socket.on("close", () => this.#finish());
    socket.on("error", () => this.#finish());
  }

  get closed(): boolean {
    return this.#closed;
  }
  onMessage(fn: (text: string) => void): void {
    this.#onMessage = fn;
  }
  onClose(fn: () => void): void {
    this.#onClose = fn;
  }

  sendText(text: string): void {
    if (!this.#closed) this.#socket.write(frame(0x1, Buffer.from(text, "utf8")));
  }

  close(code: number, reason = ""): void {
    if (this.#closed) return;
    const payload = Buffer.alloc(2 + Buffer.byteLength(reason));
    payload.writeUInt16BE(code, 0);
    payload.write(reason, 2, "utf8");
    this.#socket.write(frame(0x8, payload));
    this.#socket.end();
    this.#finish();
  }

  #finish(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#onClose();
  }

  #receive(chunk: Buffer): void {
    this.#buffer = Buffer.concat([this.#buffer, chunk]);
    for (;;) {
      if (this.#buffer.length < 2) return;
      const b0 = this.#buffer[0]!;
      const b1 = this.#buffer[1]!;
      let length = b1 & 0x7f;
      let offset = 2;
      if (length === 126) {
        if (this.#buffer.length < 4) return;
        length = this.#buffer.readUInt16BE(2);
        offset = 4;
      } else if (length === 127) {
        if (this.#buffer.length < 10) return;
        const big = this.#buffer.readBigUInt64BE(2);
        if (big > BigInt(MAX_MESSAGE_BYTES)) {
          this.close(1009, "Message too big");
          return;
        }
        length = Number(big);
        offset = 10;
      }
      if (length > MAX_MESSAGE_BYTES) {
        this.close(1009, "Message too big");
        return;
      }
      const masked = (b1 & 0x80) !== 0;
      // Client frames must be masked (RFC 6455 5.1).
      if (!masked) {
        this.close(1002, "Unmasked client frame");
        return;
      }
      if (this.#buffer.length < offset + 4 + length) return;
      const mask = this.#buffer.subarray(offset, offset + 4);
      const payload = Buffer.from(this.#buffer.subarray(offset + 4, offset + 4 + length));
      for (let i = 0; i < payload.length; i++) payload[i] = payload[i]! ^ mask[i % 4]!;
      this.#buffer = this.#buffer.subarray(offset + 4 + length);
      const fin = (b0 & 0x80) !== 0;
      const opcode = b0 & 0x0f;
      if (opcode === 0x8) {
        this.close(1000);
        return;
      }
      if (opcode === 0x9) {
        this.#socket.write(frame(0xa, payload));
        continue;
      }
      if (opcode === 0xa) continue;
      if (opcode === 0x0 || opcode === 0x1 || opcode === 0x2) {
        this.#fragmentBytes += payload.length;
        if (this.#fragmentBytes > MAX_MESSAGE_BYTES) {
          this.close(1009, "Message too big");
          return;
        }
        this.#fragments.push(payload);
        if (fin) {
          const text = Buffer.concat(this.#fragments).toString("utf8");
          this.#fragments = [];
          this.#fragmentBytes = 0;
          this.#onMessage(text);
        }
        continue;
      }
      this.close(1002, "Unknown opcode");
      return;
    }
  }
}

function frame(opcode: number, payload: Buffer): Buffer {
  const n = payload.length;
  const head = n < 126 ? Buffer.alloc(2) : n < 65536 ? Buffer.alloc(4) : Buffer.alloc(10);
  head[0] = 0x80 | opcode;
  if (n < 126) head[1] = n;
  else if (n < 65536) {
    head[1] = 126;
    head.writeUInt16BE(n, 2);
  } else {
    head[1] = 127;
    head.writeBigUInt64BE(BigInt(n), 2);
  }
  return Buffer.concat([head, payload]);
}

/** Completes the handshake, or answers 400 when the request is not a valid upgrade; null then. */
export function acceptWebSocket(req: IncomingMessage, socket: Duplex): WsConnection | null {
  const key = req.headers["sec-websocket-key"];
  if (typeof key !== "string" || (req.headers.upgrade ?? "").toLowerCase() !== "websocket") {
    rejectUpgrade(socket, 400, "Bad Request");
    return null;
  }
  const accept = createHash("sha1").update(`${key}${GUID}`).digest("base64");
  socket.write(
    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
      `Sec-WebSocket-Accept: ${accept}\r\n\r\n`,
  );
  return new WsConnection(socket);
}

/** An upgrade refused before accept (uvicorn answers a close-before-accept with 403). */
export function rejectUpgrade(socket: Duplex, status: number, text: string): void {
  socket.end(`HTTP/1.1 ${status} ${text}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`);
}
