import { timingSafeEqual } from "node:crypto";
import type { IncomingMessage, RequestListener, ServerResponse } from "node:http";
import { createRequire } from "node:module";
import type { Duplex } from "node:stream";
import Fastify, {
  type FastifyInstance,
  type FastifyRequest,
  type FastifyServerFactory,
  type FastifyServerOptions,
  LogController,
} from "fastify";
import type { Caller } from "../core/context.ts";
import { notFound, unauthenticated } from "../core/errors.ts";
import type { SandboxRuntime } from "../ports/sandbox-runtime.ts";
import { agentCallKey } from "../transports/agent-proxy/agent-calls.ts";
import { type AgentProxyLimits, createAgentHttpProxy } from "../transports/agent-proxy/agent-http.ts";
import { type AgentSocketLimits, AgentSockets } from "../transports/agent-proxy/agent-sockets.ts";
import { connectAhead } from "../transports/connect/connect-ahead.ts";
import { createConnectHandler } from "../transports/connect/connect-handler.ts";
import { connectRoutes } from "../transports/connect/connect-plugin.ts";
import { nodeHeaders } from "../transports/kit/browser-session.ts";
import { ConnectionGuard } from "../transports/kit/connection-guard.ts";
import { INTERNAL_MESSAGE } from "../transports/kit/errors.ts";
import { DEFAULT_LIMITS, type TransportLimits } from "../transports/kit/limits.ts";
import { eventRoutes } from "../transports/rest/event-routes.ts";
import { gitRoutes } from "../transports/rest/git-routes.ts";
import { legacyConversationRoutes } from "../transports/rest/legacy-conversation-routes.ts";
import { legacyRoutes } from "../transports/rest/legacy-routes.ts";
import { buildOpenApi } from "../transports/rest/openapi.ts";
import { type OptionsLists, optionsRoutes } from "../transports/rest/options-routes.ts";
import { frameworkError, restError, sendRestError, writeRestError } from "../transports/rest/rest-errors.ts";
import { restGateway, type SandboxCallbackRoute } from "../transports/rest/rest-gateway.ts";
import type { RestRoute } from "../transports/rest/rest-route.ts";
import { SIGN_IN_PATH, sessionRoutes } from "../transports/rest/session-routes.ts";
import { v1ConversationRoutes } from "../transports/rest/v1-conversation-routes.ts";
import { v1SandboxRoutes } from "../transports/rest/v1-sandbox-routes.ts";
import type { Container } from "./container.ts";
import { registerDocs } from "./docs.ts";
import { createHttpOrHttpsServer } from "./tls-listeners.ts";
import { registerNoUiPage, registerUi } from "./ui-static.ts";

export const VERSION = "0.1.0";
/** Probe and scrape paths: counted in metrics, not logged on every call. */
const QUIET_PATHS = new Set(["/alive", "/health", "/ready", "/metrics"]);
/** How often Node checks running requests against the header and request timeouts. */
const TIMEOUT_CHECK_MS = 1_000;
/** Fastify's default keep-alive timeout of the servers it makes. */
const FASTIFY_KEEP_ALIVE_MS = 72_000;

export interface HttpServerOptions {
  logger: FastifyServerOptions["logger"];
  limits: TransportLimits;
  runtime: SandboxRuntime;
  /** What /server_info reports as the storage kind. */
  storageKind: string;
  /** How long Connect streams may run on once the server starts closing. */
  shutdownTimeoutMs: number;
  /** Serve HTTPS with this certificate chain and key (PEM; TLS_CERT_FILE, TLS_KEY_FILE); undefined: plain HTTP. */
  tls?: { cert: Buffer; key: Buffer } | undefined;
  /** Browser-facing options: web UI folder, CORS origins, /api/options lists. */
  web: { uiDir?: string | undefined; corsOrigins?: readonly string[]; options?: OptionsLists };
  /** Where /metrics, /docs and /openapi.json are served, and who may read /metrics. */
  admin?: AdminOptions;
  /**
   * The everyday Connect unary call on the hand-written path of src/transports/connect/connect-unary.ts (default true); false:
   * every Connect request on connect-node's handler (AppDeps.connectFastPath).
   */
  connectFastPath?: boolean;
  /**
   * Agents reached through this listener (docs/agent-proxy.md): calls made with a sandbox's session key to the
   * agent's routes, and its events websocket, are forwarded to that sandbox's agent. Undefined: off.
   */
  agentProxy?: AgentProxyLimits & AgentSocketLimits;
}

