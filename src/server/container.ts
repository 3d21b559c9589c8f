import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import type { DescMethod } from "@bufbuild/protobuf";
import { Counter } from "prom-client";
import { HttpAgentClient } from "../adapters/agent-client/http-agent-client.ts";
import { HttpGitProviderClients } from "../adapters/git-providers/provider-clients.ts";
import { createLocalRepositoryCatalog } from "../adapters/local-repositories/local-repositories.ts";
import type { Caller } from "../core/context.ts";
import { PageTokens } from "../core/page-token.ts";
import { ProviderHostPolicy } from "../core/provider-host.ts";
import { RateLimiter } from "../core/rate-limiter.ts";
import { SecretBox } from "../core/secret-box.ts";
import { ChangeFeed } from "../domain/change-feed.ts";
import {
  AppConversationService,
  type AppConversationServiceOptions,
} from "../domain/conversations/app-conversation-service.ts";
import { ConversationRecords } from "../domain/conversations/conversation-records.ts";
import { ConversationFactBus } from "../domain/conversations/ports.ts";
import { DEFAULT_EVENT_LIMITS, type EventLimits, EventService } from "../domain/events/event-service.ts";
import { GitService } from "../domain/git/git-service.ts";
import { ApiKeyService, DEFAULT_USER } from "../domain/keys/api-key-service.ts";
import { AgentTargets } from "../domain/sandboxes/agent-targets.ts";
import type { SpecCatalog } from "../domain/sandboxes/ports.ts";
import { type AgentUrls, SandboxInfos } from "../domain/sandboxes/sandbox-info.ts";
import { SandboxLifecycle } from "../domain/sandboxes/sandbox-lifecycle.ts";
import { type SandboxLimits, sandboxLimits } from "../domain/sandboxes/sandbox-limits.ts";
import { SandboxReconciler } from "../domain/sandboxes/sandbox-reconciler.ts";
import { SandboxService } from "../domain/sandboxes/sandbox-service.ts";
import { type SandboxSpec, SandboxSpecService } from "../domain/sandboxes/sandbox-spec-service.ts";
import { SandboxStates } from "../domain/sandboxes/sandbox-state.ts";
import { sealedSessionKeys } from "../domain/sandboxes/session-keys.ts";
import { WarmClaims } from "../domain/sandboxes/warm-claims.ts";
import { SecretsService } from "../domain/secrets/secrets-service.ts";
import { SettingsService } from "../domain/settings/settings-service.ts";
import { DEFAULT_USER_DATA_LIMITS, type UserDataLimits, UserDataStore } from "../domain/user-data-store.ts";
import { AppConversationService as AppConversationServiceDesc } from "../gen/workspace/v1/app_conversation_pb.js";
import { EventService as EventServiceDesc } from "../gen/workspace/v1/event_pb.js";
import { GitService as GitServiceDesc } from "../gen/workspace/v1/git_pb.js";
import { SandboxService as SandboxServiceDesc } from "../gen/workspace/v1/sandbox_pb.js";
import { SandboxSpecService as SandboxSpecServiceDesc } from "../gen/workspace/v1/sandbox_spec_pb.js";
import { SecretsService as SecretsServiceDesc } from "../gen/workspace/v1/secrets_pb.js";
import { SettingsService as SettingsServiceDesc } from "../gen/workspace/v1/settings_pb.js";
import type { AgentClient } from "../ports/agent-client.ts";
import type { GitProviderClients } from "../ports/git-provider.ts";
import type { GitProviderVerifier } from "../ports/git-provider-verifier.ts";
import type { SandboxRepository } from "../ports/sandbox-repository.ts";
import type { SandboxRuntime } from "../ports/sandbox-runtime.ts";
import type { Storage } from "../ports/storage.ts";
import {
  type Admission,
  type Admit,
  type Authenticate,
  createAdmission,
} from "../transports/kit/admission.ts";
import { BrowserSessions, type KeyOf } from "../transports/kit/browser-session.ts";
import type { TransportLimits } from "../transports/kit/limits.ts";
import { bind, type ServiceBinding } from "../transports/kit/service-binding.ts";
import { StreamLimits } from "../transports/kit/streams.ts";
import { legacyRoutes } from "../transports/rest/legacy-routes.ts";
import { instrumentStorage, Metrics } from "./metrics.ts";

