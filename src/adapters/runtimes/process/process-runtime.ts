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
import { executeOnlyCopy } from "./agent-binary.ts";
import { DEFAULT_PATH, findTools, probeBwrap, runningAsRoot, type SandboxUser } from "./bwrap.ts";
import { CompileCache } from "./compile-cache.ts";
import { DiskWatch } from "./disk-watch.ts";
import { LeftoverSweep } from "./leftover-sweep.ts";
import type { ProcessRuntime, ProcessRuntimeOptions } from "./process-runtime-types.ts";
import { ProcessSandboxRuntime } from "./process-sandbox-runtime.ts";
import { ProcessTable } from "./process-table.ts";
import { setUpLimits } from "./runtime-limits.ts";
import { builtinAgentFiles, decideIsolation, openNetwork } from "./runtime-setup.ts";
import { type OwnChild, SandboxLauncher } from "./sandbox-launch.ts";
import { SandboxUids } from "./sandbox-uids.ts";
import { SandboxWorkspaces } from "./sandbox-workspaces.ts";
import { WarmPool } from "./warm-agents.ts";
import { spawnWarmAgent } from "./warm-claim.ts";

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
