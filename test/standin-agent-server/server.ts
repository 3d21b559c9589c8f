/**
 * The stand-in agent-server's HTTP surface: the routes of software-agent-sdk v1.3.0's `agent_server/api.py`
 * (server_details_router, conversation_router, event_router, bash_router, vscode_router, desktop_router,
 * tool_router) with their status codes and bodies, the session-key dependency (`dependencies.py`), FastAPI's
 * 404/405/422 shapes and the generic 500 handler (`{"detail":"Internal Server Error","exception":...}`), and the
 * webhooks of `conversation_service.py`. No LLM runs: a started conversation records the events the real server
 * publishes before the model answers (system prompt, state snapshot, the user's message, `execution_status`).
 *
 * `/__standin/requests` (session key required) lists every request received; `/__standin/webhooks` every webhook
 * post attempt. Nothing else under `/__standin/` exists; everything else mirrors the real server.
 */
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { constants } from "node:os";
import { basename, isAbsolute, join } from "node:path";
import type { Duplex } from "node:stream";
import type { StandinConfig, WebhookSpec } from "./config.ts";
import {
  dashed,
  type Json,
  mcpConfigProblem,
  type PydanticError,
  PythonException,
  type Verdict,
  validateConfirmationResponse,
  validateEnumQuery,
  validateExecuteBash,
  validateGenerateTitle,
  validateIdsQuery,
  validateIntQuery,
  validatePathUuid,
  validateSendMessage,
  validateStartConversation,
  validateUpdateConversation,
} from "./validate.ts";
import { acceptWebSocket, rejectUpgrade, type WsConnection } from "./websocket.ts";

/** Tools the real image registers (openhands-tools presets default + planning), in registration order. */
export const REGISTERED_TOOLS = [
  "terminal",
  "file_editor",
  "task_tracker",
  "browser_tool_set",
  "glob",
  "grep",
  "planning_file_editor",
] as const;
const EXECUTION_STATUSES = [
  "idle",
  "running",
  "paused",
  "waiting_for_confirmation",
  "finished",
  "error",
  "stuck",
] as const;
type Status = (typeof EXECUTION_STATUSES)[number];
const EVENT_MODULES: Record<string, string> = {
  MessageEvent: "openhands.sdk.event.llm_convertible.message",
  SystemPromptEvent: "openhands.sdk.event.llm_convertible.system",
  ConversationStateUpdateEvent: "openhands.sdk.event.conversation_state",
  PauseEvent: "openhands.sdk.event.user_action",
};
const MASK = "**********";
/** bash_service.py MAX_CONTENT_CHAR_LENGTH: longer output is split into events without an exit code. */
const MAX_CONTENT_CHARS = 1024 * 1024;
/** Bodies above this are refused (the real server has no limit; this keeps a test run's memory bounded). */
const MAX_BODY_BYTES = 64 * 1024 * 1024;
const MAX_RECORDED = 10_000;

export interface RecordedRequest {
  seq: number;
  time: string;
  method: string;
  path: string;
  query: Record<string, string[]>;
  headers: Record<string, string>;
  body: unknown;
  status: number | null;
}
export interface WebhookAttempt {
  time: string;
  url: string;
  kind: "events" | "conversations";
  conversation_id: string;
  count: number;
  attempt: number;
  status: number | null;
  error: string | null;
}

/** A non-JSON answer (a downloaded file). */
class RawBody {
  readonly data: Buffer;
  readonly headers: Record<string, string>;
  constructor(data: Buffer, headers: Record<string, string>) {
    this.data = data;
    this.headers = headers;
  }
}

/** An answer: status and JSON body. */
class HttpError extends Error {
  readonly status: number;
  readonly body: unknown;
  constructor(status: number, body: unknown) {
    super(`HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}
const detail = (status: number, text: string): HttpError => new HttpError(status, { detail: text });
const unprocessable = (errors: PydanticError[]): HttpError => new HttpError(422, { detail: errors });
/** FastAPI's generic handler: any exception the route does not handle. */
const internal = (exception: string): HttpError =>
  new HttpError(500, { detail: "Internal Server Error", exception });
function check<T>(verdict: Verdict<T>): T {
  if (!verdict.ok) throw unprocessable(verdict.errors);
  return verdict.value;
}

/** The request target as a URL; an origin-form path is never read as a host (`//x` stays a path). */
function requestUrl(req: IncomingMessage): URL {
  const target = req.url ?? "/";
  try {
    return target.startsWith("/") ? new URL(`http://standin${target}`) : new URL(target);
  } catch {
    return new URL("http://standin/");
  }
}

/** Python's `datetime.now().isoformat()` in a UTC container (naive, microseconds): event timestamps. */
const naiveNow = (): string => `${new Date().toISOString().slice(0, 23)}000`;
/** pydantic's JSON form of `datetime.now(UTC)`. */
const utcNow = (): string => `${new Date().toISOString().slice(0, 23)}000Z`;
const errnoText = (err: unknown): string => {
  const e = err as NodeJS.ErrnoException;
  const codes: Record<string, [number, string]> = {
    EACCES: [13, "Permission denied"],
    EPERM: [1, "Operation not permitted"],
    ENOENT: [2, "No such file or directory"],
    ENOTDIR: [20, "Not a directory"],
    EROFS: [30, "Read-only file system"],
    ENOSPC: [28, "No space left on device"],
  };
  const known = e.code === undefined ? undefined : codes[e.code];
  return known === undefined ? String(e.message) : `[Errno ${known[0]}] ${known[1]}: '${e.path ?? ""}'`;
};
function dropNulls(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(dropNulls);
  if (typeof v === "object" && v !== null) {
    const out: Json = {};
    for (const [k, val] of Object.entries(v)) if (val !== null) out[k] = dropNulls(val);
    return out;
  }
  return v;
}

interface Conversation {
  hex: string;
  stored: Json;
  title: string | null;
  createdAt: string;
  updatedAt: string;
  status: Status;
  confirmationPolicy: Json;
  secrets: Json;
  events: Json[];
  subscribers: WebhookSubscriber[];
  sockets: Set<WsConnection>;
}

/** conversation_service.py WebhookSubscriber: buffers events, posts batches, re-queues a batch that failed. */
class WebhookSubscriber {
  readonly #server: StandinServer;
  readonly #spec: WebhookSpec;
  readonly #hex: string;
  readonly #queue: Json[] = [];
  #timer: NodeJS.Timeout | null = null;
  #posting: Promise<void> = Promise.resolve();

  constructor(server: StandinServer, spec: WebhookSpec, hex: string) {
    this.#server = server;
    this.#spec = spec;
    this.#hex = hex;
  }

  push(event: Json): void {
    this.#queue.push(event);
    if (this.#queue.length >= this.#spec.eventBufferSize) {
      this.#cancelTimer();
      this.#post();
    } else if (this.#timer === null) {
      this.#timer = setTimeout(() => {
        this.#timer = null;
        if (this.#queue.length > 0) this.#post();
      }, this.#spec.flushDelayS * 1000);
      this.#timer.unref();
    }
  }

  /** Posts what is left (the subscriber's close on delete and on shutdown). */
  close(): Promise<void> {
    this.#cancelTimer();
    if (this.#queue.length > 0) this.#post();
    return this.#posting;
  }

  #cancelTimer(): void {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
  }

  #post(): void {
    const batch = this.#queue.splice(0);
    // Posts run one after the other, as the real subscriber's awaits do.
    this.#posting = this.#posting.then(async () => {
      const url = `${this.#spec.baseUrl.replace(/\/+$/, "")}/events/${this.#hex}`;
      const ok = await this.#server.postWebhook(this.#spec, url, batch, "events", this.#hex, batch.length);
      // After the last retry the batch goes back in the queue and rides with the next one.
      if (!ok) this.#queue.push(...batch);
    });
  }
}

