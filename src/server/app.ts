import type { Server as NodeServer } from "node:http";
import type * as grpc from "@grpc/grpc-js";
import type { FastifyInstance, FastifyServerOptions } from "fastify";
import type { ApiKeyService } from "../domain/keys/api-key-service.ts";
import type { SandboxSpec } from "../domain/sandboxes/sandbox-spec-service.ts";
import type { AgentClient } from "../ports/agent-client.ts";
import type { GitProviderVerifier } from "../ports/git-provider-verifier.ts";
import type { SandboxRuntime } from "../ports/sandbox-runtime.ts";
import type { Storage } from "../ports/storage.ts";
import { type AgentProxySettings, DEFAULT_AGENT_PROXY } from "../transports/agent-proxy/agent-settings.ts";
import { createGrpcServer, type GrpcListener, listenGrpc } from "../transports/grpc/grpc-server.ts";
import { addReflection } from "../transports/grpc/reflection.ts";
import { ConnectionGuard } from "../transports/kit/connection-guard.ts";
import { DEFAULT_LIMITS, type TransportLimits } from "../transports/kit/limits.ts";
import type { ServiceBinding } from "../transports/kit/service-binding.ts";
import type { OptionsLists } from "../transports/rest/options-routes.ts";
import type { RestRoute } from "../transports/rest/rest-route.ts";
import type { RetentionConfig } from "./config-types.ts";
import {
  type Container,
  type ContainerDeps,
  createContainer,
  type GitDeps,
  type Quotas,
} from "./container.ts";
import { createAdminServer, createHttpServer, REST_ROUTES } from "./http-server.ts";
import { keepMemoryReducerWorking, releaseMemoryAfterLoad } from "./idle-memory.ts";
import type { Metrics } from "./metrics.ts";
import { createWebhookListener } from "./tls-listeners.ts";

export { VERSION } from "./http-server.ts";

/** How long running calls may go on once the server starts closing. */
const SHUTDOWN_GRACE_MS = 5_000;
/** What the sweep keeps by default (see AppDeps.retention). */
const DEFAULT_RETENTION: RetentionConfig = {
  changeLogMs: 60 * 60_000,
  changeLogMaxEntries: 10_000,
  startTaskMs: 24 * 60 * 60_000,
};
/** How long a conversation delete may take: one not done after this was cut short, and the sweep finishes it. */
const CONVERSATION_DELETE_GRACE_MS = 60_000;
/** How long a deleted conversation's tombstone refuses events reported for it (an agent's late webhooks). */
const CONVERSATION_TOMBSTONE_MS = 24 * 60 * 60_000;

