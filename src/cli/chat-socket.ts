/**
 * The terminal chat's connection to a conversation's agent: its events websocket with `resend_all` (the history,
 * then each new event), as the OpenHands UI opens it. Each text message is handed on as parsed JSON (one that is
 * not JSON is dropped), and the end of the socket, a refused upgrade or a close, as one line saying why.
 */
import WebSocket from "ws";
import { errorMessage } from "./api-client.ts";

export interface EventSocketHandlers {
  open(ws: WebSocket): void;
  event(ws: WebSocket, event: unknown): void;
  /** The socket is down: the agent refused the upgrade (code: the HTTP status) or it closed (the close code). */
  down(ws: WebSocket, why: string, code: number): void;
}

/** Opens the events websocket of conversation `id` at the agent's base URL (http or https) with its session key. */
export function openEventSocket(
  agentBase: string,
  id: string,
  sessionKey: string,
  on: EventSocketHandlers,
): WebSocket {
  const base = agentBase.replace(/^http/, "ws");
  const key = encodeURIComponent(sessionKey);
  const ws = new WebSocket(
    `${base}/sockets/events/${encodeURIComponent(id)}?resend_all=true&session_api_key=${key}`,
  );
  ws.on("open", () => on.open(ws));
  ws.on("message", (data, isBinary) => {
    if (isBinary) return;
    let event: unknown;
    try {
      event = JSON.parse(data.toString());
    } catch {
      return;
    }
    on.event(ws, event);
  });
  ws.on("unexpected-response", (_req, res) => {
    let text = "";
    res.on("data", (d: Buffer) => {
      text += d.toString();
    });
    res.on("end", () => {
      let parsed: unknown = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        // not JSON
      }
      on.down(
        ws,
        `the agent refused the connection: ${errorMessage(res.statusCode ?? 0, parsed)}`,
        res.statusCode ?? 0,
      );
    });
  });
  ws.on("error", () => {
    // 'close' follows with the code
  });
  ws.on("close", (code, reason) => {
    on.down(
      ws,
      `the connection to the agent closed (${code}${reason.length > 0 ? `: ${reason.toString()}` : ""})`,
      code,
    );
  });
  return ws;
}
