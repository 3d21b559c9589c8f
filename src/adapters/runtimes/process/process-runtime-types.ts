/**
 * The process runtime's options and what it reports (its isolation, limits and network, for the server's start
 * log): the types its jobs share, apart from process-runtime.ts, which composes the jobs, so that none of them
 * imports the module that builds it.
 */
import type { RuntimeHandle, SandboxRuntime } from "../../../ports/sandbox-runtime.ts";
import type { IsolationSetting } from "./bwrap.ts";
import type { SandboxLimits } from "./sandbox-limits.ts";
import type { NetworkSetting } from "./sandbox-network.ts";

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
  /** The sandboxes' CPU priority against the service's. */
  priority: string;
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
