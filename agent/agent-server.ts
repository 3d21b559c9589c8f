/**
 * The small agent server that the default sandbox specs run inside a sandbox (a child process or a container).
 *
 * Plain `node:http` (no framework) so that it starts in a few tens of milliseconds. This module imports only Node
 * built-ins; the conversation side (conversations.ts: the agent loop, the events websocket, the workspace routes)
 * is imported on the first conversation request, and it loads the packages `ws` (first websocket) and `openai`
 * (first model call) itself, so an idle agent carries none of it. See docs/builtin-agent.md.
 */
import type { ChildProcess } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import { delimiter, isAbsolute, join, relative, resolve } from "node:path";
import type { Duplex } from "node:stream";
import type { ConversationRuntime } from "./conversations.ts";
import { killTree } from "./shared/proc-tree.ts";

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

/**
 * The agent server's webhook, as the reference agent server has it: events are buffered per conversation and
 * posted as a JSON array to `<baseUrl>/events/<conversation id>` when `bufferSize` are waiting or `flushDelayMs`
 * after the first one; conversation info is posted to `<baseUrl>/conversations` at once. Every post carries the
 * session key in X-Session-API-Key and is retried `retries` times, `retryDelayMs` apart; events that still fail are
 * kept for the next post.
 */
export interface WebhookOptions {
  baseUrl: string;
  /** Default 5. */
  bufferSize?: number;
  /** Default 500 ms (the reference agent server waits 30 s; the built-in agent has few events and no LLM). */
  flushDelayMs?: number;
  /** Default 3. */
  retries?: number;
  /** Default 1000 ms. */
  retryDelayMs?: number;
}

/** One problem in a request, in FastAPI/pydantic's shape (`{"detail": [violation, ...]}` with status 422). */
export interface AgentViolation {
  type: string;
  loc: (string | number)[];
  msg: string;
  input: unknown;
  ctx?: Record<string, unknown>;
}

/** Result of `POST /api/bash/execute_bash_command`. */
export interface CommandResult {
  /** The command's exit code; 128 + signal number when killed by a signal; -1 when it timed out. */
  exit_code: number;
  stdout: string;
  stderr: string;
}

// The agent's start is on every sandbox's critical path. A static `import { .. } from "node:http"` (likewise crypto,
// child_process, os and module) makes the ESM loader read every export, which runs lazy getters such as http.WebSocket (loads
// undici) and crypto.webcrypto: about 40 ms of a 70 ms start here. getBuiltinModule hands over the module object
// without touching them.
const { spawn } = process.getBuiltinModule("node:child_process");
const { createHash, randomUUID, timingSafeEqual } = process.getBuiltinModule("node:crypto");
const { createServer } = process.getBuiltinModule("node:http");
const { constants } = process.getBuiltinModule("node:os");

const MIB = 1024 * 1024;
const DEFAULT_TIMEOUT_SECONDS = 60;
const MAX_TIMEOUT_SECONDS = 600;
/** After the shell exits, how long to wait for its output pipes to close (a background job may hold them open). */
const PIPE_DRAIN_MS = 200;
export const REDACTED = "**********";
const SECRET_KEY = /api_?key|token|secret|password|authorization|credential/i;
const UUID = /^[0-9a-f]{32}$|^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export type Json = Record<string, unknown>;

/** A response the router decided on. */
export interface Reply {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
}

export class RequestError extends Error {
  readonly reply: Reply;
  constructor(reply: Reply) {
    super(`request error ${reply.status}`);
    this.reply = reply;
  }
}

