import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { createRequire } from "node:module";
import { Code, ConnectError, type HandlerContext, type Interceptor } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import Fastify, {
  type FastifyInstance,
  type FastifyRequest,
  type FastifyServerOptions,
  LogController,
} from "fastify";
import { Counter } from "prom-client";
import type { Caller } from "../core/context.ts";
import { PageTokens } from "../core/page-token.ts";
import { RateLimiter } from "../core/rate-limiter.ts";
import { SecretBox } from "../core/secret-box.ts";
import { AppConversationService as AppConversationServiceDesc } from "../gen/workspace/v1/app_conversation_pb.js";
import { GitService as GitServiceDesc } from "../gen/workspace/v1/git_pb.js";
import { SandboxService as SandboxServiceDesc } from "../gen/workspace/v1/sandbox_pb.js";
import { SandboxSpecService as SandboxSpecServiceDesc } from "../gen/workspace/v1/sandbox_spec_pb.js";
import { SecretsService as SecretsServiceDesc } from "../gen/workspace/v1/secrets_pb.js";
import { SettingsService as SettingsServiceDesc } from "../gen/workspace/v1/settings_pb.js";
import { HttpGitProviderClients } from "../integrations/git/provider-clients.ts";
import { HttpAgentClient } from "../integrations/http-agent-client.ts";
import type { AgentClient } from "../ports/agent-client.ts";
import type { GitProviderClients } from "../ports/git-provider.ts";
import type { GitProviderVerifier } from "../ports/git-provider-verifier.ts";
import type { SandboxRuntime } from "../ports/sandbox-runtime.ts";
import type { Storage } from "../ports/storage.ts";
import { gitRoutes } from "../rest/git-routes.ts";
import { legacyRoutes } from "../rest/legacy-routes.ts";
import { buildOpenApi } from "../rest/openapi.ts";
import { type OptionsLists, optionsRoutes } from "../rest/options-routes.ts";
import { frameworkError } from "../rest/rest-errors.ts";
import { NO_CACHE, restGateway } from "../rest/rest-gateway.ts";
import type { RestRoute } from "../rest/rest-route.ts";
import { SIGN_IN_PATH, sessionRoutes } from "../rest/session-routes.ts";
import { v1ConversationRoutes } from "../rest/v1-conversation-routes.ts";
import { v1SandboxRoutes } from "../rest/v1-sandbox-routes.ts";
import { createAuthGate } from "../rpc/auth-gate.ts";
import { createConnectUnaryHandler } from "../rpc/connect-unary.ts";
import { createGrpcServer } from "../rpc/grpc-server.ts";
import { addReflection } from "../rpc/reflection.ts";
import { bind, type ServiceBinding } from "../rpc/service-registry.ts";
import {
  AppConversationService,
  type AppConversationServiceOptions,
} from "../services/conversations/app-conversation-service.ts";
import { GitService } from "../services/git/git-service.ts";
import { ProviderHostPolicy } from "../services/git/provider-host.ts";
import { ApiKeyService, DEFAULT_USER } from "../services/keys/api-key-service.ts";
import { SandboxService } from "../services/sandboxes/sandbox-service.ts";
import { type SandboxSpec, SandboxSpecService } from "../services/sandboxes/sandbox-spec-service.ts";
import { SecretsService } from "../services/secrets/secrets-service.ts";
import { SettingsService } from "../services/settings/settings-service.ts";
import { UserDataStore } from "../services/user-data-store.ts";
import { BrowserSessions, type KeyOf, nodeHeaders } from "../transport/browser-session.ts";
import { createAccessLog } from "./access-log.ts";
import { registerDocs } from "./docs.ts";
import { instrumentStorage, Metrics } from "./metrics.ts";
import { registerUi } from "./ui-static.ts";

export const VERSION = "0.1.0";
const BODY_LIMIT = 1024 * 1024;
/** Probe and scrape paths: counted in metrics, not logged on every call. */
const QUIET_PATHS = new Set(["/alive", "/health", "/ready", "/metrics"]);

