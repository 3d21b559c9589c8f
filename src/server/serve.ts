import { chmodSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { createHandlerContext, type HandlerContext } from "@connectrpc/connect";
import type { FastifyBaseLogger, FastifyServerOptions } from "fastify";
import { HttpGitProviderVerifier } from "../adapters/git-providers/http-git-provider-verifier.ts";
import type { DockerRuntime } from "../adapters/runtimes/docker/docker-runtime.ts";
import type { ProcessIsolation, ProcessRuntime } from "../adapters/runtimes/process/process-runtime-types.ts";
import { callerValues } from "../core/context.ts";
import { ProviderHostPolicy } from "../core/provider-host.ts";
import { SandboxService as SandboxServiceDesc } from "../gen/workspace/v1/sandbox_pb.js";
import { buildApp } from "./app.ts";
import type { Config } from "./config-types.ts";
import { loadOrCreateKeyFile } from "./key-file.ts";
import { LogDestination } from "./log-destination.ts";
import { openStorage } from "./open-storage.ts";
import { defaultSpecs, loadSpecsFile } from "./sandbox-specs.ts";

/** Runs the server until SIGTERM/SIGINT, then stops gracefully. */
export async function serve(config: Readonly<Config>): Promise<void> {
  const destination = new LogDestination();
  const logger: FastifyServerOptions["logger"] = {
    level: config.logLevel,
    stream: destination,
    redact: {
      paths: ['req.headers["x-session-api-key"]', "req.headers.authorization", "req.headers.cookie"],
      censor: "[redacted]",
    },
  };
  const { app, storage, runtime, keyCreated, logTo } = await openApp(config, logger);
  const log = app.http.log;
  logTo(log);
  if (runtime.kind === "process") {
    warnIsolation(runtime.isolation, log);
    if (runtime.network.mode === "isolated")
      log.info({ network: runtime.network }, "process sandboxes have networks of their own");
    else if (runtime.isolation.mode === "bwrap")
      log.warn(
        { network: "host", reason: runtime.network.reason },
        "WARNING: process sandboxes share the host's network: a sandbox reaches other sandboxes' agents and the host's loopback services (set SANDBOX_NETWORK=host to say this is meant)",
      );
    log.info({ limits: runtime.limits, root: config.sandboxRoot }, "process sandbox limits enforced");
  } else {
    log.info(
      {
        limits: {
          pids: config.sandboxLimits.pids,
          memoryBytes: config.sandboxLimits.memoryBytes,
          cpus: config.sandboxLimits.cpus ?? "no limit",
          shmBytes: config.sandboxLimits.shmBytes,
          workspace: runtime.workspaceLimit,
          nestedUserNamespaces: "refused (the engine's default seccomp profile, no capabilities)",
          priority: "the engine's default (SANDBOX_NICE applies to process sandboxes)",
        },
        warmContainersPerSpec: config.runtime.kind === "docker" ? config.runtime.warmContainers : 0,
      },
      "docker sandbox limits enforced (container cgroup)",
    );
  }
  const counts = await app.services.sandboxes.reconcileAll();
  log.info({ sandboxes: counts }, "reconciled recorded sandboxes with the runtime");
  if (config.web.singleUser)
    log.warn({ host: config.host }, "AUTH_MODE=single-user: requests without a key act as user default");
  if (keyCreated) log.info({ file: config.encryptionKeyFile }, "created encryption key file (mode 0600)");
  // SESSION_API_KEY is stored before listening (it works from the first request); a generated key only after.
  if (config.sessionApiKey !== undefined) await app.keys.bootstrap(config.sessionApiKey);
  let ports: Awaited<ReturnType<typeof app.listen>>;
  try {
    ports = await app.listen(config.host, config.port, config.grpcPort);
  } catch (err) {
    // One listener may already be up (a taken gRPC port): close everything, so the process ends with the error.
    await app.close().catch(() => undefined);
    destination.flush();
    throw err;
  }
  // A generated first key is created only now, with both listeners bound: created before, a start that then fails
  // (a port in use) would have stored a key nobody was shown, and the next start, finding a key, would create none.
  let issued: Awaited<ReturnType<typeof app.keys.bootstrap>> = null;
  try {
    if (config.sessionApiKey === undefined) issued = await app.keys.bootstrap(undefined);
  } catch (err) {
    await app.close().catch(() => undefined);
    destination.flush();
    throw err;
  }
  log.info(
    {
      http: `${config.tls === undefined ? "http" : "https"}://${config.host}:${ports.port}`,
      grpc: `${config.host}:${ports.grpcPort}`,
      // HTTPS and gRPC over TLS, with this certificate.
      ...(config.tls === undefined ? {} : { tls: config.tls.certFile }),
      ...(ports.webhookPort === undefined ? {} : { webhooks: `http://127.0.0.1:${ports.webhookPort}` }),
      ...(ports.adminPort === undefined ? {} : { admin: `http://${config.admin.host}:${ports.adminPort}` }),
      storage: storage.kind,
    },
    "agent workspace service listening",
  );
  if (issued !== null) {
    // Printed once, to stdout and outside the structured log, so it never lands in log files by accident.
    process.stdout.write(
      `\nNo API key existed, so one was created for user "default". It is shown only now:\n\n  X-Session-API-Key: ${issued.key}\n\nCreate more with: npm run --silent cli -- keys create --user NAME\n\n`,
    );
  }
  // The listening line out at once (not after the log's flush delay), after the key: whoever started the server
  // may be waiting for it, and then reads everything printed before it.
  destination.flush();
  await new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      log.info({ signal }, "shutting down: finishing in-flight requests");
      destination.flush();
      resolve();
    };
    process.once("SIGTERM", stop);
    process.once("SIGINT", stop);
  });
  // Read before closing (the store closes with the app). Sandboxes outlive the server: name them, and the command
  // that removes them.
  const left = await storage.sandboxes
    .listAll()
    .then((all) => all.filter((r) => r.status === "RUNNING" || r.status === "STARTING"))
    .catch(() => null);
  await app.close();
  if (left !== null && left.length > 0) {
    const n = left.length;
    const command = purgeCommand();
    log.info(
      {
        runningSandboxes: n,
        sandboxes: left.map((r) => ({ id: r.id, user: r.ownerId })),
        removeWith: command,
      },
      `stopped; ${n} sandbox${n === 1 ? "" : "es"} left running: ${leftRunning(left)}. They outlive the server (a server started on the same store takes them over). Remove ${n === 1 ? "it" : "them"}, workspace${n === 1 ? "" : "s"} included, with: ${command}`,
    );
  } else log.info("stopped");
  destination.flush();
}

