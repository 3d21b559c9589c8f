/**
 * The conversation side of the built-in agent server, loaded on the first conversation (an idle agent never loads
 * it): the conversation routes the app server and the OpenHands UI call, the events websocket, and the workspace
 * routes (git changes and diff, file upload, VS Code URL). Shapes follow the OpenHands agent-server (SDK v1.3.0).
 */
import { randomUUID } from "node:crypto";
import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import type { WebSocket, WebSocketServer } from "ws";
import { Conversation } from "./conversation.ts";
import { normaliseId, parseMessage } from "./conversation-requests.ts";
import { firstUserText } from "./conversation-state.ts";
import { ConversationStore } from "./conversation-store.ts";
import { MAX_PAGE, searchEvents } from "./event-search.ts";
import type { Json } from "./json.ts";
import { detail, type Reply, unprocessable } from "./replies.ts";
import type { Webhook } from "./webhook.ts";
import { workspaceRoute } from "./workspace-routes.ts";

/** What the agent server hands the conversation side. */
export interface RuntimeContext {
  workspaceDir: string;
  shell: string;
  commandEnv: Record<string, string> | undefined;
  hook: Webhook | null;
  readJson: (req: IncomingMessage) => Promise<Json>;
  maxBodyBytes: number;
  maxUploadBytes: number;
  /** Where conversations are saved and, at creation, restored from (see conversation-store.ts); null: nowhere. */
  stateDir: string | null;
  sessionApiKey: string;
  /** A full garbage collection, run once every conversation has been idle for IDLE_COLLECT_MS after a turn. */
  collectGarbage: (() => void) | null;
}

export interface ConversationRuntime {
  /** Answers a request under /api/conversations, /api/git, /api/file or /api/vscode; null when no route matches. */
  route(req: IncomingMessage, url: URL, path: string, method: string): Promise<Reply | null>;
  /** Takes over an authorised upgrade request for /sockets/events/{id}. */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, url: URL): void;
  /** Stops every conversation's loop and shell and closes the websockets. */
  close(): void;
}

/**
 * V8 keeps the garbage of a conversation's turns in its old space until that reaches its limit (several times what
 * is live), and its memory reducer does not run for a heap this small: once every conversation has been idle this
 * long after a turn, one full collection (ctx.collectGarbage, ~45 ms here) gives it back (docs/builtin-agent.md).
 * Long enough that a person (or a team's script) answering the agent does not send into it: at 1 s, messages sent
 * 1.0–1.3 s after a turn waited for the collection (p90 96 ms against 5–14 ms; docs/performance.md, "Team load").
 */
const IDLE_COLLECT_MS = 4000;
const TRUE = new Set(["true", "1", "yes", "on"]);

