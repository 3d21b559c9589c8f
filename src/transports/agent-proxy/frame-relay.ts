/**
 * The agent proxy's websocket wire (src/transports/agent-proxy/agent-sockets.ts decides who may open one and when it must close):
 * a relay that passes the agent's frames to the client as the bytes they arrived in, once both handshakes
 * (src/transports/agent-proxy/socket-handshake.ts) are done.
 *
 * Hand-written, and what it earns: a server's frames are unmasked on both legs, so once neither handshake negotiated
 * an extension, the agent's frames are already the frames the client must receive. Passing its reads through (one
 * socket write per read, a scan of the frame headers for bounds and boundaries) moves an event for 2.0-2.7 µs of CPU
 * where a relay of `ws` sockets, parsing each message on one side and framing it again on the other, takes 6.5 µs;
 * in the benchmark ("events streamed per second", docs/performance.md) that relay streamed at 0.62-0.73× direct,
 * under the 0.8× target, and this one at 0.74-0.90×. `ws` has no public way to write bytes on the socket under a
 * WebSocket, so the client's side is this relay's too: its handshake answer is written by socket-handshake.ts, and
 * its frames (masked, so they must be parsed anyway) are read with `ws`'s exported `Receiver` (sizes, UTF-8,
 * fragments) and framed for the agent with its `Sender`. The agent's side is an `http.request` upgrade that offers
 * no extension and refuses an answer that names one.
 *
 * What the scan keeps: an agent frame is never buffered whole (its bytes go out as they come, and the agent is
 * paused while the client's socket has a full write buffer), an agent message over its limit is refused from its
 * header before any of it is sent, a frame that breaks the protocol (masked, RSV bits without an extension, a
 * continuation out of place, a control frame fragmented or over 125 bytes, an unknown opcode) ends the relay, and
 * the relay's own frames to the client (only close frames: pings and pongs pass end to end) are written between
 * the agent's frames, never inside one. Text frames pass without UTF-8 validation: the browser validates them
 * (a bad one fails that socket only), and the service never reads them.
 */
import { Socket } from "node:net";
import type { Duplex } from "node:stream";
import * as ws from "ws";
import type { AgentWire } from "./socket-handshake.ts";

/** After the relay's close frame, how long a peer has to finish the closing handshake before it is cut off. */
const CLOSE_TIMEOUT_MS = 5000;

/** `ws`'s Receiver: parses the frames written to it (a Writable), emitting messages and control frames. */
interface FrameReceiver {
  write(chunk: Buffer): boolean;
  readonly writableNeedDrain: boolean;
  on(event: "message", listener: (data: Buffer, isBinary: boolean) => void): this;
  on(event: "ping" | "pong", listener: (data: Buffer) => void): this;
  on(event: "conclude", listener: (code: number, reason: Buffer) => void): this;
  on(event: "error", listener: (err: Error & { code?: string }) => void): this;
  on(event: "drain", listener: () => void): this;
}
/** `ws`'s Sender: frames data and control messages onto a socket. */
interface FrameSender {
  send(data: Buffer, options: { binary: boolean; fin: boolean; mask: boolean; compress: boolean }): void;
  ping(data: Buffer, mask: boolean): void;
  pong(data: Buffer, mask: boolean): void;
  close(code: number, reason: Buffer | string, mask: boolean): void;
}
// Public exports of `ws` (its index and ESM wrapper) that @types/ws does not declare.
const { Receiver, Sender } = ws as unknown as {
  Receiver: new (options: {
    isServer: boolean;
    maxPayload: number;
    maxFragments: number;
    maxBufferedChunks: number;
    binaryType: "nodebuffer";
    skipUTF8Validation: boolean;
    allowSynchronousEvents: boolean;
  }) => FrameReceiver;
  Sender: new (socket: Duplex) => FrameSender;
};