export interface AppDeps {
  storage: Storage;
  encryptionKey: Buffer;
  /** null disables git token verification. */
  verifier: GitProviderVerifier | null;
  rateLimit?: { perSecond: number; burst: number };
  runtime: SandboxRuntime;
  specs: readonly SandboxSpec[];
  maxRunningSandboxes?: number;
  logger?: FastifyServerOptions["logger"];
  /** Client of the sandboxes' agent servers (default: HTTP). */
  agent?: AgentClient;
  /**
   * Git provider access: the allowed token hosts (default: public domain names only), the provider clients
   * (default: over HTTP), one call's timeout and the repository cache (default 60 s).
   */
  git?: {
    hosts?: ProviderHostPolicy;
    clients?: GitProviderClients;
    timeoutMs?: number;
    repositoryCacheSeconds?: number;
  };
  /** Timeouts of conversation starts and live status. */
  conversations?: Pick<AppConversationServiceOptions, "timeouts" | "liveStatusTimeoutMs" | "shutdownGraceMs">;
  /** Browser-facing options: web UI folder, CORS, sign-in cookie, single-user mode, /api/options lists. */
  web?: WebDeps;
}

export interface WebDeps {
  uiDir?: string | undefined;
  corsOrigins?: readonly string[];
  trustProxy?: boolean;
  singleUser?: boolean;
  sessionMaxAgeSeconds?: number;
  options?: OptionsLists;
}

export interface App {
  http: FastifyInstance;
  metrics: Metrics;
  /** The service objects (for composition and tests). */
  services: {
    settings: SettingsService;
    secrets: SecretsService;
    sandboxes: SandboxService;
    specs: SandboxSpecService;
    conversations: AppConversationService;
    git: GitService;
  };
  grpc: grpc.Server;
  keys: ApiKeyService;
  bindings: readonly ServiceBinding[];
  routes: readonly RestRoute[];
  /** Listens on both ports (0: any free port) and returns the bound ports. */
  listen(host: string, port: number, grpcPort: number): Promise<{ port: number; grpcPort: number }>;
  /**
   * Graceful stop: refuses new work, lets running conversation starts finish (cut off after a grace period, ending
   * in ERROR), finishes in-flight requests, then closes storage.
   */
  close(): Promise<void>;
}

