import { isAbsolute, resolve } from "node:path";
import { ProviderHostPolicy } from "../services/git/provider-host.ts";
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
    };

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
  readonly sandboxSpecsFile: string | undefined;
  readonly logLevel: string;
  /** Web UI, CORS, browser sign-in, single-user mode, /api/options lists (web-config.ts). */
  readonly web: WebConfig;
}

export class ConfigError extends Error {
  override name = "ConfigError";
}

/** Every environment variable the server reads, with its meaning (README and --help print this). */
export const ENV_DOC: readonly [string, string][] = [
  ["HOST", "interface to listen on (default 127.0.0.1)"],
  ["PORT", "HTTP/1.1 port: REST, Connect, gRPC-Web (default 3000)"],
  ["GRPC_PORT", "HTTP/2 cleartext port for gRPC (default 3001)"],
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
  ["SANDBOX_SPECS_FILE", "JSON file with the sandbox spec list (overrides the defaults)"],
  ["DOCKER_SOCKET", "Docker socket path (default: DOCKER_HOST or /var/run/docker.sock)"],
  ["DOCKER_NETWORK", "network of sandbox containers: host (default), none, or a network name"],
  [
    "DOCKER_IMAGE",
    "image of the default docker spec (default ghcr.io/openhands/agent-server:5f62cee-python)",
  ],
  ["SANDBOX_MEMORY_MB", "memory limit of a sandbox container"],
  ["SANDBOX_CPUS", "CPU limit of a sandbox container (e.g. 1.5)"],
  ["LOG_LEVEL", "fatal, error, warn, info (default), debug, trace, silent"],
  ...WEB_ENV_DOC,
];

type Env = Record<string, string | undefined>;

function port(env: Env, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0 || n > 65535)
    throw new ConfigError(`${name} must be a port number 0-65535, got ${JSON.stringify(raw)}`);
  return n;
}

function int(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max)
    throw new ConfigError(`${name} must be an integer ${min}-${max}, got ${JSON.stringify(raw)}`);
  return n;
}

function flag(env: Env, name: string, fallback: boolean): boolean {
  const raw = env[name]?.trim().toLowerCase();
  if (raw === undefined || raw === "") return fallback;
  if (["1", "true", "yes", "on"].includes(raw)) return true;
  if (["0", "false", "no", "off"].includes(raw)) return false;
  throw new ConfigError(`${name} must be true or false, got ${JSON.stringify(env[name])}`);
}

function key(raw: string | undefined): Buffer | undefined {
  if (raw === undefined || raw === "") return undefined;
  const t = raw.trim();
  const buf = /^[0-9a-fA-F]{64}$/.test(t) ? Buffer.from(t, "hex") : Buffer.from(t, "base64");
  if (buf.length !== 32) throw new ConfigError("ENCRYPTION_KEY must be 32 bytes, as 64 hex digits or base64");
  return buf;
}

function allowedHosts(raw: string | undefined): readonly string[] {
  const entries = (raw ?? "")
    .split(",")
    .map((e) => e.trim())
    .filter((e) => e !== "");
  try {
    new ProviderHostPolicy(entries);
  } catch {
    throw new ConfigError(
      "GIT_PROVIDER_ALLOWED_HOSTS must list host, host:port or http://host:port entries, comma-separated",
    );
  }
  return Object.freeze(entries);
}

/** Parses the environment once. Throws ConfigError with a clear message on any invalid value. */
export function loadConfig(env: Env = process.env, cwd: string = process.cwd()): Readonly<Config> {
  const dataDir = resolve(cwd, env.DATA_DIR || "data");
  const mongoUri = env.MONGODB_URI?.trim();
  if (mongoUri && !/^mongodb(\+srv)?:\/\//.test(mongoUri))
    throw new ConfigError("MONGODB_URI must start with mongodb:// or mongodb+srv://");
  const runtimeKind = (env.SANDBOX_RUNTIME || "process").trim();
  if (runtimeKind !== "process" && runtimeKind !== "docker")
    throw new ConfigError(`SANDBOX_RUNTIME must be process or docker, got ${JSON.stringify(runtimeKind)}`);
  const cpus = env.SANDBOX_CPUS ? Number(env.SANDBOX_CPUS) : undefined;
  if (cpus !== undefined && !(cpus > 0 && cpus <= 1024))
    throw new ConfigError("SANDBOX_CPUS must be a positive number");
  const memMb = env.SANDBOX_MEMORY_MB ? int(env, "SANDBOX_MEMORY_MB", 0, 6, 1 << 20) : undefined;
  const level = (env.LOG_LEVEL || "info").trim();
  if (!["fatal", "error", "warn", "info", "debug", "trace", "silent"].includes(level))
    throw new ConfigError(`LOG_LEVEL ${JSON.stringify(level)} is not a level`);
  const sessionApiKey =
    env.SESSION_API_KEY === undefined || env.SESSION_API_KEY === "" ? undefined : env.SESSION_API_KEY;
  if (sessionApiKey !== undefined && sessionApiKey.length < 8)
    throw new ConfigError("SESSION_API_KEY must be at least 8 characters");
  const keyFile = env.ENCRYPTION_KEY_FILE || "secret.key";
  const host = env.HOST || "127.0.0.1";
  const config: Config = {
    host,
    port: port(env, "PORT", 3000),
    grpcPort: port(env, "GRPC_PORT", 3001),
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
            network: env.DOCKER_NETWORK || "host",
            image: env.DOCKER_IMAGE || "ghcr.io/openhands/agent-server:5f62cee-python",
            memoryBytes: memMb === undefined ? undefined : memMb * 1024 * 1024,
            nanoCpus: cpus === undefined ? undefined : Math.round(cpus * 1e9),
          }
        : { kind: "process" },
    sessionApiKey,
    gitProviderVerify: flag(env, "GIT_PROVIDER_VERIFY", true),
    gitProviderTimeoutMs: int(env, "GIT_PROVIDER_TIMEOUT_MS", 5000, 100, 120_000),
    gitProviderAllowedHosts: allowedHosts(env.GIT_PROVIDER_ALLOWED_HOSTS),
    gitRepositoryCacheSeconds: int(env, "GIT_REPOSITORY_CACHE_SECONDS", 60, 0, 3600),
    encryptionKey: key(env.ENCRYPTION_KEY),
    encryptionKeyFile: isAbsolute(keyFile) ? keyFile : resolve(dataDir, keyFile),
    rateLimitPerSecond: int(env, "RATE_LIMIT_PER_SECOND", 200, 0, 1_000_000),
    rateLimitBurst: int(env, "RATE_LIMIT_BURST", 400, 1, 10_000_000),
    maxRunningSandboxes: int(env, "MAX_RUNNING_SANDBOXES", 5, 1, 1000),
    sandboxSpecsFile: env.SANDBOX_SPECS_FILE || undefined,
    logLevel: level,
    web: loadWebConfig(env, host, cwd, (msg) => new ConfigError(msg)),
  };
  return Object.freeze(config);
}
