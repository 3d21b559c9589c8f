/**
 * `loadConfig`: the environment parsed once, every value checked, into the frozen `Config` (config-types.ts) the
 * server is built from. The variables and their meaning: env-doc.ts.
 */
import { isAbsolute, resolve } from "node:path";
import { ProviderHostPolicy } from "../core/provider-host.ts";
import { DEFAULT_LIMITS } from "../transports/kit/limits.ts";
import { type Config, ConfigError } from "./config-types.ts";
import { commaList, type Env, envReader } from "./env-reader.ts";
import { loadTlsConfig, type TlsConfig } from "./tls-config.ts";
import { loadWebConfig, type WebConfig } from "./web-config.ts";

/** Default of SANDBOX_WARM_AGENTS: enough for one start after another while the next agent boots. */
export const DEFAULT_WARM_AGENTS = 2;
/** Niceness of process sandboxes (SANDBOX_NICE): below the service's, so that under load it runs first. */
export const DEFAULT_SANDBOX_NICE = 10;
/**
 * Default of SANDBOX_WARM_CONTAINERS: one, since an idle agent-server container holds its memory (see
 * docs/warm-pool.md); a machine that starts sandboxes faster than one per agent-server boot wants more.
 */
export const DEFAULT_WARM_CONTAINERS = 1;