/**
 * The store, the sandbox runtime and the app on them, as the configuration says (not listening yet). The sandbox
 * purge (`sandboxes purge`) opens them too, with no warm agents or containers and an existing store only.
 */
async function openApp(
  config: Readonly<Config>,
  logger: FastifyServerOptions["logger"],
  purge = false,
): Promise<{
  app: Awaited<ReturnType<typeof buildApp>>;
  storage: Awaited<ReturnType<typeof openStorage>>;
  runtime: DockerRuntime | ProcessRuntime;
  keyCreated: boolean;
  logTo: (log: FastifyBaseLogger) => void;
}> {
  const now = new Date();
  const specs = config.sandboxSpecsFile
    ? loadSpecsFile(config.sandboxSpecsFile, now)
    : defaultSpecs(config.runtime, now);
  if (!purge) {
    // DATA_DIR holds the database, the key file and the workspaces: the server's user only (also an older one).
    mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
    chmodSync(config.dataDir, 0o700);
  }
  // The purge removes sandboxes from a store that exists (MissingDatabaseError otherwise), and starts none.
  const storage = await openStorage(config.storage, { mustExist: purge });
  let runtimeLog: (msg: string, data?: object) => void = () => {};
  const runtimeConfig: Readonly<Config> = purge
    ? {
        ...config,
        sandboxWarmAgents: 0,
        runtime: config.runtime.kind === "docker" ? { ...config.runtime, warmContainers: 0 } : config.runtime,
      }
    : config;
  const runtime = await openRuntime(runtimeConfig, (msg, data) => runtimeLog(msg, data)).catch(
    async (err: unknown) => {
      await storage.close();
      throw err;
    },
  );
  let key = config.encryptionKey;
  let keyCreated = false;
  if (key === undefined) {
    const k = loadOrCreateKeyFile(config.encryptionKeyFile);
    key = k.key;
    keyCreated = k.created;
  }
  const hosts = new ProviderHostPolicy(config.gitProviderAllowedHosts);
  let verifierLog: (msg: string, data: Record<string, unknown>) => void = () => {};
  const app = await buildApp({
    storage,
    encryptionKey: key,
    verifier: config.gitProviderVerify
      ? new HttpGitProviderVerifier({
          timeoutMs: config.gitProviderTimeoutMs,
          hosts,
          log: (msg, data) => verifierLog(msg, data),
        })
      : null,
    git: {
      hosts,
      timeoutMs: config.gitProviderTimeoutMs,
      repositoryCacheSeconds: config.gitRepositoryCacheSeconds,
    },
    rateLimit: { perSecond: config.rateLimitPerSecond, burst: config.rateLimitBurst },
    logger,
    runtime,
    specs,
    maxRunningSandboxes: config.maxRunningSandboxes,
    web: config.web,
    limits: config.limits,
    maxSandboxesPerUser: config.maxSandboxesPerUser,
    warmClaimsPerMinute: config.warmClaimsPerMinute,
    sweepIntervalMs: config.sweepIntervalMs,
    retention: config.retention,
    leaseMs: config.leaseMs,
    sandboxStartTimeoutMs: config.sandboxStartTimeoutMs,
    conversations: { localRepositoryRoots: config.localRepositoryRoots },
    admin: config.admin,
    quotas: config.quotas,
    agentProxy: {
      enabled: config.agentProxy.enabled,
      publicUrl: config.agentProxy.publicUrl,
      limits: {
        maxBodyBytes: config.agentProxy.maxBodyBytes,
        timeoutMs: config.agentProxy.timeoutMs,
        callsPerSecond: config.agentProxy.callsPerSecond,
        socketsPerUser: config.agentProxy.socketsPerUser,
        maxMessageBytes: config.agentProxy.socketMessageBytes,
        messagesPerSecond: config.agentProxy.socketMessagesPerSecond,
      },
    },
    ...(config.webhookBaseUrl === undefined ? {} : { webhookBaseUrl: config.webhookBaseUrl }),
    tls: config.tls,
    webhookPort: config.webhookPort,
  });
  const logTo = (log: FastifyBaseLogger) => {
    runtimeLog = (msg, data) => log.info({ runtime: runtime.kind, ...data }, msg);
    verifierLog = (msg, data) => log.warn(data, msg);
  };
  return { app, storage, runtime, keyCreated, logTo };
}