/** Builds the whole service on the given storage: no globals, no environment reads. */
export async function buildApp(deps: AppDeps): Promise<App> {
  const metrics = new Metrics();
  const storage = instrumentStorage(deps.storage, metrics);
  const box = new SecretBox(deps.encryptionKey);
  const pageTokens = new PageTokens(box.derive("page-tokens"));
  const keys = new ApiKeyService(storage.apiKeys);
  const limiter = new RateLimiter(deps.rateLimit?.perSecond ?? 200, deps.rateLimit?.burst ?? 400);
  const store = new UserDataStore(storage.userData);

  const hosts = deps.git?.hosts ?? new ProviderHostPolicy();
  const settings = new SettingsService({ store, box, verifier: deps.verifier, hosts });
  const git = new GitService({
    tokens: settings,
    clients:
      deps.git?.clients ?? new HttpGitProviderClients({ hosts, timeoutMs: deps.git?.timeoutMs ?? 5_000 }),
    repositoryCacheSeconds: deps.git?.repositoryCacheSeconds ?? 60,
  });
  const secrets = new SecretsService({ store, box });
  const specs = new SandboxSpecService(deps.specs, pageTokens);
  const sandboxes = new SandboxService({
    repo: storage.sandboxes,
    runtime: deps.runtime,
    specs,
    box,
    tokens: pageTokens,
    maxRunning: deps.maxRunningSandboxes ?? 5,
  });
  let log: (msg: string, data?: Record<string, unknown>) => void = () => {};
  const conversations = new AppConversationService({
    conversations: storage.conversations,
    startTasks: storage.startTasks,
    sandboxes,
    settings,
    secrets,
    agent: deps.agent ?? new HttpAgentClient(),
    tokens: pageTokens,
    ...deps.conversations,
    log: (msg, data) => log(msg, data),
  });
  const taskTransitions = new Counter({
    name: "start_task_transitions_total",
    help: "Start-task state changes by the state entered (READY and ERROR are outcomes)",
    labelNames: ["status"] as const,
    registers: [metrics.registry],
  });
  conversations.onTaskChange((status) => taskTransitions.inc({ status }));
  metrics.statusGauge("start_tasks_in_progress", "Unfinished start tasks by status (all users)", async () => {
    const counts: Record<string, number> = {};
    for (const t of await storage.startTasks.listUnfinished()) counts[t.status] = (counts[t.status] ?? 0) + 1;
    return counts;
  });
  const bindings: ServiceBinding[] = [
    bind(SettingsServiceDesc, settings),
    bind(SecretsServiceDesc, secrets),
    bind(SandboxSpecServiceDesc, specs),
    bind(SandboxServiceDesc, sandboxes),
    bind(AppConversationServiceDesc, conversations),
    bind(GitServiceDesc, git),
  ];
  const routes: RestRoute[] = [...legacyRoutes, ...v1SandboxRoutes, ...v1ConversationRoutes, ...gitRoutes];
  /** The request paths of every RPC (Connect and gRPC-Web serve them on the HTTP port). */
  const rpcPaths = new Set(
    bindings.flatMap((b) => b.desc.methods.map((m) => `/${b.desc.typeName}/${m.name}`)),
  );

  const web = deps.web ?? {};
  const sessions = new BrowserSessions({
    box: new SecretBox(box.derive("browser-sessions")),
    allowedOrigins: web.corsOrigins ?? [],
    trustProxy: web.trustProxy ?? false,
    maxAgeSeconds: web.sessionMaxAgeSeconds ?? 24 * 3600,
    singleUser: web.singleUser ?? false,
  });
  const keyOf: KeyOf = (method, header) => sessions.keyOf(method, header);
  const singleUser: Caller = { userId: DEFAULT_USER, keyId: "single-user" };
  const authenticate =
    web.singleUser === true
      ? (key: string | undefined) => (key === undefined ? singleUser : keys.authenticate(key))
      : (key: string | undefined) => keys.authenticate(key);
  const admit = (caller: Caller) => limiter.admit(caller.keyId);

  // Connect and gRPC-Web calls (POST/GET /<package.Service>/<Method>) are dispatched to the RPC handlers (the
  // Connect unary path, else connect-node's adapter) before Fastify sees them: Fastify's request and reply
  // objects, hooks and per-request logger cost ~15% of a Connect call in the benchmarks and add nothing a call
  // needs. They get the same request id, access-log line and HTTP metrics as the REST routes below; everything
  // else goes to Fastify.
  let rpc: ((req: IncomingMessage, res: ServerResponse, path: string) => void) | null = null;
  const http = Fastify({
    serverFactory: (fastify) =>
      createServer((req, res) => {
        const path = pathOf(req.url);
        if (rpc !== null && rpcPaths.has(path)) rpc(req, res, path);
        else fastify(req, res);
      }),
    logger: deps.logger ?? false,
    bodyLimit: BODY_LIMIT,
    // No route here declares a JSON schema (the gateway validates with its own models), so Fastify's Ajv and
    // fast-json-stringify compilers are loaded only if one ever does, not at every start.
    schemaController: { compilersFactory: lazyFastifyCompilers() },
    requestIdHeader: "x-request-id",
    genReqId: nextRequestId,
    // One log line per request (from the onResponse hook below) instead of Fastify's two: request logging was
    // ~20% of the CPU of a REST call in the benchmarks.
    logController: new LogController({ disableRequestLogging: true }),
    return503OnClosing: true,
    forceCloseConnections: "idle",
  });
  http.setErrorHandler((err, req, reply) => {
    const client = frameworkError(err);
    if (client !== null) return reply.code(client.status).send(client.body);
    req.log.error({ err }, "request failed");
    return reply.code(500).send({ detail: "Internal Server Error" });
  });
  log = (msg, data) => http.log.warn(data ?? {}, msg);
  const access = createAccessLog(http.log);
  let spa: Awaited<ReturnType<typeof registerUi>> | undefined;
  http.setNotFoundHandler(
    (req, reply) => spa?.(req, reply) ?? reply.code(404).headers(NO_CACHE).send({ detail: "Not Found" }),
  );
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
  // Request ids: taken from x-request-id when given, generated otherwise; in every log line and echoed back.
  http.addHook("onRequest", (req, reply, done) => {
    reply.header("x-request-id", req.id);
    done();
  });
  http.addHook("onResponse", (req, reply, done) => {
    const route = req.routeOptions.url ?? "unmatched";
    metrics.http(req.method, route, reply.statusCode, reply.elapsedTime / 1000);
    if (!QUIET_PATHS.has(route)) {
      // Built directly (see access-log.ts); the same line req.log.info would write.
      access(
        {
          reqId: req.id,
          method: req.method,
          url: req.url,
          route,
          statusCode: reply.statusCode,
          ms: reply.elapsedTime,
        },
        "request completed",
      );
    }
    done();
  });
  metrics.statusGauge("sandboxes", "Recorded sandboxes by status (all users)", async () => {
    const counts: Record<string, number> = { STARTING: 0, RUNNING: 0, PAUSED: 0, ERROR: 0, MISSING: 0 };
    for (const s of await storage.sandboxes.listAll()) counts[s.status] = (counts[s.status] ?? 0) + 1;
    return counts;
  });

  const started = Date.now();
  http.get("/alive", async () => ({ status: "ok" }));
  http.get("/health", async () => "OK");
  // Readiness, separate from liveness: storage answers and the runtime can start sandboxes.
  http.get("/ready", async (_req, reply) => {
    const check = async (fn: () => Promise<void>) =>
      fn().then(
        () => "ok",
        (err: unknown) => `unavailable: ${err instanceof Error ? err.message : String(err)}`,
      );
    const [storageState, runtimeState] = await Promise.all([
      check(() => storage.ping()),
      check(() => deps.runtime.ping()),
    ]);
    const ready = storageState === "ok" && runtimeState === "ok";
    return reply
      .code(ready ? 200 : 503)
      .send({ status: ready ? "ready" : "not ready", storage: storageState, runtime: runtimeState });
  });
  http.get("/metrics", async (_req, reply) =>
    reply.header("content-type", metrics.registry.contentType).send(await metrics.registry.metrics()),
  );
  http.get("/server_info", async () => ({
    name: "agent-workspace-service",
    version: VERSION,
    uptime: (Date.now() - started) / 1000,
    storage: deps.storage.kind,
    runtime: deps.runtime.kind,
  }));

  // OpenAPI 3.1 from the route table (request models + proto responses), and Swagger UI at /docs (assets are
  // served from the npm package: no CDN); both made on first use.
  registerDocs(http, () => buildOpenApi(routes, { title: "Agent Workspace Service", version: VERSION }));

  await http.register(restGateway({ routes, bindings, authenticate, admit, keyOf }));
  await http.register(sessionRoutes({ sessions, authenticate, admit }));
  /** The admitted caller of a request outside the gateway (throws as the gateway's auth step would). */
  const requestCaller = async (req: FastifyRequest): Promise<Caller | null> => {
    const caller = await authenticate(keyOf(req.method, nodeHeaders(req.headers)));
    if (caller !== null) admit(caller);
    return caller;
  };
  await http.register(optionsRoutes({ ...web.options, caller: requestCaller }));
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
  }
  const connect = connectNodeAdapter({
    interceptors: [rpcMetrics(metrics)],
    requestGate: countRejections(metrics, createAuthGate(authenticate, admit, keyOf)),
    readMaxBytes: BODY_LIMIT,
    routes: (router) => {
      for (const b of bindings) router.service(b.desc, b.impl as never);
    },
  });
  const onRpcError = (err: unknown, method: string) => http.log.error({ err, method }, "rpc failed");
  /** Finished calls counted and timed by protocol, method and code. */
  const countCall = (protocol: string) => (method: string, code: Code | 0, ms: number) =>
    metrics.rpc(protocol, method, code === 0 ? "OK" : (Code[code] ?? String(code)), ms / 1000);
  // Connect unary calls (POST, JSON or proto) are served without connect-node's universal-request glue; GET,
  // streaming, gRPC-Web and unknown content types go to its adapter (see connect-unary.ts).
  const connectUnary = createConnectUnaryHandler({
    bindings,
    authenticate,
    admit,
    keyOf,
    readMaxBytes: BODY_LIMIT,
    onCall: countCall("connect"),
    onError: onRpcError,
  });
  let closing = false;
  rpc = (req, res, route) => {
    const started = performance.now();
    const header = req.headers["x-request-id"];
    let reqId = typeof header === "string" && header.length > 0 ? header : nextRequestId();
    try {
      res.setHeader("x-request-id", reqId);
    } catch {
      // A value Node accepts in a request but not in a response header: answer with an id of our own.
      reqId = nextRequestId();
      res.setHeader("x-request-id", reqId);
    }
    // "close" rather than "finish": a call whose client went away before the answer was complete is logged and
    // counted too (marked aborted in the log).
    res.once("close", () => {
      const ms = performance.now() - started;
      metrics.http(req.method ?? "", route, res.statusCode, ms / 1000);
      const entry = {
        reqId,
        method: req.method ?? "",
        url: req.url ?? "",
        route,
        statusCode: res.statusCode,
        ms,
      };
      if (res.writableFinished) access(entry, "request completed");
      else access({ ...entry, aborted: true }, "request aborted by the client");
    });
    if (closing) {
      // As Fastify answers while closing (return503OnClosing), in Connect's error shape.
      res
        .writeHead(503, { "content-type": "application/json", connection: "close" })
        .end(JSON.stringify({ code: "unavailable", message: "the server is shutting down" }));
      return;
    }
    if (!connectUnary(req, res, route)) connect(req, res);
  };
  http.addHook("preClose", (done) => {
    closing = true;
    done();
  });

  const grpcServer = createGrpcServer({
    bindings,
    authenticate,
    admit,
    onError: onRpcError,
    onCall: countCall("grpc"),
  });
  addReflection(grpcServer, bindings);

  let closed = false;
  return {
    http,
    grpc: grpcServer,
    keys,
    metrics,
    services: { settings, secrets, sandboxes, specs, conversations, git },
    bindings,
    routes,
    async listen(host, port, grpcPort) {
      await http.listen({ host, port });
      const address = http.server.address();
      const boundGrpc = await new Promise<number>((resolve, reject) =>
        grpcServer.bindAsync(`${host}:${grpcPort}`, grpc.ServerCredentials.createInsecure(), (err, p) =>
          err ? reject(err) : resolve(p),
        ),
      );
      return {
        port: typeof address === "object" && address !== null ? address.port : port,
        grpcPort: boundGrpc,
      };
    },
    async close() {
      if (closed) return;
      closed = true;
      await conversations.shutdown();
      await Promise.all([
        http.close(),
        new Promise<void>((resolve) => {
          const timer = setTimeout(() => {
            grpcServer.forceShutdown();
            resolve();
          }, 5_000);
          grpcServer.tryShutdown(() => {
            clearTimeout(timer);
            resolve();
          });
        }),
      ]);
      await deps.runtime.close();
      await deps.storage.close();
    },
  };
}

