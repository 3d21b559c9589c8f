/**
 * Resource limits of process sandboxes, enforced by the kernel: a cgroup per sandbox (cgroup v2, or the v1
 * controllers the host mounts) holding its pid, memory and CPU limits; where no cgroup can be written, per-process
 * rlimits instead (RLIMIT_NPROC, which counts a uid's processes and so bounds a sandbox only when it has a uid of its
 * own, i.e. when the server runs as root; RLIMIT_AS, which bounds each process, not the sandbox).
 *
 * A sandbox joins its cgroup before anything of it runs: its command is prefixed with a small shell step that
 * writes its own pid into each `cgroup.procs` and then execs the command (bwrap), so every process the sandbox
 * ever forks is born inside. Warm agents are started the same way, in a cgroup named after their workspace folder,
 * so a claimed one already has its limits and a claim costs nothing more.
 *
 * Cgroups live in `<controller mount>/<base>/<workspace folder>` (v1) or `<cgroup2 mount>/<base>/<folder>` (v2),
 * where `<base>` is `agent-workspace-<hash of the workspace root>`, so two servers with different roots on one host
 * never share one.
 */
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** The limits of every process sandbox (0 or undefined: none of that kind). */
export interface SandboxLimits {
  /** Processes (and threads) of one sandbox. */
  pids?: number;
  /** Memory of one sandbox in bytes (tmpfs pages it writes, /tmp and /dev/shm, count too). */
  memoryBytes?: number;
  /** CPUs of one sandbox (1.5: one and a half cores). */
  cpus?: number;
  /** Size of the sandbox's private /tmp and /dev/shm (bwrap tmpfs) in bytes. */
  tmpBytes?: number;
  shmBytes?: number;
  /**
   * Niceness of a sandbox's processes (1–19; 0 or unset: the service's own). Under contention the kernel then runs
   * the service, which answers every user and relays every agent's events, before the sandboxes' work.
   */
  nice?: number;
}

export type Controller = "pids" | "memory" | "cpu";

/** Where the cgroup filesystems are mounted, from /proc/self/mountinfo. */
interface CgroupMounts {
  v2: string | null;
  v1: Partial<Record<Controller, string>>;
}

function readMounts(mountinfo = "/proc/self/mountinfo"): CgroupMounts {
  const mounts: CgroupMounts = { v2: null, v1: {} };
  let text = "";
  try {
    text = readFileSync(mountinfo, "utf8");
  } catch {
    return mounts;
  }
  for (const line of text.split("\n")) {
    const [before, after] = line.split(" - ");
    if (!before || !after) continue;
    const mountPoint = before.split(" ")[4];
    const [fstype, , superOptions = ""] = after.split(" ");
    if (!mountPoint) continue;
    // The unified hierarchy: /sys/fs/cgroup on a v2 host; on a hybrid host it sits elsewhere (/sys/fs/cgroup/unified)
    // and usually holds no controller, so the v1 ones are used.
    if (fstype === "cgroup2" && (mounts.v2 === null || mountPoint === "/sys/fs/cgroup"))
      mounts.v2 = mountPoint;
    if (fstype === "cgroup") {
      const options = superOptions.split(",");
      for (const c of ["pids", "memory", "cpu"] as const)
        if (options.includes(c)) mounts.v1[c] ??= mountPoint;
    }
  }
  return mounts;
}

const write = (file: string, value: string): void => writeFileSync(file, value);

function readOr(file: string, otherwise: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch {
    return otherwise;
  }
}

/** The per-sandbox cgroups of one runtime instance. */
export class SandboxCgroups {
  readonly version: 1 | 2;
  /** Controller → the base folder of this workspace root's sandboxes. */
  readonly #bases: Map<Controller, string>;
  readonly #limits: SandboxLimits;

  private constructor(version: 1 | 2, bases: Map<Controller, string>, limits: SandboxLimits) {
    this.version = version;
    this.#bases = bases;
    this.#limits = limits;
  }

