/**
 * The configuration the server is built from, parsed once from the environment by `loadConfig` (config.ts) and
 * frozen, and the error an invalid environment gives.
 */
import type { TransportLimits } from "../transports/kit/limits.ts";
import type { TlsConfig } from "./tls-config.ts";
import type { WebConfig } from "./web-config.ts";

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
