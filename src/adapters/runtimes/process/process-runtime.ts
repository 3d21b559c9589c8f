/**
 * The process runtime: sandboxes as local child processes (see {@link createProcessRuntime}). Its options and
 * reports, the composition of its jobs (isolation, limits and network decided once in runtime-setup.ts and
 * runtime-limits.ts, processes in process-table.ts, launches in sandbox-launch.ts, workspaces in
 * sandbox-workspaces.ts, warm agents in warm-agents.ts and warm-claim.ts, the leftover sweep and the disk watch),
 * and the runtime itself, whose methods delegate to them.
 */
import { chmodSync, existsSync, mkdirSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import {
  BUILTIN_AGENT_COMMAND,
  BUILTIN_AGENT_MAIN,
  BUILTIN_AGENT_NODE_FLAGS,
} from "../../../../agent/shared/builtin-agent.ts";
import type { RuntimeHandle, SandboxRuntime } from "../../../ports/sandbox-runtime.ts";
import { executeOnlyCopy } from "./agent-binary.ts";
import { findTools, type IsolationSetting, probeBwrap, runningAsRoot, type SandboxUser } from "./bwrap.ts";
import { CompileCache } from "./compile-cache.ts";
import { DiskWatch } from "./disk-watch.ts";
import { LeftoverSweep } from "./leftover-sweep.ts";
import { ProcessSandboxRuntime } from "./process-sandbox-runtime.ts";
import { ProcessTable } from "./process-table.ts";
import { setUpLimits } from "./runtime-limits.ts";
import { builtinAgentFiles, decideIsolation, openNetwork } from "./runtime-setup.ts";
import { DEFAULT_PATH, type OwnChild, SandboxLauncher } from "./sandbox-launch.ts";
import type { SandboxLimits } from "./sandbox-limits.ts";
import type { NetworkSetting } from "./sandbox-network.ts";
import { SandboxUids } from "./sandbox-uids.ts";
import { SandboxWorkspaces } from "./sandbox-workspaces.ts";
import { WarmPool } from "./warm-agents.ts";
import { spawnWarmAgent } from "./warm-claim.ts";

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
  const agentCommand = options.agentCommand ?? [
    process.execPath,
    ...BUILTIN_AGENT_NODE_FLAGS,
    BUILTIN_AGENT_MAIN,
  ];
  const log = options.log ?? (() => {});
  const uidBase = options.uidBase ?? DEFAULT_UID_BASE;
  const asRoot = runningAsRoot();
  const ownUser: SandboxUser = { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
  // The workspace root holds every workspace (each 0700, owned by its sandbox's uid when run as root), the logs
  // and the compile cache: only the server's user may list it.
  mkdirSync(workspaceRoot, { recursive: true, mode: 0o700 });
  chmodSync(workspaceRoot, 0o700);
  const tools = findTools(options.bwrapPath ?? "bwrap", options.searchPath ?? DEFAULT_PATH, asRoot);
  const procs = new ProcessTable<OwnChild>(workspaceRoot, typeof tools === "string" ? null : tools.bwrap);
  const isolation = decideIsolation(options.isolation ?? "auto", () =>
    typeof tools === "string"
      ? tools
      : probeBwrap(tools, workspaceRoot, asRoot ? { uid: uidBase, gid: uidBase } : ownUser, asRoot),
  );
  const limits = setUpLimits(options, { workspaceRoot, asRoot, isolation, log });
  const { network, report: networkReport } = openNetwork(options, { workspaceRoot, isolation, asRoot, log });
  /** The sandbox uids of this root, claimed host-wide (as root; see SandboxUids). */
  const uids = new SandboxUids({
    workspaceRoot,
    base: uidBase,
    count: options.uidCount ?? DEFAULT_UID_COUNT,
    claimsDir: options.uidLockDir ?? DEFAULT_UID_LOCK_DIR,
    asRoot,
    ownUser,
  });
  const compileCache = new CompileCache({ agentCommand, ownUid: ownUser.uid, log });
  // As root under bubblewrap: the built-in agent from an execute-only copy of Node (agent-binary.ts).
  const builtin = agentCommand[0] === process.execPath;
  const agentBinary =
    asRoot && isolation.mode === "bwrap" && builtin
      ? executeOnlyCopy(process.execPath, join(workspaceRoot, ".node"))
      : null;
  if (asRoot && isolation.mode === "bwrap" && agentBinary === null && builtin)
    log("the built-in agent runs from the readable Node binary: the commands it runs may read its memory");
  const agentFiles = builtinAgentFiles(options.log);
  const stopGraceMs = options.stopGraceMs ?? 2000;
  const workspaces = new SandboxWorkspaces({ workspaceRoot, limits, uids, network, procs, stopGraceMs, log });
  let warm: WarmPool | null = null;
  const launcher = new SandboxLauncher({
    workspaceRoot,
    host,
    urlHost,
    baseEnv: options.env ?? { PATH: DEFAULT_PATH, LANG: "C.UTF-8" },
    compileCacheDir:
      options.compileCacheDir === undefined ? join(workspaceRoot, ".cache") : options.compileCacheDir,
    compileCache,
    agentCommand,
    agentBinary,
    agentFiles,
    readOnlyPaths: [process.execPath, ...(options.readOnlyPaths ?? [])],
    isolation,
    asRoot,
    ownUser,
    tools: () => {
      if (typeof tools === "string") throw new Error(tools);
      return tools;
    },
    uids,
    limits,
    procs,
    log,
    network,
    removeWorkspace: (folder) => void workspaces.remove(folder),
    onWarmExit: (agent) => warm?.exited(agent),
  });

  // uid claims whose workspace is gone (a server died between claiming and removing) are given back, and so are
  // networks.
  uids.sweepStale();
  void network
    ?.sweep(new Set(existsSync(workspaceRoot) ? readdirSync(workspaceRoot) : []))
    .then((n) => n > 0 && log("sandbox networks of removed workspaces deleted", { count: n }))
    .catch((e: unknown) => log("sandbox networks: sweep failed", { error: String(e) }));
  const leftovers = new LeftoverSweep({
    workspaceRoot,
    everyMs: options.leftoverSweepMs ?? 30_000,
    removeFolder: (folder) => workspaces.removeWithProcesses(folder),
    log,
  });
  warm =
    (options.warmAgents ?? 0) > 0 && builtin
      ? new WarmPool({
          root: workspaceRoot,
          size: options.warmAgents ?? 0,
          after: leftovers.first,
          log,
          spawn: (folder) => spawnWarmAgent(launcher, folder),
          discard: async (folder) => {
            await workspaces.removeWithProcesses(folder);
          },
        })
      : null;
  const runtime = new ProcessSandboxRuntime({
    workspaceRoot,
    isolation,
    network,
    networkReport,
    limitsReport: limits.report,
    procs,
    workspaces,
    launcher,
    warm,
    leftovers,
    diskWatch: limits.watchDisks
      ? new DiskWatch({
          workspaceRoot,
          procs,
          diskBytes: limits.diskBytes,
          everyMs: limits.diskWatchMs,
          stopped: (folder, reason) => workspaces.stoppedOverSize(folder, reason),
          log,
        })
      : null,
    cgroups: limits.cgroups,
    singleUserFile: join(workspaceRoot, ".single-user"),
    ownUser,
    stopGraceMs,
    healthPollMs: options.healthPollMs ?? 5,
    probeTimeoutMs: options.probeTimeoutMs ?? 1000,
    log,
  });
  warm?.fill();
  return runtime;
}
