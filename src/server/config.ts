import { isAbsolute, resolve } from "node:path";
import { ProviderHostPolicy } from "../core/provider-host.ts";
import { DEFAULT_LIMITS, type TransportLimits } from "../transport/limits.ts";
import { loadTlsConfig, TLS_ENV_DOC, type TlsConfig } from "./tls-config.ts";
import { loadWebConfig, WEB_ENV_DOC, type WebConfig } from "./web-config.ts";

/** Storage backend: SQLite file under DATA_DIR (default) or MongoDB when MONGODB_URI is set. */
export type StorageConfig =
  | { kind: "sqlite"; path: string }
  | { kind: "mongo"; uri: string; dbName: string | undefined };

/** Sandbox runtime: child processes (default) or Docker containers. */
export type RuntimeConfig =
  | { kind: "process" }
  | {
      kind: "docker";
      socketPath: string | undefined;
      network: string;
      image: string;
      memoryBytes: number | undefined;
      nanoCpus: number | undefined;
      /** `uid[:gid]` the container's processes run as; undefined: the image's own user. */
      user: string | undefined;
      pidsLimit: number;
      /** Containers kept started and healthy ahead of need per sandbox spec (0: none). */
      warmContainers: number;
    };

/** SANDBOX_PIDS_LIMIT, SANDBOX_MEMORY_MB, SANDBOX_CPUS, SANDBOX_TMP_MB, SANDBOX_SHM_MB, SANDBOX_DISK_MB. */
export interface SandboxLimitsConfig {
  readonly pids: number;
  readonly memoryBytes: number;
  /** undefined: no CPU limit. */
  readonly cpus: number | undefined;
  readonly tmpBytes: number;
  readonly shmBytes: number;
  /** Workspace size of a process sandbox; 0: no limit. */
  readonly diskBytes: number;
  /** New process sandboxes are refused while SANDBOX_ROOT's file system has less free. */
  readonly diskReserveBytes: number;
}