export interface ContainerDeps {
  storage: Storage;
  encryptionKey: Buffer;
  /** null disables git token verification. */
  verifier: GitProviderVerifier | null;
  rateLimit: { perSecond: number; burst: number };
  runtime: SandboxRuntime;
  specs: readonly SandboxSpec[];
  maxRunningSandboxes: number;
  /** Sandboxes a user may have. */
  maxSandboxesPerUser: number;
  /** Warm sandboxes one user may take per minute (SandboxService's default when unset). */
  warmClaimsPerMinute?: number;
  limits: TransportLimits;
  /** Client of the sandboxes' agent servers (default: HTTP). */
  agent?: AgentClient;
  /**
   * Git provider access: the allowed token hosts (default: public domain names only), the provider clients
   * (default: over HTTP), one call's timeout and the repository cache (default 60 s).
   */
  git?: GitDeps;
  /** Timeouts of conversation starts and live status, and how long a server's lease on a start lasts. */
  conversations?: Pick<
    AppConversationServiceOptions,
    | "timeouts"
    | "liveStatusTimeoutMs"
    | "shutdownGraceMs"
    | "leaseMs"
    | "maxAttempts"
    | "localRepositoryRoots"
  >;
  /** How long a sandbox may take to start before it is ERROR (default 120 s). */
  sandboxStartTimeoutMs?: number;
  /**
   * Base URL of this service as sandboxes reach it, read at each sandbox start (for their webhooks); undefined:
   * sandboxes get no webhook URL.
   */
  webhookBaseUrl: () => string | undefined;
  /** Service warnings (e.g. a conversation start that failed). */
  log: (msg: string, data?: Record<string, unknown>) => void;
  /** What one user may store and what sandboxes may post (default: DEFAULT_QUOTAS; docs/quotas.md). */
  quotas?: Quotas;
  /**
   * Browser sign-in: allowed origins, proxy trust, session lifetime, single-user mode; `tls`: the server serves
   * TLS itself (every request is secure: the `__Host-` cookie, an https origin).
   */
  web: {
    corsOrigins?: readonly string[];
    trustProxy?: boolean;
    tls?: boolean;
    singleUser?: boolean;
    sessionMaxAgeSeconds?: number;
  };
  /** How sandbox and conversation JSON name agents (SandboxServiceDeps.agentUrls; default: proxied). */
  agentUrls?: AgentUrls;
}

/** The services of one server, wired together, with what every transport needs to serve them. */
/** See ContainerDeps.git. */
export interface GitDeps {
  hosts?: ProviderHostPolicy;
  clients?: GitProviderClients;
  timeoutMs?: number;
  repositoryCacheSeconds?: number;
}

export interface Container {
  storage: Storage;
  /** Whether a user may write its settings and secrets now (its write rate; refused REST writes skip the body). */
  canWriteUserData: (userId: string) => boolean;
  /** The store's change log as this server follows it (watches). */
  changes: ChangeFeed;
  metrics: Metrics;
  keys: ApiKeyService;
  services: {
    settings: SettingsService;
    secrets: SecretsService;
    sandboxes: SandboxService;
    specs: SandboxSpecService;
    conversations: AppConversationService;
    events: EventService;
    git: GitService;
  };
  /** Every service with its descriptor, streaming methods under the stream caps. */
  bindings: readonly ServiceBinding[];
  /** Authentication and admission (rate limit) of a session key, for every transport. */
  admission: Admission;
  /** Its two steps, for routes outside the transports (sign-in, options). */
  authenticate: Authenticate;
  admit: Admit;
  /** Browser sessions, and the session key of an HTTP request (header or session cookie). */
  sessions: BrowserSessions;
  keyOf: KeyOf;
  streams: StreamLimits;
}

/** What one user may store and what sandboxes may post (docs/quotas.md). */
export interface Quotas {
  userData: UserDataLimits;
  events: EventLimits;
}

export const DEFAULT_QUOTAS: Quotas = Object.freeze({
  userData: DEFAULT_USER_DATA_LIMITS,
  events: DEFAULT_EVENT_LIMITS,
});

