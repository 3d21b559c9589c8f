/**
 * The agent proxy's websocket half: `GET /sockets/events/{id}?session_api_key=<sandbox key>&…` upgraded on the
 * service's own listener is relayed to the same path on the agent the key's sandbox recorded, on the wire of
 * src/transports/agent-proxy/frame-relay.ts (the agent's frames passed through as read, the client's parsed and checked) after the
 * handshakes of src/transports/agent-proxy/socket-handshake.ts. The agent's handshake comes first: the client's upgrade is accepted
 * only once the agent accepted, so a refusal is an HTTP answer with a JSON body, never a socket that opens and
 * hangs; what the agent sends at once waits unread until the relay listens.
 *
 * Bounds: a message from the client of at most maxMessageBytes (close 1009), messagesPerSecond per socket (close
 * 1008), socketsPerUser open sockets per sandbox owner on this server process (429), the agent's messages at most
 * 64 times maxMessageBytes, a client that does not read stops the agent's side (backpressure, never an unbounded
 * queue), and a sandbox that stops running (paused, deleted, ERROR) has its sockets closed within checkMs (1001
 * "sandbox is not running").
 */
import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import { RateLimiter } from "../../core/rate-limiter.ts";
import type { AgentTarget } from "../../domain/sandboxes/agent-targets.ts";
import { pathOf, SOCKET_PREFIX, socketKey } from "./agent-calls.ts";
import { AgentCallError, type AgentProxyDeps, resolveAgent } from "./agent-http.ts";
import { FrameRelay } from "./frame-relay.ts";
import {
  type AgentWire,
  acceptClient,
  clientHandshakeProblem,
  connectAgent,
  type Refusal,
} from "./socket-handshake.ts";

export interface AgentSocketLimits {
  /** Largest message a client may send (the agent's messages may be up to 64 times that). */
  maxMessageBytes: number;
  /** Messages a client may send per second on one socket (burst twice that); 0: no limit. */
  messagesPerSecond: number;
  /** Open sockets per sandbox owner on this server process. */
  socketsPerUser: number;
  /** How long the agent has to accept the handshake. */
  handshakeTimeoutMs: number;
  /** How often open sockets' sandboxes are checked (still running, key still valid). */
  checkMs: number;
}

interface Relay {
  key: string;
  ownerId: string;
  sandboxId: string;
  /** Closes both sides (set once the relay runs). */
  end?: (code: number, reason: string) => void;
}

/** How many times a client message's limit an agent message may be. */
const AGENT_MESSAGE_FACTOR = 64;

/** Relays the agent events websockets (see the module's comment). */
export class AgentSockets {
  readonly #deps: Pick<AgentProxyDeps, "target" | "userOf" | "logger">;
  readonly #limits: AgentSocketLimits;
  readonly #relays = new Set<Relay>();
  readonly #perUser = new Map<string, number>();
  #timer: NodeJS.Timeout | undefined;
  #checking = false;
  #closed = false;

  constructor(deps: Pick<AgentProxyDeps, "target" | "userOf" | "logger">, limits: AgentSocketLimits) {
    this.#deps = deps;
    this.#limits = limits;
  }

  /** Open relays (for tests and metrics). */
  get size(): number {
    return this.#relays.size;
  }

  /** Whether an upgrade request is for the events websocket (else the caller refuses it). */
  serves(req: IncomingMessage): boolean {
    return pathOf(req.url ?? "").startsWith(SOCKET_PREFIX);
  }