export interface Config {
  readonly host: string;
  readonly port: number;
  readonly grpcPort: number;
  readonly dataDir: string;
  readonly storage: StorageConfig;
  readonly runtime: RuntimeConfig;
  /** A key of user "default" when set. */
  readonly sessionApiKey: string | undefined;
  readonly gitProviderVerify: boolean;
  readonly gitProviderTimeoutMs: number;
  /** Provider hosts allowed beyond public domain names (IP literals, internal names, plain HTTP). */
  readonly gitProviderAllowedHosts: readonly string[];
  readonly gitRepositoryCacheSeconds: number;
  /** 32-byte key from ENCRYPTION_KEY (base64 or hex), else read/created at ENCRYPTION_KEY_FILE. */
  readonly encryptionKey: Buffer | undefined;
  readonly encryptionKeyFile: string;
  readonly rateLimitPerSecond: number;
  readonly rateLimitBurst: number;
  readonly maxRunningSandboxes: number;
  readonly maxSandboxesPerUser: number;
  /** Warm sandboxes one user may take per minute (a start past that is cold); 0: no limit. */
  readonly warmClaimsPerMinute: number;
  /** Period of the background sweep (sandbox reconciliation, unsaved start-task ends, change log pruning); 0: off. */
  readonly sweepIntervalMs: number;
  /** What the sweep prunes: change log entries by age and count, finished start tasks by age. */
  readonly retention: RetentionConfig;
  /** How long a server's lease on a conversation start lasts before another server resumes it. */
  readonly leaseMs: number;
  /** How long a sandbox may take to start before it is ERROR (also the grace of crash leftovers). */
  readonly sandboxStartTimeoutMs: number;
  readonly sandboxSpecsFile: string | undefined;
  readonly logLevel: string;
  /** Web UI, CORS, browser sign-in, single-user mode, /api/options lists (web-config.ts). */
  readonly web: WebConfig;
  /** Message size, stream, connection and timeout limits, the same on every protocol. */
  readonly limits: TransportLimits;
  /** Base URL of this service as sandboxes reach it (their webhooks); default: the HTTP listener's address. */
  readonly webhookBaseUrl: string | undefined;
  /** TLS_CERT_FILE and TLS_KEY_FILE: the HTTP listener serves HTTPS and the gRPC one TLS (tls-config.ts). */
  readonly tls: TlsConfig | undefined;
  /**
   * With TLS and no WEBHOOK_BASE_URL: the port of the plain-HTTP webhook listener on 127.0.0.1 (WEBHOOK_PORT, 0: any
   * free one); else undefined.
   */
  readonly webhookPort: number | undefined;
  /** Process sandboxes: bwrap (required), none, or auto (bwrap when it works, else one user only). */
  readonly sandboxIsolation: "auto" | "bwrap" | "none";
  /**
   * Process sandboxes' networks (SANDBOX_NETWORK): isolated (each its own, required), host (the host's), or auto
   * (their own when the host allows it: root, bubblewrap, ip, iptables).
   */
  readonly sandboxNetwork: "auto" | "isolated" | "host";
  /** Host loopback ports isolated process sandboxes reach at their gateway besides the webhook's (SANDBOX_HOST_PORTS). */
  readonly sandboxHostPorts: readonly number[];
  /** The /16 sandbox networks are cut from (SANDBOX_SUBNET). */
  readonly sandboxSubnet: string;
  /** As root, isolated process sandbox n runs as uid/gid sandboxUidBase + n. */
  readonly sandboxUidBase: number;
  /**
   * Absolute folders whose repositories a conversation may start from by local path or file:// URL; bound
   * read-only into every sandbox (LOCAL_REPOSITORY_ROOTS). Empty: local repositories are refused.
   */
  readonly localRepositoryRoots: readonly string[];
  /** As root, the host-wide folder of sandbox uid claims, shared by every server on the host. */
  readonly sandboxUidLockDir: string;
  /** Built-in agents the process runtime keeps started ahead of need (0: none). */
  readonly sandboxWarmAgents: number;
  /** Limits of every sandbox, both runtimes (docker: the container's; process: cgroups or rlimits, tmpfs sizes). */
  readonly sandboxLimits: SandboxLimitsConfig;
  /** Where process sandboxes' workspaces live (default DATA_DIR/sandboxes): put it on its own filesystem. */
  readonly sandboxRoot: string;
  /** Server processes sharing the ports (node:cluster, src/server/cluster.ts); 1: this process alone. */
  readonly workers: number;
  /** What one user may store and what sandboxes may post (docs/quotas.md). */
  readonly quotas: {
    readonly userData: {
      readonly maxSecrets: number;
      readonly maxBytes: number;
      readonly writesPerSecond: number;
      readonly writesBurst: number;
    };
    readonly events: {
      readonly maxPerConversation: number;
      readonly perSecond: number;
      readonly burst: number;
    };
  };
  /** Agents reached through this service's own origin (docs/agent-proxy.md). */
  readonly agentProxy: AgentProxyConfig;
  /** /metrics, /docs, /openapi.json on a listener of their own (ADMIN_PORT on ADMIN_HOST); else on PORT. */
  readonly admin: {
    readonly port: number | undefined;
    readonly host: string;
    readonly metricsToken: string | undefined;
  };
}

/** AGENT_PROXY, PUBLIC_URL and the AGENT_PROXY_* / AGENT_SOCKET_* limits. */
export interface AgentProxyConfig {
  /** Conversation and sandbox JSON name agents by this service's origin, which forwards their calls. */
  readonly enabled: boolean;
  /** The origin browsers reach this service at, for absolute agent URLs; undefined: relative URLs. */
  readonly publicUrl: string | undefined;
  readonly maxBodyBytes: number;
  readonly timeoutMs: number;
  readonly callsPerSecond: number;
  readonly socketsPerUser: number;
  readonly socketMessageBytes: number;
  readonly socketMessagesPerSecond: number;
}

/** What the background sweep keeps (see docs/reliability.md). */
export interface RetentionConfig {
  /** Change log entries older than this are pruned (a watch resuming from an older revision gets OUT_OF_RANGE). */
  readonly changeLogMs: number;
  /** At most this many change log entries are kept, the newest. */
  readonly changeLogMaxEntries: number;
  /** READY and ERROR start tasks last updated longer ago than this are deleted. */
  readonly startTaskMs: number;
}

/** Invalid configuration; `problems` lists every one found (the message joins them, one a line). */
export class ConfigError extends Error {
  override name = "ConfigError";
  readonly problems: readonly string[];
  constructor(problems: string | readonly string[]) {
    const list = typeof problems === "string" ? [problems] : problems;
    super(list.join("\n"));
    this.problems = list;
  }
}