/** Parses the environment once. Throws ConfigError with a clear message on any invalid value. */
export function loadConfig(env: Env = process.env, cwd: string = process.cwd()): Readonly<Config> {
  // Every value is checked and every problem reported at once: fixing them one start at a time is a slow loop.
  const { problems, fail, port, int, flag } = envReader(env);
  const key = (raw: string | undefined): Buffer | undefined => {
    if (raw === undefined || raw === "") return undefined;
    const t = raw.trim();
    const buf = /^[0-9a-fA-F]{64}$/.test(t) ? Buffer.from(t, "hex") : Buffer.from(t, "base64");
    if (buf.length === 32) return buf;
    fail("ENCRYPTION_KEY must be 32 bytes, as 64 hex digits or base64");
    return undefined;
  };
  const allowedHosts = (raw: string | undefined): readonly string[] => {
    const entries = commaList(raw);
    try {
      new ProviderHostPolicy(entries);
    } catch {
      fail(
        "GIT_PROVIDER_ALLOWED_HOSTS must list host, host:port or http://host:port entries, comma-separated",
      );
      return Object.freeze([]);
    }
    return Object.freeze(entries);
  };
  const localRepositoryRoots = (raw: string | undefined): readonly string[] => {
    const roots = commaList(raw);
    const bad = roots.filter((r) => !isAbsolute(r));
    if (bad.length > 0) {
      fail(
        `LOCAL_REPOSITORY_ROOTS must list absolute folders, comma-separated; not absolute: ${bad.join(", ")}`,
      );
      return Object.freeze([]);
    }
    // Normalized (no trailing "/", no ".."), so that a containment check compares like with like.
    return Object.freeze([...new Set(roots.map((r) => resolve(r)))]);
  };
  const dataDir = resolve(cwd, env.DATA_DIR || "data");
  const mongoUri = env.MONGODB_URI?.trim();
  if (mongoUri && !/^mongodb(\+srv)?:\/\//.test(mongoUri))
    fail("MONGODB_URI must start with mongodb:// or mongodb+srv://");
  const runtimeKind = (env.SANDBOX_RUNTIME || "process").trim();
  if (runtimeKind !== "process" && runtimeKind !== "docker")
    fail(`SANDBOX_RUNTIME must be process or docker, got ${JSON.stringify(runtimeKind)}`);
  const cpus = env.SANDBOX_CPUS ? Number(env.SANDBOX_CPUS) : undefined;
  if (cpus !== undefined && !(cpus > 0 && cpus <= 1024)) fail("SANDBOX_CPUS must be a positive number");
  const memMb = int("SANDBOX_MEMORY_MB", 4096, 6, 1 << 20);
  const pidsLimit = int("SANDBOX_PIDS_LIMIT", 2048, 16, 4_194_304);
  const MB = 1024 * 1024;
  const isolation = (env.SANDBOX_ISOLATION || "auto").trim();
  if (isolation !== "auto" && isolation !== "bwrap" && isolation !== "none")
    fail(`SANDBOX_ISOLATION must be auto, bwrap or none, got ${JSON.stringify(isolation)}`);
  const sandboxNetwork = (env.SANDBOX_NETWORK || "auto").trim();
  if (sandboxNetwork !== "auto" && sandboxNetwork !== "isolated" && sandboxNetwork !== "host")
    fail(`SANDBOX_NETWORK must be auto, isolated or host, got ${JSON.stringify(sandboxNetwork)}`);
  const hostPortsRaw = (env.SANDBOX_HOST_PORTS ?? "11434").trim();
  const sandboxHostPorts: number[] = [];
  for (const word of hostPortsRaw === "" ? [] : hostPortsRaw.split(/[\s,]+/)) {
    const n = Number(word);
    if (!/^\d+$/.test(word) || n < 1 || n > 65535)
      fail(
        `SANDBOX_HOST_PORTS must list ports (1-65535) separated by commas, got ${JSON.stringify(hostPortsRaw)}`,
      );
    else sandboxHostPorts.push(n);
  }
  const sandboxSubnet = (env.SANDBOX_SUBNET || "10.213.0.0/16").trim();
  const subnetMatch = /^(\d{1,3})\.(\d{1,3})\.0\.0\/16$/.exec(sandboxSubnet);
  if (!subnetMatch || Number(subnetMatch[1]) > 255 || Number(subnetMatch[2]) > 255)
    fail(
      `SANDBOX_SUBNET must be a /16 of private addresses such as 10.213.0.0/16, got ${JSON.stringify(sandboxSubnet)}`,
    );
  const dockerUser = env.SANDBOX_DOCKER_USER?.trim() || undefined;
  if (dockerUser !== undefined && !/^[1-9][0-9]{0,9}(:[1-9][0-9]{0,9})?$/.test(dockerUser))
    fail(
      `SANDBOX_DOCKER_USER must be a non-root uid[:gid] such as 1000:1000, got ${JSON.stringify(dockerUser)}`,
    );
  const level = (env.LOG_LEVEL || "info").trim();
  if (!["fatal", "error", "warn", "info", "debug", "trace", "silent"].includes(level))
    fail(`LOG_LEVEL ${JSON.stringify(level)} is not a level`);
  const sessionApiKey =
    env.SESSION_API_KEY === undefined || env.SESSION_API_KEY === "" ? undefined : env.SESSION_API_KEY;
  if (sessionApiKey !== undefined && sessionApiKey.length < 8)
    fail("SESSION_API_KEY must be at least 8 characters");
  const keyFile = env.ENCRYPTION_KEY_FILE || "secret.key";
  const host = env.HOST || "127.0.0.1";
  const webhookBaseUrl = env.WEBHOOK_BASE_URL?.trim() || undefined;
  if (webhookBaseUrl !== undefined && !/^https?:\/\/[^/\s]+(\/\S*)?$/.test(webhookBaseUrl))
    fail("WEBHOOK_BASE_URL must be an http(s) URL such as http://127.0.0.1:3000");
  const dockerNetwork = env.DOCKER_NETWORK?.trim() || "bridge";
  let tls: TlsConfig | undefined;
  try {
    tls = loadTlsConfig(env, cwd, (p) => new ConfigError(p));
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    problems.push(...err.problems);
  }
  // Set, though perhaps not valid (then its problem is reported): the checks below are about TLS being asked for.
  const tlsAsked = Boolean(env.TLS_CERT_FILE?.trim() || env.TLS_KEY_FILE?.trim());
  // With TLS, sandboxes post their webhooks to a plain-HTTP listener on 127.0.0.1 (they would not trust the
  // certificate), which containers on a network of their own do not reach either (docs/tls.md).
  if (
    tlsAsked &&
    runtimeKind === "docker" &&
    dockerNetwork !== "host" &&
    dockerNetwork !== "none" &&
    webhookBaseUrl === undefined
  )
    fail(
      `DOCKER_NETWORK=${dockerNetwork} with TLS: sandboxes post their webhooks to a plain-HTTP listener on 127.0.0.1, which containers on a network of their own do not reach. Set WEBHOOK_BASE_URL to an address containers reach (an https one with a certificate they trust), or DOCKER_NETWORK=host`,
    );
  // Containers on a network of their own reach this service through the host gateway (host.docker.internal):
  // a loopback-only listener cannot answer their webhooks, and every conversation start would wait on retries.
  if (
    !tlsAsked &&
    runtimeKind === "docker" &&
    dockerNetwork !== "host" &&
    dockerNetwork !== "none" &&
    webhookBaseUrl === undefined &&
    /^(127\.|localhost$|::1$|\[::1\]$)/.test(host)
  )
    fail(
      `DOCKER_NETWORK=${dockerNetwork}: sandbox containers reach this service at the host gateway (host.docker.internal), but HOST=${host} listens on loopback only. Set HOST=0.0.0.0 (or the gateway's address), or WEBHOOK_BASE_URL to an address containers reach, or DOCKER_NETWORK=host`,
    );
  const httpPort = port("PORT", 3000);
  const grpcPort = port("GRPC_PORT", 3001);
  if (httpPort === grpcPort && httpPort !== 0)
    fail(
      `PORT and GRPC_PORT must differ (both are ${httpPort}): HTTP and gRPC each need a port of their own`,
    );
  const webhookListener = tlsAsked && webhookBaseUrl === undefined;
  const webhookPort = webhookListener ? port("WEBHOOK_PORT", 0) : undefined;
  if (!webhookListener && (env.WEBHOOK_PORT?.trim() ?? "") !== "")
    fail(
      `WEBHOOK_PORT is the port of the plain-HTTP webhook listener, which only a TLS server (TLS_CERT_FILE) without WEBHOOK_BASE_URL starts; unset it${webhookBaseUrl === undefined ? " or set TLS_CERT_FILE and TLS_KEY_FILE" : ""}`,
    );
  if (
    webhookPort !== undefined &&
    webhookPort !== 0 &&
    (webhookPort === httpPort || webhookPort === grpcPort)
  )
    fail(`WEBHOOK_PORT must differ from PORT and GRPC_PORT (${webhookPort})`);
  const localRoots = localRepositoryRoots(env.LOCAL_REPOSITORY_ROOTS);
  let web: WebConfig;
  try {
    web = loadWebConfig(env, host, cwd, (msg) => new ConfigError(msg));
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    problems.push(...err.problems);
    web = loadWebConfig({}, host, cwd, (msg) => new ConfigError(msg));
  }
  const metricsToken = env.METRICS_TOKEN?.trim() || undefined;
  if (metricsToken !== undefined && (metricsToken.length < 16 || /\s/.test(metricsToken)))
    fail("METRICS_TOKEN must be at least 16 characters without spaces");
  const publicUrl = env.PUBLIC_URL?.trim().replace(/\/+$/, "") || undefined;
  if (publicUrl !== undefined) {
    let origin: string | undefined;
    try {
      origin = new URL(publicUrl).origin;
    } catch {
      origin = undefined;
    }
    if (origin !== publicUrl || !/^https?:/.test(publicUrl))
      fail(
        `PUBLIC_URL must be an origin such as https://agents.example.com (scheme, host and port, no path), got ${JSON.stringify(env.PUBLIC_URL)}`,
      );
  }
  const adminPort = env.ADMIN_PORT === undefined || env.ADMIN_PORT === "" ? undefined : port("ADMIN_PORT", 0);
  const config: Config = {
    host,
    port: httpPort,
    grpcPort,
    dataDir,
    storage: mongoUri
      ? { kind: "mongo", uri: mongoUri, dbName: env.MONGODB_DB || undefined }
      : { kind: "sqlite", path: resolve(dataDir, "workspace.sqlite") },
    runtime:
      runtimeKind === "docker"
        ? {
            kind: "docker",
            socketPath:
              env.DOCKER_SOCKET ||
              (env.DOCKER_HOST?.startsWith("unix://") ? env.DOCKER_HOST.slice(7) : undefined),
            network: dockerNetwork,
            image: env.DOCKER_IMAGE || "ghcr.io/openhands/agent-server:5f62cee-python",
            memoryBytes: memMb * 1024 * 1024,
            nanoCpus: cpus === undefined ? undefined : Math.round(cpus * 1e9),
            user: dockerUser,
            pidsLimit,
            warmContainers: int("SANDBOX_WARM_CONTAINERS", DEFAULT_WARM_CONTAINERS, 0, 64),
          }
        : { kind: "process" },
    sessionApiKey,
    gitProviderVerify: flag("GIT_PROVIDER_VERIFY", true),
    gitProviderTimeoutMs: int("GIT_PROVIDER_TIMEOUT_MS", 5000, 100, 120_000),
    gitProviderAllowedHosts: allowedHosts(env.GIT_PROVIDER_ALLOWED_HOSTS),
    gitRepositoryCacheSeconds: int("GIT_REPOSITORY_CACHE_SECONDS", 60, 0, 3600),
    encryptionKey: key(env.ENCRYPTION_KEY),
    encryptionKeyFile: isAbsolute(keyFile) ? keyFile : resolve(dataDir, keyFile),
    rateLimitPerSecond: int("RATE_LIMIT_PER_SECOND", 200, 0, 1_000_000),
    rateLimitBurst: int("RATE_LIMIT_BURST", 400, 1, 10_000_000),
    maxRunningSandboxes: int("MAX_RUNNING_SANDBOXES", 5, 1, 1000),
    maxSandboxesPerUser: int("MAX_SANDBOXES_PER_USER", 20, 1, 100_000),
    warmClaimsPerMinute: int("SANDBOX_WARM_CLAIMS_PER_MINUTE", 6, 0, 100_000),
    sweepIntervalMs: int("SWEEP_INTERVAL_MS", 30_000, 0, 86_400_000),
    retention: Object.freeze({
      changeLogMs: int("CHANGE_LOG_RETENTION_MS", 3_600_000, 1000, 30 * 86_400_000),
      changeLogMaxEntries: int("CHANGE_LOG_MAX_ENTRIES", 10_000, 100, 100_000_000),
      startTaskMs: int("START_TASK_RETENTION_MS", 86_400_000, 60_000, 365 * 86_400_000),
    }),
    leaseMs: int("LEASE_MS", 15_000, 300, 3_600_000),
    sandboxStartTimeoutMs: int("SANDBOX_START_TIMEOUT_MS", 120_000, 1000, 3_600_000),
    sandboxSpecsFile: env.SANDBOX_SPECS_FILE || undefined,
    logLevel: level,
    web,
    limits: Object.freeze({
      maxMessageBytes: int("MAX_MESSAGE_BYTES", DEFAULT_LIMITS.maxMessageBytes, 1024, 64 * 1024 * 1024),
      maxStreamsPerKey: int("MAX_STREAMS_PER_KEY", DEFAULT_LIMITS.maxStreamsPerKey, 1, 100_000),
      maxStreams: int("MAX_STREAMS", DEFAULT_LIMITS.maxStreams, 1, 1_000_000),
      maxConnections: int("MAX_CONNECTIONS", DEFAULT_LIMITS.maxConnections, 1, 1_000_000),
      requestTimeoutMs: int("REQUEST_TIMEOUT_MS", DEFAULT_LIMITS.requestTimeoutMs, 100, 3_600_000),
      headersTimeoutMs: int("HEADERS_TIMEOUT_MS", DEFAULT_LIMITS.headersTimeoutMs, 100, 3_600_000),
      keyRecheckMs: DEFAULT_LIMITS.keyRecheckMs,
      maxWebhookBytes: int("WEBHOOK_MAX_BODY_BYTES", 32 * 1024 * 1024, 1024 * 1024, 1024 * 1024 * 1024),
    }),
    webhookBaseUrl,
    tls,
    webhookPort,
    sandboxIsolation: isolation as Config["sandboxIsolation"],
    sandboxNetwork: sandboxNetwork as Config["sandboxNetwork"],
    sandboxHostPorts: Object.freeze(sandboxHostPorts),
    sandboxSubnet,
    localRepositoryRoots: localRoots,
    sandboxUidBase: int("SANDBOX_UID_BASE", 1_000_000_000, 1000, 4_000_000_000),
    sandboxWarmAgents: int("SANDBOX_WARM_AGENTS", DEFAULT_WARM_AGENTS, 0, 64),
    sandboxLimits: Object.freeze({
      pids: pidsLimit,
      memoryBytes: memMb * MB,
      cpus,
      tmpBytes: int("SANDBOX_TMP_MB", 512, 1, 1 << 20) * MB,
      shmBytes: int("SANDBOX_SHM_MB", 512, 1, 1 << 20) * MB,
      nice: int("SANDBOX_NICE", DEFAULT_SANDBOX_NICE, 0, 19),
      diskBytes: int("SANDBOX_DISK_MB", 10_240, 0, 1 << 30) * MB,
      diskReserveBytes: int("SANDBOX_DISK_RESERVE_MB", 1024, 0, 1 << 30) * MB,
    }),
    sandboxRoot: resolve(cwd, env.SANDBOX_ROOT || resolve(dataDir, "sandboxes")),
    workers: int("WORKERS", 1, 1, 64),
    sandboxUidLockDir: resolve(cwd, env.SANDBOX_UID_LOCK_DIR || "/var/lib/agent-workspace/sandbox-uids"),
    quotas: Object.freeze({
      userData: Object.freeze({
        maxSecrets: int("MAX_SECRETS_PER_USER", 500, 1, 1_000_000),
        maxBytes: int("MAX_USER_DATA_BYTES", 1024 * 1024, 16 * 1024, 1024 * 1024 * 1024),
        writesPerSecond: int("USER_DATA_WRITES_PER_SECOND", 10, 0, 1_000_000),
        writesBurst: 2 * int("USER_DATA_WRITES_PER_SECOND", 10, 0, 1_000_000) || 1,
      }),
      events: Object.freeze({
        maxPerConversation: int("MAX_EVENTS_PER_CONVERSATION", 50_000, 100, 100_000_000),
        perSecond: int("WEBHOOK_EVENTS_PER_SECOND", 200, 0, 10_000_000),
        burst: int("WEBHOOK_EVENTS_BURST", 5_000, 1000, 100_000_000),
      }),
    }),
    agentProxy: Object.freeze({
      enabled: flag("AGENT_PROXY", true),
      publicUrl,
      maxBodyBytes: int("AGENT_PROXY_MAX_BODY_MB", 64, 1, 1 << 20) * MB,
      timeoutMs: int("AGENT_PROXY_TIMEOUT_MS", 120_000, 100, 86_400_000),
      callsPerSecond: int("AGENT_PROXY_CALLS_PER_SECOND", 100, 0, 1_000_000),
      socketsPerUser: int("AGENT_SOCKETS_PER_USER", 32, 1, 100_000),
      socketMessageBytes: int("AGENT_SOCKET_MAX_MESSAGE_BYTES", 1024 * 1024, 1024, 256 * 1024 * 1024),
      socketMessagesPerSecond: int("AGENT_SOCKET_MESSAGES_PER_SECOND", 20, 0, 1_000_000),
    }),
    admin: Object.freeze({ port: adminPort, host: env.ADMIN_HOST?.trim() || "127.0.0.1", metricsToken }),
  };
  if (problems.length > 0) throw new ConfigError(problems);
  return Object.freeze(config);
}
