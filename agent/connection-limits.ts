/**
 * What one client may hold of the agent's server ({@link ConnectionLimits}), applied to its connections by
 * {@link guardConnections}.
 */
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { Duplex } from "node:stream";

/**
 * What one client may hold of the agent's server. The agent's port is on the host's loopback, where every sandbox
 * reaches it: without these, one sandbox opening idle connections would take another's agent's descriptors.
 */
export interface ConnectionLimits {
  /**
   * Open connections (default 256). At the cap a new connection closes the one idle longest (never used, or kept
   * alive with no request in flight) and takes its place, so `/alive` is still answered under a flood; only when
   * every connection has a request in flight (or is a websocket) is the new one closed.
   */
  maxConnections: number;
  /** A connection that sends no complete request head within this is closed (default 10 s; also Node's headersTimeout). */
  headersTimeoutMs: number;
  /** A connection idle this long after its last answer is closed (default 30 s; Node's keepAliveTimeout). */
  idleTimeoutMs: number;
}

export const DEFAULT_CONNECTION_LIMITS: ConnectionLimits = Object.freeze({
  maxConnections: 256,
  headersTimeoutMs: 10_000,
  idleTimeoutMs: 30_000,
});

/** A connection as {@link guardConnections} sees it. */
interface Held {
  /** Requests in flight; -1 once it is a websocket (never idle). */
  busy: number;
  used: boolean;
  timer: NodeJS.Timeout | undefined;
}

/**
 * Applies {@link ConnectionLimits} to the server's connections: a timer closes a connection idle too long (never
 * used: the header timeout; after an answer: the idle timeout), and at the cap the connection idle longest makes
 * room for a new one. Node's own `maxConnections` would refuse the newest instead (the service's health probe
 * among them), and its header timeout ignores a connection that never sends a byte.
 *
 * Returns a function that closes every connection the server holds: accepted, handed to it through its
 * "connection" event (a warm agent's early socket), or upgraded to a websocket. Node's closeAllConnections knows
 * only the HTTP connections of a server that listened itself, and one left open holds the process at shutdown.
 */
export function guardConnections(server: Server, limits: ConnectionLimits): () => void {
  const held = new Map<Duplex, Held>();
  /** Connections with nothing in flight, idle longest first (a Set keeps insertion order). */
  const idle = new Set<Duplex>();
  const rest = (socket: Duplex, h: Held): void => {
    idle.add(socket);
    clearTimeout(h.timer);
    h.timer = setTimeout(
      () => socket.destroy(),
      h.used ? limits.idleTimeoutMs : limits.headersTimeoutMs,
    ).unref();
  };
  const work = (socket: Duplex): Held | undefined => {
    const h = held.get(socket);
    if (h === undefined) return undefined;
    idle.delete(socket);
    clearTimeout(h.timer);
    h.timer = undefined;
    h.used = true;
    return h;
  };
  server.prependListener("connection", (socket: Duplex) => {
    if (held.size >= limits.maxConnections) {
      const oldest = idle.values().next().value;
      if (oldest === undefined) {
        socket.destroy();
        return;
      }
      oldest.destroy();
      forget(oldest);
    }
    const h: Held = { busy: 0, used: false, timer: undefined };
    held.set(socket, h);
    rest(socket, h);
    socket.once("close", () => forget(socket));
  });
  const forget = (socket: Duplex): void => {
    const h = held.get(socket);
    if (h === undefined) return;
    clearTimeout(h.timer);
    held.delete(socket);
    idle.delete(socket);
  };
  server.prependListener("request", (req: IncomingMessage, res: ServerResponse) => {
    const socket = req.socket;
    const h = work(socket);
    if (h === undefined) return;
    h.busy += 1;
    res.once("close", () => {
      if (h.busy < 0 || held.get(socket) !== h) return;
      h.busy -= 1;
      if (h.busy === 0) rest(socket, h);
    });
  });
  server.prependListener("upgrade", (req: IncomingMessage) => {
    const h = work(req.socket);
    if (h !== undefined) h.busy = -1;
  });
  return () => {
    for (const socket of [...held.keys()]) socket.destroy();
  };
}