/** A sandbox a purge removed, or failed to remove (`error`). */
export interface PurgedSandbox {
  id: string;
  userId: string;
  status: string;
  error?: string;
}

/**
 * `sandboxes purge`: deletes every sandbox of the configured store (or of one user) as a user's DELETE does, with
 * its processes or container, its workspace and its record, without a running server (or beside one: the delete
 * marks the record first, as a server's does). Throws MissingDatabaseError when the store does not exist.
 */
export async function purgeSandboxes(
  config: Readonly<Config>,
  options: { userId?: string | undefined; onDeleted?: (s: PurgedSandbox) => void } = {},
): Promise<PurgedSandbox[]> {
  const { app, storage } = await openApp(config, false, true);
  const done: PurgedSandbox[] = [];
  try {
    for (const r of await storage.sandboxes.listAll(options.userId)) {
      const entry: PurgedSandbox = { id: r.id, userId: r.ownerId, status: r.status };
      try {
        await app.services.sandboxes.deleteSandbox(
          { $typeName: "workspace.v1.DeleteSandboxRequest", sandboxId: r.id },
          adminContext(r.ownerId),
        );
      } catch (err) {
        entry.error = err instanceof Error ? err.message : String(err);
      }
      done.push(entry);
      options.onDeleted?.(entry);
    }
  } finally {
    await app.close();
  }
  return done;
}

/** The handler context of a call made for `userId` by the server's own administration (the purge). */
function adminContext(userId: string): HandlerContext {
  return createHandlerContext({
    service: SandboxServiceDesc,
    method: SandboxServiceDesc.method.deleteSandbox,
    protocolName: "admin",
    requestMethod: "POST",
    url: "http://localhost/admin/purge",
    contextValues: callerValues({ userId, keyId: "admin-purge" }),
  });
}

/**
 * The command that removes sandboxes left running, with the variables of this server's environment that say which
 * store and runtime it uses (a MongoDB URI is named, never shown: it may hold a password).
 */
export function purgeCommand(env: NodeJS.ProcessEnv = process.env): string {
  const names = ["DATA_DIR", "MONGODB_URI", "MONGODB_DB", "SANDBOX_RUNTIME", "SANDBOX_ROOT", "DOCKER_SOCKET"];
  const shell = (v: string) => (/^[\w@%+=:,./-]+$/.test(v) ? v : `'${v.replace(/'/g, "'\\''")}'`);
  const vars = names
    .filter((n) => env[n] !== undefined && env[n] !== "")
    .map((n) => `${n}=${n === "MONGODB_URI" ? "…" : shell(env[n] as string)}`);
  return [...vars, "npm run cli -- sandboxes purge"].join(" ");
}

