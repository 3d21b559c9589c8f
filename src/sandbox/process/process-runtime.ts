import { lookup } from "node:dns/promises";
import {
  accessSync,
  chmodSync,
  constants,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { isIPv4 } from "node:net";
import { basename, dirname, isAbsolute, join, relative, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import {
  BUILTIN_AGENT_COMMAND,
  BUILTIN_AGENT_MAIN,
  BUILTIN_AGENT_NODE_FLAGS,
  BUILTIN_AGENT_PACKAGES,
} from "../../../agent/shared/builtin-agent.ts";
import { descendantsOf, type ProcStat, readProcStat, signal } from "../../../agent/shared/proc-tree.ts";
import { failedPrecondition } from "../../core/errors.ts";
import type {
  RuntimeHandle,
  RuntimeSpec,
  RuntimeStartRequest,
  RuntimeState,
  SandboxRuntime,
} from "../../ports/sandbox-runtime.ts";
import { pollAlive, probeAlive } from "../agent-health.ts";
import { executeOnlyCopy } from "./agent-binary.ts";
import { findTools, type IsolationSetting, probeBwrap, runningAsRoot, type SandboxUser } from "./bwrap.ts";
import { CompileCache } from "./compile-cache.ts";
import { ProcessTable, parseHandleData } from "./process-table.ts";
import { setUpLimits } from "./runtime-limits.ts";
import { DEFAULT_PATH, type OwnChild, SandboxLauncher, type WarmChild } from "./sandbox-launch.ts";
import type { SandboxLimits } from "./sandbox-limits.ts";
import { isLoopbackHost, type NetworkSetting, SandboxNetwork } from "./sandbox-network.ts";
import { stopSandboxProcesses } from "./sandbox-processes.ts";
import { SandboxUids } from "./sandbox-uids.ts";
import { claimedFolder, forgetClaim, sweepWarmAgents, WarmPool, WORKSPACE_FOLDER } from "./warm-agents.ts";
import { claimWarmAgent, servesWarm, spawnWarmAgent } from "./warm-claim.ts";
import { usedBytes } from "./workspace-disk.ts";

/** Options of {@link createProcessRuntime}. */
export interface ProcessRuntimeOptions {
  /**
   * Each sandbox gets the folder `<workspaceRoot>/<sandboxId>` (one started from a warm agent keeps the agent's
   * folder, `ws-<random>`); its output goes to `.openhands/logs/sandbox.log` in that folder (SANDBOX_LOG_DIR).
   */
  workspaceRoot: string;
  /**
   * Argv of the built-in agent (default: this Node binary with {@link BUILTIN_AGENT_NODE_FLAGS}, running
   * agent/main.ts).
   */
  agentCommand?: string[];
  /** Address the agent listens on and the host of its URL (default 127.0.0.1). */
  host?: string;
  /** Base environment of every sandbox (default: a standard PATH and LANG=C.UTF-8; HOME is the workspace). */
  env?: Record<string, string>;
  /** Node compile cache shared by built-in agents, halving their start time (default `<workspaceRoot>/.cache`; null: off). */
  compileCacheDir?: string | null;
  /** How long removal waits after SIGTERM before SIGKILL (default 2000 ms). */
  stopGraceMs?: number;
  /** Interval of health polls in {@link SandboxRuntime.waitHealthy} (default 5 ms). */
  healthPollMs?: number;
  /** Timeout of the single health probe made by {@link SandboxRuntime.inspect} (default 1000 ms). */
  probeTimeoutMs?: number;
  log?: (msg: string, data?: object) => void;
  /**
   * `bwrap`: every sandbox runs under bubblewrap (creating the runtime throws when bwrap cannot run here); `none`:
   * plain child processes, for every user; `auto` (default): bwrap when a probe shows it works, else plain child
   * processes for one user only (see {@link ProcessRuntime.isolation}).
   */
  isolation?: IsolationSetting;
  /** The bwrap binary (default `bwrap`, looked up in `searchPath`). */
  bwrapPath?: string;
  /** Where bwrap and, as root, setpriv are looked up once at creation (default: the standard system folders). */
  searchPath?: string;
  /** As root, sandbox n runs as uid/gid `uidBase + n` (default 1,000,000,000), n < `uidCount` (default 65,536). */
  uidBase?: number;
  uidCount?: number;
  /**
   * As root: the host-wide folder where a `<uid>` file, naming the workspace it is for, claims each sandbox uid
   * (default /var/lib/agent-workspace/sandbox-uids). Every server on the host uses the same one, whatever its
   * DATA_DIR, so two servers never hand out the same uid.
   */
  uidLockDir?: string;
  /** More read-only paths every isolated sandbox sees (e.g. an interpreter a custom spec command runs). */
  readOnlyPaths?: readonly string[];
  /**
   * How many built-in agents to keep started ahead of need (default 0: none). A start of the built-in agent claims
   * one instead of waiting for a Node process to boot; see warm-agents.ts.
   */
  warmAgents?: number;
  /**
   * Period of the sweep that removes the warm agents of servers that are gone (default 30 s; 0: only once, at
   * creation). Every server on a workspace root sweeps, so a server that keeps running reaps what a killed one
   * left; agents whose server still runs (another server on the same root) are never touched.
   */
  leftoverSweepMs?: number;
  /**
   * Limits of every sandbox (see sandbox-limits.ts): pids, memory and CPUs in a cgroup per sandbox, else rlimits;
   * /tmp and /dev/shm sizes on bwrap's tmpfs. Default: none.
   */
  limits?: SandboxLimits;
  /** `off`: never use cgroups (rlimits only; for hosts and tests where cgroups must be left alone). Default auto. */
  cgroups?: "auto" | "off";
  /**
   * Size of each workspace in bytes (0 or absent: none), enforced as workspace-disk.ts says: a loop-mounted file
   * system where the host allows (`auto`, the default), else (or with `watch`) by measuring and stopping.
   */
  diskBytes?: number;
  disk?: "auto" | "watch";
  /**
   * `auto` (default): every sandbox under bubblewrap gets a network of its own when the host allows it (root, ip,
   * iptables, nsenter), else shares the host's, which the start log says; `isolated`: required (creating the
   * runtime throws when it cannot be); `host`: the host's network (see sandbox-network.ts).
   */
  network?: NetworkSetting;
  /** Host loopback ports isolated sandboxes reach through their gateway besides the webhook port (model servers). */
  hostPorts?: readonly number[];
  /** The /16 the sandbox networks are cut from (default 10.213.0.0/16). */
  subnet?: string;
  /** How often watched workspaces are measured (default 5000 ms). */
  diskWatchMs?: number;
  /** New workspaces are refused while the file system holding them has less free (default 1 GiB). */
  diskReserveBytes?: number;
}

/** How a runtime's sandboxes are networked, for the server's start log. */
export type ProcessNetworkReport =
  | { mode: "isolated"; subnet: string; hostPorts: number[]; dns: string | null }
  | { mode: "host"; reason: string };

/** How a runtime enforces {@link ProcessRuntimeOptions.limits}, for the server's start log. */
export interface ProcessLimitsReport {
  pids: string;
  memory: string;
  cpu: string;
  tmp: string;
  shm: string;
  nestedUserNamespaces: string;
  disk: string;
}

/** How this runtime runs sandboxes, decided once when it is created. */
export interface ProcessIsolation {
  mode: "bwrap" | "none";
  /** No isolation and not explicitly allowed: sandboxes are started for the first user who asks only. */
  singleUser: boolean;
  /** Why bwrap is not used (auto mode only). */
  reason?: string;
}

/** The process runtime, plus a test helper. */
export interface ProcessRuntime extends SandboxRuntime {
  readonly kind: "process";
  readonly isolation: ProcessIsolation;
  /** Removes every sandbox this instance started and that is not removed yet (for tests and shutdown scripts). */
  killAll(): Promise<void>;
  /** Warm agents ready to be claimed now (see {@link ProcessRuntimeOptions.warmAgents}). */
  warmReady(): number;
  /** Which limits hold and how (cgroup v1/v2, rlimit, tmpfs size, none). */
  readonly limits: ProcessLimitsReport;
  /** Whether sandboxes have networks of their own, and why not when they do not. */
  readonly network: ProcessNetworkReport;
  reachHost(url: string): void;
  /** Why the sandbox ended in error when the runtime knows (its memory limit), else null. */
  failureReason(handle: RuntimeHandle): string | null;
}

/** The spec's working directory relative to the workspace ("" for the workspace itself); throws when it leaves it. */
function workingDirOf(spec: RuntimeSpec): string {
  if (!spec.workingDir || isAbsolute(spec.workingDir)) return "";
  const inside = relative("/w", resolve("/w", spec.workingDir));
  if (inside.startsWith("..")) throw new Error(`working dir outside the workspace: ${spec.workingDir}`);
  return inside;
}

const DEFAULT_UID_BASE = 1_000_000_000;
const DEFAULT_UID_COUNT = 65_536;
const DEFAULT_UID_LOCK_DIR = "/var/lib/agent-workspace/sandbox-uids";

/**
 * Sandboxes as local child processes: one process group and one workspace folder per sandbox.
 *
 * - isolation (decided at creation, see {@link ProcessRuntimeOptions.isolation}): under bubblewrap each sandbox sees
 *   only the system folders (read-only), what the agent needs (read-only) and its own workspace, in its own PID,
 *   IPC and UTS namespaces with private /tmp, as its own uid when the server runs as root (see bwrap.ts); the
 *   process group is bwrap's, and its processes are bwrap's descendants. Without isolation, sandboxes are started
 *   for one user only unless `none` was chosen explicitly.
 * - start: spawns the spec's command (empty or {@link BUILTIN_AGENT_COMMAND}: the built-in agent) detached in its own
 *   process group, cwd = the workspace (or a relative `workingDir` inside it), with a minimal environment plus the
 *   spec's `initialEnv`, `SESSION_API_KEY`/`OH_SESSION_API_KEYS_0`, `PORT` (a free loopback port; `{port}` in the
 *   command is replaced by it), `HOST` and `WORKSPACE_DIR` (the built-in agent takes it on its stdin, so that its
 *   /proc environ holds no key). Output goes to `.openhands/logs/sandbox.log` in the workspace, bounded by the
 *   workspace's size.
 *   With `warmAgents`, a start of the built-in agent claims a warm one instead when it can (see warm-agents.ts):
 *   the same environment, given to an agent already booted in a folder of its own.
 * - pause/resume: SIGSTOP/SIGCONT to the group and to every descendant (commands that left the group); idempotent.
 * - remove: SIGTERM (and SIGCONT, so a paused sandbox can act on it), SIGKILL after `stopGraceMs`, then deletes the
 *   workspace (its log with it); idempotent. When the main process of a sandbox started by this instance exits,
 *   whatever is left in its process group is killed at once.
 * - inspect: `missing` when the pid is gone or now belongs to another process (start time differs), or when the
 *   process exited with code 0; `error` when it crashed: a non-zero exit or death by a signal, as seen by this
 *   instance (its parent) or in the wait status of a zombie nobody reaped; `paused` when stopped; `running` when
 *   `/alive` answers, else `starting`. A fresh instance after a server restart is not the parent and cannot see
 *   how a reaped process ended: a vanished process is then `missing`.
 * - close: releases nothing that matters: sandboxes outlive the server, reconciliation is the caller's job.
 *
 * pause/resume raise FAILED_PRECONDITION when the process is gone.
 */
export function createProcessRuntime(options: ProcessRuntimeOptions): ProcessRuntime {
  const workspaceRoot = resolve(options.workspaceRoot);
  const host = options.host ?? "127.0.0.1";
  const urlHost = host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host.includes(":") ? `[${host}]` : host;
  const baseEnv = options.env ?? { PATH: DEFAULT_PATH, LANG: "C.UTF-8" };
  const compileCacheDir =
    options.compileCacheDir === undefined ? join(workspaceRoot, ".cache") : options.compileCacheDir;
  const agentCommand = options.agentCommand ?? [
    process.execPath,
    ...BUILTIN_AGENT_NODE_FLAGS,
    BUILTIN_AGENT_MAIN,
  ];
  const stopGraceMs = options.stopGraceMs ?? 2000;
  const healthPollMs = options.healthPollMs ?? 5;
  const probeTimeoutMs = options.probeTimeoutMs ?? 1000;
  const log = options.log ?? (() => {});

  const uidBase = options.uidBase ?? DEFAULT_UID_BASE;
  const asRoot = runningAsRoot();
  const ownUser: SandboxUser = { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
  // The workspace root holds every workspace (each 0700, owned by its sandbox's uid when run as root), the logs
  // and the compile cache: only the server's user may list it.
  mkdirSync(workspaceRoot, { recursive: true, mode: 0o700 });
  chmodSync(workspaceRoot, 0o700);
  const tools = findTools(options.bwrapPath ?? "bwrap", options.searchPath ?? DEFAULT_PATH, asRoot);
  const bwrapTools = () => {
    if (typeof tools === "string") throw new Error(tools);
    return tools;
  };
  const procs = new ProcessTable<OwnChild>(workspaceRoot, typeof tools === "string" ? null : tools.bwrap);
  const isolation = decideIsolation(options.isolation ?? "auto", () =>
    typeof tools === "string"
      ? tools
      : probeBwrap(tools, workspaceRoot, asRoot ? { uid: uidBase, gid: uidBase } : ownUser, asRoot),
  );
  const runtimeLimits = setUpLimits(options, { workspaceRoot, asRoot, isolation, log });
  const networkSetting = options.network ?? "auto";
  let network: SandboxNetwork | null = null;
  let networkReport: ProcessNetworkReport;
  if (networkSetting === "host") networkReport = { mode: "host", reason: "SANDBOX_NETWORK=host" };
  else if (isolation.mode !== "bwrap")
    networkReport = { mode: "host", reason: "sandboxes are not isolated (no bubblewrap)" };
  else {
    const made = SandboxNetwork.create(
      {
        root: workspaceRoot,
        ...(options.subnet ? { subnet: options.subnet } : {}),
        hostPorts: options.hostPorts ?? [],
        searchPath: options.searchPath ?? DEFAULT_PATH,
        log,
      },
      asRoot,
    );
    if (typeof made === "string") {
      if (networkSetting === "isolated")
        throw new Error(`SANDBOX_NETWORK=isolated, but sandboxes cannot have networks of their own: ${made}`);
      networkReport = { mode: "host", reason: made };
    } else {
      network = made;
      networkReport = {
        mode: "isolated",
        subnet: made.subnet,
        hostPorts: made.allowedPorts,
        dns: made.resolvConf === null ? null : made.dnsAddress,
      };
    }
  }
  const { cgroups, diskBytes, loopDisks, watchDisks, diskWatchMs, report: limitsReport } = runtimeLimits;
  /** Workspaces stopped for passing their size, with the reason (see failureReason). */
  const diskStops = new Map<string, string>();
  const readOnlyPaths = [process.execPath, ...(options.readOnlyPaths ?? [])];
  const singleUserFile = join(workspaceRoot, ".single-user");
  /** The sandbox uids of this root, claimed host-wide (as root; see SandboxUids). */
  const uids = new SandboxUids({
    workspaceRoot,
    base: options.uidBase ?? DEFAULT_UID_BASE,
    count: options.uidCount ?? DEFAULT_UID_COUNT,
    claimsDir: options.uidLockDir ?? DEFAULT_UID_LOCK_DIR,
    asRoot,
    ownUser,
  });
  const compileCache = new CompileCache({ agentCommand, ownUid: ownUser.uid, log });
  // As root under bubblewrap: the built-in agent from an execute-only copy of Node (agent-binary.ts).
  const agentBinary =
    asRoot && isolation.mode === "bwrap" && agentCommand[0] === process.execPath
      ? executeOnlyCopy(process.execPath, join(workspaceRoot, ".node"))
      : null;
  if (asRoot && isolation.mode === "bwrap" && agentBinary === null && agentCommand[0] === process.execPath)
    log("the built-in agent runs from the readable Node binary: the commands it runs may read its memory");
  /**
   * What the built-in agent reads: its folder, the package.json that makes its modules ES modules, and the two
   * packages its conversations load (the events websocket and the model client), wherever Node resolves them.
   */
  const agentFiles = [dirname(BUILTIN_AGENT_MAIN)];
  for (let dir = dirname(BUILTIN_AGENT_MAIN); dir !== dirname(dir); dir = dirname(dir)) {
    if (existsSync(join(dir, "package.json"))) {
      agentFiles.push(join(dir, "package.json"));
      break;
    }
  }
  for (const pkg of BUILTIN_AGENT_PACKAGES) {
    // Where Node finds a bare import: node_modules/<pkg> in the agent's folder or the nearest ancestor holding it.
    let found: string | null = null;
    for (let dir = dirname(BUILTIN_AGENT_MAIN); found === null && dir !== dirname(dir); dir = dirname(dir))
      if (existsSync(join(dir, "node_modules", pkg, "package.json"))) found = join(dir, "node_modules", pkg);
    if (found !== null) agentFiles.push(found);
    else
      options.log?.("a package of the built-in agent is not installed: its conversations cannot use it", {
        pkg,
      });
  }

  /** Refuses a second user when sandboxes are not isolated and that was not explicitly allowed. */
  const checkSingleUser = (ownerId: string | undefined): void => {
    if (!isolation.singleUser || ownerId === undefined) return;
    let owner: string | null = null;
    try {
      owner = readFileSync(singleUserFile, "utf8");
    } catch {
      writeFileSync(singleUserFile, ownerId, { mode: 0o600 });
      return;
    }
    if (owner !== ownerId)
      throw failedPrecondition(
        "process sandboxes are not isolated on this server (bubblewrap is unavailable), so they are started for one user only; install bubblewrap, or set SANDBOX_ISOLATION=none to run every user's sandboxes unisolated",
      );
  };

  /**
   * Deletes the workspace folder `folder`, giving back the uid claimed for it. What is left in the sandbox's cgroup
   * (a process that escaped its group) is killed first, so that nothing of the sandbox can swap a folder for a
   * symlink while root deletes the tree; a loop-mounted workspace is unmounted before, leaving an empty folder.
   * Settles once its loop disk is detached for good (whoever still held it killed: LoopDisks.remove).
   */
  const removeWorkspace = (folder: string): Promise<void> => {
    for (const pid of cgroups?.pids(folder) ?? []) signal(pid, "SIGKILL");
    uids.release(folder);
    const detached = loopDisks?.remove(join(workspaceRoot, folder), folder).then(({ killed, detached }) => {
      if (killed.length > 0)
        log("sandbox disk: processes still holding it were killed before it was detached", {
          folder,
          pids: killed,
        });
      if (!detached) log("sandbox disk: still attached after its removal", { folder });
    });
    rmSync(join(workspaceRoot, folder), { recursive: true, force: true });
    diskStops.delete(folder);
    const released = network
      ?.release(folder)
      .catch((e: unknown) => log("sandbox network could not be removed", { folder, error: String(e) }));
    if (cgroups) {
      for (const pid of cgroups.pids(folder)) signal(pid, "SIGKILL");
      if (!cgroups.remove(folder)) setTimeout(() => removeCgroupLater(folder, 10), 50).unref();
    }
    return Promise.all([detached, released]).then(() => {});
  };

  /** Retries removing a cgroup whose last processes were still exiting. */
  const removeCgroupLater = (folder: string, tries: number): void => {
    if (!cgroups) return;
    for (const pid of cgroups.pids(folder)) signal(pid, "SIGKILL");
    if (cgroups.remove(folder)) return;
    if (tries > 0) setTimeout(() => removeCgroupLater(folder, tries - 1), 200).unref();
    else log("sandbox cgroup could not be removed", { folder });
  };

  /** Stops the processes that carry the workspace folder `folder` and removes it; how many it stopped. */
  const removeFolder = async (folder: string): Promise<number> => {
    const workspace = join(workspaceRoot, folder);
    const stopped = await stopSandboxProcesses(workspace, stopGraceMs);
    for (const [pid, own] of procs.children)
      if (own.handle.data.workspace === workspace) procs.children.delete(pid);
    await removeWorkspace(folder);
    return stopped;
  };

  const launcher = new SandboxLauncher({
    workspaceRoot,
    host,
    urlHost,
    baseEnv,
    compileCacheDir,
    compileCache,
    agentCommand,
    agentBinary,
    agentFiles,
    readOnlyPaths,
    isolation,
    asRoot,
    ownUser,
    tools: bwrapTools,
    uids,
    limits: runtimeLimits,
    procs,
    log,
    network,
    removeWorkspace: (folder) => void removeWorkspace(folder),
    onWarmExit: (agent) => warm?.exited(agent),
  });

  // uid claims whose workspace is gone (a server died between claiming and removing) are given back, and so are
  // networks.
  uids.sweepStale();
  void network
    ?.sweep(new Set(existsSync(workspaceRoot) ? readdirSync(workspaceRoot) : []))
    .then((n) => n > 0 && log("sandbox networks of removed workspaces deleted", { count: n }))
    .catch((e: unknown) => log("sandbox networks: sweep failed", { error: String(e) }));

  // What servers that died left of their warm agents is removed by whichever server starts next on this root, and
  // then periodically by every server on it (an agent normally exits with its server, when its stdin closes; one
  // that did not would otherwise run until the next server start).
  const sweepLeftovers = (): Promise<void> =>
    sweepWarmAgents(
      workspaceRoot,
      async (folder) => {
        await removeFolder(folder);
      },
      log,
    ).catch((e: unknown) => log("warm agents: sweep failed", { error: String(e) }));
  const swept = sweepLeftovers();
  let sweeping: Promise<void> | null = null;
  const leftoverSweepMs = options.leftoverSweepMs ?? 30_000;
  const leftoverTimer =
    leftoverSweepMs > 0
      ? setInterval(() => {
          sweeping ??= sweepLeftovers().finally(() => {
            sweeping = null;
          });
        }, leftoverSweepMs)
      : null;
  leftoverTimer?.unref();
  const warm =
    (options.warmAgents ?? 0) > 0 && agentCommand[0] === process.execPath
      ? new WarmPool({
          root: workspaceRoot,
          size: options.warmAgents ?? 0,
          after: swept,
          log,
          spawn: (folder) => spawnWarmAgent(launcher, folder),
          discard: async (folder) => {
            await removeFolder(folder);
          },
        })
      : null;

  const runtime: ProcessRuntime = {
    kind: "process",
    isolation,
    network: networkReport,

    admit(ownerId: string): void {
      checkSingleUser(ownerId);
    },

    reachHost(url: string): void {
      if (network === null) return;
      let parsed: URL;
      try {
        parsed = new URL(url);
      } catch {
        return;
      }
      const port = Number(parsed.port || (parsed.protocol === "https:" ? 443 : 80));
      const host = parsed.hostname.replace(/^\[|\]$/g, "");
      // On loopback: through the gateway. Elsewhere: that address of the host (a name: the addresses it has now).
      if (isLoopbackHost(host)) network.allowPort(port);
      else if (isIPv4(host)) network.allowAddress(host, port);
      else
        void lookup(host, { all: true, family: 4 }).then(
          (found) => {
            for (const { address } of found) network.allowAddress(address, port);
          },
          (e: unknown) =>
            log("sandboxes cannot be let reach a host name that does not resolve", { url, error: String(e) }),
        );
      if (networkReport.mode === "isolated") networkReport.hostPorts = network.allowedPorts;
    },

    async start(request: RuntimeStartRequest): Promise<RuntimeHandle> {
      const { sandboxId, spec, sessionApiKey } = request;
      if (!WORKSPACE_FOLDER.test(sandboxId))
        throw new Error(`invalid sandbox id for a folder name: ${sandboxId}`);
      const rel = workingDirOf(spec);
      checkSingleUser(request.ownerId);
      const agent = warm && servesWarm(spec) ? warm.take(sandboxId) : null;
      if (agent)
        return claimWarmAgent(launcher, ownUser, log, agent as WarmChild, {
          sandboxId,
          spec,
          sessionApiKey,
          rel,
        });
      return (await launcher.launch(sandboxId, sandboxId, spec, rel, sessionApiKey)).handle;
    },

    async waitHealthy(handle: RuntimeHandle, timeoutMs: number): Promise<boolean> {
      const data = parseHandleData(handle.data);
      if (!data) return false;
      const healthy = await pollAlive(handle.agentUrl, timeoutMs, {
        intervalMs: healthPollMs,
        gaveUp: () => procs.leaderGone(data),
      });
      // A claimed warm agent is serving: now its replacement may start (see WarmPool.take).
      if (data.sandboxId !== undefined) warm?.refillSoon();
      return healthy;
    },

    async inspect(handle: RuntimeHandle, options?: { probe?: boolean }): Promise<RuntimeState> {
      const data = parseHandleData(handle.data);
      if (!data) return "missing";
      const own = procs.own(data);
      let stat = own?.exit ? null : readProcStat(data.pid);
      if (own && !own.exit && stat?.state === "Z") {
        // Our child died and is about to be reaped: wait for its exit status to tell a crash from a clean exit.
        await Promise.race([own.exited, sleep(100)]);
        stat = own.exit ? null : stat;
      }
      if (own?.exit) return own.exit.code === 0 ? "missing" : "error";
      // Vanished without being removed (its workspace is still there: a reboot, a kill seen by no parent of ours):
      // it ended, and a resume can start it again (see restart).
      if (!stat || stat.startTime !== data.startTimeTicks)
        return procs.workspaceOf(data) !== null && existsSync(data.workspace) && own === undefined
          ? "error"
          : "missing";
      // Dead, and its parent (not us) has not reaped it: judge by its exit status, as for our own children; a
      // sandbox whose workspace is gone was removed (stopped by a signal), not crashed.
      if (stat.state === "Z" || stat.state === "X")
        return stat.exitStatus === 0 || !existsSync(data.workspace) ? "missing" : "error";
      if (stat.state === "T" || stat.state === "t") return "paused";
      if (options?.probe === false) return "running";
      return (await probeAlive(handle.agentUrl, probeTimeoutMs)) ? "running" : "starting";
    },

    async pause(handle: RuntimeHandle): Promise<void> {
      const data = procs.requireLive(handle);
      procs.signal(data, "SIGSTOP");
      await procs.settle(data, (state) => state === "T" || state === "t");
    },

    async resume(handle: RuntimeHandle): Promise<RuntimeHandle> {
      const data = procs.requireLive(handle);
      procs.signal(data, "SIGCONT");
      await procs.settle(data, (state) => state !== "T" && state !== "t");
      return handle;
    },

    async restart(handle: RuntimeHandle, request: RuntimeStartRequest): Promise<RuntimeHandle> {
      const data = parseHandleData(handle.data);
      const workspace = data && procs.workspaceOf(data);
      if (!data || !workspace || !existsSync(workspace))
        throw failedPrecondition("the sandbox's workspace is gone: it cannot be started again; delete it");
      checkSingleUser(request.ownerId);
      // Never two agents on one workspace: whatever is left of the old one (its group, processes in its folder).
      if (!procs.leaderGone(data)) throw failedPrecondition("the sandbox process is still running");
      await stopSandboxProcesses(workspace, 0);
      if (procs.own(data)) procs.children.delete(data.pid);
      const folder = basename(workspace);
      // Whatever is left in its cgroup too; the cgroup is made anew (its OOM count then tells about the new agent).
      for (const pid of cgroups?.pids(folder) ?? []) signal(pid, "SIGKILL");
      cgroups?.remove(folder);
      diskStops.delete(folder);
      const rel = workingDirOf(request.spec);
      const { handle: fresh } = await launcher.launch(
        folder,
        request.sandboxId,
        request.spec,
        rel,
        request.sessionApiKey,
      );
      return folder === request.sandboxId
        ? fresh
        : { ...fresh, data: { ...fresh.data, sandboxId: request.sandboxId } };
    },

    async remove(handle: RuntimeHandle): Promise<void> {
      const data = parseHandleData(handle.data);
      if (!data) return;
      if (procs.live(data)) {
        // Remember the descendants (with their start times) now: they are re-parented once the leader exits.
        const descendants = descendantsOf(data.pid)
          .map((pid) => readProcStat(pid))
          .filter((s): s is ProcStat => s !== null);
        const signalDescendants = (sig: NodeJS.Signals, skip?: (pid: number) => boolean): void => {
          for (const d of descendants)
            if (readProcStat(d.pid)?.startTime === d.startTime && !skip?.(d.pid)) signal(d.pid, sig);
        };
        // Under bwrap the leader and the nested bwrap that refuses user namespaces are bwrap monitors, which
        // SIGTERM would kill at once (the exit handler then SIGKILLs the rest): only the processes they run get
        // SIGTERM, and the monitors end when those have.
        if (data.isolation !== "bwrap") signal(-data.pgid, "SIGTERM");
        signalDescendants(
          "SIGTERM",
          data.isolation === "bwrap" ? (pid: number) => procs.isBwrapMonitor(pid) : undefined,
        );
        signal(-data.pgid, "SIGCONT");
        signalDescendants("SIGCONT");
        const graceful = await procs.waitLeaderGone(data, stopGraceMs);
        // A group id is not reused while the group has members, so members left behind are still ours.
        if (!graceful || signal(-data.pgid, 0)) signal(-data.pgid, "SIGKILL");
        signalDescendants("SIGKILL");
        if (!graceful) await procs.waitLeaderGone(data, 1000);
        log("sandbox process removed", { pid: data.pid, graceful });
      }
      const workspace = procs.workspaceOf(data);
      if (workspace) {
        const folder = relative(workspaceRoot, workspace);
        await removeWorkspace(folder);
      }
      if (data.sandboxId) forgetClaim(workspaceRoot, data.sandboxId);
      const own = procs.own(data);
      if (own) procs.children.delete(data.pid);
    },

    async removeBySandboxId(sandboxId: string): Promise<number> {
      if (!WORKSPACE_FOLDER.test(sandboxId)) return 0;
      const stopped = await removeFolder(claimedFolder(workspaceRoot, sandboxId) ?? sandboxId);
      forgetClaim(workspaceRoot, sandboxId);
      if (stopped > 0) log("sandbox processes removed by sandbox id", { sandboxId, processes: stopped });
      return stopped;
    },

    async ping(): Promise<void> {
      mkdirSync(workspaceRoot, { recursive: true });
      accessSync(workspaceRoot, constants.W_OK);
    },

    async close(): Promise<void> {
      if (diskWatch) clearInterval(diskWatch);
      // Sandboxes keep running; the exit listeners hold no reference that keeps Node alive (children are unref'd).
      // Warm agents are not sandboxes: they go.
      if (leftoverTimer !== null) clearInterval(leftoverTimer);
      await Promise.all([warm?.close(), sweeping]);
      cgroups?.release();
      network?.close();
    },

    warmReady(): number {
      return warm?.ready ?? 0;
    },

    limits: limitsReport,

    failureReason(handle: RuntimeHandle): string | null {
      const data = parseHandleData(handle.data);
      const workspace = data && procs.workspaceOf(data);
      if (!workspace) return null;
      const folder = relative(workspaceRoot, workspace);
      const stopped = diskStops.get(folder);
      if (stopped) return stopped;
      if (!cgroups) return null;
      return cgroups.oomKilled(folder)
        ? `killed by its memory limit (${runtimeLimits.limits.memoryBytes} bytes)`
        : null;
    },

    async killAll(): Promise<void> {
      if (diskWatch) clearInterval(diskWatch);
      if (leftoverTimer !== null) clearInterval(leftoverTimer);
      await Promise.all([warm?.close(), sweeping]);
      await Promise.all([...procs.children.values()].map((own) => runtime.remove(own.handle)));
      cgroups?.release();
    },
  };
  /**
   * Watched workspaces: each sandbox this instance runs is measured in turn; one past its size is stopped (its
   * processes killed; its files stay until it is deleted) and reports why.
   */
  let measuring = false;
  const diskWatch = watchDisks
    ? setInterval(async () => {
        if (measuring) return;
        measuring = true;
        try {
          for (const own of [...procs.children.values()]) {
            const data = parseHandleData(own.handle.data);
            if (own.exit || !data) continue;
            const folder = relative(workspaceRoot, data.workspace);
            const used = await usedBytes(data.workspace);
            if (used === null || used <= diskBytes || own.exit) continue;
            const reason = `stopped: its workspace holds ${Math.ceil(used / 1048576)} MB, more than its ${Math.floor(diskBytes / 1048576)} MB`;
            diskStops.set(folder, reason);
            log("sandbox stopped: workspace over its size", {
              sandboxId: own.label ?? folder,
              used,
              limit: diskBytes,
            });
            for (const pid of descendantsOf(data.pid)) signal(pid, "SIGKILL");
            signal(-data.pgid, "SIGKILL");
          }
        } finally {
          measuring = false;
        }
      }, diskWatchMs)
    : null;
  diskWatch?.unref();
  warm?.fill();
  return runtime;
}

/**
 * The isolation a runtime uses: bwrap when asked (throws when the probe fails) or when auto and the probe
 * succeeds; else none, restricted to one user unless `none` was asked for explicitly.
 */
function decideIsolation(setting: IsolationSetting, probe: () => string | null): ProcessIsolation {
  if (setting === "none") return { mode: "none", singleUser: false };
  const reason = probe();
  if (reason === null) return { mode: "bwrap", singleUser: false };
  if (setting === "bwrap")
    throw new Error(`SANDBOX_ISOLATION=bwrap, but bubblewrap cannot run sandboxes here: ${reason}`);
  return { mode: "none", singleUser: true, reason };
}