export function createConversationRuntime(ctx: RuntimeContext): ConversationRuntime {
  const conversations = new Map<string, Conversation>();
  const sockets = new Map<string, Set<WebSocket>>();
  // `ws` is loaded on the first websocket, `openai` on the first model call: the REST routes need neither.
  let wss: Promise<WebSocketServer> | undefined;
  const websocketServer = (): Promise<WebSocketServer> =>
    (wss ??= import("ws").then(
      ({ WebSocketServer }) => new WebSocketServer({ noServer: true, maxPayload: ctx.maxBodyBytes }),
    ));

  const store =
    ctx.stateDir === null
      ? null
      : new ConversationStore(ctx.stateDir, ctx.sessionApiKey, (msg) => process.emitWarning(msg));
  let idleTimer: NodeJS.Timeout | undefined;
  const collectWhenIdle = (): void => {
    if (ctx.collectGarbage === null) return;
    clearTimeout(idleTimer);
    idleTimer = setTimeout(() => {
      idleTimer = undefined;
      for (const c of conversations.values()) if (c.status === "running") return; // its turn's end collects
      ctx.collectGarbage?.();
    }, IDLE_COLLECT_MS);
    idleTimer.unref();
  };
  const host = {
    workspaceDir: ctx.workspaceDir,
    shell: ctx.shell,
    commandEnv: ctx.commandEnv,
    onEvent(conversation: Conversation, event: Json): void {
      store?.append(conversation.id, event);
      ctx.hook?.event(conversation.id, event);
      const set = sockets.get(conversation.id);
      if (set === undefined || set.size === 0) return;
      const text = JSON.stringify(event);
      for (const ws of set) if (ws.readyState === ws.OPEN) ws.send(text);
    },
    onInfo(conversation: Conversation): void {
      store?.saveInfo(conversation.id, conversation.record);
      ctx.hook?.conversation(conversation.record);
      if (conversation.status !== "running") collectWhenIdle();
    },
  };
  // The conversations an earlier process of this agent saved (it crashed, or the sandbox was started again).
  for (const saved of store?.loadAll() ?? []) {
    const conversation = new Conversation(saved.id, saved.body, host);
    conversations.set(saved.id, conversation);
    conversation.restore(saved.record, saved.events);
  }

  const find = (raw: string): Conversation | undefined => {
    const id = normaliseId(decodeURIComponent(raw));
    return id === null ? undefined : conversations.get(id);
  };

  function start(body: Json): Reply {
    let id: string;
    const requested = body.conversation_id;
    if (requested === undefined || requested === null) id = randomUUID().replaceAll("-", "");
    else {
      const parsed = typeof requested === "string" ? normaliseId(requested) : null;
      if (parsed === null)
        throw unprocessable([
          {
            type: "uuid_parsing",
            loc: ["body", "conversation_id"],
            msg: "Input should be a valid UUID",
            input: requested,
          },
        ]);
      id = parsed;
    }
    const existing = conversations.get(id);
    if (existing) return { status: 200, body: existing.record };
    const initial =
      body.initial_message === undefined || body.initial_message === null
        ? null
        : parseMessage(body.initial_message, ["body", "initial_message"]);
    const maxIterations = body.max_iterations;
    if (
      maxIterations !== undefined &&
      maxIterations !== null &&
      (typeof maxIterations !== "number" || !Number.isInteger(maxIterations) || maxIterations < 1)
    )
      throw unprocessable([
        {
          type: "greater_than_equal",
          loc: ["body", "max_iterations"],
          msg: "Input should be an integer greater than or equal to 1",
          input: maxIterations,
        },
      ]);
    const conversation = new Conversation(id, body, host);
    conversations.set(id, conversation);
    store?.create(id, body, conversation.record);
    if (initial !== null) conversation.sendMessage(initial.role, initial.content, true);
    conversation.announceStatus();
    host.onInfo(conversation);
    return { status: 200, body: conversation.record };
  }

  async function route(req: IncomingMessage, url: URL, path: string, method: string): Promise<Reply | null> {
    if (!path.startsWith("/api/conversations")) return workspaceRoute(req, url, path, method, ctx);
    if (path === "/api/conversations") {
      if (method === "POST") return start(await ctx.readJson(req));
      if (method !== "GET") return detail(405, "Method Not Allowed");
      const ids = url.searchParams.getAll("ids");
      if (ids.length === 0)
        throw unprocessable([{ type: "missing", loc: ["query", "ids"], msg: "Field required", input: null }]);
      return { status: 200, body: ids.map((raw) => find(raw)?.record ?? null) };
    }
    const m = /^\/api\/conversations\/([^/]+)(?:\/(.+))?$/.exec(path);
    if (m === null) return null;
    const conversation = find(m[1] ?? "");
    const sub = m[2] ?? "";
    if (conversation === undefined) {
      // The reference answers 400 to a delete of an unknown conversation, 404 elsewhere.
      if (sub === "" && method === "DELETE") return detail(400, "Bad Request");
      return detail(404, "Not Found");
    }
    const post = async (handle: (body: Json) => Reply): Promise<Reply> => {
      if (method !== "POST") return detail(405, "Method Not Allowed");
      return handle(await ctx.readJson(req));
    };
    switch (sub) {
      case "":
        if (method === "GET") return { status: 200, body: conversation.record };
        if (method === "DELETE") {
          conversation.close();
          conversations.delete(conversation.id);
          store?.delete(conversation.id);
          for (const ws of sockets.get(conversation.id) ?? []) ws.close(1000, "Conversation deleted");
          sockets.delete(conversation.id);
          return { status: 200, body: { success: true } };
        }
        if (method === "PATCH") {
          const body = await ctx.readJson(req);
          const title = body.title;
          if (typeof title !== "string" || title.length < 1 || title.length > 200)
            throw unprocessable([
              {
                type: "string_type",
                loc: ["body", "title"],
                msg: "Input should be a string of 1 to 200 characters",
                input: title ?? null,
              },
            ]);
          conversation.setTitle(title);
          return { status: 200, body: { success: true } };
        }
        return detail(405, "Method Not Allowed");
      case "events":
        return post((body) => {
          const message = parseMessage(body, ["body"]);
          conversation.sendMessage(message.role, message.content, body.run === true);
          return { status: 200, body: { success: true } };
        });
      case "events/respond_to_confirmation":
        return post((body) => {
          if (typeof body.accept !== "boolean")
            throw unprocessable([
              {
                type: body.accept === undefined ? "missing" : "bool_type",
                loc: ["body", "accept"],
                msg: body.accept === undefined ? "Field required" : "Input should be a valid boolean",
                input: body.accept ?? null,
              },
            ]);
          const reason = typeof body.reason === "string" ? body.reason : "User rejected the action.";
          conversation.respond(body.accept, reason);
          return { status: 200, body: { success: true } };
        });
      case "events/search":
        if (method !== "GET") return detail(405, "Method Not Allowed");
        return { status: 200, body: searchEvents(conversation.events, url.searchParams) };
      case "events/count": {
        if (method !== "GET") return detail(405, "Method Not Allowed");
        const q = new URLSearchParams(url.searchParams);
        q.delete("page_id");
        q.set("limit", String(MAX_PAGE));
        let count = 0;
        for (let page: Json | null = searchEvents(conversation.events, q); page !== null; ) {
          count += (page.items as Json[]).length;
          const next = page.next_page_id;
          if (typeof next !== "string") break;
          q.set("page_id", next);
          page = searchEvents(conversation.events, q);
        }
        return { status: 200, body: count };
      }
      case "run":
        if (method !== "POST") return detail(405, "Method Not Allowed");
        if (!conversation.run())
          return detail(409, "Conversation already running. Wait for completion or pause first.");
        return { status: 200, body: { success: true } };
      case "pause":
        if (method !== "POST") return detail(405, "Method Not Allowed");
        conversation.pause();
        return { status: 200, body: { success: true } };
      case "generate_title":
        return post((body) => {
          const max = body.max_length ?? 50;
          if (typeof max !== "number" || !Number.isInteger(max) || max < 1 || max > 200)
            throw unprocessable([
              {
                type: "int_type",
                loc: ["body", "max_length"],
                msg: "Input should be an integer 1..200",
                input: max,
              },
            ]);
          const text = firstUserText(conversation.events);
          if (text === null) return detail(500, "Internal Server Error");
          return { status: 200, body: { title: text.length > max ? `${text.slice(0, max - 3)}...` : text } };
        });
      default: {
        if (sub.startsWith("events/") && method === "GET") {
          const eventId = decodeURIComponent(sub.slice("events/".length));
          const event = conversation.events.find((e) => e.id === eventId);
          return event ? { status: 200, body: event } : detail(404, "Not Found");
        }
        return detail(404, "Not Found");
      }
    }
  }

  function upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, url: URL): void {
    const raw = url.pathname.replace(/\/+$/, "").slice("/sockets/events/".length);
    const resendAll = TRUE.has((url.searchParams.get("resend_all") ?? "").toLowerCase());
    websocketServer().then(
      (server) => server.handleUpgrade(req, socket, head, (ws) => accept(ws, raw, resendAll)),
      (e: unknown) => {
        wss = undefined;
        process.emitWarning(`agent websocket failed: ${e instanceof Error ? e.message : String(e)}`);
        const body = JSON.stringify({ detail: "The agent cannot load its websocket package (ws)" });
        socket.end(
          `HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
        );
      },
    );
  }

  function accept(ws: WebSocket, raw: string, resendAll: boolean): void {
    const conversation = find(raw);
    if (conversation === undefined) {
      ws.close(4004, "Conversation not found");
      return;
    }
    let set = sockets.get(conversation.id);
    if (set === undefined) {
      set = new Set();
      sockets.set(conversation.id, set);
    }
    // The state first, then (resend_all) every past event; new events follow as they happen.
    ws.send(JSON.stringify(conversation.fullState()));
    if (resendAll) for (const e of conversation.events) ws.send(JSON.stringify(e));
    set.add(ws);
    ws.on("message", (data, isBinary) => {
      if (isBinary) return;
      let message: { role: string; content: Json[] };
      try {
        message = parseMessage(JSON.parse(data.toString()), ["body"]);
      } catch {
        return; // as the reference: a bad message is logged and the socket stays open
      }
      const current = conversations.get(conversation.id);
      current?.sendMessage(message.role, message.content, true);
    });
    ws.on("close", () => set.delete(ws));
    ws.on("error", () => set.delete(ws));
  }

  return {
    route,
    upgrade,
    close(): void {
      clearTimeout(idleTimer);
      for (const c of conversations.values()) c.close();
      for (const set of sockets.values()) for (const ws of set) ws.terminate();
      void wss?.then((server) => server.close()).catch(() => {});
    },
  };
}