/** Every environment variable the server reads, with its meaning (README and --help print this). */
export const ENV_DOC: readonly [string, string][] = [
  ["HOST", "interface to listen on (default 127.0.0.1)"],
  ["PORT", "HTTP/1.1 port: REST, Connect, gRPC-Web; https with TLS_CERT_FILE (default 3000)"],
  ["GRPC_PORT", "HTTP/2 port for gRPC: cleartext, or TLS with TLS_CERT_FILE (default 3001)"],
  ...TLS_ENV_DOC,
  ["WORKERS", "server processes sharing PORT and GRPC_PORT, 1-64 (default 1: no cluster; docs/workers.md)"],
  ["DATA_DIR", "where SQLite, the key file and process sandboxes live (default ./data)"],
  ["MONGODB_URI", "use MongoDB at this URI instead of SQLite"],
  ["MONGODB_DB", "database name (default: from the URI, else agent_workspace)"],
  ["SESSION_API_KEY", "a key of user 'default' (in addition to keys made with the CLI)"],
  ["GIT_PROVIDER_VERIFY", "verify git tokens with the provider before storing (default true)"],
  ["GIT_PROVIDER_TIMEOUT_MS", "timeout of one git provider call (default 5000)"],
  [
    "GIT_PROVIDER_ALLOWED_HOSTS",
    "comma-separated provider hosts allowed besides public domain names: host, host:port, http://host:port (default none)",
  ],
  ["GIT_REPOSITORY_CACHE_SECONDS", "seconds a user's repository listing is cached (default 60; 0 disables)"],
  ["ENCRYPTION_KEY", "32-byte key for secrets at rest, base64 or hex (default: key file)"],
  ["ENCRYPTION_KEY_FILE", "key file, created with mode 0600 on first start (default DATA_DIR/secret.key)"],
  ["RATE_LIMIT_PER_SECOND", "requests per second per API key (default 200; 0 disables)"],
  ["RATE_LIMIT_BURST", "burst size per API key (default 400)"],
  ["SANDBOX_RUNTIME", "process (default) or docker"],
  ["MAX_RUNNING_SANDBOXES", "running sandboxes per user before the oldest is paused (default 5)"],
  [
    "MAX_SANDBOXES_PER_USER",
    "sandboxes a user may have, any status; one more is refused with 409 (default 20)",
  ],
  [
    "SWEEP_INTERVAL_MS",
    "period of the background sweep: sandboxes reconciled with the runtime, crash leftovers and cut deletes finished, unsaved start-task ends saved, the change log and finished start tasks pruned, freed SQLite pages given back (default 30000; 0: off)",
  ],
  [
    "CHANGE_LOG_RETENTION_MS",
    "change log entries older than this are pruned; a watch resuming from an older revision gets OUT_OF_RANGE and watches again (default 3600000)",
  ],
  [
    "CHANGE_LOG_MAX_ENTRIES",
    "the change log keeps at most this many entries, the newest, whatever their age (default 10000)",
  ],
  [
    "START_TASK_RETENTION_MS",
    "finished (READY or ERROR) conversation start tasks are deleted this long after their last change (default 86400000)",
  ],
  [
    "LEASE_MS",
    "lease of a server on a conversation start it runs; renewed every third of it, and once it expires (the server died) another server sharing the store resumes the start (default 15000)",
  ],
  [
    "SANDBOX_START_TIMEOUT_MS",
    "time a sandbox may take to start before it is ERROR; also how old a crash's leftover sandbox record must be before it is cleaned up (default 120000)",
  ],
  ["SANDBOX_SPECS_FILE", "JSON file with the sandbox spec list (overrides the defaults)"],
  ["DOCKER_SOCKET", "Docker socket path (default: DOCKER_HOST or /var/run/docker.sock)"],
  ["DOCKER_NETWORK", "network of sandbox containers: bridge (default), host, none, or a network name"],
  [
    "DOCKER_IMAGE",
    "image of the default docker spec (default ghcr.io/openhands/agent-server:5f62cee-python)",
  ],
  [
    "SANDBOX_ISOLATION",
    "process sandboxes: auto (default: bubblewrap when it works, else one user only), bwrap (required), none",
  ],
  ["SANDBOX_UID_BASE", "as root, isolated process sandboxes run as uids from this one (default 1000000000)"],
  [
    "LOCAL_REPOSITORY_ROOTS",
    "comma-separated absolute folders a conversation may start from by local path or file:// URL, bound read-only into sandboxes (default none: local repositories are refused)",
  ],
  [
    "SANDBOX_UID_LOCK_DIR",
    "as root, the host-wide folder where sandbox uids are claimed, one file per uid, so that servers on one host (any DATA_DIR) never share a uid (default /var/lib/agent-workspace/sandbox-uids)",
  ],
  [
    "SANDBOX_WARM_AGENTS",
    "process sandboxes: built-in agents kept started ahead of need, so that a start does not wait for one to boot (default 2; 0: none)",
  ],
  [
    "SANDBOX_WARM_CONTAINERS",
    "docker sandboxes: containers per sandbox spec kept started and healthy ahead of need, so that a start does not wait for the agent-server to boot; each idle one costs its memory (default 1; 0: none; docs/warm-pool.md)",
  ],
  [
    "SANDBOX_WARM_CLAIMS_PER_MINUTE",
    "warm agents or containers one user may take per minute (at most that many at once); a start past that starts cold, so that one user's start/delete loop cannot keep the pool empty for others (default 6; 0: no limit)",
  ],
  [
    "SANDBOX_DOCKER_USER",
    "uid[:gid] of the processes in sandbox containers (default: the image's own user; 1000:1000 for a root image)",
  ],
  [
    "SANDBOX_PIDS_LIMIT",
    "processes of one sandbox, docker and process runtimes (default 2048; docs/sandbox-isolation.md)",
  ],
  ["SANDBOX_MEMORY_MB", "memory of one sandbox, docker and process runtimes (default 4096)"],
  ["SANDBOX_CPUS", "CPUs of one sandbox, docker and process runtimes, e.g. 1.5 (default: no limit)"],
  ["SANDBOX_TMP_MB", "process sandboxes: size of their private /tmp (default 512)"],
  [
    "SANDBOX_SHM_MB",
    "size of a sandbox's /dev/shm, docker and process runtimes (default 512: Chromium's renderers)",
  ],
  [
    "SANDBOX_DISK_MB",
    "size of one workspace: process sandboxes, a loop-mounted filesystem where the host allows, else watched; docker sandboxes, an ext4 volume on a loop device where the host allows (root, a local engine), else not limited (default 10240; 0: no limit)",
  ],
  [
    "SANDBOX_DISK_RESERVE_MB",
    "process sandboxes: no new one starts while SANDBOX_ROOT's file system has less free (default 1024)",
  ],
  [
    "SANDBOX_ROOT",
    "folder of process sandboxes' workspaces (default DATA_DIR/sandboxes; best its own filesystem)",
  ],
  ["LOG_LEVEL", "fatal, error, warn, info (default), debug, trace, silent"],
  ...WEB_ENV_DOC,
  [
    "MAX_MESSAGE_BYTES",
    "largest request body or message on REST, Connect, gRPC-Web and gRPC (default 1048576)",
  ],
  ["MAX_STREAMS_PER_KEY", "open streaming calls per API key, all protocols (default 16)"],
  ["MAX_STREAMS", "open streaming calls on the server (default 1000)"],
  ["MAX_CONNECTIONS", "open connections per listener, HTTP and gRPC each (default 10000)"],
  ["REQUEST_TIMEOUT_MS", "time for a whole HTTP request, headers and body, to arrive (default 30000)"],
  ["HEADERS_TIMEOUT_MS", "time for an HTTP request's headers to arrive (default 10000)"],
  ["MAX_SECRETS_PER_USER", "custom secrets a user may store; one more is refused with 409 (default 500)"],
  [
    "MAX_USER_DATA_BYTES",
    "size of a user's stored settings, provider tokens and custom secrets together; a write beyond is refused with 409 (default 1048576)",
  ],
  [
    "USER_DATA_WRITES_PER_SECOND",
    "changes of one user's settings and secrets per second (burst twice that); beyond, 429 (default 10; 0 disables)",
  ],
  [
    "MAX_EVENTS_PER_CONVERSATION",
    "events stored per conversation; a webhook batch beyond is refused with 409 (default 50000)",
  ],
  [
    "WEBHOOK_EVENTS_PER_SECOND",
    "events a sandbox may post per second, sustained; beyond, 429 (default 200; 0 disables)",
  ],
  ["WEBHOOK_EVENTS_BURST", "events a sandbox may post at once above its rate (default 5000)"],
  [
    "ADMIN_PORT",
    "serve /metrics, /docs and /openapi.json on this port only, off PORT (default: unset, they are on PORT and /metrics there wants an API key or METRICS_TOKEN)",
  ],
  ["ADMIN_HOST", "interface of the ADMIN_PORT listener (default 127.0.0.1)"],
  [
    "METRICS_TOKEN",
    "bearer token for /metrics (Authorization: Bearer ...), at least 16 characters; on ADMIN_PORT the only way in when set (default none)",
  ],
  [
    "WEBHOOK_MAX_BODY_BYTES",
    "largest event batch an agent server may post to its webhook (default 33554432: 32 MiB)",
  ],
  [
    "AGENT_PROXY",
    "true (default): conversations name their agent by this service's own origin, which forwards the agent's HTTP routes and events websocket to the sandbox, so browsers on other machines need only this one port; false: the agent's direct loopback URL (docs/agent-proxy.md)",
  ],
  [
    "PUBLIC_URL",
    "the origin browsers reach this service at (https://agents.example.com); agent URLs are then absolute on it (default: relative, the origin the browser used)",
  ],
  ["AGENT_PROXY_MAX_BODY_MB", "largest request body (an upload) forwarded to an agent (default 64)"],
  ["AGENT_PROXY_TIMEOUT_MS", "time an agent has to answer a forwarded call (default 120000)"],
  [
    "AGENT_PROXY_CALLS_PER_SECOND",
    "forwarded HTTP calls per second per sandbox, burst twice that; beyond, 429 (default 100; 0 disables)",
  ],
  [
    "AGENT_SOCKETS_PER_USER",
    "open agent websockets per user on one server process; one more is refused with 429 (default 32)",
  ],
  [
    "AGENT_SOCKET_MAX_MESSAGE_BYTES",
    "largest websocket message a client may send to an agent; beyond, the socket closes with 1009 (default 1048576)",
  ],
  [
    "AGENT_SOCKET_MESSAGES_PER_SECOND",
    "messages a client may send per second on one agent websocket, burst twice that; beyond, it closes with 1008 (default 20; 0 disables)",
  ],
  [
    "WEBHOOK_BASE_URL",
    "this service's URL as sandboxes reach it, for their event webhooks (default http://<HOST>:<PORT>; with TLS, http://127.0.0.1:<WEBHOOK_PORT>)",
  ],
];