/** Builds the services on the given storage and runtime: no transports, no globals, no environment reads. */
export function createContainer(deps: ContainerDeps): Container {
  const metrics = new Metrics();
  const storage = instrumentStorage(deps.storage, metrics);
  const box = new SecretBox(deps.encryptionKey);
  const pageTokens = new PageTokens(box.derive("page-tokens"));
  const keys = new ApiKeyService(storage.apiKeys, { cacheTtlMs: deps.limits.keyRecheckMs });
  const limiter = new RateLimiter(deps.rateLimit.perSecond, deps.rateLimit.burst);
  const quotas = deps.quotas ?? DEFAULT_QUOTAS;
  const store = new UserDataStore(storage.userData, quotas.userData);
  const changes = new ChangeFeed(storage.changes, { log: deps.log });
  // Names this server in start task leases: host, process, and a random part (a pid may be reused).
  const leaseOwner = `${hostname()}:${process.pid}:${randomBytes(4).toString("hex")}`;

  const hosts = deps.git?.hosts ?? new ProviderHostPolicy();
  // The repositories of LOCAL_REPOSITORY_ROOTS: listed by the git routes, named by starts.
  const localRoots = deps.conversations?.localRepositoryRoots ?? [];
  const localRepositories =
    localRoots.length === 0 ? undefined : createLocalRepositoryCatalog({ roots: localRoots });
  const settings = new SettingsService({
    store,
    box,
    verifier: deps.verifier,
    hosts,
    localRepositories: localRepositories !== undefined,
  });
  const git = new GitService({
    tokens: settings,
    clients:
      deps.git?.clients ?? new HttpGitProviderClients({ hosts, timeoutMs: deps.git?.timeoutMs ?? 5_000 }),
    repositoryCacheSeconds: deps.git?.repositoryCacheSeconds ?? 60,
    ...(localRepositories === undefined ? {} : { local: localRepositories }),
  });
  const secrets = new SecretsService({ store, box });
  const specs = new SandboxSpecService(deps.specs, pageTokens);
  const sandboxes = createSandboxService({
    webhookBaseUrl: deps.webhookBaseUrl,
    repo: storage.sandboxes,
    runtime: deps.runtime,
    specs,
    box,
    tokens: pageTokens,
    limits: sandboxLimits({
      maxRunning: deps.maxRunningSandboxes,
      maxPerUser: deps.maxSandboxesPerUser,
      ...(deps.warmClaimsPerMinute === undefined ? {} : { warmClaimsPerMinute: deps.warmClaimsPerMinute }),
      ...(deps.sandboxStartTimeoutMs === undefined ? {} : { startTimeoutMs: deps.sandboxStartTimeoutMs }),
    }),
    changes,
    log: deps.log,
    // Sandboxes used by unfinished conversation starts (of any server sharing the store) keep their slot.
    inUseByStarts: (userId) => storage.startTasks.sandboxesInUse(userId),
    ...(deps.agentUrls === undefined ? {} : { agentUrls: deps.agentUrls }),
  });
  const agent = deps.agent ?? new HttpAgentClient();
  const facts = new ConversationFactBus();
  const conversations = new AppConversationService({
    conversations: storage.conversations,
    startTasks: storage.startTasks,
    sandboxes,
    sandboxStarts: sandboxes,
    settings,
    secrets,
    agent,
    tokens: pageTokens,
    ...deps.conversations,
    timeouts: {
      ...(deps.sandboxStartTimeoutMs === undefined ? {} : { sandboxStartMs: deps.sandboxStartTimeoutMs }),
      ...deps.conversations?.timeouts,
    },
    changes,
    leaseOwner,
    events: storage.events,
    log: deps.log,
    pullRequests: { open: (userId, prs) => git.pullRequestsOpen(userId, prs) },
    facts,
    ...(localRepositories === undefined ? {} : { localRepositories }),
  });
  const records = new ConversationRecords({
    conversations: storage.conversations,
    sandboxes,
    agent,
    ...(deps.conversations?.liveStatusTimeoutMs === undefined
      ? {}
      : { agentTimeoutMs: deps.conversations.liveStatusTimeoutMs }),
  });
  const events = new EventService({
    events: storage.events,
    pendingStart: (ownerId, conversationId) => storage.startTasks.findPending(ownerId, conversationId),
    limits: quotas.events,
    sandboxes: { get: (id) => storage.sandboxes.get(id), sessionKey: (r) => sandboxes.sessionKey(r) },
    conversations: records,
    tokens: pageTokens,
    changes,
    log: deps.log,
  });
  // The event service names a conversation from a first user message that arrived before its record existed.
  facts.subscribe((fact) => events.conversationCreated(fact.record));

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
  metrics.statusGauge("sandboxes", "Recorded sandboxes by status (all users)", async () => {
    const counts: Record<string, number> = { STARTING: 0, RUNNING: 0, PAUSED: 0, ERROR: 0, MISSING: 0 };
    for (const s of await storage.sandboxes.listAll()) counts[s.status] = (counts[s.status] ?? 0) + 1;
    return counts;
  });

  const web = deps.web;
  const sessions = new BrowserSessions({
    box: new SecretBox(box.derive("browser-sessions")),
    allowedOrigins: web.corsOrigins ?? [],
    trustProxy: web.trustProxy ?? false,
    tls: web.tls ?? false,
    maxAgeSeconds: web.sessionMaxAgeSeconds ?? 24 * 3600,
    singleUser: web.singleUser ?? false,
  });
  const singleUser: Caller = { userId: DEFAULT_USER, keyId: "single-user" };
  const authenticate: Authenticate =
    web.singleUser === true
      ? (key) => (key === undefined ? singleUser : keys.authenticate(key))
      : (key) => keys.authenticate(key);
  const admit: Admit = (caller) => limiter.admit(caller.keyId);
  const streams = new StreamLimits({
    perKey: deps.limits.maxStreamsPerKey,
    total: deps.limits.maxStreams,
    recheckMs: deps.limits.keyRecheckMs,
    authenticate,
  });
  metrics.gauge("open_streams", "Open server-streaming calls (all protocols)", () => streams.open);
  const bindings = [
    bind(SettingsServiceDesc, settings),
    bind(SecretsServiceDesc, secrets),
    bind(SandboxSpecServiceDesc, specs),
    bind(SandboxServiceDesc, sandboxes),
    bind(AppConversationServiceDesc, conversations),
    bind(EventServiceDesc, events),
    bind(GitServiceDesc, git),
  ].map((b) => streams.guard(b));

  return {
    storage,
    canWriteUserData: (userId) => store.canWrite(userId),
    changes,
    metrics,
    keys,
    services: { settings, secrets, sandboxes, specs, conversations, events, git },
    bindings,
    // The write rate of the methods that write the user document, before their request is decoded (the transports
    // that know the method first pass it; UserDataStore.mutate holds every write to it in any case).
    admission: createAdmission(authenticate, admit, (caller, method) => {
      if (USER_DATA_WRITERS.has(method)) store.requireWrite(caller.userId);
    }),
    authenticate,
    admit,
    sessions,
    keyOf: (method, header) => sessions.keyOf(method, header),
    streams,
  };
}