export const detail = (status: number, message: string): Reply => ({ status, body: { detail: message } });
export const unprocessable = (violations: AgentViolation[]): RequestError =>
  new RequestError({ status: 422, body: { detail: violations } });

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
export function createAgentServer(options: AgentServerOptions): Server {
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
        readJson: readJsonObject,
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
      const request = parseCommandRequest(await readJsonObject(req), workspaceDir);
      return { status: 200, body: await runCommand(request) };
    }
    return detail(404, "Not Found");
  }

  async function readJsonObject(req: IncomingMessage): Promise<Json> {
    const declared = Number(req.headers["content-length"] ?? 0);
    if (declared > maxBodyBytes) throw tooLarge(maxBodyBytes);
    const raw = await readBody(req, maxBodyBytes);
    if (raw === null) throw tooLarge(maxBodyBytes);
    if (raw.length === 0)
      throw unprocessable([{ type: "missing", loc: ["body"], msg: "Field required", input: null }]);
    let body: unknown;
    try {
      body = JSON.parse(raw.toString("utf8"));
    } catch (e: unknown) {
      const error = e instanceof Error ? e.message : String(e);
      throw unprocessable([
        { type: "json_invalid", loc: ["body", 0], msg: "JSON decode error", input: {}, ctx: { error } },
      ]);
    }
    if (typeof body !== "object" || body === null || Array.isArray(body)) {
      throw unprocessable([
        {
          type: "model_attributes_type",
          loc: ["body"],
          msg: "Input should be a valid dictionary or object to extract fields from",
          input: body,
        },
      ]);
    }
    return body as Json;
  }

  function runCommand(request: CommandRequest): Promise<CommandResult> {
    return new Promise((resolvePromise) => {
      const stdout = collector(maxOutputBytes);
      const stderr = collector(maxOutputBytes);
      const child = spawn(shell, ["-c", request.command], {
        cwd: request.cwd,
        // Not detached: commands stay in the agent's process group, so the runtime's pause, resume and removal
        // (signals to that group) reach them and their background jobs too.
        stdio: ["ignore", "pipe", "pipe"],
        ...(options.commandEnv ? { env: options.commandEnv } : {}),
      });
      running.add(child);
      child.stdout?.on("data", stdout.push);
      child.stderr?.on("data", stderr.push);
      let timedOut = false;
      let exitCode = -1;
      let settled = false;
      let drainTimer: NodeJS.Timeout | undefined;
      const timer = setTimeout(() => {
        timedOut = true;
        if (child.pid !== undefined) killTree(child.pid);
      }, request.timeoutSeconds * 1000);
      const finish = (startError?: Error): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        clearTimeout(drainTimer);
        running.delete(child);
        child.stdout?.destroy();
        child.stderr?.destroy();
        let err = stderr.text();
        if (startError) err += `${err ? "\n" : ""}failed to start ${shell}: ${startError.message}`;
        if (timedOut) err += `${err ? "\n" : ""}[command timed out after ${request.timeoutSeconds} seconds]`;
        resolvePromise({
          exit_code: timedOut || startError ? -1 : exitCode,
          stdout: stdout.text(),
          stderr: err,
        });
      };
      child.on("error", (e) => finish(e));
      child.on("exit", (code, signal) => {
        exitCode = code ?? (signal ? 128 + (constants.signals[signal] ?? 0) : -1);
        drainTimer = setTimeout(() => finish(), PIPE_DRAIN_MS);
      });
      child.on("close", () => finish());
    });
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
        .then((reply) => send(req, res, reply));
    },
  );
  guardConnections(server, limits);
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
  return server;
}

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
 */
function guardConnections(server: Server, limits: ConnectionLimits): void {
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
}

let lastTimestampUs = 0;
/**
 * The SDK's event timestamp: ISO-8601 with microseconds and no offset (here UTC). Strictly increasing, so that
 * events made in the same millisecond keep their order.
 */
export function sdkTimestamp(): string {
  lastTimestampUs = Math.max(Date.now() * 1000, lastTimestampUs + 1);
  const ms = Math.floor(lastTimestampUs / 1000);
  const micros = String(lastTimestampUs % 1_000_000).padStart(6, "0");
  return `${new Date(ms).toISOString().slice(0, 19)}.${micros}`;
}