  get controllers(): Controller[] {
    return [...this.#bases.keys()];
  }

  /**
   * Sets up the base cgroups for the limits asked and checks a sandbox cgroup can be made and limited there; a
   * string says why not (then rlimits are the fallback).
   */
  static open(workspaceRoot: string, limits: SandboxLimits, mountinfo?: string): SandboxCgroups | string {
    const wanted: Controller[] = [];
    if (limits.pids) wanted.push("pids");
    if (limits.memoryBytes) wanted.push("memory");
    if (limits.cpus) wanted.push("cpu");
    if (wanted.length === 0) return "no limit asked";
    const name = `agent-workspace-${createHash("sha256").update(workspaceRoot).digest("hex").slice(0, 12)}`;
    const mounts = readMounts(mountinfo);
    try {
      let cgroups: SandboxCgroups;
      const v2Available = mounts.v2 ? readOr(join(mounts.v2, "cgroup.controllers"), "") : "";
      if (mounts.v2 && wanted.every((c) => v2Available.split(/\s+/).includes(c))) {
        const base = join(mounts.v2, name);
        mkdirSync(base, { recursive: true });
        // Controllers reach a cgroup only when enabled in every parent's subtree_control (root's included).
        const enable = wanted.map((c) => `+${c}`).join(" ");
        write(join(mounts.v2, "cgroup.subtree_control"), enable);
        write(join(base, "cgroup.subtree_control"), enable);
        cgroups = new SandboxCgroups(2, new Map(wanted.map((c) => [c, base])), limits);
      } else {
        const missing = wanted.filter((c) => !mounts.v1[c]);
        if (missing.length > 0) return `no cgroup controller ${missing.join(", ")} is mounted`;
        const bases = new Map<Controller, string>();
        for (const c of wanted) {
          const base = join(mounts.v1[c] as string, name);
          mkdirSync(base, { recursive: true });
          bases.set(c, base);
        }
        cgroups = new SandboxCgroups(1, bases, limits);
      }
      // A trial sandbox cgroup: the folders and limit files are writable.
      const probe = `probe-${process.pid}`;
      cgroups.create(probe);
      cgroups.remove(probe);
      return cgroups;
    } catch (e: unknown) {
      return `cgroups cannot be written: ${(e as Error).message}`;
    }
  }

  /** Makes the cgroup(s) of the sandbox in `folder` with its limits; returns the `cgroup.procs` files to join. */
  create(folder: string): string[] {
    const procs = new Set<string>();
    const { pids, memoryBytes, cpus } = this.#limits;
    for (const [controller, base] of this.#bases) {
      const dir = join(base, folder);
      mkdirSync(dir, { recursive: true });
      procs.add(join(dir, "cgroup.procs"));
      if (this.version === 2) {
        if (controller === "pids") write(join(dir, "pids.max"), String(pids));
        if (controller === "memory") {
          write(join(dir, "memory.max"), String(memoryBytes));
          // Swap would let a sandbox hold more than its limit.
          if (existsSync(join(dir, "memory.swap.max"))) write(join(dir, "memory.swap.max"), "0");
        }
        if (controller === "cpu") write(join(dir, "cpu.max"), `${Math.round((cpus ?? 1) * 100_000)} 100000`);
      } else {
        if (controller === "pids") write(join(dir, "pids.max"), String(pids));
        if (controller === "memory") {
          write(join(dir, "memory.limit_in_bytes"), String(memoryBytes));
          const memsw = join(dir, "memory.memsw.limit_in_bytes");
          if (existsSync(memsw)) write(memsw, String(memoryBytes));
        }
        if (controller === "cpu") {
          write(join(dir, "cpu.cfs_period_us"), "100000");
          write(join(dir, "cpu.cfs_quota_us"), String(Math.round((cpus ?? 1) * 100_000)));
        }
      }
    }
    return [...procs];
  }

  /** The pids in the sandbox's cgroup (empty when it has none or it is gone). */
  pids(folder: string): number[] {
    const found = new Set<number>();
    for (const base of new Set(this.#bases.values())) {
      try {
        for (const line of readFileSync(join(base, folder, "cgroup.procs"), "utf8").split("\n"))
          if (line) found.add(Number(line));
      } catch {
        // gone
      }
    }
    return [...found];
  }

  /** True when the kernel killed a process of the sandbox for its memory limit. */
  oomKilled(folder: string): boolean {
    const base = this.#bases.get("memory");
    if (!base) return false;
    const file = join(base, folder, this.version === 2 ? "memory.events" : "memory.oom_control");
    try {
      const match = /^oom_kill (\d+)$/m.exec(readFileSync(file, "utf8"));
      return match !== null && Number(match[1]) > 0;
    } catch {
      return false;
    }
  }

  /**
   * Removes the cgroups of workspace folders that are gone (a server died while removing a sandbox), killing what
   * is left in them; returns how many went. Trial cgroups of servers starting meanwhile are left alone.
   */
  sweep(exists: (folder: string) => boolean): number {
    let removed = 0;
    for (const base of new Set(this.#bases.values())) {
      let names: string[] = [];
      try {
        names = readdirSync(base, { withFileTypes: true })
          .filter((e) => e.isDirectory())
          .map((e) => e.name);
      } catch {
        continue;
      }
      for (const name of names) {
        if (name.startsWith("probe-") || exists(name)) continue;
        for (const pid of this.pids(name)) {
          try {
            process.kill(pid, "SIGKILL");
          } catch {
            // gone
          }
        }
        if (this.remove(name)) removed++;
      }
    }
    return removed;
  }

  /** Removes the base cgroups when no sandbox cgroup is left in them (at shutdown; else they stay, harmless). */
  release(): void {
    for (const base of new Set(this.#bases.values())) {
      try {
        rmdirSync(base);
      } catch {
        // sandboxes still run (they outlive the server), or already gone
      }
    }
  }

  /** Removes the sandbox's cgroups (they must be empty: call after its processes are gone); false if one stays. */
  remove(folder: string): boolean {
    let all = true;
    for (const base of new Set(this.#bases.values())) {
      try {
        rmdirSync(join(base, folder));
      } catch (e: unknown) {
        if ((e as NodeJS.ErrnoException).code !== "ENOENT") all = false;
      }
    }
    return all;
  }
}

/**
 * The argv that runs `argv` with the sandbox's limits: joins the cgroups (`procs` files) or, without cgroups,
 * applies rlimits through `prlimit`. A plain `sh` step, so the cost is one small exec. Either way no core file
 * (soft and hard RLIMIT_CORE 0, which nothing in the sandbox can raise): a command sharing the built-in agent's uid
 * could otherwise raise the agent's soft limit and crash it, and read its memory (its keys) in the core file.
 */
export function limitedArgv(
  argv: readonly string[],
  procs: readonly string[],
  rlimits: { nproc?: number; asBytes?: number; fsizeBytes?: number } | null,
  prlimit: string | null,
): string[] {
  const out = [...argv];
  if (prlimit && (rlimits || procs.length === 0)) {
    const flags: string[] = [];
    if (rlimits?.nproc) flags.push(`--nproc=${rlimits.nproc}`);
    if (rlimits?.asBytes) flags.push(`--as=${rlimits.asBytes}`);
    if (rlimits?.fsizeBytes) flags.push(`--fsize=${rlimits.fsizeBytes}`);
    out.unshift(prlimit, ...flags, "--core=0", "--");
  }
  if (procs.length === 0) return out;
  // Joins each cgroup (exit 125 when one cannot be joined: the sandbox never runs unlimited), then becomes argv.
  const script =
    'ulimit -c 0; n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"';
  return ["/bin/sh", "-c", script, "sh", String(procs.length), ...procs, ...out];
}