/** What the sandbox service's jobs are composed from (see {@link createSandboxService}). */
export interface SandboxServiceDeps {
  repo: SandboxRepository;
  /** The store's change feed: status changes are published there and watches follow it (every server's). */
  changes: ChangeFeed;
  runtime: SandboxRuntime;
  /** The configured specs (the SandboxSpecService). */
  specs: SpecCatalog;
  /** Seals the sandboxes' session keys at rest. */
  box: SecretBox;
  tokens: PageTokens;
  /** The limits, frozen (sandboxLimits), shared by every job. */
  limits: SandboxLimits;
  log?: (msg: string, data?: Record<string, unknown>) => void;
  /**
   * Base URL of this service as sandboxes reach it (e.g. http://127.0.0.1:3000), read at each start; when set,
   * the agent gets OH_WEBHOOKS_0_BASE_URL = <base>/api/v1/webhooks/<sandbox id> to report its events.
   */
  webhookBaseUrl?: () => string | undefined;
  /**
   * The user's sandboxes in use by a conversation start that has not ended (any server's): the running limit
   * never pauses them, as it never pauses a STARTING one. Default: none.
   */
  inUseByStarts?: (userId: string) => Promise<readonly string[]>;
  /** How sandbox JSON names the agent (docs/agent-proxy.md; AgentUrls). Default: proxied. */
  agentUrls?: AgentUrls;
}

/**
 * The sandbox service composed from its jobs: sandbox states, warm claims, the lifecycle, the reconciler, the
 * API's sandbox infos and the agent proxy's targets, each given the small interfaces it needs and the one frozen
 * limits object.
 */
export function createSandboxService(deps: SandboxServiceDeps): SandboxService {
  const { repo, runtime, changes, limits, log } = deps;
  const keys = sealedSessionKeys(deps.box);
  const states = new SandboxStates({ repo, runtime, changes, limits, log });
  const warm = new WarmClaims({ pool: runtime, records: repo, limits, log });
  const lifecycle = new SandboxLifecycle({
    repo,
    runtime,
    specs: deps.specs,
    warm,
    states,
    changes,
    keys,
    limits,
    inUseByStarts: deps.inUseByStarts ?? (async () => []),
    webhookBaseUrl: deps.webhookBaseUrl,
    log,
  });
  const reconciler = new SandboxReconciler({ repo, runtime, states, lifecycle, limits, log });
  return new SandboxService({
    records: repo,
    changes,
    tokens: deps.tokens,
    keys,
    states,
    lifecycle,
    reconciler,
    infos: new SandboxInfos({ keys, agentUrls: deps.agentUrls ?? { proxied: true } }),
    agentTargets: new AgentTargets({ records: repo, keys }),
  });
}

/** The RPC methods that write the caller's user document: those of the REST routes marked `writesUserData`. */
const USER_DATA_WRITERS: ReadonlySet<DescMethod> = new Set(
  legacyRoutes.flatMap((r) => (r.writesUserData === true ? [r.rpc] : [])),
);