export interface AdminOptions {
  /**
   * Whether /metrics, /docs and /openapi.json are on the HTTP port (default true). False when an admin listener
   * of their own serves them (ADMIN_PORT, {@link createAdminServer}): the HTTP port answers 404 for them.
   */
  onPublicPort?: boolean;
  /** A bearer token /metrics accepts (METRICS_TOKEN); on the HTTP port an API key is accepted too. */
  metricsToken?: string | undefined;
}

/** The REST routes, in registration order. */
export const REST_ROUTES: readonly RestRoute[] = [
  ...legacyRoutes,
  ...legacyConversationRoutes,
  ...v1SandboxRoutes,
  ...v1ConversationRoutes,
  ...eventRoutes,
  ...gitRoutes,
];

/**
 * The HTTP/1.1 server: REST (/api, /api/v1), Connect, gRPC-Web and Connect GET (/<package.Service>/<Method>),
 * probes, metrics and docs. Every request gets a request id (x-request-id, honoured or generated, echoed), one
 * access line and the HTTP metrics; bodies, connections and slow clients are limited as `limits` says.
 */
export async function createHttpServer(
  container: Container,
  options: HttpServerOptions,
): Promise<FastifyInstance> {
  const { limits, runtime } = options;
  const { metrics, storage } = container;
  const headersTimeout = Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs);
  // Connect, gRPC-Web and Connect GET: connect-node's handler, ahead of Fastify (src/transports/connect/connect-ahead.ts) and
  // as Fastify routes for the requests Fastify gets. Streams still open when the server closes are cut off after
  // the grace; the timer is unref'd and cleared at close, so a server with no open stream stops at once.
  const shutdown = new AbortController();
  let closing = false;
  const connect = createConnectHandler({
    bindings: container.bindings,
    admission: container.admission,
    keyOf: container.keyOf,
    maxMessageBytes: limits.maxMessageBytes,
    onCall: (method, code, seconds) => metrics.rpc("connect", method, code, seconds),
    onAnswer: (method, seconds) => metrics.answer("connect", method, seconds),
    onError: (err, method) => http.log.error({ err, method }, "rpc failed"),
    shutdownSignal: shutdown.signal,
    fastPath: options.connectFastPath !== false,
  });
  const requestId = requestIds();
  // Agent calls (a sandbox's session key on one of the agent's routes) go to that sandbox's agent before the
  // service routes anything (the proxy is built once Fastify's logger exists, before the server listens); the
  // events websocket is relayed from the server's 'upgrade' event.
  let agentProxy: Awaited<ReturnType<typeof createAgentHttpProxy>> | undefined;
  let agentSockets: AgentSockets | undefined;
  const serverFactory: FastifyServerFactory = (fastify) => {
    const listener = connectAhead(
      {
        handler: connect,
        requestId,
        log: () => http.log,
        observe: (method, route, status, seconds) => metrics.http(method, route, status, seconds),
        cors: (options.web.corsOrigins ?? []).length > 0,
        closing: () => closing,
      },
      fastify as RequestListener,
    );
    const server = createHttpOrHttpsServer(
      options.tls,
      {
        headersTimeout,
        requestTimeout: limits.requestTimeoutMs,
        connectionsCheckingInterval: TIMEOUT_CHECK_MS,
      },
      options.agentProxy === undefined
        ? listener
        : (req, res) => {
            if (agentProxy !== undefined && agentCallKey(req) !== undefined) agentProxy.routing(req, res);
            else listener(req, res);
          },
    );
    server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      if (agentSockets?.serves(req) === true) {
        // An upgraded connection is in use for as long as it stays open.
        connections.begin(req.socket);
        agentSockets.upgrade(req, socket, head);
      } else socket.end(NOT_UPGRADABLE);
    });
    server.keepAliveTimeout = FASTIFY_KEEP_ALIVE_MS;
    return server;
  };
  const http: FastifyInstance = Fastify({
    logger: options.logger ?? false,
    genReqId: requestId,
    schemaController: { compilersFactory: lazySchemaCompilers() },
    bodyLimit: limits.maxMessageBytes,
    requestIdHeader: "x-request-id",
    // One access line per request (from the onResponse hook below) instead of Fastify's two.
    logController: new LogController({ disableRequestLogging: true }),
    return503OnClosing: true,
    forceCloseConnections: "idle",
    requestTimeout: limits.requestTimeoutMs,
    serverFactory,
  });
  if (options.agentProxy !== undefined) {
    const agentDeps = {
      target: (key: string) => container.services.sandboxes.agentTarget(key),
      userOf: async (req: IncomingMessage) => {
        const key = container.sessions.cookieKeyOf(nodeHeaders(req.headers));
        if (key === undefined) return null;
        const caller = await Promise.resolve(key)
          .then((k) => container.authenticate(k))
          .catch(() => null);
        return caller?.userId ?? null;
      },
      logger: http.log,
    };
    agentProxy = await createAgentHttpProxy({
      ...agentDeps,
      corsOrigins: new Set(options.web.corsOrigins ?? []),
      limits: options.agentProxy,
      observe: (method, route, status, seconds) => metrics.http(method, route, status, seconds),
      requestId,
    });
    agentSockets = new AgentSockets(agentDeps, options.agentProxy);
  }
  let cutOff: NodeJS.Timeout | undefined;
  http.addHook("preClose", (done) => {
    closing = true;
    cutOff = setTimeout(() => shutdown.abort(), options.shutdownTimeoutMs).unref();
    // Relayed agent websockets end now (1001): the server's close waits for every connection it accepted.
    agentSockets?.close();
    done();
  });
  http.addHook("onClose", (_instance, done) => {
    clearTimeout(cutOff);
    void (agentProxy?.close() ?? Promise.resolve()).finally(done);
  });
  // Connections without a request head within the header timeout are closed (Node times out only connections
  // that have begun a request), and at MAX_CONNECTIONS the longest idle one makes room for a new client.
  const connections = new ConnectionGuard({
    maxConnections: limits.maxConnections,
    firstRequestTimeoutMs: headersTimeout,
  });
  connections.attach(http.server);
  http.server.on("request", (req: IncomingMessage, res: ServerResponse) => {
    res.once("close", connections.begin(req.socket));
  });
  http.setErrorHandler((err, req, reply) => {
    // Errors outside every route's own handler: Fastify's 4xx, else a server fault.
    const client = frameworkError(err, limits.maxMessageBytes);
    if (client === null) req.log.error({ err }, "request failed");
    return writeRestError(reply, client ?? { status: 500, body: { detail: INTERNAL_MESSAGE } });
  });
  const { web } = options;
  let spa: Awaited<ReturnType<typeof registerUi>> | undefined;
  http.setNotFoundHandler((req, reply) => spa?.(req, reply) ?? sendRestError(reply, notFound()));
  if ((web.corsOrigins ?? []).length > 0) {
    const { default: cors } = await import("@fastify/cors");
    await http.register(cors, {
      origin: [...(web.corsOrigins ?? [])],
      credentials: true,
      methods: ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"],
      exposedHeaders: ["x-request-id"],
      maxAge: 600,
    });
  }
  http.addHook("onRequest", (req, reply, done) => {
    reply.header("x-request-id", req.id);
    done();
  });
  http.addHook("onResponse", (req, reply, done) => {
    // Each read once (the status and the elapsed time are getters): the metrics and the access line show the same.
    const route = req.routeOptions.url ?? "unmatched";
    const method = req.method;
    const statusCode = reply.statusCode;
    const ms = reply.elapsedTime;
    metrics.http(method, route, statusCode, ms / 1000);
    if (!QUIET_PATHS.has(route))
      req.log.info({ method, url: req.url, route, statusCode, ms }, "request completed");
    done();
  });

  const started = Date.now();
  http.get("/alive", async () => ({ status: "ok" }));
  http.get("/health", async () => "OK");
  // Readiness, separate from liveness: storage accepts a write and the runtime can start sandboxes.
  http.get("/ready", async (_req, reply) => {
    const check = async (fn: () => Promise<void>) =>
      fn().then(
        () => "ok",
        (err: unknown) => `unavailable: ${err instanceof Error ? err.message : String(err)}`,
      );
    const [storageState, runtimeState] = await Promise.all([
      check(() => storage.checkWritable()),
      check(() => runtime.ping()),
    ]);
    const ready = storageState === "ok" && runtimeState === "ok";
    return reply
      .code(ready ? 200 : 503)
      .send({ status: ready ? "ready" : "not ready", storage: storageState, runtime: runtimeState });
  });
  http.get("/server_info", async () => ({
    name: "agent-workspace-service",
    version: VERSION,
    uptime: (Date.now() - started) / 1000,
    storage: options.storageKind,
    runtime: runtime.kind,
  }));

  const { events } = container.services;
  // The agent servers' webhooks (OH_WEBHOOKS_0_BASE_URL = <service>/api/v1/webhooks/<sandbox id>).
  const callbacks: SandboxCallbackRoute[] = [
    {
      method: "POST",
      url: "/api/v1/webhooks/:sandbox_id/events/:conversation_id",
      bodyLimit: limits.maxWebhookBytes ?? DEFAULT_LIMITS.maxWebhookBytes ?? limits.maxMessageBytes,
      acknowledgeRefusals: true,
      handle: ({ body, params, sessionKey }) =>
        events.receiveEvents(params.sandbox_id ?? "", sessionKey, params.conversation_id ?? "", body),
    },
    {
      method: "POST",
      url: "/api/v1/webhooks/:sandbox_id/conversations",
      handle: ({ body, params, sessionKey }) =>
        events.receiveConversation(params.sandbox_id ?? "", sessionKey, body),
    },
  ];
  await http.register(
    restGateway({
      routes: REST_ROUTES,
      callbacks,
      bindings: container.bindings,
      admission: container.admission,
      canWriteUserData: container.canWriteUserData,
      maxBodyBytes: limits.maxMessageBytes,
      keyOf: container.keyOf,
      onAnswer: (method, seconds) => metrics.answer("rest", method, seconds),
    }),
  );
  const { sessions, authenticate, admit, keyOf } = container;
  await http.register(sessionRoutes({ sessions, authenticate, admit }));
  /** The admitted caller of a request outside the gateway (throws as the gateway's auth step would). */
  const requestCaller = async (req: FastifyRequest): Promise<Caller | null> => {
    const caller = await authenticate(keyOf(req.method, nodeHeaders(req.headers)));
    if (caller !== null) admit(caller);
    return caller;
  };
  await http.register(optionsRoutes({ ...web.options, caller: requestCaller }));
  if (options.admin?.onPublicPort ?? true) {
    // On the port every client (sandboxes included) reaches, /metrics wants the token or an API key.
    const token = options.admin?.metricsToken;
    registerAdminRoutes(http, container, async (req) =>
      token !== undefined && bearerIs(req, token) ? true : (await requestCaller(req)) !== null,
    );
  }
  if (web.uiDir !== undefined) {
    spa = await registerUi(http, {
      root: web.uiDir,
      signInPath: SIGN_IN_PATH,
      signedIn: async (req) => {
        try {
          return (await authenticate(keyOf("GET", nodeHeaders(req.headers)))) !== null;
        } catch {
          return false;
        }
      },
    });
  } else {
    // No UI: "/" says where to sign in, where the API's documents are and how to add the UI (not a JSON 404).
    registerNoUiPage(http, { signInPath: SIGN_IN_PATH, docsHere: options.admin?.onPublicPort ?? true });
  }
  await http.register(connectRoutes(connect));
  return http;
}

