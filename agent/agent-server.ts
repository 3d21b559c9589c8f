/**
 * The small agent server that the default sandbox specs run inside a sandbox (a child process or a container).
 *
 * Plain `node:http` (no framework) so that it starts in a few tens of milliseconds. This module and what it imports
 * (the bash command route, the connection limits, replies and request bodies, the webhook) use only Node built-ins;
 * the conversation side (conversations.ts: the agent loop, the events websocket, the workspace routes) is imported
 * on the first conversation request, and it loads the packages `ws` (first websocket) and `openai` (first model
 * call) itself, so an idle agent carries none of it. See docs/builtin-agent.md.
 */
import type { ChildProcess } from "node:child_process";
import { readdirSync } from "node:fs";
import type { IncomingMessage, Server } from "node:http";
import { resolve } from "node:path";
import type { Duplex } from "node:stream";
import { findShell, parseCommandRequest, runCommand } from "./bash-command.ts";
import { type ConnectionLimits, DEFAULT_CONNECTION_LIMITS, guardConnections } from "./connection-limits.ts";
import type { ConversationRuntime } from "./conversations.ts";
import { detail, type Reply, RequestError, sendReply, unprocessable } from "./replies.ts";
import { readJsonObject } from "./request-body.ts";
import { killTree } from "./shared/proc-tree.ts";
import { createWebhook, type WebhookOptions } from "./webhook.ts";

/** Options of {@link createAgentServer}. */
export interface AgentServerOptions {
  /** Every route except `/alive` and `/health` requires this value in `X-Session-API-Key`. */
  sessionApiKey: string;
  /** Commands run here by default; `cwd` of a command must lie inside it. */
  workspaceDir: string;
  /** Environment of executed commands (default: inherited from the agent process). */
  commandEnv?: Record<string, string>;
  /** Shell used as `<shell> -c <command>` (default: `bash` from PATH, else `/bin/sh`). */
  shell?: string;
  /** Request body limit in bytes (default 1 MiB); larger bodies get 413. */
  maxBodyBytes?: number;
  /** Output kept per stream of a command in bytes (default 1 MiB); the rest is dropped with a marker. */
  maxOutputBytes?: number;
  /** Where to report conversations and their events (the agent server's OH_WEBHOOKS_0_* settings). */
  webhook?: WebhookOptions;
  /** Largest file accepted by `POST /api/file/upload/{path}` in bytes (default 100 MiB); larger gets 413. */
  maxUploadBytes?: number;
  /**
   * Browser origins allowed to call the agent (CORS), as the reference's OH_ALLOW_CORS_ORIGINS: empty (default)
   * allows any `localhost` or `127.0.0.1` origin; otherwise exactly those listed (`*` for any).
   */
  corsOrigins?: string[];
  /**
   * Where conversations are saved, one folder each, and restored from when the server is created (see
   * conversation-store.ts); absent: kept in memory only.
   */
  stateDir?: string;
  /** Connection limits (see {@link ConnectionLimits}); each defaults as documented there. */
  connections?: Partial<ConnectionLimits>;
  /**
   * A full garbage collection, run once every conversation has been idle for 4 s after a turn (main.ts passes
   * V8's); absent: V8 alone decides when to collect.
   */
  collectGarbage?: () => void;
}

// The agent's start is on every sandbox's critical path. A static `import { .. } from "node:http"` (likewise crypto,
// child_process, os and module) makes the ESM loader read every export, which runs lazy getters such as http.WebSocket (loads
// undici) and crypto.webcrypto: about 40 ms of a 70 ms start here. getBuiltinModule hands over the module object
// without touching them.
const { createHash, timingSafeEqual } = process.getBuiltinModule("node:crypto");
const { createServer } = process.getBuiltinModule("node:http");

const MIB = 1024 * 1024;

/**
 * Creates (does not start) the agent server. Routes:
 * - `GET /alive` → `{"status":"ok"}`; `GET /health` → `"OK"` (no key needed);
 * - `POST /api/bash/execute_bash_command` `{command, cwd?, timeout?}` → {@link CommandResult};
 * - the conversation routes (`/api/conversations…`), `/api/git/…`, `/api/file/upload/…`, `/api/vscode/url` and the
 *   websocket `/sockets/events/{id}?session_api_key=…&resend_all=…`, answered by conversations.ts.
 *
 * Errors: 401 `{"detail":"Unauthorized"}` without the right key (403 for a websocket), 422 `{"detail":[...]}` for
 * bad JSON or fields, 413 for bodies over the limit, 404/405 for unknown routes, 500 `{"detail":"Internal Server
 * Error"}` otherwise. Commands run in the agent's own process group; closing the server kills the commands still
 * running, with every process below them, and stops every conversation.
 */