/** Fastify's default schema compilers, required on first use from where Fastify resolves them. */
export function lazyFastifyCompilers() {
  type Factory = (...args: unknown[]) => unknown;
  const fromFastify = createRequire(createRequire(import.meta.url).resolve("fastify"));
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

/** The path of a request URL (without its query). */
function pathOf(url: string | undefined): string {
  if (url === undefined) return "";
  const q = url.indexOf("?");
  return q === -1 ? url : url.slice(0, q);
}

let requestCount = 0;
/** Request ids when the client sends none: "req-" and a process-wide counter in base 36, as Fastify's own. */
function nextRequestId(): string {
  requestCount++;
  return `req-${requestCount.toString(36)}`;
}

/** Calls the request gate rejects (they never reach the interceptors) counted by method and code too. */
function countRejections(
  metrics: Metrics,
  gate: (ctx: HandlerContext) => void | Promise<void>,
): (ctx: HandlerContext) => void | Promise<void> {
  const count = (ctx: HandlerContext, err: unknown): never => {
    const method = `${ctx.service.typeName}/${ctx.method.name}`;
    metrics.rpc("connect", method, Code[ConnectError.from(err).code] ?? "Unknown", 0);
    throw err;
  };
  return (ctx) => {
    let passed: void | Promise<void>;
    try {
      passed = gate(ctx);
    } catch (err) {
      return count(ctx, err);
    }
    return passed instanceof Promise ? passed.catch((err: unknown) => count(ctx, err)) : undefined;
  };
}

/** Connect / gRPC-Web calls counted and timed by method and code. */
function rpcMetrics(metrics: Metrics): Interceptor {
  const names = new WeakMap<object, string>();
  return (next) => async (req) => {
    const started = performance.now();
    let method = names.get(req.method);
    if (method === undefined) {
      method = `${req.service.typeName}/${req.method.name}`;
      names.set(req.method, method);
    }
    try {
      const res = await next(req);
      metrics.rpc("connect", method, "OK", (performance.now() - started) / 1000);
      return res;
    } catch (err) {
      metrics.rpc(
        "connect",
        method,
        Code[ConnectError.from(err).code] ?? "Unknown",
        (performance.now() - started) / 1000,
      );
      throw err;
    }
  };
}