export class StandinServer {
  readonly config: StandinConfig;
  readonly #conversations = new Map<string, Conversation>();
  readonly #requests: RecordedRequest[] = [];
  readonly #webhookAttempts: WebhookAttempt[] = [];
  readonly #children = new Set<import("node:child_process").ChildProcess>();
  readonly #startTime = Date.now();
  #lastEventTime = Date.now();
  #seq = 0;
  #server: Server | null = null;

  constructor(config: StandinConfig) {
    this.config = config;
  }

  /** The lifespan's start: the conversations folder is created (ConversationService.__aenter__); throws if it cannot. */
  prepareState(): void {
    mkdirSync(this.config.conversationsPath, { recursive: true });
  }

  listen(host: string, port: number): Promise<AddressInfo> {
    const server = createServer((req, res) => {
      this.#handle(req, res).catch((err: unknown) => {
        if (!res.headersSent)
          this.#send(res, 500, { detail: "Internal Server Error", exception: String(err) });
      });
    });
    server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      if (head.length > 0) socket.unshift(head);
      this.#upgrade(req, socket);
    });
    this.#server = server;
    return new Promise((resolvePromise, reject) => {
      server.once("error", reject);
      server.listen(port, host, () => {
        server.off("error", reject);
        resolvePromise(server.address() as AddressInfo);
      });
    });
  }

  /** Shutdown: the event services close, so each webhook subscriber posts what it still holds (bounded here). */
  async close(): Promise<void> {
    for (const child of this.#children) child.kill("SIGKILL");
    const flushes = [...this.#conversations.values()].flatMap((c) => c.subscribers.map((s) => s.close()));
    for (const c of this.#conversations.values()) for (const ws of c.sockets) ws.close(1001);
    await Promise.race([Promise.all(flushes), new Promise((r) => setTimeout(r, 5000).unref())]);
    const server = this.#server;
    this.#server = null;
    if (server !== null) {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    }
  }

  // ---- webhooks ----

  /** One webhook post with the spec's retries; true when an attempt got a 2xx. */
  async postWebhook(
    spec: WebhookSpec,
    url: string,
    body: unknown,
    kind: "events" | "conversations",
    hex: string,
    count: number,
  ): Promise<boolean> {
    const headers: Record<string, string> = { ...spec.headers, "content-type": "application/json" };
    const key = this.config.sessionApiKeys[0];
    if (key !== undefined) headers["X-Session-API-Key"] = key;
    for (let attempt = 1; attempt <= spec.numRetries + 1; attempt++) {
      const record: WebhookAttempt = {
        time: utcNow(),
        url,
        kind,
        conversation_id: hex,
        count,
        attempt,
        status: null,
        error: null,
      };
      try {
        const res = await fetch(url, {
          method: "POST",
          headers,
          body: JSON.stringify(body),
          signal: AbortSignal.timeout(30_000),
        });
        await res.arrayBuffer().catch(() => undefined);
        record.status = res.status;
        if (res.ok) {
          this.#pushAttempt(record);
          return true;
        }
        record.error = `HTTP ${res.status}`;
      } catch (err) {
        record.error = String((err as Error).message ?? err);
      }
      this.#pushAttempt(record);
      if (attempt <= spec.numRetries) await new Promise((r) => setTimeout(r, spec.retryDelayS * 1000));
    }
    return false;
  }

  #pushAttempt(a: WebhookAttempt): void {
    this.#webhookAttempts.push(a);
    if (this.#webhookAttempts.length > MAX_RECORDED) this.#webhookAttempts.shift();
  }

  /** ConversationWebhookSubscriber: the info is posted inline (the caller waits for every retry). */
  async #notifyConversation(conv: Conversation): Promise<void> {
    const info = this.#info(conv);
    await Promise.all(
      this.config.webhooks.map((spec) =>
        this.postWebhook(
          spec,
          `${spec.baseUrl.replace(/\/+$/, "")}/conversations`,
          info,
          "conversations",
          conv.hex,
          1,
        ),
      ),
    );
  }

  #publish(conv: Conversation, event: Json): void {
    conv.events.push(event);
    conv.updatedAt = utcNow();
    this.#lastEventTime = Date.now();
    for (const s of conv.subscribers) s.push(event);
    const text = JSON.stringify(event);
    for (const ws of conv.sockets) ws.sendText(text);
  }
  #event(kind: string, source: string, fields: Json): Json {
    return { kind, id: randomUUID(), timestamp: naiveNow(), source, ...fields };
  }
  #stateUpdate(conv: Conversation, key: string, value: unknown): void {
    this.#publish(conv, this.#event("ConversationStateUpdateEvent", "environment", { key, value }));
  }
  #fullState(conv: Conversation): void {
    this.#stateUpdate(conv, "full_state", dropNulls(this.#state(conv)));
  }
  #setStatus(conv: Conversation, status: Status): void {
    if (conv.status === status) return;
    conv.status = status;
    this.#stateUpdate(conv, "execution_status", status);
  }

  // ---- conversation views ----

  #maskLlm(llm: unknown): unknown {
    if (typeof llm !== "object" || llm === null) return llm;
    const out: Json = { ...(llm as Json) };
    for (const k of ["api_key", "aws_access_key_id", "aws_secret_access_key"])
      if (out[k] != null) out[k] = MASK;
    return out;
  }
  #maskCondenser(c: unknown): unknown {
    if (typeof c !== "object" || c === null) return c;
    const out: Json = { ...(c as Json) };
    if ("llm" in out) out.llm = this.#maskLlm(out.llm);
    if (Array.isArray(out.condensers)) out.condensers = out.condensers.map((x) => this.#maskCondenser(x));
    return out;
  }
  #agent(conv: Conversation): Json {
    const agent = conv.stored.agent as Json;
    return { ...agent, llm: this.#maskLlm(agent.llm), condenser: this.#maskCondenser(agent.condenser) };
  }
  /** ConversationState.model_dump(mode="json"): the id as a plain UUID (dashed), secrets masked. */
  #state(conv: Conversation): Json {
    const secretSources: Json = {};
    for (const [k, v] of Object.entries(conv.secrets)) {
      const s = { ...(v as Json) };
      if (s.kind === "StaticSecret" && s.value != null) s.value = MASK;
      secretSources[k] = s;
    }
    return {
      id: dashed(conv.hex),
      agent: this.#agent(conv),
      workspace: conv.stored.workspace,
      persistence_dir: join(this.config.conversationsPath, conv.hex),
      max_iterations: conv.stored.max_iterations,
      stuck_detection: conv.stored.stuck_detection,
      execution_status: conv.status,
      confirmation_policy: conv.confirmationPolicy,
      security_analyzer: null,
      activated_knowledge_skills: [],
      stats: { usage_to_metrics: {} },
      secret_registry: { secret_sources: secretSources },
    };
  }
  /** ConversationInfo: the state plus title, metrics, created_at, updated_at. */
  #info(conv: Conversation): Json {
    return {
      ...this.#state(conv),
      title: conv.title,
      metrics: null,
      created_at: conv.createdAt,
      updated_at: conv.updatedAt,
    };
  }

  // ---- HTTP ----

  #send(res: ServerResponse, status: number, body: unknown, extra: Record<string, string> = {}): void {
    if (body instanceof RawBody) {
      res.writeHead(status, { ...extra, ...body.headers, "content-length": body.data.length });
      res.end(body.data);
      return;
    }
    const text = JSON.stringify(body);
    res.writeHead(status, {
      ...extra,
      "content-type": "application/json",
      "content-length": Buffer.byteLength(text),
    });
    res.end(text);
  }

  async #readBody(req: IncomingMessage): Promise<Buffer> {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of req) {
      size += (chunk as Buffer).length;
      if (size > MAX_BODY_BYTES) throw detail(413, "Request body too large");
      chunks.push(chunk as Buffer);
    }
    return Buffer.concat(chunks);
  }

  /**
   * middleware.py LocalhostCORSMiddleware (Starlette's CORSMiddleware, credentials allowed, any method and header):
   * an origin is allowed when listed in OH_ALLOW_CORS_ORIGINS (`*` = any), or, only when that list is empty, when
   * its host is localhost or 127.0.0.1.
   */
  #originAllowed(origin: string): boolean {
    const allowed = this.config.allowCorsOrigins;
    if (allowed.includes("*") || allowed.includes(origin)) return true;
    if (allowed.length > 0) return false;
    try {
      return ["localhost", "127.0.0.1"].includes(new URL(origin).hostname);
    } catch {
      return false;
    }
  }

  /** Answers a CORS preflight before routing and the key check; false when the request is not one. */
  #preflight(req: IncomingMessage, res: ServerResponse): boolean {
    const origin = req.headers.origin;
    const requested = req.headers["access-control-request-method"];
    if (req.method !== "OPTIONS" || typeof origin !== "string" || typeof requested !== "string") return false;
    const headers: Record<string, string> = {
      vary: "Origin",
      "access-control-allow-methods": "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT",
      "access-control-max-age": "600",
      "access-control-allow-credentials": "true",
    };
    const requestedHeaders = req.headers["access-control-request-headers"];
    if (typeof requestedHeaders === "string") headers["access-control-allow-headers"] = requestedHeaders;
    const ok = this.#originAllowed(origin);
    if (ok) headers["access-control-allow-origin"] = origin;
    const text = ok ? "OK" : "Disallowed CORS origin";
    res.writeHead(ok ? 200 : 400, { ...headers, "content-type": "text/plain; charset=utf-8" });
    res.end(text);
    return true;
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = requestUrl(req);
    const method = req.method ?? "GET";
    if (this.#preflight(req, res)) {
      req.resume();
      return;
    }
    const origin = req.headers.origin;
    const cors: Record<string, string> =
      typeof origin === "string" && this.#originAllowed(origin)
        ? {
            "access-control-allow-origin": origin,
            "access-control-allow-credentials": "true",
            vary: "Origin",
          }
        : {};
    let raw: Buffer;
    try {
      raw = await this.#readBody(req);
    } catch (err) {
      if (err instanceof HttpError) return this.#send(res, err.status, err.body, cors);
      throw err;
    }
    const text = raw.toString("utf8");
    const ctype = (req.headers["content-type"] ?? "").toLowerCase();
    let parsedBody: unknown;
    let bodyError: PydanticError | null = null;
    if (raw.length > 0) {
      if (ctype === "" || /^application\/([\w.+-]*\+)?json/.test(ctype)) {
        try {
          parsedBody = JSON.parse(text) as unknown;
        } catch (err) {
          const position = /position (\d+)/.exec(String((err as Error).message));
          bodyError = {
            type: "json_invalid",
            loc: ["body", position === null ? 0 : Number(position[1])],
            msg: "JSON decode error",
            input: {},
            ctx: { error: String((err as Error).message) },
          };
        }
      } else if (/^multipart\//.test(ctype)) parsedBody = `<${ctype.split(";")[0]}: ${raw.length} bytes>`;
      else parsedBody = text;
    }
    const record = url.pathname.startsWith("/__standin/")
      ? null
      : this.#record(req, url, bodyError === null ? (parsedBody ?? null) : text);
    let status: number;
    let body: unknown;
    try {
      const out = await this.#route(req, url, method, parsedBody, bodyError, raw);
      status = out[0];
      body = out[1];
    } catch (err) {
      if (err instanceof HttpError) {
        status = err.status;
        body = err.body;
      } else if (err instanceof PythonException) {
        status = 500;
        body = { detail: "Internal Server Error", exception: err.message };
      } else throw err;
    }
    if (record !== null) record.status = status;
    this.#send(res, status, body, cors);
  }

  /** Keeps a request for /__standin/requests, the session key (header or websocket query) redacted. */
  #record(req: IncomingMessage, url: URL, body: unknown): RecordedRequest {
    const query: Record<string, string[]> = {};
    for (const [k, v] of url.searchParams) {
      const values = query[k] ?? [];
      values.push(k === "session_api_key" ? "<redacted>" : v);
      query[k] = values;
    }
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers))
      if (v !== undefined)
        headers[k] = k === "x-session-api-key" ? "<redacted>" : Array.isArray(v) ? v.join(", ") : v;
    const record: RecordedRequest = {
      seq: ++this.#seq,
      time: utcNow(),
      method: req.method ?? "GET",
      path: url.pathname,
      query,
      headers,
      body,
      status: null,
    };
    this.#requests.push(record);
    if (this.#requests.length > MAX_RECORDED) this.#requests.shift();
    return record;
  }

  /**
   * sockets.py `/sockets/events/{conversation_id}`: the key is the `session_api_key` query parameter (a refusal
   * closes before accept, which uvicorn answers with 403); an unknown conversation is accepted then closed with
   * 4004. A new subscriber first gets a full-state update, then (with `resend_all`) every stored event, then each
   * new one; a JSON message from the client is a Message sent with run=True (an invalid one is ignored).
   */
  #upgrade(req: IncomingMessage, socket: Duplex): void {
    socket.on("error", () => undefined);
    const url = requestUrl(req);
    const record = this.#record(req, url, null);
    const m = url.pathname.match(/^\/sockets\/events\/([^/]+)$/);
    const idVerdict = m === null ? null : validatePathUuid("conversation_id", m[1]!);
    const resendRaw = url.searchParams.get("resend_all")?.toLowerCase() ?? null;
    const truthy = ["1", "true", "t", "yes", "y", "on"];
    const falsy = ["0", "false", "f", "no", "n", "off"];
    const keys = this.config.sessionApiKeys;
    const given = url.searchParams.get("session_api_key");
    // An unknown path, a bad parameter and a wrong key all close before accept.
    if (
      idVerdict === null ||
      !idVerdict.ok ||
      (resendRaw !== null && !truthy.includes(resendRaw) && !falsy.includes(resendRaw)) ||
      (keys.length > 0 && (given === null || !keys.includes(given)))
    ) {
      record.status = 403;
      rejectUpgrade(socket, 403, "Forbidden");
      return;
    }
    const ws = acceptWebSocket(req, socket);
    if (ws === null) {
      record.status = 400;
      return;
    }
    record.status = 101;
    const conv = this.#conversations.get(idVerdict.value);
    if (conv === undefined) {
      ws.close(4004, "Conversation not found");
      return;
    }
    const snapshot = { key: "full_state", value: dropNulls(this.#state(conv)) };
    ws.sendText(JSON.stringify(this.#event("ConversationStateUpdateEvent", "environment", snapshot)));
    if (resendRaw !== null && truthy.includes(resendRaw))
      for (const e of conv.events) ws.sendText(JSON.stringify(e));
    conv.sockets.add(ws);
    ws.onClose(() => conv.sockets.delete(ws));
    ws.onMessage((text) => {
      let data: unknown;
      try {
        data = JSON.parse(text);
      } catch {
        return;
      }
      // Message.model_validate: `role` has no default there.
      if (typeof data !== "object" || data === null || !("role" in data)) return;
      const verdict = validateSendMessage(data);
      if (verdict.ok && this.#conversations.has(conv.hex)) this.#sendMessage(conv, verdict.value, true);
    });
  }

  #authorized(req: IncomingMessage): boolean {
    const keys = this.config.sessionApiKeys;
    const given = req.headers["x-session-api-key"];
    return keys.length === 0 || (typeof given === "string" && keys.includes(given));
  }

  async #route(
    req: IncomingMessage,
    url: URL,
    method: string,
    body: unknown,
    bodyError: PydanticError | null,
    raw: Buffer,
  ): Promise<[number, unknown]> {
    // Starlette matches routes on the percent-decoded path (so `{path:path}` can hold an encoded absolute path).
    let path = url.pathname;
    try {
      path = decodeURIComponent(path);
    } catch {
      // kept as sent
    }
    const q = url.searchParams;
    const routes: [
      string,
      RegExp,
      (m: RegExpMatchArray) => Promise<[number, unknown]> | [number, unknown],
    ][] = [];
    const add = (
      m: string,
      re: RegExp,
      fn: (m: RegExpMatchArray) => Promise<[number, unknown]> | [number, unknown],
    ): void => {
      routes.push([m, re, fn]);
    };
    const jsonBody = (): unknown => {
      if (bodyError !== null) throw unprocessable([bodyError]);
      return body;
    };
    const conv = (id: string): Conversation | undefined =>
      this.#conversations.get(check(validatePathUuid("conversation_id", id)));
    const needConv = (id: string): Conversation => {
      const c = conv(id);
      if (c === undefined)
        throw detail(
          404,
          `Conversation not found: ${dashed(check(validatePathUuid("conversation_id", id)))}`,
        );
      return c;
    };

    // server_details_router (no key)
    add("GET", /^\/alive$/, () => [200, { status: "ok" }]);
    add("GET", /^\/health$/, () => [200, "OK"]);
    const serverInfo = (): [number, unknown] => [
      200,
      {
        uptime: Math.floor((Date.now() - this.#startTime) / 1000),
        idle_time: Math.floor((Date.now() - this.#lastEventTime) / 1000),
        title: "OpenHands Agent Server",
        version: "1.3.0",
        docs: "/docs",
        redoc: "/redoc",
      },
    ];
    add("GET", /^\/server_info$/, serverInfo);
    add("GET", /^\/$/, serverInfo);

    // the stand-in's own surface
    add("GET", /^\/__standin\/requests$/, () => [200, { requests: this.#requests }]);
    add("GET", /^\/__standin\/webhooks$/, () => [200, { attempts: this.#webhookAttempts }]);

    // conversation_router
    add("GET", /^\/api\/conversations\/search$/, () => this.#search(q));
    add("GET", /^\/api\/conversations\/count$/, () => {
      const status = q.get("status");
      const s = status === null ? null : check(validateEnumQuery("status", status, EXECUTION_STATUSES));
      return [200, [...this.#conversations.values()].filter((c) => s === null || c.status === s).length];
    });
    add("GET", /^\/api\/conversations\/([^/]+)$/, (m) => {
      const c = conv(m[1]!);
      if (c === undefined) throw detail(404, "Not Found");
      return [200, this.#info(c)];
    });
    add("GET", /^\/api\/conversations$/, () => {
      const ids = check(validateIdsQuery(q.getAll("ids")));
      if (!(ids.length < 100)) throw internal("");
      return [
        200,
        ids.map((id) => this.#conversations.get(id)).map((c) => (c === undefined ? null : this.#info(c))),
      ];
    });
    add("POST", /^\/api\/conversations$/, () => this.#start(jsonBody()));
    add("POST", /^\/api\/conversations\/([^/]+)\/pause$/, async (m) => {
      const c = conv(m[1]!);
      if (c === undefined) throw detail(400, "Bad Request");
      this.#pause(c);
      await this.#notifyConversation(c);
      return [200, { success: true }];
    });
    add("DELETE", /^\/api\/conversations\/([^/]+)$/, async (m) => {
      const c = conv(m[1]!);
      if (c === undefined) throw detail(400, "Bad Request");
      this.#conversations.delete(c.hex);
      await this.#notifyConversation(c);
      for (const ws of c.sockets) ws.close(1000);
      for (const s of c.subscribers) void s.close();
      return [200, { success: true }];
    });
    add("POST", /^\/api\/conversations\/([^/]+)\/run$/, (m) => {
      const c = conv(m[1]!);
      if (c === undefined) throw detail(404, "Not Found");
      this.#run(c, true);
      return [200, { success: true }];
    });
    add("PATCH", /^\/api\/conversations\/([^/]+)$/, async (m) => {
      const id = check(validatePathUuid("conversation_id", m[1]!));
      const { title } = check(validateUpdateConversation(jsonBody()));
      const c = this.#conversations.get(id);
      if (c === undefined) return [200, { success: false }];
      c.title = title.trim();
      c.updatedAt = utcNow();
      await this.#notifyConversation(c);
      return [200, { success: true }];
    });
    add("POST", /^\/api\/conversations\/([^/]+)\/generate_title$/, (m) => {
      const id = check(validatePathUuid("conversation_id", m[1]!));
      const { max_length } = check(validateGenerateTitle(jsonBody()));
      const c = this.#conversations.get(id);
      if (c === undefined) throw internal("500: Internal Server Error");
      return [200, { title: this.#title(c, max_length) }];
    });
    add("POST", /^\/api\/conversations\/([^/]+)\/confirmation_policy$/, (m) => {
      const c = needConv(m[1]!);
      const b = jsonBody();
      if (typeof b !== "object" || b === null || Array.isArray(b) || !("policy" in b))
        throw unprocessable([
          { type: "missing", loc: ["body", "policy"], msg: "Field required", input: b ?? null },
        ]);
      const v = validateStartConversation({
        agent: { llm: { model: "x" } },
        workspace: { working_dir: "/" },
        confirmation_policy: (b as Json).policy,
      });
      if (!v.ok)
        throw unprocessable(v.errors.map((e) => ({ ...e, loc: ["body", "policy", ...e.loc.slice(2)] })));
      c.confirmationPolicy = v.value.confirmation_policy as Json;
      return [200, { success: true }];
    });
    add("POST", /^\/api\/conversations\/([^/]+)\/secrets$/, (m) => {
      const c = needConv(m[1]!);
      const b = jsonBody();
      if (typeof b !== "object" || b === null || !("secrets" in b))
        throw unprocessable([
          { type: "missing", loc: ["body", "secrets"], msg: "Field required", input: b ?? null },
        ]);
      const v = validateStartConversation({
        agent: { llm: { model: "x" } },
        workspace: { working_dir: "/" },
        secrets: (b as Json).secrets,
      });
      if (!v.ok) throw unprocessable(v.errors);
      Object.assign(c.secrets, v.value.secrets as Json);
      return [200, { success: true }];
    });

    // event_router
    add("GET", /^\/api\/conversations\/([^/]+)\/events\/search$/, (m) =>
      this.#searchEvents(needConv(m[1]!), q),
    );
    add("GET", /^\/api\/conversations\/([^/]+)\/events\/count$/, (m) => {
      const c = needConv(m[1]!);
      return [200, this.#filterEvents(c, q).length];
    });
    add("POST", /^\/api\/conversations\/([^/]+)\/events\/respond_to_confirmation$/, (m) => {
      const c = needConv(m[1]!);
      const { accept } = check(validateConfirmationResponse(jsonBody()));
      if (accept) this.#run(c, false);
      else this.#pause(c);
      return [200, { success: true }];
    });
    add("GET", /^\/api\/conversations\/([^/]+)\/events\/([^/]+)$/, (m) => {
      const c = needConv(m[1]!);
      const e = c.events.find((x) => x.id === decodeURIComponent(m[2]!));
      if (e === undefined) throw detail(404, "Not Found");
      return [200, e];
    });
    add("POST", /^\/api\/conversations\/([^/]+)\/events$/, (m) => {
      const c = needConv(m[1]!);
      const msg = check(validateSendMessage(jsonBody()));
      this.#sendMessage(c, msg, msg.run === true);
      return [200, { success: true }];
    });

    // file_router
    add("POST", /^\/api\/file\/upload\/(.*)$/s, (m) => this.#upload(req, m[1]!, raw));
    add("GET", /^\/api\/file\/download\/(.*)$/s, (m) => this.#download(m[1]!));

    // bash_router
    add("POST", /^\/api\/bash\/execute_bash_command$/, () => this.#bash(jsonBody()));

    // vscode_router, desktop_router, tool_router
    add("GET", /^\/api\/vscode\/url$/, () => {
      if (!this.config.enableVscode)
        throw detail(503, "VSCode is disabled in configuration. Set enable_vscode=true to enable.");
      const token = this.config.sessionApiKeys[0];
      const base = q.get("base_url") ?? "http://localhost:8001";
      const folder = q.get("workspace_dir") ?? "workspace";
      return [200, { url: token === undefined ? null : `${base}/?tkn=${token}&folder=${folder}` }];
    });
    add("GET", /^\/api\/vscode\/status$/, () =>
      this.config.enableVscode
        ? [200, { running: false, enabled: true }]
        : [200, { running: false, enabled: false, message: "VSCode is disabled in configuration" }],
    );
    add("GET", /^\/api\/desktop\/url$/, () => {
      if (!this.config.enableVnc)
        throw detail(503, "Desktop is disabled in configuration. Set enable_vnc=true to enable.");
      return [200, { url: null }];
    });
    add("GET", /^\/api\/tools\/$/, () => [200, [...REGISTERED_TOOLS]]);

    const matching = routes.filter(([, re]) => re.test(path));
    if (matching.length === 0) throw detail(404, "Not Found");
    const route = matching.find(([m]) => m === method);
    if (route === undefined) throw detail(405, "Method Not Allowed");
    // The session-key dependency sits on the /api router (and is checked before the body); /__standin needs it too.
    if ((path.startsWith("/api/") || path.startsWith("/__standin/")) && !this.#authorized(req))
      throw detail(401, "Unauthorized");
    return route[2](path.match(route[1])!);
  }

  // ---- conversations ----

  async #start(body: unknown): Promise<[number, unknown]> {
    const request = check(validateStartConversation(body));
    const hex = (request.conversation_id as string | null) ?? randomUUID().replaceAll("-", "");
    const existing = this.#conversations.get(hex);
    if (existing !== undefined) return [200, this.#info(existing)];
    const agent = request.agent as Json;
    const workspace = request.workspace as Json;
    // EventService.start: the conversation's folder and the working directory are made first.
    try {
      mkdirSync(join(this.config.conversationsPath, hex), { recursive: true });
      mkdirSync(workspace.working_dir as string, { recursive: true });
    } catch (err) {
      throw internal(errnoText(err));
    }
    // Agent.init_state → _initialize: every tool must be registered, then the MCP config goes to fastmcp.
    for (const tool of agent.tools as Json[]) {
      if (!(REGISTERED_TOOLS as readonly string[]).includes(tool.name as string))
        throw internal(`"ToolDefinition '${tool.name}' is not registered"`);
    }
    const names = (agent.tools as Json[]).map((t) => t.name as string);
    const dupes = [...new Set(names.filter((n, i) => names.indexOf(n) !== i))];
    if (dupes.length > 0)
      throw internal(`Duplicate tool names found: {${dupes.map((d) => `'${d}'`).join(", ")}}`);
    const mcp = mcpConfigProblem(agent.mcp_config as Json);
    if (mcp !== null) throw internal(mcp);

    const now = utcNow();
    const conv: Conversation = {
      hex,
      stored: request,
      title: null,
      createdAt: now,
      updatedAt: now,
      status: "idle",
      confirmationPolicy: request.confirmation_policy as Json,
      secrets: { ...(request.secrets as Json) },
      events: [],
      subscribers: this.config.webhooks.map((spec) => new WebhookSubscriber(this, spec, hex)),
      sockets: new Set(),
    };
    this.#conversations.set(hex, conv);
    this.#publish(
      conv,
      this.#event("SystemPromptEvent", "agent", {
        system_prompt: {
          cache_prompt: false,
          type: "text",
          text: "You are OpenHands agent (stand-in: no LLM runs).",
        },
        tools: [...names, "finish", "think"].map((name) => ({
          type: "function",
          function: { name, description: "", parameters: { type: "object", properties: {} } },
        })),
      }),
    );
    this.#fullState(conv);
    const initial = request.initial_message as Json | null;
    // start_conversation sends the initial message with run=True whatever the request's `run` says.
    if (initial !== null) this.#sendMessage(conv, initial, true);
    await this.#notifyConversation(conv);
    return [201, this.#info(conv)];
  }

  #sendMessage(conv: Conversation, msg: Json, run: boolean): void {
    this.#publish(
      conv,
      this.#event("MessageEvent", "user", {
        llm_message: {
          role: msg.role,
          content: msg.content,
          cache_enabled: false,
          vision_enabled: false,
          function_calling_enabled: false,
          tool_calls: null,
          tool_call_id: null,
          name: null,
          force_string_serializer: false,
          send_reasoning_content: false,
          reasoning_content: null,
          thinking_blocks: [],
          responses_reasoning_item: null,
        },
        llm_response_id: null,
        activated_skills: [],
        extended_content: [],
        sender: null,
      }),
    );
    if (run && conv.status !== "running") this.#setStatus(conv, "running");
  }

  /** The agent loop would start here; with no LLM the conversation stays `running` until paused. */
  #run(conv: Conversation, fromRunRoute: boolean): void {
    if (conv.status === "running") {
      if (fromRunRoute)
        throw detail(409, "Conversation already running. Wait for completion or pause first.");
      throw internal("conversation_already_running");
    }
    this.#setStatus(conv, "running");
    this.#fullState(conv);
  }

  /** LocalConversation.pause: only an idle or running conversation pauses; the state is published either way. */
  #pause(conv: Conversation): void {
    if (conv.status === "idle" || conv.status === "running") {
      this.#setStatus(conv, "paused");
      this.#publish(conv, this.#event("PauseEvent", "user", {}));
    }
    this.#fullState(conv);
  }

  #title(conv: Conversation, maxLength: number): string {
    const first = conv.events.find((e) => e.kind === "MessageEvent" && e.source === "user");
    const content = ((first?.llm_message as Json | undefined)?.content as Json[] | undefined) ?? [];
    const text = content
      .filter((c) => c.type === "text")
      .map((c) => c.text as string)
      .join(" ")
      .trim()
      .replace(/\s+/g, " ");
    const title = text === "" ? "New conversation" : text;
    return title.length <= maxLength ? title : `${title.slice(0, Math.max(0, maxLength - 3))}...`;
  }

  #search(q: URLSearchParams): [number, unknown] {
    const limit = q.has("limit") ? check(validateIntQuery("limit", q.get("limit")!, { gt: 0 })) : 100;
    if (limit > 100) throw internal("");
    const status = q.get("status");
    const s = status === null ? null : check(validateEnumQuery("status", status, EXECUTION_STATUSES));
    const order = check(
      validateEnumQuery("sort_order", q.get("sort_order") ?? "CREATED_AT_DESC", [
        "CREATED_AT",
        "UPDATED_AT",
        "CREATED_AT_DESC",
        "UPDATED_AT_DESC",
      ]),
    );
    const all = [...this.#conversations.values()].filter((c) => s === null || c.status === s);
    const key = order.startsWith("CREATED")
      ? (c: Conversation) => c.createdAt
      : (c: Conversation) => c.updatedAt;
    all.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
    if (order.endsWith("_DESC")) all.reverse();
    const pageId = q.get("page_id");
    const start = pageId
      ? Math.max(
          0,
          all.findIndex((c) => c.hex === pageId),
        )
      : 0;
    const items = all.slice(start, start + limit);
    const next = all[start + limit];
    return [
      200,
      { items: items.map((c) => this.#info(c)), next_page_id: next === undefined ? null : next.hex },
    ];
  }

  #filterEvents(conv: Conversation, q: URLSearchParams): Json[] {
    const kind = q.get("kind");
    const source = q.get("source");
    const body = q.get("body");
    const gte = q.get("timestamp__gte");
    const lt = q.get("timestamp__lt");
    return conv.events.filter((e) => {
      // The real filter compares the kind with "<module>.<class>" of the event.
      if (kind !== null && `${EVENT_MODULES[e.kind as string] ?? ""}.${e.kind}` !== kind) return false;
      if (source !== null && e.source !== source) return false;
      if (body !== null) {
        if (e.kind !== "MessageEvent") return false;
        const content = ((e.llm_message as Json).content as Json[]) ?? [];
        const text = content
          .filter((c) => c.type === "text")
          .map((c) => c.text as string)
          .join(" ")
          .toLowerCase();
        if (!text.includes(body.toLowerCase())) return false;
      }
      if (gte !== null && (e.timestamp as string) < gte) return false;
      if (lt !== null && (e.timestamp as string) >= lt) return false;
      return true;
    });
  }

  #searchEvents(conv: Conversation, q: URLSearchParams): [number, unknown] {
    const limit = q.has("limit") ? check(validateIntQuery("limit", q.get("limit")!, { gt: 0 })) : 100;
    if (limit > 100) throw internal("");
    const order = check(
      validateEnumQuery("sort_order", q.get("sort_order") ?? "TIMESTAMP", ["TIMESTAMP", "TIMESTAMP_DESC"]),
    );
    const all = this.#filterEvents(conv, q);
    all.sort((a, b) =>
      (a.timestamp as string) < (b.timestamp as string) ? -1 : a.timestamp === b.timestamp ? 0 : 1,
    );
    if (order === "TIMESTAMP_DESC") all.reverse();
    const pageId = q.get("page_id");
    const start = pageId
      ? Math.max(
          0,
          all.findIndex((e) => e.id === pageId),
        )
      : 0;
    const next = all[start + limit];
    return [
      200,
      { items: all.slice(start, start + limit), next_page_id: next === undefined ? null : next.id },
    ];
  }

  // ---- files (file_router.py) ----

  /** UploadFile `file` in a multipart form, written to an absolute path; every failure becomes the route's 500. */
  async #upload(req: IncomingMessage, target: string, raw: Buffer): Promise<[number, unknown]> {
    let file: File | null = null;
    const ctype = req.headers["content-type"] ?? "";
    if (/^multipart\/form-data/i.test(ctype)) {
      try {
        const form = await new Request("http://standin/", {
          method: "POST",
          headers: { "content-type": ctype },
          body: new Uint8Array(raw),
        }).formData();
        const entry = form.get("file");
        if (entry instanceof File) file = entry;
      } catch {
        file = null;
      }
    }
    if (file === null)
      throw unprocessable([{ type: "missing", loc: ["body", "file"], msg: "Field required", input: null }]);
    // The route's try/except turns everything, its own 400 included, into a 500.
    const failed = (text: string): HttpError => internal(`500: Failed to upload file: ${text}`);
    if (!isAbsolute(target)) throw failed("400: Path must be absolute");
    try {
      mkdirSync(join(target, ".."), { recursive: true });
      writeFileSync(target, new Uint8Array(await file.arrayBuffer()));
    } catch (err) {
      throw failed(errnoText(err));
    }
    return [200, { success: true }];
  }

  #download(target: string): [number, unknown] {
    if (!isAbsolute(target)) throw detail(400, "Path must be absolute");
    let isFile: boolean;
    try {
      isFile = statSync(target).isFile();
    } catch {
      throw detail(404, "File not found");
    }
    if (!isFile) throw detail(400, "Path is not a file");
    let data: Buffer;
    try {
      data = readFileSync(target);
    } catch (err) {
      throw internal(`500: Failed to download file: ${errnoText(err)}`);
    }
    const name = basename(target);
    return [
      200,
      new RawBody(data, {
        "content-type": "application/octet-stream",
        "content-disposition": `attachment; filename="${name.replace(/["\\]/g, "_")}"`,
      }),
    ];
  }

  // ---- bash (bash_service.py) ----

  #saveBashEvent(event: Json): void {
    mkdirSync(this.config.bashEventsDir, { recursive: true });
    const stamp = (event.timestamp as string).replace(/[-T:]/g, "").slice(0, 14);
    const parts = [stamp, event.kind as string];
    if (typeof event.command_id === "string") parts.push(event.command_id);
    parts.push(event.id as string);
    writeFileSync(join(this.config.bashEventsDir, parts.join("_")), JSON.stringify(event, null, 2));
  }

  async #bash(body: unknown): Promise<[number, unknown]> {
    const request = check(validateExecuteBash(body));
    const command: Json = {
      kind: "BashCommand",
      id: randomUUID().replaceAll("-", ""),
      timestamp: utcNow(),
      command: request.command,
      cwd: request.cwd,
      timeout: request.timeout,
    };
    try {
      this.#saveBashEvent(command);
    } catch (err) {
      throw internal(errnoText(err));
    }
    const outputs: Json[] = [];
    const output = (
      order: number,
      exitCode: number | null,
      stdout: string | null,
      stderr: string | null,
    ): Json => ({
      kind: "BashOutput",
      id: randomUUID().replaceAll("-", ""),
      timestamp: utcNow(),
      command_id: command.id,
      order,
      exit_code: exitCode,
      stdout,
      stderr,
    });
    const result = await this.#runShell(request.command, request.cwd, request.timeout);
    try {
      if (result.spawnError !== null) {
        outputs.push(output(0, -1, null, `Error executing command: ${result.spawnError}`));
      } else {
        let order = 0;
        let stdout = result.stdout;
        let stderr = result.stderr;
        while (stdout.length > MAX_CONTENT_CHARS) {
          outputs.push(output(order++, null, stdout.slice(0, MAX_CONTENT_CHARS), null));
          stdout = stdout.slice(MAX_CONTENT_CHARS);
        }
        while (stderr.length > MAX_CONTENT_CHARS) {
          outputs.push(output(order++, null, null, stderr.slice(0, MAX_CONTENT_CHARS)));
          stderr = stderr.slice(MAX_CONTENT_CHARS);
        }
        outputs.push(
          output(order, result.exitCode, stdout === "" ? null : stdout, stderr === "" ? null : stderr),
        );
      }
      for (const o of outputs) this.#saveBashEvent(o);
    } catch (err) {
      throw internal(errnoText(err));
    }
    return [200, outputs[outputs.length - 1]];
  }

  /** create_subprocess_shell: /bin/sh -c, in cwd (or the server's), killed at the timeout (exit code -1). */
  #runShell(
    command: string,
    cwd: string | null,
    timeoutS: number,
  ): Promise<{ exitCode: number; stdout: string; stderr: string; spawnError: string | null }> {
    return new Promise((resolvePromise) => {
      const child = spawn("/bin/sh", ["-c", command], {
        cwd: cwd ?? process.cwd(),
        stdio: ["ignore", "pipe", "pipe"],
      });
      this.#children.add(child);
      let stdout = "";
      let stderr = "";
      let done = false;
      child.stdout.setEncoding("utf8").on("data", (d: string) => {
        stdout += d;
      });
      child.stderr.setEncoding("utf8").on("data", (d: string) => {
        stderr += d;
      });
      const finish = (exitCode: number, spawnError: string | null): void => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        this.#children.delete(child);
        resolvePromise({ exitCode, stdout, stderr, spawnError });
      };
      const timer = setTimeout(() => {
        child.kill("SIGKILL");
        // The real service reports -1 without waiting for the streams (a grandchild may hold them open).
        setTimeout(() => finish(-1, null), 100).unref();
      }, Math.max(0, timeoutS) * 1000);
      child.on("error", (err: NodeJS.ErrnoException) => {
        const text =
          err.code === "ENOENT" && cwd !== null
            ? `[Errno 2] No such file or directory: '${cwd}'`
            : errnoText(err);
        finish(-1, text);
      });
      child.on("close", (code, signal) => {
        const signum = signal === null ? 0 : (constants.signals[signal] ?? 0);
        finish(code ?? -signum, null);
      });
    });
  }
}
