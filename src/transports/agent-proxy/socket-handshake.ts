/**
 * The two websocket handshakes of the agent proxy's relay (src/transports/agent-proxy/frame-relay.ts): the client's upgrade request
 * checked and answered as `ws`'s server would (no extension, the first subprotocol listed), and the agent's side
 * opened with an `http.request` upgrade that offers no extension and refuses an answer that names one, so that the
 * agent's frames are already the frames the client must receive. Written here rather than with `ws`'s server and
 * client because the relay needs the bare sockets under them, which `ws` does not hand out.
 */
import { createHash, randomBytes } from "node:crypto";
import { type ClientRequest, request as httpRequest, type IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import type { Duplex } from "node:stream";
import * as ws from "ws";

/** The websocket accept GUID of RFC 6455. */
const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
const KEY = /^[+/0-9A-Za-z]{22}==$/;
// A public export of `ws` (its index and ESM wrapper) that @types/ws does not declare.
const { subprotocol } = ws as unknown as { subprotocol: { parse(header: string): Set<string> } };

/** Why a websocket was not opened: an HTTP status, a detail for the JSON body, and headers to add. */
export interface Refusal {
  status: number;
  detail: string;
  headers?: Record<string, string>;
}

/**
 * What is wrong with a client's upgrade request, as `ws`'s server checks it (method, Upgrade, key, version,
 * subprotocol list); undefined when it may be answered.
 */
export function clientHandshakeProblem(req: IncomingMessage): Refusal | undefined {
  if (req.method !== "GET") return { status: 405, detail: "A websocket handshake is a GET" };
  if (req.headers.upgrade?.toLowerCase() !== "websocket")
    return { status: 400, detail: "Invalid Upgrade header" };
  const key = req.headers["sec-websocket-key"];
  if (key === undefined || !KEY.test(key))
    return { status: 400, detail: "Missing or invalid Sec-WebSocket-Key header" };
  const version = Number(req.headers["sec-websocket-version"]);
  if (version !== 13 && version !== 8)
    return {
      status: 400,
      detail: "Missing or invalid Sec-WebSocket-Version header",
      headers: { "Sec-WebSocket-Version": "13, 8" },
    };
  const protocols = req.headers["sec-websocket-protocol"];
  if (protocols !== undefined)
    try {
      subprotocol.parse(protocols);
    } catch {
      return { status: 400, detail: "Invalid Sec-WebSocket-Protocol header" };
    }
  return undefined;
}

/**
 * Answers a client's upgrade request (checked by {@link clientHandshakeProblem}) with 101: no extension, and the
 * first subprotocol it listed, as `ws`'s server does without a protocol handler.
 */
export function acceptClient(req: IncomingMessage, socket: Duplex): void {
  const accept = createHash("sha1").update(`${req.headers["sec-websocket-key"]}${GUID}`).digest("base64");
  const protocols = req.headers["sec-websocket-protocol"];
  const protocol = protocols === undefined ? undefined : subprotocol.parse(protocols).values().next().value;
  socket.write(
    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
      `Sec-WebSocket-Accept: ${accept}\r\n${protocol === undefined ? "" : `Sec-WebSocket-Protocol: ${protocol}\r\n`}\r\n`,
  );
}

/** An agent's side once its handshake succeeded: the socket, and the bytes that came with the answer. */
export interface AgentWire {
  socket: Duplex;
  head: Buffer;
}

/**
 * Opens the agent's side: a websocket handshake to `url` (the agent's http: or https: URL) offering no extension and no subprotocol,
 * with no header of the client's. The socket is handed over unread (what the agent sends at once waits in it, and
 * in `head`, until the relay listens). Refusals: 502 when the agent cannot be reached within `timeoutMs`, answers
 * anything but 101, or answers 101 wrongly (its accept key, or an extension or subprotocol it was not offered);
 * 499 when `signal` aborts first (the client went away).
 */
export function connectAgent(url: URL, timeoutMs: number, signal: AbortSignal): Promise<AgentWire | Refusal> {
  return new Promise((resolve) => {
    const key = randomBytes(16).toString("base64");
    const request = url.protocol === "https:" ? httpsRequest : httpRequest;
    let req: ClientRequest | undefined;
    let done = false;
    const settle = (outcome: AgentWire | Refusal) => {
      if (done) {
        if ("socket" in outcome) outcome.socket.destroy();
        return;
      }
      done = true;
      clearTimeout(timer);
      signal.removeEventListener("abort", onAbort);
      if (!("socket" in outcome)) req?.destroy();
      resolve(outcome);
    };
    const unreachable = () => settle({ status: 502, detail: "The sandbox's agent could not be reached" });
    const onAbort = () => settle({ status: 499, detail: "client went away" });
    const timer = setTimeout(unreachable, timeoutMs);
    if (signal.aborted) return onAbort();
    signal.addEventListener("abort", onAbort);
    req = request(url, {
      agent: false,
      headers: {
        connection: "Upgrade",
        upgrade: "websocket",
        "sec-websocket-version": "13",
        "sec-websocket-key": key,
      },
    });
    req.on("error", unreachable);
    req.on("response", (res) => {
      res.resume();
      settle({ status: 502, detail: `The sandbox's agent refused the websocket (${res.statusCode})` });
    });
    req.on("upgrade", (res: IncomingMessage, socket: Duplex, head: Buffer) => {
      socket.on("error", destroyOnError);
      const wrong = (what: string) => {
        socket.destroy();
        settle({
          status: 502,
          detail: `The sandbox's agent answered the websocket handshake wrongly: ${what}`,
        });
      };
      const expected = createHash("sha1").update(`${key}${GUID}`).digest("base64");
      if (res.headers.upgrade?.toLowerCase() !== "websocket") return wrong("no Upgrade: websocket");
      if (res.headers["sec-websocket-accept"] !== expected) return wrong("a wrong Sec-WebSocket-Accept");
      const extensions = res.headers["sec-websocket-extensions"];
      if (extensions !== undefined)
        return wrong(`an extension it was not offered (${extensions.slice(0, 100)})`);
      if (res.headers["sec-websocket-protocol"] !== undefined)
        return wrong("a subprotocol it was not offered");
      settle({ socket, head });
    });
    req.end();
  });
}

/** A socket's error listener that keeps nothing alive but the socket (a closure would keep its whole scope). */
function destroyOnError(this: Duplex): void {
  this.destroy();
}