export interface AppDeps {
  storage: Storage;
  encryptionKey: Buffer;
  /** null disables git token verification. */
  verifier: GitProviderVerifier | null;
  rateLimit?: { perSecond: number; burst: number };
  runtime: SandboxRuntime;
  specs: readonly SandboxSpec[];
  maxRunningSandboxes?: number;
  /** Sandboxes a user may have (default 20). */
  maxSandboxesPerUser?: number;
  /** Warm sandboxes one user may take per minute (default: no limit; `serve` sets SANDBOX_WARM_CLAIMS_PER_MINUTE). */
  warmClaimsPerMinute?: number;
  /**
   * Period of the background sweep: sandboxes reconciled with the runtime (crash leftovers removed), unsaved start
   * task ends saved, old change log entries pruned (default 30 s; 0: no timer, tests call {@link App.sweep}).
   */
  sweepIntervalMs?: number;
  /** What the sweep keeps of the change log and of finished start tasks (defaults: 1 h or 10,000 entries; 1 day). */
  retention?: Partial<RetentionConfig>;
  /** Lease of this server on the conversation starts it runs (default 15 s; see AppConversationService). */
  leaseMs?: number;
  /** How long a sandbox may take to start before it is ERROR (default 120 s). */
  sandboxStartTimeoutMs?: number;
  logger?: FastifyServerOptions["logger"];
  /** Client of the sandboxes' agent servers (default: HTTP). */
  agent?: AgentClient;
  /**
   * Base URL of this service as sandboxes reach it, for their webhooks (default: http://<listen host>:<HTTP port>,
   * with 127.0.0.1 for a wildcard host; with `tls`, the webhook listener's http://127.0.0.1:<webhookPort>).
   */
  webhookBaseUrl?: string;
  /**
   * Serve TLS with this certificate chain and key (PEM): HTTPS on the HTTP port, gRPC over TLS, the browser
   * session cookie always Secure. Without webhookBaseUrl, sandboxes then post their webhooks to a plain-HTTP
   * listener on 127.0.0.1:`webhookPort` (default 0: any free port) that serves nothing else (docs/tls.md).
   */
  tls?: { cert: Buffer; key: Buffer } | undefined;
  /** Port of the webhook listener started with `tls` and no webhookBaseUrl (default 0: any free port). */
  webhookPort?: number | undefined;
  /**
   * Git provider access: the allowed token hosts (default: public domain names only), the provider clients
   * (default: over HTTP), one call's timeout and the repository cache (default 60 s).
   */
  git?: GitDeps;
  /** Timeouts of conversation starts and live status, and the local repository roots. */
  conversations?: ContainerDeps["conversations"];
  /** Message size, stream, connection and timeout limits (defaults: DEFAULT_LIMITS). */
  limits?: Partial<TransportLimits>;
  /** Browser-facing options: web UI folder, CORS, sign-in cookie, single-user mode, /api/options lists. */
  web?: WebDeps;
  /** What one user may store and what sandboxes may post (default DEFAULT_QUOTAS; docs/quotas.md). */
  quotas?: Quotas;
  /**
   * /metrics, /docs and /openapi.json: with `port`, served only by a listener of their own on `host` (default
   * 127.0.0.1); else on the HTTP port, /metrics there for an API key. `metricsToken`: a bearer token /metrics
   * accepts (on the admin listener, the only thing it accepts when set).
   */
  admin?: { port?: number | undefined; host?: string | undefined; metricsToken?: string | undefined };
  /**
   * The everyday Connect unary call on the hand-written path of src/transports/connect/connect-unary.ts (default true); false: every
   * Connect call on connect-node's handler (`npm run bench -- --only connect` measures both ways).
   */
  connectFastPath?: boolean;
  /**
   * Agents reached through this service's own origin (default: on, with DEFAULT_AGENT_PROXY limits;
   * docs/agent-proxy.md). `enabled: false`: conversations and sandboxes name the agents' direct URLs and the HTTP
   * listener forwards nothing. `publicUrl`: the origin browsers reach the service at (absolute agent URLs).
   */
  agentProxy?: { enabled?: boolean; publicUrl?: string | undefined; limits?: Partial<AgentProxySettings> };
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
  services: Container["services"];
  grpc: grpc.Server;
  keys: ApiKeyService;
  bindings: readonly ServiceBinding[];
  routes: readonly RestRoute[];
  /** One run of the background sweep (see AppDeps.sweepIntervalMs); never rejects. */
  sweep(): Promise<void>;
  /**
   * Listens on both ports (0: any free port) and returns the bound ports; with TLS and no webhook base URL, also
   * the webhook listener's (on 127.0.0.1).
   */
  listen(
    host: string,
    port: number,
    grpcPort: number,
  ): Promise<{ port: number; grpcPort: number; adminPort?: number; webhookPort?: number }>;
  /**
   * Graceful stop: refuses new work, lets running conversation starts finish (cut off after a grace period, ending
   * in ERROR), finishes in-flight requests, then closes storage.
   */
  close(): Promise<void>;
}