/**
 * The admin listener (ADMIN_PORT): /metrics, /docs and /openapi.json on a port of their own, so the HTTP port need
 * not serve them. /metrics wants `Authorization: Bearer <metricsToken>` when a token is set, else it is open to
 * whoever reaches this listener (ADMIN_HOST, loopback by default).
 */
export async function createAdminServer(
  container: Container,
  options: { logger: FastifyServerOptions["logger"]; metricsToken?: string | undefined },
): Promise<FastifyInstance> {
  const admin = Fastify({ logger: options.logger ?? false, forceCloseConnections: true });
  const token = options.metricsToken;
  registerAdminRoutes(admin, container, async (req) => token === undefined || bearerIs(req, token));
  admin.setNotFoundHandler((_req, reply) => sendRestError(reply, notFound()));
  return admin;
}

/** /metrics (when `allowed` says so, else 401) and the API's documents (OpenAPI 3.1, Swagger UI at /docs). */
function registerAdminRoutes(
  app: FastifyInstance,
  container: Container,
  allowed: (req: FastifyRequest) => Promise<boolean>,
): void {
  const { registry } = container.metrics;
  app.get("/metrics", async (req, reply) => {
    if (!(await allowed(req)))
      return writeRestError(reply, {
        ...restError(unauthenticated()),
        headers: { "www-authenticate": "Bearer" },
      });
    return reply.header("content-type", registry.contentType).send(await registry.metrics());
  });
  registerDocs(app, () => buildOpenApi(REST_ROUTES, { title: "Agent Workspace Service", version: VERSION }));
}

