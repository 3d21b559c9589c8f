import { existsSync } from "node:fs";
import { join } from "node:path";
import { DEFAULT_PATH, findExecutable } from "./bwrap.ts";
import type {
  ProcessIsolation,
  ProcessLimitsReport,
  ProcessRuntimeOptions,
} from "./process-runtime-types.ts";
import { SandboxCgroups } from "./sandbox-limits.ts";
import { LoopDisks } from "./workspace-disk.ts";

/** How the limits of process sandboxes are enforced on this host, found once when the runtime is made. */
export interface RuntimeLimits {
  limits: NonNullable<ProcessRuntimeOptions["limits"]>;
  /** The sandboxes' cgroups, or null where cgroups are off or unavailable. */
  cgroups: SandboxCgroups | null;
  /** The prlimit executable (rlimits where cgroups cannot limit), or null. */
  prlimit: string | null;
  /** Workspace size (0: none). */
  diskBytes: number;
  /** Loop-mounted workspaces of that size, or null. */
  loopDisks: LoopDisks | null;
  /** Whether workspace sizes are watched (a size without loop devices). */
  watchDisks: boolean;
  diskWatchMs: number;
  diskReserveBytes: number;
  /** What goes before a sandbox's argv to run it at a lower CPU priority (`nice -n N`), or nothing. */
  priority: string[];
  /** The rlimits every sandbox gets through prlimit, or null. */
  rlimits: { nproc?: number; asBytes?: number; fsizeBytes?: number } | null;
  /** What enforces each limit, for the startup log. */
  report: ProcessLimitsReport;
}

/**
 * Finds how each asked limit is enforced here — cgroups (v2 or v1), else rlimits through prlimit, loop-mounted or
 * watched workspaces — and clears what removed sandboxes left of them (loop images, cgroups).
 */
export function setUpLimits(
  options: ProcessRuntimeOptions,
  host: {
    workspaceRoot: string;
    asRoot: boolean;
    isolation: ProcessIsolation;
    log: (msg: string, data?: Record<string, unknown>) => void;
  },
): RuntimeLimits {
  const { workspaceRoot, asRoot, isolation, log } = host;
  const limits = options.limits ?? {};
  const cgroupsOrWhy =
    options.cgroups === "off" ? "cgroups are off (cgroups: off)" : SandboxCgroups.open(workspaceRoot, limits);
  const cgroups = typeof cgroupsOrWhy === "string" ? null : cgroupsOrWhy;
  const prlimit = findExecutable("prlimit", options.searchPath ?? DEFAULT_PATH);
  const niceness = limits.nice ?? 0;
  const niceBin = niceness > 0 ? findExecutable("nice", options.searchPath ?? DEFAULT_PATH) : null;
  const priority = niceBin === null ? [] : [niceBin, "-n", String(niceness)];
  /**
   * Without cgroups: RLIMIT_NPROC counts the processes of a uid, so it bounds a sandbox only when the sandbox has a
   * uid of its own (isolated, as root); RLIMIT_AS bounds each process's address space.
   */
  const diskBytes = options.diskBytes ?? 0;
  const loopOrWhy =
    diskBytes <= 0
      ? "no workspace size asked"
      : options.disk === "watch"
        ? "watching asked (disk: watch)"
        : LoopDisks.open(workspaceRoot, diskBytes, options.searchPath ?? DEFAULT_PATH);
  const loopDisks = typeof loopOrWhy === "string" ? null : loopOrWhy;
  const watchDisks = diskBytes > 0 && loopDisks === null;
  const diskWatchMs = options.diskWatchMs ?? 5000;
  const diskReserveBytes = options.diskReserveBytes ?? 1024 * 1024 * 1024;
  const rlimits =
    prlimit !== null && (cgroups === null || watchDisks)
      ? {
          ...(cgroups === null && limits.pids && asRoot && isolation.mode === "bwrap"
            ? { nproc: limits.pids }
            : {}),
          ...(cgroups === null && limits.memoryBytes ? { asBytes: limits.memoryBytes } : {}),
          // Watched workspaces: no single file may pass the size between two measurements.
          ...(watchDisks ? { fsizeBytes: diskBytes } : {}),
        }
      : null;
  const how = (asked: unknown, controller: "pids" | "memory" | "cpu", rlimit: unknown): string =>
    !asked
      ? "none asked"
      : cgroups?.controllers.includes(controller)
        ? `cgroup v${cgroups.version}`
        : rlimit
          ? `rlimit ${controller === "pids" ? "RLIMIT_NPROC (per sandbox uid)" : `RLIMIT_AS (per process${(limits.memoryBytes ?? 0) < 1536 * 1024 * 1024 ? "; below 1536 MB the built-in agent cannot start" : ""})`}`
          : `not enforced (${typeof cgroupsOrWhy === "string" ? cgroupsOrWhy : "no cgroup"}${prlimit ? "" : "; prlimit not found"})`;
  const bwrapped = isolation.mode === "bwrap";
  const limitsReport: ProcessLimitsReport = {
    pids: how(limits.pids, "pids", rlimits?.nproc),
    memory: how(limits.memoryBytes, "memory", rlimits?.asBytes),
    cpu: how(limits.cpus, "cpu", false),
    tmp: bwrapped
      ? limits.tmpBytes
        ? `tmpfs of ${limits.tmpBytes} bytes`
        : "tmpfs without size"
      : "host /tmp",
    shm: bwrapped
      ? limits.shmBytes
        ? `tmpfs of ${limits.shmBytes} bytes`
        : "tmpfs without size"
      : "host /dev/shm",
    nestedUserNamespaces: bwrapped ? "refused (bwrap --disable-userns)" : "allowed (no isolation)",
    priority:
      niceness <= 0
        ? "the service's (SANDBOX_NICE=0)"
        : niceBin === null
          ? "the service's (nice not found)"
          : `nice ${niceness}, below the service's`,
    disk: loopDisks
      ? `loop-mounted ext4 of ${diskBytes} bytes per workspace`
      : watchDisks
        ? `watched every ${diskWatchMs} ms (du), sandbox stopped past ${diskBytes} bytes, RLIMIT_FSIZE per file (${loopOrWhy})`
        : "no limit",
  };
  loopDisks?.sweep(workspaceRoot);
  const sweptCgroups = cgroups?.sweep((folder) => existsSync(join(workspaceRoot, folder))) ?? 0;
  if (sweptCgroups > 0) log("cgroups of removed sandboxes removed", { count: sweptCgroups });
  return {
    limits,
    cgroups,
    prlimit,
    diskBytes,
    loopDisks,
    watchDisks,
    diskWatchMs,
    diskReserveBytes,
    rlimits,
    priority,
    report: limitsReport,
  };
}