/** The stop line's list: ids by user, at most `max` of them. */
function leftRunning(left: readonly { id: string; ownerId: string }[], max = 10): string {
  const byUser = new Map<string, string[]>();
  for (const r of left.slice(0, max)) byUser.set(r.ownerId, [...(byUser.get(r.ownerId) ?? []), r.id]);
  const parts = [...byUser].map(([user, ids]) => `${ids.join(", ")} (user ${user})`);
  return parts.join("; ") + (left.length > max ? `; and ${left.length - max} more` : "");
}

/** The configured sandbox runtime; imported on demand, so a process-runtime server never loads dockerode. */
async function openRuntime(
  config: Readonly<Config>,
  log: (msg: string, data?: object) => void,
): Promise<DockerRuntime | ProcessRuntime> {
  if (config.runtime.kind === "docker") {
    const [{ default: Docker }, { createDockerRuntime }] = await Promise.all([
      import("dockerode"),
      import("../adapters/runtimes/docker/docker-runtime.ts"),
    ]);
    return createDockerRuntime({
      docker: new Docker(config.runtime.socketPath ? { socketPath: config.runtime.socketPath } : undefined),
      network: config.runtime.network,
      hostPorts: config.sandboxHostPorts,
      ...(config.runtime.memoryBytes ? { memoryBytes: config.runtime.memoryBytes } : {}),
      ...(config.runtime.user === undefined ? {} : { user: config.runtime.user }),
      pidsLimit: config.runtime.pidsLimit,
      warmContainers: config.runtime.warmContainers,
      diskBytes: config.sandboxLimits.diskBytes,
      diskDir: join(config.dataDir, "docker-disks"),
      // As long as a sandbox may take to start: the agent-server's boot on a loaded machine.
      warmReadyTimeoutMs: config.sandboxStartTimeoutMs,
      readOnlyPaths: config.localRepositoryRoots,
      shmBytes: config.sandboxLimits.shmBytes,
      ...(config.runtime.nanoCpus ? { nanoCpus: config.runtime.nanoCpus } : {}),
      log,
    });
  }
  const { createProcessRuntime } = await import("../adapters/runtimes/process/process-runtime.ts");
  return createProcessRuntime({
    workspaceRoot: config.sandboxRoot,
    isolation: config.sandboxIsolation,
    network: config.sandboxNetwork,
    hostPorts: config.sandboxHostPorts,
    subnet: config.sandboxSubnet,
    ...(process.env.PATH ? { searchPath: process.env.PATH } : {}),
    uidBase: config.sandboxUidBase,
    uidLockDir: config.sandboxUidLockDir,
    warmAgents: config.sandboxWarmAgents,
    readOnlyPaths: config.localRepositoryRoots,
    limits: {
      pids: config.sandboxLimits.pids,
      memoryBytes: config.sandboxLimits.memoryBytes,
      ...(config.sandboxLimits.cpus ? { cpus: config.sandboxLimits.cpus } : {}),
      tmpBytes: config.sandboxLimits.tmpBytes,
      shmBytes: config.sandboxLimits.shmBytes,
    },
    diskBytes: config.sandboxLimits.diskBytes,
    diskReserveBytes: config.sandboxLimits.diskReserveBytes,
    log,
  });
}

/** Says how process sandboxes are isolated; loudly when they are not. */
function warnIsolation(isolation: ProcessIsolation, log: FastifyBaseLogger): void {
  if (isolation.mode === "bwrap") {
    log.info({ isolation: "bwrap" }, "process sandboxes are isolated with bubblewrap");
  } else if (isolation.singleUser) {
    log.warn(
      { isolation: "none", reason: isolation.reason },
      "WARNING: process sandboxes are NOT isolated (bubblewrap cannot run here): a sandbox can read the key file, the database and every other sandbox. Sandboxes are started for ONE user only; install bubblewrap (apt-get install bubblewrap), or set SANDBOX_ISOLATION=none to allow every user anyway",
    );
  } else {
    log.warn(
      { isolation: "none" },
      "WARNING: SANDBOX_ISOLATION=none: process sandboxes are NOT isolated: a sandbox can read the key file, the database and every other sandbox",
    );
  }
}