/** Whether the request carries `Authorization: Bearer <token>` (compared in constant time). */
function bearerIs(req: FastifyRequest, token: string): boolean {
  const header = req.headers.authorization;
  if (typeof header !== "string" || !header.startsWith("Bearer ")) return false;
  const given = Buffer.from(header.slice(7).trim());
  const want = Buffer.from(token);
  return given.length === want.length && timingSafeEqual(given, want);
}

/**
 * Fastify's own schema compilers (@fastify/ajv-compiler, @fastify/fast-json-stringify-compiler), required on their
 * first use instead of when Fastify starts: what the server validates it validates with its own REST binders, so
 * ajv (~13 MiB with its formats) is loaded only when a route with a JSON schema is compiled. What it earns: idle
 * RSS within the 100 MB goal (`npm run bench`, "server RSS idle"), which the server misses by about that much
 * with the compilers loaded at start.
 */
function lazySchemaCompilers() {
  type Factory = (...args: unknown[]) => unknown;
  // Fastify's own require, resolved on first use too (resolving reads package.json files).
  const fromFastify = (id: string): unknown =>
    createRequire(createRequire(import.meta.url).resolve("fastify"))(id);
  let validator: Factory | undefined;
  let serializer: Factory | undefined;
  return {
    buildValidator: (...args: unknown[]) => {
      validator ??= (fromFastify("@fastify/ajv-compiler") as () => Factory)();
      return validator(...args);
    },
    buildSerializer: (...args: unknown[]) => {
      serializer ??= (fromFastify("@fastify/fast-json-stringify-compiler") as () => Factory)();
      return serializer(...args);
    },
  } as never;
}

/** The answer to an upgrade request this server does not take (only the agent events websocket is one). */
const NOT_UPGRADABLE =
  'HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: 22\r\n\r\n{"detail":"Not Found"}';

/** Request ids as Fastify makes them by default (req-1, req-2, … in base 36), for Fastify and the Connect listener. */
function requestIds(): () => string {
  let last = 0;
  return () => {
    last = (last + 1) & 0x7fffffff;
    return `req-${last.toString(36)}`;
  };
}