/** A MessageEvent as the SDK writes it. */
export function messageEvent(role: string, content: Json[]): Json {
  return {
    kind: "MessageEvent",
    id: randomUUID(),
    timestamp: sdkTimestamp(),
    source: role === "user" ? "user" : "agent",
    llm_message: { role, content },
    llm_response_id: null,
    activated_skills: [],
    extended_content: [],
    sender: null,
  };
}

/** A SendMessageRequest (`{role?, content?}`), checked. */
export function parseMessage(value: unknown, loc: (string | number)[]): { role: string; content: Json[] } {
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw unprocessable([
      { type: "model_attributes_type", loc, msg: "Input should be a valid dictionary", input: value },
    ]);
  const v = value as Json;
  const role = v.role ?? "user";
  const content = v.content ?? [];
  const problems: AgentViolation[] = [];
  if (typeof role !== "string" || !["user", "system", "assistant", "tool"].includes(role))
    problems.push({
      type: "literal_error",
      loc: [...loc, "role"],
      msg: "Input should be 'user', 'system', 'assistant' or 'tool'",
      input: role,
    });
  if (!Array.isArray(content) || content.some((c) => typeof c !== "object" || c === null))
    problems.push({
      type: "list_type",
      loc: [...loc, "content"],
      msg: "Input should be a valid list of content",
      input: content,
    });
  if (problems.length > 0) throw unprocessable(problems);
  return { role: role as string, content: content as Json[] };
}

/** The text of the first user message among the events (the SDK's title source), whitespace collapsed. */
export function firstUserText(list: Json[]): string | null {
  for (const e of list) {
    if (e.kind !== "MessageEvent" || e.source !== "user") continue;
    const content = (e.llm_message as { content?: Json[] } | undefined)?.content ?? [];
    const text = content
      .filter((c) => c.type === "text" && typeof c.text === "string")
      .map((c) => c.text as string)
      .join(" ")
      .replace(/\s+/g, " ")
      .trim();
    if (text !== "") return text;
  }
  return null;
}

/**
 * One POST of a JSON body through node:http(s), answering the status (the body is read and dropped); rejects on a
 * transport error or after 30 s. Not fetch: its first use loads undici, ~50 ms of the agent's event loop (the
 * first webhook is sent while the conversation start is being answered) and ~10 MiB in every sandbox.
 */
function postJson(url: string, headers: Record<string, string>, body: string): Promise<number> {
  const target = new URL(url);
  const { request } =
    target.protocol === "https:"
      ? process.getBuiltinModule("node:https")
      : process.getBuiltinModule("node:http");
  return new Promise((resolve, reject) => {
    const req = request(
      target,
      {
        method: "POST",
        headers: { ...headers, "content-length": String(Buffer.byteLength(body)) },
        timeout: 30_000,
      },
      (res) => {
        res.resume();
        res.once("end", () => resolve(res.statusCode ?? 0));
        res.once("error", reject);
      },
    );
    req.once("timeout", () => req.destroy(new Error("no answer within 30 s")));
    req.once("error", reject);
    req.end(body);
  });
}