/** The agent's HTTP server, and the closing of every connection it holds (its shutdown; see guardConnections). */
export type AgentServer = Server & { closeEveryConnection(): void };

export function createAgentServer(options: AgentServerOptions): AgentServer {
  const expectedKey = digest(options.sessionApiKey);
  const workspaceDir = resolve(options.workspaceDir);
  const maxBodyBytes = options.maxBodyBytes ?? MIB;
  const maxOutputBytes = options.maxOutputBytes ?? MIB;
  const shell = options.shell ?? findShell(options.commandEnv?.PATH);
  const running = new Set<ChildProcess>();
  const hook = options.webhook ? createWebhook(options.webhook, options.sessionApiKey) : null;
  /** The conversation side (agent loop, websocket, workspace routes), loaded on its first use. */
  let runtime: Promise<ConversationRuntime> | undefined;
  const loadRuntime = (): Promise<ConversationRuntime> =>
    (runtime ??= import("./conversations.ts").then((m) =>
      m.createConversationRuntime({
        workspaceDir,
        shell,
        commandEnv: options.commandEnv,
        hook,
        readJson: (req) => readJsonObject(req, maxBodyBytes),
        maxBodyBytes,
        maxUploadBytes: options.maxUploadBytes ?? 100 * MIB,
        stateDir: options.stateDir ?? null,
        sessionApiKey: options.sessionApiKey,
        collectGarbage: options.collectGarbage ?? null,
      }),
    ));
  let loaded: ConversationRuntime | undefined;
  // Conversations saved by an earlier process of this agent: loaded now, so that they are there (and the UI's
  // websocket finds them) from the first request on. An agent without any stays idle, without the agent loop.
  if (options.stateDir !== undefined && hasSavedConversations(options.stateDir))
    void loadRuntime().then(
      (r) => {
        loaded = r;
      },
      (e: unknown) => {
        runtime = undefined;
        process.emitWarning(
          `agent conversation module failed to load: ${e instanceof Error ? e.message : String(e)}`,
        );
      },
    );
  const conversationRoute = /^\/api\/(conversations|git|file|vscode)(\/|$)/;

  const authorized = (header: string | string[] | undefined): boolean =>
    typeof header === "string" && timingSafeEqual(digest(header), expectedKey);

  async function route(req: IncomingMessage): Promise<Reply> {
    const url = new URL(req.url ?? "/", "http://agent");
    const path = url.pathname.length > 1 ? url.pathname.replace(/\/+$/, "") : url.pathname;
    const method = req.method ?? "GET";
    if (path === "/alive" || path === "/health") {
      if (method !== "GET" && method !== "HEAD") return detail(405, "Method Not Allowed");
      return { status: 200, body: path === "/alive" ? { status: "ok" } : "OK" };
    }
    if (!authorized(req.headers["x-session-api-key"])) return detail(401, "Unauthorized");

    if (path === "/api/conversations" && method === "GET" && runtime === undefined) {
      // Before the first conversation there is none to find: answer without loading the agent loop.
      const ids = url.searchParams.getAll("ids");
      if (ids.length === 0)
        throw unprocessable([{ type: "missing", loc: ["query", "ids"], msg: "Field required", input: null }]);
      return { status: 200, body: ids.map(() => null) };
    }
    if (conversationRoute.test(path)) {
      try {
        loaded = await loadRuntime();
      } catch (e: unknown) {
        runtime = undefined; // tried again on the next request
        const message = e instanceof Error ? e.message : String(e);
        process.emitWarning(`agent conversation module failed to load: ${message}`);
        return detail(503, `The agent cannot load its conversation module: ${message}`);
      }
      return (await loaded.route(req, url, path, method)) ?? detail(404, "Not Found");
    }
    if (path === "/api/bash/execute_bash_command") {
      if (method !== "POST") return detail(405, "Method Not Allowed");
      const request = parseCommandRequest(await readJsonObject(req, maxBodyBytes), workspaceDir);
      return {
        status: 200,
        body: await runCommand(request, { shell, commandEnv: options.commandEnv, maxOutputBytes, running }),
      };
    }
    return detail(404, "Not Found");
  }

  const corsOrigins = options.corsOrigins ?? [];
  /** The reference's CORS rule: without configured origins, any localhost or 127.0.0.1 origin; else those listed. */
  const allowedOrigin = (origin: string): boolean => {
    if (corsOrigins.length === 0) {
      try {
        const host = new URL(origin).hostname;
        return host === "localhost" || host === "127.0.0.1";
      } catch {
        return false;
      }
    }
    return corsOrigins.includes("*") || corsOrigins.includes(origin);
  };

  const limits = { ...DEFAULT_CONNECTION_LIMITS, ...options.connections };
  const server = createServer(
    {
      headersTimeout: limits.headersTimeoutMs,
      keepAliveTimeout: limits.idleTimeoutMs,
      // Node checks the header and request timeouts this often (default every 30 s).
      connectionsCheckingInterval: Math.max(250, Math.min(limits.headersTimeoutMs, 30_000) / 2),
    },
    (req, res) => {
      // The OpenHands UI calls the agent straight from the browser (pause, run, confirmation, git, upload, VS Code).
      const origin = req.headers.origin;
      const corsHeaders: Record<string, string> =
        typeof origin === "string" && allowedOrigin(origin)
          ? {
              "access-control-allow-origin": origin,
              "access-control-allow-credentials": "true",
              vary: "Origin",
            }
          : {};
      if (
        req.method === "OPTIONS" &&
        typeof origin === "string" &&
        req.headers["access-control-request-method"]
      ) {
        req.resume();
        if (corsHeaders["access-control-allow-origin"] === undefined) {
          res.writeHead(400, { "content-type": "text/plain", vary: "Origin" }).end("Disallowed CORS origin");
          return;
        }
        const requested = req.headers["access-control-request-headers"];
        res
          .writeHead(200, {
            ...corsHeaders,
            "access-control-allow-methods": "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT",
            ...(typeof requested === "string" ? { "access-control-allow-headers": requested } : {}),
            "access-control-max-age": "600",
            "content-type": "text/plain",
          })
          .end("OK");
        return;
      }
      for (const [name, value] of Object.entries(corsHeaders)) res.setHeader(name, value);
      route(req)
        .catch((e: unknown) => {
          if (e instanceof RequestError) return e.reply;
          process.emitWarning(
            `agent request failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`,
          );
          return detail(500, "Internal Server Error");
        })
        .then((reply) => sendReply(req, res, reply));
    },
  );
  const closeEveryConnection = guardConnections(server, limits);
  // Malformed HTTP: answer 400 with a JSON body instead of letting the socket die silently.
  server.on("clientError", (_error, socket) => {
    if (socket.writable && !socket.destroyed) {
      const body = JSON.stringify({ detail: "Bad Request" });
      socket.end(
        `HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
      );
    } else {
      socket.destroy();
    }
  });
  // The events websocket (/sockets/events/{id}?session_api_key=..): the key travels in the query, as browsers
  // cannot set headers on a websocket.
  server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const url = new URL(req.url ?? "/", "http://agent");
    const refuse = (status: number, text: string): void => {
      const body = JSON.stringify({ detail: text });
      socket.end(
        `HTTP/1.1 ${status} ${text}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
      );
    };
    if (!/^\/sockets\/events\/[^/]+\/?$/.test(url.pathname)) return refuse(404, "Not Found");
    const key = url.searchParams.get("session_api_key") ?? req.headers["x-session-api-key"];
    if (!authorized(key ?? undefined)) return refuse(403, "Forbidden");
    loadRuntime().then(
      (r) => {
        loaded = r;
        r.upgrade(req, socket, head, url);
      },
      (e: unknown) => {
        runtime = undefined;
        process.emitWarning(`agent websocket failed: ${e instanceof Error ? e.message : String(e)}`);
        refuse(503, "Service Unavailable");
      },
    );
  });
  server.on("close", () => {
    loaded?.close();
    for (const child of running) if (child.pid !== undefined) killTree(child.pid);
    hook?.flushAll();
  });
  return Object.assign(server, { closeEveryConnection });
}

function digest(value: string): Buffer {
  return createHash("sha256").update(value, "utf8").digest();
}

function hasSavedConversations(dir: string): boolean {
  try {
    return readdirSync(dir).length > 0;
  } catch {
    return false;
  }
}