/** Bounds and hooks of one relay. */
export interface FrameRelayOptions {
  /** Largest message the client may send (close 1009). */
  maxClientMessageBytes: number;
  /** Largest message the agent may send (the agent is closed with 1009, the client with 1011). */
  maxAgentMessageBytes: number;
  /** Asked before each message, ping or pong of the client is passed on; false closes both sides with 1008. */
  admit: () => boolean;
  /** Called once, when the relay begins to close (for whatever reason). */
  onEnd: () => void;
}

/** Frame opcodes of RFC 6455. */
const CONTINUATION = 0x0;
const TEXT = 0x1;
const BINARY = 0x2;
const CLOSE = 0x8;
const PING = 0x9;
const PONG = 0xa;

/**
 * One relayed websocket: the client's socket (after `acceptClient`) and the agent's (from `connectAgent`, both in
 * socket-handshake.ts), each with the bytes that arrived with its handshake. Either side's close is passed to the
 * other with its code and reason; a side that breaks the protocol or a bound is closed with the code that says so.
 */
export class FrameRelay {
  readonly #client: Duplex;
  readonly #agent: Duplex;
  readonly #o: FrameRelayOptions;
  readonly #receiver: FrameReceiver;
  readonly #toAgent: FrameSender;
  readonly #toClient: FrameSender;

  // The agent's byte stream, read frame by frame.
  /** A frame header split over two reads (none of it sent yet). */
  #held: Buffer | undefined;
  /** Payload bytes of the current frame still to come. */
  #left = 0;
  /** A data message whose last frame has not come yet. */
  #fragmented = false;
  /** Payload bytes of the current data message so far. */
  #messageBytes = 0;
  /** The agent's close frame being read (it is not passed on: the relay answers it). */
  #closing: { payload: Buffer; filled: number } | undefined;
  /** Agent bytes still go to the client (false once the relay's close frame is written to it). */
  #forwarding = true;
  /** The agent's bytes are still read (false after its close frame or a frame that broke the protocol). */
  #agentReading = true;
  /** Reads of the client wait for the agent's socket to drain. */
  #waitingForAgent = false;

  #ended = false;
  /** The close frame for the client, waiting for the end of the agent frame being passed. */
  #clientClose: { code: number; reason: Buffer | string } | undefined;
  #clientCloseSent = false;
  #clientCloseReceived = false;
  #agentCloseSent = false;
  #agentCloseReceived = false;
  #clientGone = false;
  #agentGone = false;
  #cutOff: NodeJS.Timeout | undefined;

