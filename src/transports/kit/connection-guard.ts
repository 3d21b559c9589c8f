import type { Server, Socket } from "node:net";

/** A connection's state as the guard sees it. */
interface Tracked {
  /** Requests (HTTP/1.1) or calls (gRPC) in flight on it. */
  busy: number;
  /** Whether a request or call has ever started on it. */
  used: boolean;
  /** Closes it if no request has started by then. */
  timer: NodeJS.Timeout | undefined;
  /** `address:port` of the client, taken at accept (a closed socket no longer has it). */
  peer: string | undefined;
}

export interface ConnectionGuardOptions {
  /** Open connections on the listener; beyond, the oldest idle one is closed, else the new one. */
  readonly maxConnections: number;
  /** A connection on which no request (HTTP/1.1 head, gRPC call) has started within this is closed. */
  readonly firstRequestTimeoutMs: number;
}

/**
 * Guards one listener against connections that hold a place without using it. Node checks its header timeout
 * only for connections that have begun a request (and only every `connectionsCheckingInterval`), and its
 * `maxConnections` refuses the newest connection whatever the others do; so a client that opens sockets and sends
 * nothing can keep every other client out. Here:
 * - a connection on which no request or call has started within `firstRequestTimeoutMs` is destroyed (it sent
 *   nothing, stopped halfway through its first request head, or an HTTP/2 preface with no stream after it);
 * - at `maxConnections` a new connection closes the connection that has been idle longest (no request in flight:
 *   never used, or kept alive between requests) and takes its place; only when every connection has a request in
 *   flight is the new one closed at once.
 *
 * The transport says when a request starts and ends on a socket (`begin`, which returns the matching end).
 */
export class ConnectionGuard {
  readonly #options: ConnectionGuardOptions;
  readonly #tracked = new Map<Socket, Tracked>();
  /** Connections with nothing in flight, the longest idle first (a Set keeps insertion order). */
  readonly #idle = new Set<Socket>();
  /** HTTP/2 calls name their connection by the peer address (grpc-js `getPeer()`). */
  readonly #byPeer = new Map<string, Socket>();

  constructor(options: ConnectionGuardOptions) {
    this.#options = options;
  }

  /** Open connections the guard tracks. */
  get size(): number {
    return this.#tracked.size;
  }

  /** Guards every connection `server` accepts (register before other 'connection' listeners see it). */
  attach(server: Server): void {
    server.prependListener("connection", (socket: Socket) => this.admit(socket));
  }

  /** Takes a new connection in (closing it, or the longest idle one, at the cap); false when it was closed. */
  admit(socket: Socket): boolean {
    if (this.#tracked.size >= this.#options.maxConnections) {
      const oldest = this.#idle.values().next().value;
      if (oldest === undefined) {
        socket.destroy();
        return false;
      }
      this.#drop(oldest);
      oldest.destroy();
    }
    const timer = setTimeout(() => {
      const t = this.#tracked.get(socket);
      if (t !== undefined && !t.used) socket.destroy();
    }, this.#options.firstRequestTimeoutMs);
    timer.unref();
    const peer = peerOf(socket);
    this.#tracked.set(socket, { busy: 0, used: false, timer, peer });
    this.#idle.add(socket);
    if (peer !== undefined) this.#byPeer.set(peer, socket);
    socket.once("close", () => this.#drop(socket));
    return true;
  }

  /**
   * A request or call starts on `socket`; the returned function ends it (idempotent). Over TLS the request's socket
   * is the TLS socket on top of the accepted one: the connection is then found by its peer address.
   */
  begin(socket: Socket): () => void {
    const conn = this.#tracked.has(socket) ? socket : this.#byPeer.get(peerOf(socket) ?? "");
    const t = conn === undefined ? undefined : this.#tracked.get(conn);
    if (conn === undefined || t === undefined) return () => {};
    t.busy += 1;
    t.used = true;
    if (t.timer !== undefined) {
      clearTimeout(t.timer);
      t.timer = undefined;
    }
    this.#idle.delete(conn);
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      t.busy -= 1;
      // Still open and now idle: to the end of the idle order (idle the shortest).
      if (t.busy === 0 && this.#tracked.get(conn) === t) this.#idle.add(conn);
    };
  }

  /** `begin` for the connection a gRPC call names by its peer address (grpc-js `call.getPeer()`). */
  beginPeer(peer: string): () => void {
    const socket = this.#byPeer.get(peer);
    return socket === undefined ? () => {} : this.begin(socket);
  }

  #drop(socket: Socket): void {
    const t = this.#tracked.get(socket);
    if (t === undefined) return;
    if (t.timer !== undefined) clearTimeout(t.timer);
    this.#tracked.delete(socket);
    this.#idle.delete(socket);
    if (t.peer !== undefined && this.#byPeer.get(t.peer) === socket) this.#byPeer.delete(t.peer);
  }
}

/** The connection's peer as grpc-js names it: `address:port`. */
function peerOf(socket: Socket): string | undefined {
  const { remoteAddress, remotePort } = socket;
  if (remoteAddress === undefined) return undefined;
  return remotePort === undefined ? remoteAddress : `${remoteAddress}:${remotePort}`;
}