  /** Takes over an upgrade request for the events websocket. */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on("error", destroyOnError);
    void this.#upgrade(req, socket, head).catch((err: unknown) => {
      this.#deps.logger.error({ err }, "agent socket failed");
      refuse(socket, 502, "The sandbox's agent could not be reached");
    });
  }

  async #upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    if (this.#closed) return refuse(socket, 503, "The server is shutting down");
    const problem = clientHandshakeProblem(req);
    if (problem !== undefined) return refuse(socket, problem.status, problem.detail, problem.headers);
    const url = new URL(req.url ?? "/", "http://agent");
    const key = socketKey(url, req.headers);
    if (key === undefined)
      return refuse(socket, 401, "A sandbox session key is required (the session_api_key query parameter)");
    let target: AgentTarget & { agentUrl: string };
    try {
      target = await resolveAgent(this.#deps, key, req);
    } catch (err) {
      if (err instanceof AgentCallError) return refuse(socket, err.status, err.message, err.headers);
      throw err;
    }
    const uncount = this.#count(target.ownerId);
    if (uncount === undefined)
      return refuse(
        socket,
        429,
        `Too many open agent websockets: a user may have ${this.#limits.socketsPerUser} open; close one first`,
      );
    socket.once("close", uncount);
    // The agent's side first: the same path and query on the recorded agent, no header of the client's.
    const agent = await reachAgent(
      new URL(url.pathname + url.search, new URL(target.agentUrl).origin),
      this.#limits.handshakeTimeoutMs,
      socket,
    );
    if (!("socket" in agent) || socket.destroyed || !socket.writable) {
      uncount();
      if ("socket" in agent) agent.socket.destroy();
      if ("socket" in agent || agent.status === 499) socket.destroy();
      else refuse(socket, agent.status, agent.detail);
      return;
    }
    acceptClient(req, socket);
    this.#relay({ key, ownerId: target.ownerId, sandboxId: target.sandboxId }, socket, head, agent, uncount);
  }

  /**
   * Counts an open socket for `ownerId`: the function that uncounts it (once), or undefined when the owner has
   * socketsPerUser open already. (Its own function, so that an open relay keeps only this much of the upgrade's.)
   */
  #count(ownerId: string): (() => void) | undefined {
    const open = this.#perUser.get(ownerId) ?? 0;
    if (open >= this.#limits.socketsPerUser) return undefined;
    this.#perUser.set(ownerId, open + 1);
    let counted = true;
    return () => {
      if (!counted) return;
      counted = false;
      const n = (this.#perUser.get(ownerId) ?? 1) - 1;
      if (n <= 0) this.#perUser.delete(ownerId);
      else this.#perUser.set(ownerId, n);
    };
  }

  #relay(r: Relay, client: Duplex, head: Buffer, agent: AgentWire, uncount: () => void): void {
    const rate = new RateLimiter(
      this.#limits.messagesPerSecond,
      Math.max(1, this.#limits.messagesPerSecond * 2),
    );
    this.#relays.add(r);
    this.#watch();
    const relay = new FrameRelay(client, head, agent, {
      maxClientMessageBytes: this.#limits.maxMessageBytes,
      maxAgentMessageBytes: this.#limits.maxMessageBytes * AGENT_MESSAGE_FACTOR,
      admit: () => {
        if (!rate.has("socket")) return false;
        rate.spend("socket");
        return true;
      },
      onEnd: () => {
        this.#relays.delete(r);
        uncount();
      },
    });
    r.end = (code, reason) => relay.end(code, reason);
  }

  /** Checks open sockets' sandboxes every checkMs while any is open; closes those whose sandbox stopped running. */
  #watch(): void {
    if (this.#timer !== undefined) return;
    this.#timer = setInterval(() => {
      if (this.#relays.size === 0) {
        clearInterval(this.#timer);
        this.#timer = undefined;
        return;
      }
      if (this.#checking) return;
      this.#checking = true;
      void this.#check().finally(() => {
        this.#checking = false;
      });
    }, this.#limits.checkMs);
    this.#timer.unref();
  }

  async #check(): Promise<void> {
    const byKey = new Map<string, Relay[]>();
    for (const r of this.#relays) byKey.set(r.key, [...(byKey.get(r.key) ?? []), r]);
    for (const [key, relays] of byKey) {
      const t = await this.#deps.target(key).catch(() => undefined);
      if (t === undefined) continue; // storage hiccup: check again next time
      if (t === null || t.status !== "RUNNING")
        for (const r of relays) r.end?.(1001, "sandbox is not running");
    }
  }

  /** Closes every relay (1001) and refuses new ones. */
  close(): void {
    this.#closed = true;
    clearInterval(this.#timer);
    this.#timer = undefined;
    for (const r of [...this.#relays]) r.end?.(1001, "server shutting down");
  }
}

/** Opens the agent's side for a client's socket; 499 when the client goes away first. */
async function reachAgent(url: URL, timeoutMs: number, client: Duplex): Promise<AgentWire | Refusal> {
  const gone = new AbortController();
  const onGone = () => gone.abort();
  client.once("close", onGone);
  try {
    return await connectAgent(url, timeoutMs, gone.signal);
  } finally {
    client.off("close", onGone);
  }
}

function destroyOnError(this: Duplex): void {
  this.destroy();
}

/** Answers an upgrade request with an HTTP error and a JSON body, then closes the socket. */
function refuse(socket: Duplex, status: number, detail: string, headers: Record<string, string> = {}): void {
  if (socket.destroyed) return;
  const body = JSON.stringify({ detail });
  const extra = Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join("");
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? "Error"}\r\n` +
      "content-type: application/json\r\nx-content-type-options: nosniff\r\nconnection: close\r\n" +
      `content-length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`,
  );
}

const STATUS_TEXT: Record<number, string> = {
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  405: "Method Not Allowed",
  409: "Conflict",
  429: "Too Many Requests",
  502: "Bad Gateway",
  503: "Service Unavailable",
};