  constructor(client: Duplex, clientHead: Buffer, agent: AgentWire, options: FrameRelayOptions) {
    this.#client = client;
    this.#agent = agent.socket;
    this.#o = options;
    this.#toAgent = new Sender(this.#agent);
    this.#toClient = new Sender(client);
    this.#receiver = new Receiver({
      isServer: true,
      maxPayload: options.maxClientMessageBytes,
      maxFragments: 16 * 1024,
      maxBufferedChunks: 256 * 1024,
      binaryType: "nodebuffer",
      skipUTF8Validation: false,
      allowSynchronousEvents: true,
    });
    for (const s of [client, this.#agent])
      if (s instanceof Socket) {
        s.setNoDelay(true);
        s.setTimeout(0);
      }

    // Client → agent: parsed and checked, then framed (masked) for the agent.
    const r = this.#receiver;
    r.on("message", (data, isBinary) => {
      if (this.#ended || !this.#admitted()) return;
      this.#toAgent.send(data, { binary: isBinary, fin: true, mask: true, compress: false });
      this.#agentBackpressure();
    });
    r.on("ping", (data) => {
      if (!this.#ended && this.#admitted()) this.#toAgent.ping(data, true);
    });
    r.on("pong", (data) => {
      if (!this.#ended && this.#admitted()) this.#toAgent.pong(data, true);
    });
    r.on("conclude", (code, reason) => {
      this.#clientCloseReceived = true;
      const c = sendable(code);
      this.#end(c, reason, c, reason);
      if (this.#clientCloseSent) finish(client);
    });
    r.on("error", (err) => {
      this.#clientCloseReceived = true; // nothing more is read from it
      const [code, reason] = receiverClose(err.code);
      this.#end(code, reason, code, reason);
    });
    r.on("drain", () => this.#resumeClient());
    client.on("data", (chunk: Buffer) => this.#fromClient(chunk));
    client.on("end", () => {
      this.#end(1000, "", 1000, "");
      finish(client);
    });
    client.on("error", () => {
      this.#end(1011, "", 1011, "");
      client.destroy();
    });
    client.on("close", () => {
      this.#clientGone = true;
      this.#end(1000, "", 1000, "");
      this.#settled();
    });

    // Agent → client: passed through as read, paused while the client's write buffer is full.
    this.#agent.on("data", (chunk: Buffer) => this.#fromAgent(chunk));
    this.#agent.on("end", () => {
      this.#end(1000, "", 1000, "");
      finish(this.#agent);
    });
    this.#agent.on("error", () => {
      this.#end(1011, "agent error", 1011, "");
      this.#agent.destroy();
    });
    this.#agent.on("close", () => {
      this.#agentGone = true;
      this.#end(1000, "", 1000, "");
      // A frame cut off in the middle cannot be finished for the client: its socket goes too.
      if (this.#clientClose !== undefined) client.destroy();
      this.#settled();
    });
    client.on("drain", () => this.#agent.resume());

    if (clientHead.length > 0) this.#fromClient(clientHead);
    if (agent.head.length > 0) this.#fromAgent(agent.head);
  }

  /** Closes both sides with `code` and `reason` (at most 123 bytes). */
  end(code: number, reason: string): void {
    this.#end(code, reason, code, reason);
  }

  #admitted(): boolean {
    if (this.#o.admit()) return true;
    this.#end(1008, "Too many messages: slow down", 1008, "Too many messages: slow down");
    return false;
  }

  #fromClient(chunk: Buffer): void {
    if (this.#clientCloseReceived) return;
    if (!this.#receiver.write(chunk)) this.#client.pause();
  }

  /** Stops reading the client while the agent's socket has a full write buffer. */
  #agentBackpressure(): void {
    if (!this.#agent.writableNeedDrain || this.#waitingForAgent) return;
    this.#waitingForAgent = true;
    this.#client.pause();
    this.#agent.once("drain", () => {
      this.#waitingForAgent = false;
      this.#resumeClient();
    });
  }

  #resumeClient(): void {
    if (!this.#waitingForAgent && !this.#receiver.writableNeedDrain) this.#client.resume();
  }

  /** Reads the agent's bytes frame by frame and passes data, ping and pong frames on as they are. */
  #fromAgent(data: Buffer): void {
    if (!this.#agentReading) return;
    let chunk = data;
    if (this.#held !== undefined) {
      chunk = Buffer.concat([this.#held, data]);
      this.#held = undefined;
    }
    const n = chunk.length;
    /** The first byte of the chunk not yet sent (or skipped). */
    let from = 0;
    let i = 0;
    while (i < n) {
      if (this.#left > 0) {
        const take = Math.min(this.#left, n - i);
        const closing = this.#closing;
        if (closing !== undefined) {
          chunk.copy(closing.payload, closing.filled, i, i + take);
          closing.filled += take;
        }
        i += take;
        this.#left -= take;
        if (this.#left > 0) break;
        if (closing !== undefined) {
          this.#closeFromAgent(closing.payload);
          return;
        }
        from = this.#frameEnded(chunk, from, i);
        continue;
      }
      // A frame header at i: 2 bytes, then 2 or 8 of length; never a mask (a server's frames are unmasked).
      const b0 = chunk[i] as number;
      const b1 = i + 1 < n ? (chunk[i + 1] as number) : 0;
      const size = b1 & 0x7f;
      const headerBytes = 2 + (size === 126 ? 2 : size === 127 ? 8 : 0);
      if (n - i < 2 || n - i < headerBytes) {
        this.#send(chunk, from, i);
        this.#held = Buffer.from(chunk.subarray(i));
        return;
      }
      const fin = (b0 & 0x80) !== 0;
      const opcode = b0 & 0x0f;
      let length = size;
      if (size === 126) length = chunk.readUInt16BE(i + 2);
      else if (size === 127) {
        const high = chunk.readUInt32BE(i + 2);
        // Over 2^53 - 1 bytes is over any limit (and not a safe integer).
        length = high > 0x1fffff ? Number.POSITIVE_INFINITY : high * 2 ** 32 + chunk.readUInt32BE(i + 6);
      }
      const problem = this.#headerProblem(fin, b0 & 0x70, opcode, (b1 & 0x80) !== 0, length);
      if (problem !== undefined) {
        this.#send(chunk, from, i);
        this.#forwarding = false;
        this.#agentReading = false;
        this.#agentCloseReceived = true; // the connection is failed: no close frame is waited for
        this.#end(1011, problem.toClient, problem.code, problem.toAgent);
        return;
      }
      i += headerBytes;
      this.#left = length;
      if (opcode === CLOSE) {
        this.#send(chunk, from, i - headerBytes);
        from = i;
        this.#closing = { payload: Buffer.alloc(length), filled: 0 };
        if (length === 0) {
          this.#closeFromAgent(this.#closing.payload);
          return;
        }
      } else if (length === 0) from = this.#frameEnded(chunk, from, i);
    }
    this.#send(chunk, from, n);
  }

  /**
   * What is wrong with a frame of the agent's, as its header says: the codes to close with, or undefined. Keeps the
   * count of the current data message.
   */
  #headerProblem(
    fin: boolean,
    rsv: number,
    opcode: number,
    masked: boolean,
    length: number,
  ): { code: number; toAgent: string; toClient: string } | undefined {
    const broken = (what: string) => ({
      code: 1002,
      toAgent: what,
      toClient: "The sandbox's agent broke the websocket protocol",
    });
    if (masked) return broken("A server's frames must not be masked");
    if (rsv !== 0) return broken("RSV bits set without an extension");
    if (opcode >= CLOSE) {
      if (opcode !== CLOSE && opcode !== PING && opcode !== PONG) return broken("Unknown opcode");
      if (!fin || length > 125) return broken("A control frame must be whole and at most 125 bytes");
      return undefined;
    }
    if (opcode === CONTINUATION) {
      if (!this.#fragmented) return broken("A continuation frame outside a message");
    } else if (opcode === TEXT || opcode === BINARY) {
      if (this.#fragmented) return broken("A new message inside a fragmented one");
      this.#messageBytes = 0;
    } else return broken("Unknown opcode");
    this.#messageBytes += length;
    if (this.#messageBytes > this.#o.maxAgentMessageBytes)
      return {
        code: 1009,
        toAgent: "Message too big",
        toClient: "The sandbox's agent sent a message over the limit",
      };
    this.#fragmented = !fin;
    return undefined;
  }

  /**
   * A frame of the agent's ended at `i` of `chunk`: a close frame for the client waiting for this moment is written
   * now (after the bytes up to `i`). The new first unsent byte.
   */
  #frameEnded(chunk: Buffer, from: number, i: number): number {
    if (this.#clientClose === undefined) return from;
    this.#send(chunk, from, i);
    this.#writeClientClose();
    return i;
  }

  /** Sends `chunk[from, to)` to the client while agent bytes still go there; pauses the agent when it is full. */
  #send(chunk: Buffer, from: number, to: number): void {
    if (to <= from || !this.#forwarding || this.#clientGone) return;
    const ok = this.#client.write(from === 0 && to === chunk.length ? chunk : chunk.subarray(from, to));
    if (!ok) this.#agent.pause();
  }

  /** The agent's close frame (its payload): the client is closed with the same code and reason. */
  #closeFromAgent(payload: Buffer): void {
    this.#closing = undefined;
    this.#agentReading = false;
    this.#agentCloseReceived = true;
    let code = 1000;
    let reason: Buffer | string = "";
    if (payload.length >= 2) {
      code = payload.readUInt16BE(0);
      reason = payload.subarray(2);
    }
    if (payload.length === 1 || (payload.length >= 2 && !validCloseCode(code)) || !validUtf8(reason)) {
      this.#end(1011, "The sandbox's agent broke the websocket protocol", 1002, "Invalid close frame");
    } else this.#end(sendable(code), reason, sendable(code), reason);
    if (this.#agentCloseSent) finish(this.#agent);
  }

  /**
   * Begins to close (once): a close frame to each side that is still open and has not sent one, the client's after
   * the agent frame being passed to it; both sockets are cut off if the closing handshake is not done in 5 s.
   */
  #end(
    clientCode: number,
    clientReason: Buffer | string,
    agentCode: number,
    agentReason: Buffer | string,
  ): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#o.onEnd();
    if (!this.#agentGone && !this.#agentCloseSent && this.#agent.writable) {
      this.#agentCloseSent = true;
      this.#toAgent.close(agentCode, agentReason, true);
      if (this.#agentCloseReceived) finish(this.#agent);
    }
    if (!this.#clientGone && !this.#clientCloseSent && this.#client.writable) {
      this.#clientClose = { code: clientCode, reason: clientReason };
      // Inside an agent frame being passed on (not the agent's own close frame, which is never passed), the close
      // waits for the frame's end.
      if (this.#left === 0 || this.#closing !== undefined || !this.#forwarding) this.#writeClientClose();
    }
    this.#cutOff = setTimeout(() => {
      this.#client.destroy();
      this.#agent.destroy();
    }, CLOSE_TIMEOUT_MS).unref();
    this.#settled();
  }

  #writeClientClose(): void {
    const close = this.#clientClose;
    if (close === undefined) return;
    this.#clientClose = undefined;
    this.#forwarding = false;
    this.#clientCloseSent = true;
    if (this.#clientGone || !this.#client.writable) return;
    this.#toClient.close(close.code, close.reason, false);
    if (this.#clientCloseReceived) finish(this.#client);
  }

  /** Once both sockets are closed, nothing is left to cut off. */
  #settled(): void {
    if (this.#clientGone && this.#agentGone) clearTimeout(this.#cutOff);
  }
}

/** Ends a socket's writing side unless it is ended already (ending it twice makes an error). */
function finish(socket: Duplex): void {
  if (!socket.writableEnded && !socket.destroyed) socket.end();
}

/** A close code that may be sent on (1005, 1006 and 1015 are only reported, never sent). */
export function sendable(code: number): number {
  return code === 1005 || code === 1006 || code === 1015 || code < 1000 || code >= 5000 ? 1000 : code;
}

/** Whether a close frame may carry `code` (RFC 6455 7.4, as `ws` checks it). */
function validCloseCode(code: number): boolean {
  return (
    (code >= 1000 && code <= 1014 && code !== 1004 && code !== 1005 && code !== 1006) ||
    (code >= 3000 && code <= 4999)
  );
}

const UTF8 = new TextDecoder("utf-8", { fatal: true });
function validUtf8(text: Buffer | string): boolean {
  if (typeof text === "string") return true;
  try {
    UTF8.decode(text);
    return true;
  } catch {
    return false;
  }
}

/** The close code and reason for a client frame `ws`'s Receiver refused (its documented error codes). */
function receiverClose(code: string | undefined): [number, string] {
  switch (code) {
    case "WS_ERR_UNSUPPORTED_MESSAGE_LENGTH":
    case "WS_ERR_UNSUPPORTED_DATA_PAYLOAD_LENGTH":
      return [1009, "Message too big"];
    case "WS_ERR_INVALID_UTF8":
      return [1007, "Invalid UTF-8"];
    case "WS_ERR_TOO_MANY_BUFFERED_PARTS":
      return [1008, "Too many fragments"];
    default:
      return [1002, "Protocol error"];
  }
}