/** The webhook sender (see {@link WebhookOptions}). */
export type Webhook = ReturnType<typeof createWebhook>;
function createWebhook(o: WebhookOptions, sessionApiKey: string) {
  const base = o.baseUrl.replace(/\/+$/, "");
  const bufferSize = o.bufferSize ?? 5;
  const flushDelayMs = o.flushDelayMs ?? 500;
  const retries = o.retries ?? 3;
  const retryDelayMs = o.retryDelayMs ?? 1000;
  const queues = new Map<string, { events: Json[]; timer: NodeJS.Timeout | undefined; posting: boolean }>();
  const headers = { "content-type": "application/json", "x-session-api-key": sessionApiKey };

  /** Posts `body` (JSON text, fixed when the post is made: a retry sends what was true then). */
  async function post(url: string, body: string): Promise<boolean> {
    for (let attempt = 0; attempt <= retries; attempt++) {
      try {
        const status = await postJson(url, headers, body);
        if (status >= 200 && status < 300) return true;
        process.emitWarning(`webhook ${url} answered ${status}`);
        // Refused for what it is (too large, malformed): sending it again, alone or with later events, cannot
        // succeed and would hold back every later event of the conversation. Dropped.
        if (status >= 400 && status < 500 && status !== 401 && status !== 408 && status !== 429) return true;
      } catch (e: unknown) {
        process.emitWarning(`webhook ${url} failed: ${e instanceof Error ? e.message : String(e)}`);
      }
      if (attempt < retries) await new Promise((r) => setTimeout(r, retryDelayMs).unref());
    }
    return false;
  }

  /**
   * Posts the conversation's waiting events: one post in flight per conversation, so that they arrive in order;
   * what comes while one is in flight goes right after it (the post was its batching window).
   */
  function flush(conversationId: string): void {
    const q = queues.get(conversationId);
    if (q === undefined || q.events.length === 0) return;
    clearTimeout(q.timer);
    q.timer = undefined;
    if (q.posting) return;
    const batch = q.events.splice(0);
    q.posting = true;
    void post(`${base}/events/${conversationId}`, JSON.stringify(batch)).then((ok) => {
      q.posting = false;
      // Kept for the next post, in order, as the reference does.
      if (!ok) q.events.unshift(...batch);
      else flush(conversationId);
    });
  }

  return {
    event(conversationId: string, event: Json): void {
      let q = queues.get(conversationId);
      if (q === undefined) {
        q = { events: [], timer: undefined, posting: false };
        queues.set(conversationId, q);
      }
      q.events.push(event);
      if (q.events.length >= bufferSize) flush(conversationId);
      else q.timer ??= setTimeout(() => flush(conversationId), flushDelayMs).unref();
    },
    conversation(info: Json): void {
      void post(`${base}/conversations`, JSON.stringify(info));
    },
    flushAll(): void {
      for (const id of queues.keys()) flush(id);
    },
  };
}

interface CommandRequest {
  command: string;
  cwd: string;
  timeoutSeconds: number;
}

function parseCommandRequest(body: Json, workspaceDir: string): CommandRequest {
  const violations: AgentViolation[] = [];
  const { command, cwd, timeout } = body;
  if (command === undefined)
    violations.push({ type: "missing", loc: ["body", "command"], msg: "Field required", input: body });
  else if (typeof command !== "string") violations.push(stringType("command", command));
  let dir = workspaceDir;
  if (cwd !== undefined && cwd !== null) {
    if (typeof cwd !== "string") violations.push(stringType("cwd", cwd));
    else {
      dir = resolve(workspaceDir, cwd);
      const rel = relative(workspaceDir, dir);
      if (rel.startsWith("..") || isAbsolute(rel)) {
        violations.push(valueError("cwd", "cwd must be inside the workspace", cwd));
      } else if (!isDirectory(dir)) {
        violations.push(valueError("cwd", "cwd is not an existing directory", cwd));
      }
    }
  }
  let timeoutSeconds = DEFAULT_TIMEOUT_SECONDS;
  if (timeout !== undefined && timeout !== null) {
    if (typeof timeout !== "number" || !Number.isFinite(timeout)) {
      violations.push({
        type: "float_type",
        loc: ["body", "timeout"],
        msg: "Input should be a valid number",
        input: timeout,
      });
    } else if (timeout <= 0) {
      violations.push({
        type: "greater_than",
        loc: ["body", "timeout"],
        msg: "Input should be greater than 0",
        input: timeout,
        ctx: { gt: 0 },
      });
    } else if (timeout > MAX_TIMEOUT_SECONDS) {
      violations.push({
        type: "less_than_equal",
        loc: ["body", "timeout"],
        msg: `Input should be less than or equal to ${MAX_TIMEOUT_SECONDS}`,
        input: timeout,
        ctx: { le: MAX_TIMEOUT_SECONDS },
      });
    } else {
      timeoutSeconds = timeout;
    }
  }
  if (violations.length > 0) throw unprocessable(violations);
  return { command: command as string, cwd: dir, timeoutSeconds };
}