type Env = Record<string, string | undefined>;

/** Parses the environment once. Throws ConfigError with a clear message on any invalid value. */
/** Default of SANDBOX_WARM_AGENTS: enough for one start after another while the next agent boots. */
export const DEFAULT_WARM_AGENTS = 2;
/**
 * Default of SANDBOX_WARM_CONTAINERS: one, since an idle agent-server container holds its memory (see
 * docs/warm-pool.md); a machine that starts sandboxes faster than one per agent-server boot wants more.
 */
export const DEFAULT_WARM_CONTAINERS = 1;

export function loadConfig(env: Env = process.env, cwd: string = process.cwd()): Readonly<Config> {
  // Every value is checked and every problem reported at once: fixing them one start at a time is a slow loop.
  const problems: string[] = [];
  const fail = (message: string): void => {
    problems.push(message);
  };
  const port = (name: string, fallback: number): number => {
    const raw = env[name];
    if (raw === undefined || raw === "") return fallback;
    const n = Number(raw);
    if (Number.isInteger(n) && n >= 0 && n <= 65535) return n;
    fail(`${name} must be a port number 0-65535, got ${JSON.stringify(raw)}`);
    return fallback;
  };
  const int = (name: string, fallback: number, min: number, max: number): number => {
    const raw = env[name];
    if (raw === undefined || raw === "") return fallback;
    const n = Number(raw);
    if (Number.isInteger(n) && n >= min && n <= max) return n;
    fail(`${name} must be an integer ${min}-${max}, got ${JSON.stringify(raw)}`);
    return fallback;
  };
  const flag = (name: string, fallback: boolean): boolean => {
    const raw = env[name]?.trim().toLowerCase();
    if (raw === undefined || raw === "") return fallback;
    if (["1", "true", "yes", "on"].includes(raw)) return true;
    if (["0", "false", "no", "off"].includes(raw)) return false;
    fail(`${name} must be true or false, got ${JSON.stringify(env[name])}`);
    return fallback;
  };
  const key = (raw: string | undefined): Buffer | undefined => {
    if (raw === undefined || raw === "") return undefined;
    const t = raw.trim();
    const buf = /^[0-9a-fA-F]{64}$/.test(t) ? Buffer.from(t, "hex") : Buffer.from(t, "base64");
    if (buf.length === 32) return buf;
    fail("ENCRYPTION_KEY must be 32 bytes, as 64 hex digits or base64");
    return undefined;
  };
  const list = (raw: string | undefined): string[] =>
    (raw ?? "")
      .split(",")
      .map((e) => e.trim())
      .filter((e) => e !== "");
  const allowedHosts = (raw: string | undefined): readonly string[] => {
    const entries = list(raw);
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
    const roots = list(raw);
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