/** Builds the whole service: the container of services, the HTTP server and the gRPC server over it. */
export async function buildApp(deps: AppDeps): Promise<App> {
  const limits: TransportLimits = Object.freeze({ ...DEFAULT_LIMITS, ...deps.limits });
  let http: FastifyInstance | undefined;
  let listenerUrl: string | undefined;
  /** The HTTP listener's port once it listens (the proxied agent URL's port when no PUBLIC_URL names one). */
  let listenerPort: number | undefined;
  const container = createContainer({
    storage: deps.storage,
    encryptionKey: deps.encryptionKey,
    verifier: deps.verifier,
    rateLimit: deps.rateLimit ?? { perSecond: 200, burst: 400 },
    runtime: deps.runtime,
    specs: deps.specs,
    maxRunningSandboxes: deps.maxRunningSandboxes ?? 5,
    maxSandboxesPerUser: deps.maxSandboxesPerUser ?? 20,
    ...(deps.warmClaimsPerMinute === undefined ? {} : { warmClaimsPerMinute: deps.warmClaimsPerMinute }),
    limits,
    ...(deps.agent ? { agent: deps.agent } : {}),
    conversations: {
      ...(deps.leaseMs === undefined ? {} : { leaseMs: deps.leaseMs }),
      ...deps.conversations,
    },
    ...(deps.sandboxStartTimeoutMs === undefined
      ? {}
      : { sandboxStartTimeoutMs: deps.sandboxStartTimeoutMs }),
    ...(deps.git ? { git: deps.git } : {}),
    webhookBaseUrl: () => deps.webhookBaseUrl ?? listenerUrl,
    log: (msg, data) => http?.log.warn(data ?? {}, msg),
    web: { ...deps.web, tls: deps.tls !== undefined },
    ...(deps.quotas ? { quotas: deps.quotas } : {}),
    agentUrls: {
      proxied: deps.agentProxy?.enabled !== false,
      publicUrl: deps.agentProxy?.publicUrl,
      servicePort: () => listenerPort,
    },
  });
  const proxied = deps.agentProxy?.enabled !== false;
  http = await createHttpServer(container, {
    ...(proxied ? { agentProxy: { ...DEFAULT_AGENT_PROXY, ...deps.agentProxy?.limits } } : {}),
    logger: deps.logger,
    limits,
    runtime: deps.runtime,
    storageKind: deps.storage.kind,
    shutdownTimeoutMs: SHUTDOWN_GRACE_MS,
    tls: deps.tls,
    web: deps.web ?? {},
    admin: { onPublicPort: deps.admin?.port === undefined, metricsToken: deps.admin?.metricsToken },
    connectFastPath: deps.connectFastPath !== false,
  });
  const log = http.log;
  // A gRPC connection with no call within the header timeout is closed, as an HTTP/1.1 one without a request head;
  // one idle that long after its calls is closed by grpc-js (max_connection_idle_ms).
  const grpcIdleMs = Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs);
  const grpcConnections = new ConnectionGuard({
    maxConnections: limits.maxConnections,
    firstRequestTimeoutMs: grpcIdleMs,
  });
  const grpcServer = createGrpcServer({
    maxConnectionIdleMs: grpcIdleMs,
    onCallStart: (peer) => grpcConnections.beginPeer(peer),
    bindings: container.bindings,
    admission: container.admission,
    maxMessageBytes: limits.maxMessageBytes,
    onCall: (method, code, seconds) => container.metrics.rpc("grpc", method, code, seconds),
    onAnswer: (method, seconds) => container.metrics.answer("grpc", method, seconds),
    onError: (err, method) => log.error({ err, method }, "rpc failed"),
  });
  addReflection(grpcServer, container.bindings);

  const { sandboxes, conversations } = container.services;
  const retention: RetentionConfig = { ...DEFAULT_RETENTION, ...deps.retention };
  const sweep = async (): Promise<void> => {
    try {
      await sandboxes.reconcileAll();
      await conversations.sweepStartTasks();
    } catch (err) {
      log.warn({ error: String(err) }, "sweep failed; the next one retries");
    }
    // The store's upkeep, even when the sandboxes could not be reconciled (a runtime outage).
    try {
      const now = Date.now();
      const deletes = await deps.storage.conversations.finishDeletes(
        new Date(now - CONVERSATION_DELETE_GRACE_MS),
        new Date(now - CONVERSATION_TOMBSTONE_MS),
      );
      if (deletes.finished > 0)
        log.warn({ conversations: deletes.finished }, "finished conversation deletes cut short by a crash");
      await deps.storage.startTasks.pruneFinished(new Date(now - retention.startTaskMs));
      await container.changes.prune(new Date(now - retention.changeLogMs), retention.changeLogMaxEntries);
      await deps.storage.compact();
    } catch (err) {
      log.warn({ error: String(err) }, "store upkeep failed; the next sweep retries");
    }
  };
  let sweeping: Promise<void> | null = null;
  const sweepIntervalMs = deps.sweepIntervalMs ?? 30_000;
  const sweepTimer =
    sweepIntervalMs > 0
      ? setInterval(() => {
          sweeping ??= sweep().finally(() => {
            sweeping = null;
          });
        }, sweepIntervalMs).unref()
      : null;

  const server = http;
  let grpcListener: GrpcListener | undefined;
  let admin: FastifyInstance | undefined;
  let webhookListener: NodeServer | undefined;
  let stopMemoryReducerAid: (() => void) | undefined;
  let closed = false;
  let warming: Promise<void> | null = null;
  return {
    http: server,
    grpc: grpcServer,
    keys: container.keys,
    metrics: container.metrics,
    services: container.services,
    bindings: container.bindings,
    routes: REST_ROUTES,
    sweep,
    async listen(host, port, grpcPort) {
      const tls = deps.tls !== undefined;
      // Fastify's own "Server listening at" line, with the scheme the server serves.
      const listenTextResolver = (url: string) =>
        `Server listening at ${tls ? url.replace(/^http:/, "https:") : url}`;
      await namedListen("HTTP", "PORT", port, () => server.listen({ host, port, listenTextResolver }));
      const address = server.server.address();
      if (typeof address === "object" && address !== null) listenerPort = address.port;
      if (!tls && typeof address === "object" && address !== null) {
        const h =
          host === "0.0.0.0" || host === "::" || host === ""
            ? "127.0.0.1"
            : host.includes(":")
              ? `[${host}]`
              : host;
        listenerUrl = `http://${h}:${address.port}`;
      }
      grpcListener = await namedListen("gRPC", "GRPC_PORT", grpcPort, () =>
        listenGrpc(grpcServer, host, grpcPort, grpcConnections, deps.tls),
      );
      // Sandboxes would not trust the certificate: by default they post their webhooks over plain HTTP to a
      // listener on loopback that serves nothing else (after gRPC: a cluster worker's first two listeners are
      // HTTP and gRPC, see cluster.ts).
      let webhookPort: number | undefined;
      if (tls && deps.webhookBaseUrl === undefined) {
        const hooks = createWebhookListener((req, res) => server.routing(req, res), limits);
        webhookListener = hooks;
        webhookPort = await namedListen("webhook", "WEBHOOK_PORT", deps.webhookPort ?? 0, () =>
          listenOn(hooks, "127.0.0.1", deps.webhookPort ?? 0),
        );
        listenerUrl = `http://127.0.0.1:${webhookPort}`;
      }
      // Sandboxes in networks of their own reach the host only where allowed: the webhook URL is.
      const hooksAt = deps.webhookBaseUrl ?? listenerUrl;
      if (hooksAt !== undefined) deps.runtime.reachHost?.(hooksAt);
      let adminPort: number | undefined;
      if (deps.admin?.port !== undefined) {
        admin = await createAdminServer(container, {
          logger: deps.logger,
          metricsToken: deps.admin.metricsToken,
        });
        await admin.listen({ host: deps.admin.host ?? "127.0.0.1", port: deps.admin.port });
        const a = admin.server.address();
        adminPort = typeof a === "object" && a !== null ? a.port : deps.admin.port;
      }
      // Listening (sandboxes started from now on get this server's webhook URL): resume at once what an earlier
      // run of this server, or another server that died, left unfinished.
      conversations.startLeases();
      // Warm sandboxes are started with this server's webhook URL, known from now on.
      warming ??= sandboxes.startWarmPool().catch((err: unknown) => {
        log.warn({ error: String(err) }, "warm sandbox pool could not be started; starts are cold");
      });
      if (stopMemoryReducerAid === undefined) {
        const stopReducerAid = keepMemoryReducerWorking();
        const stopRelease = releaseMemoryAfterLoad({
          onRelease: ({ rssBeforeMiB, rssAfterMiB, ms }) =>
            log.info(
              {
                rssBeforeMiB: Math.round(rssBeforeMiB),
                rssAfterMiB: Math.round(rssAfterMiB),
                ms: Math.round(ms),
              },
              "idle after load: gave the young generation's pooled pages back",
            ),
        });
        stopMemoryReducerAid = () => {
          stopReducerAid();
          stopRelease();
        };
      }
      return {
        port: typeof address === "object" && address !== null ? address.port : port,
        grpcPort: grpcListener.port,
        ...(adminPort === undefined ? {} : { adminPort }),
        ...(webhookPort === undefined ? {} : { webhookPort }),
      };
    },
    async close() {
      if (closed) return;
      closed = true;
      if (sweepTimer !== null) clearInterval(sweepTimer);
      stopMemoryReducerAid?.();
      await sweeping;
      await warming;
      await container.services.conversations.shutdown();
      container.changes.close();
      // Connections that become idle while in-flight calls finish are closed too (Node closes the idle ones once,
      // when closing starts).
      const idle = setInterval(() => {
        server.server.closeIdleConnections();
        webhookListener?.closeIdleConnections();
      }, 100);
      await Promise.all([
        server.close(),
        grpcListener?.close(SHUTDOWN_GRACE_MS),
        admin?.close(),
        webhookListener === undefined ? undefined : closeServer(webhookListener),
      ]).finally(() => clearInterval(idle));
      await deps.runtime.close();
      await deps.storage.close();
    },
  };
}

/** Listens on host:port; resolves with the bound port. */
function listenOn(server: NodeServer, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      const a = server.address();
      resolve(typeof a === "object" && a !== null ? a.port : port);
    });
  });
}

/** Stops accepting and resolves once the server's connections are closed. */
function closeServer(server: NodeServer): Promise<void> {
  return new Promise((resolve) => server.close(() => resolve()));
}

/**
 * Runs one listener's listen and, when it fails, says which listener and which variable sets its port (the
 * original error is the cause): "listen EADDRINUSE :::3000" alone names neither.
 */
async function namedListen<T>(
  listener: string,
  variable: string,
  port: number,
  listen: () => Promise<T>,
): Promise<T> {
  try {
    return await listen();
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why =
      code === "EADDRINUSE"
        ? "the port is already in use (EADDRINUSE: another server or program listens there)"
        : code === "EACCES"
          ? "permission denied (EACCES: ports below 1024 need privileges)"
          : (err as Error).message;
    throw new Error(
      `the ${listener} listener cannot listen on port ${port} (${variable}): ${why}; set ${variable} to a free port`,
      {
        cause: err,
      },
    );
  }
}