const stringType = (field: string, input: unknown): AgentViolation => ({
  type: "string_type",
  loc: ["body", field],
  msg: "Input should be a valid string",
  input,
});

const valueError = (field: string, message: string, input: unknown): AgentViolation => ({
  type: "value_error",
  loc: ["body", field],
  msg: `Value error, ${message}`,
  input,
  ctx: { error: message },
});

export const tooLarge = (limit: number): RequestError =>
  new RequestError({
    status: 413,
    body: { detail: `Request body too large (limit ${limit} bytes)` },
    // The rest of the body is not read: close the connection rather than leave it half-consumed.
    headers: { connection: "close" },
  });

/** Reads the whole body; null as soon as it exceeds the limit. */
export function readBody(req: IncomingMessage, limit: number): Promise<Buffer | null> {
  return new Promise((resolvePromise, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    req.on("data", (chunk: Buffer) => {
      if (done) return;
      size += chunk.length;
      if (size > limit) {
        done = true;
        resolvePromise(null);
      } else {
        chunks.push(chunk);
      }
    });
    req.on("end", () => {
      if (!done) resolvePromise(Buffer.concat(chunks));
      done = true;
    });
    req.on("error", (e) => {
      if (!done) reject(e);
      done = true;
    });
  });
}

function send(req: IncomingMessage, res: ServerResponse, reply: Reply): void {
  if (res.headersSent || res.destroyed) return;
  const body = JSON.stringify(reply.body);
  res.writeHead(reply.status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(body),
    ...reply.headers,
  });
  res.end(req.method === "HEAD" ? undefined : body);
  if (reply.headers?.connection === "close") res.on("finish", () => req.socket.destroySoon());
}

/** Keeps at most `limit` bytes of a stream and counts the rest. */
export function collector(limit: number): { push: (chunk: Buffer) => void; text: () => string } {
  const chunks: Buffer[] = [];
  let kept = 0;
  let dropped = 0;
  return {
    push: (chunk) => {
      const room = limit - kept;
      if (room >= chunk.length) {
        chunks.push(chunk);
        kept += chunk.length;
      } else {
        if (room > 0) chunks.push(chunk.subarray(0, room));
        kept += Math.max(room, 0);
        dropped += chunk.length - Math.max(room, 0);
      }
    },
    text: () => {
      const out = Buffer.concat(chunks).toString("utf8");
      return dropped > 0 ? `${out}\n[output truncated: ${dropped} more bytes]` : out;
    },
  };
}

function digest(value: string): Buffer {
  return createHash("sha256").update(value, "utf8").digest();
}

export function normaliseId(raw: string): string | null {
  const s = raw.trim().toLowerCase();
  return UUID.test(s) ? s.replaceAll("-", "") : null;
}

/** Replaces string values under secret-looking keys (api_key, token, ...) so that no credential is kept. */
export function redact(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(redact);
  if (value === null || typeof value !== "object") return value;
  const out: Json = {};
  for (const [key, inner] of Object.entries(value)) {
    out[key] = typeof inner === "string" && SECRET_KEY.test(key) ? REDACTED : redact(inner);
  }
  return out;
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

function hasSavedConversations(dir: string): boolean {
  try {
    return readdirSync(dir).length > 0;
  } catch {
    return false;
  }
}

export function findShell(pathVariable: string | undefined): string {
  const dirs = (pathVariable ?? "/usr/local/bin:/usr/bin:/bin").split(delimiter).filter((d) => d !== "");
  for (const dir of dirs) if (existsSync(join(dir, "bash"))) return join(dir, "bash");
  return "/bin/sh";
}
