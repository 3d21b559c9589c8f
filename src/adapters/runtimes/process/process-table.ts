import { readlinkSync } from "node:fs";
import { isAbsolute, join, relative, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { descendantsOf, type ProcStat, readProcStat, signal } from "../../../../agent/shared/proc-tree.ts";
import { failedPrecondition } from "../../../core/errors.ts";
import type { RuntimeHandle } from "../../../ports/sandbox-runtime.ts";
import type { NetLease } from "./sandbox-network.ts";
import { WORKSPACE_FOLDER } from "./warm-agents.ts";

/** How long pause/resume wait for the kernel to report the new state of the group leader. */
const SIGNAL_SETTLE_MS = 200;

/** What a process sandbox's handle holds (RuntimeHandle.data). */
export interface ProcessHandleData {
  pid: number;
  /** The process group (the sandbox leads its own group: pgid = pid). */
  pgid: number;
  port: number;
  workspace: string;
  /** Start time of the pid in clock ticks after boot (/proc/<pid>/stat field 22): detects pid reuse. */
  startTimeTicks: number;
  /** How it runs: under bwrap as uid `uid` (absent: a plain child process of the server's user). */
  isolation?: "bwrap";
  uid?: number;
  /** The sandbox id, when the workspace folder has another name (a sandbox started from a warm agent). */
  sandboxId?: string;
  /** Its network, when it has one of its own (see sandbox-network.ts). */
  net?: NetLease;
}

/** A warm agent as this runtime keeps it: its process and the stdin its claim is written to. */

/** A sandbox process this server started (its own child): how it exited, once it did. */
export interface ChildProcessEntry {
  handle: RuntimeHandle;
  startTimeTicks: number;
  exit: { code: number | null; signal: NodeJS.Signals | null } | null;
}

/**
 * The sandbox processes of one runtime as the kernel shows them: this server's own children by pid, the live
 * process behind a handle (pid reuse detected by its start time), its workspace folder, signals to a sandbox's
 * group and descendants and the wait until they take effect, the wait for a leader to be gone, and stopping a
 * sandbox's processes.
 */
export class ProcessTable<C extends ChildProcessEntry> {
  /** This server's own sandbox processes, by pid. */
  readonly children = new Map<number, C>();
  readonly #workspaceRoot: string;
  /** The bwrap binary (its processes are sandbox monitors), or null without bubblewrap. */
  readonly #bwrap: string | null;

  constructor(workspaceRoot: string, bwrap: string | null) {
    this.#workspaceRoot = workspaceRoot;
    this.#bwrap = bwrap;
  }

  /** This server's own child behind the handle (undefined for another server's process or a reused pid). */
  own(data: ProcessHandleData): C | undefined {
    const own = this.children.get(data.pid);
    return own && own.startTimeTicks === data.startTimeTicks ? own : undefined;
  }

  /** The live process behind the handle, or null when it is gone or the pid now belongs to another process. */
  live(data: ProcessHandleData): ProcStat | null {
    if (this.own(data)?.exit) return null;
    const stat = readProcStat(data.pid);
    return stat && stat.startTime === data.startTimeTicks ? stat : null;
  }

  workspaceOf(data: ProcessHandleData): string | null {
    // The path comes from stored data: only ever delete a direct child of the workspace root.
    const rel = relative(this.#workspaceRoot, resolve(data.workspace));
    return rel !== "" && !rel.includes("/") && !isAbsolute(rel) && WORKSPACE_FOLDER.test(rel)
      ? join(this.#workspaceRoot, rel)
      : null;
  }

  /** True when the process runs the bwrap binary (a monitor of a sandbox's namespaces). */
  isBwrapMonitor(pid: number): boolean {
    if (this.#bwrap === null) return false;
    try {
      return readlinkSync(`/proc/${pid}/exe`) === this.#bwrap;
    } catch {
      return false;
    }
  }

  /** Signals the sandbox's group and every descendant outside it. */
  signal(data: ProcessHandleData, sig: NodeJS.Signals): void {
    signal(-data.pgid, sig);
    for (const pid of descendantsOf(data.pid)) signal(pid, sig);
  }

  /**
   * Waits until the leader and every descendant satisfy `done` (or are gone), at most SIGNAL_SETTLE_MS: a signal
   * to a process running on another CPU takes effect asynchronously, so "paused" is only reported once it is.
   */
  async settle(data: ProcessHandleData, done: (state: string) => boolean): Promise<void> {
    const deadline = Date.now() + SIGNAL_SETTLE_MS;
    const settled = (state: string | undefined) =>
      state === undefined || state === "Z" || state === "X" || done(state);
    for (;;) {
      const stat = this.live(data);
      if (!stat) return;
      if (settled(stat.state) && descendantsOf(data.pid).every((pid) => settled(readProcStat(pid)?.state)))
        return;
      if (Date.now() >= deadline) return;
      await sleep(1);
    }
  }

  requireLive(handle: RuntimeHandle): ProcessHandleData {
    const data = parseHandleData(handle.data);
    const stat = data && this.live(data);
    if (!data || !stat || stat.state === "Z" || stat.state === "X") {
      throw failedPrecondition("the sandbox process is not running");
    }
    return data;
  }

  /**
   * True once the leader is gone: for our own child, once its exit was seen (so that it is reaped, not a zombie
   * still visible in /proc); for another's, when it vanished, was reused, or is a zombie its parent has not reaped.
   */
  leaderGone(data: ProcessHandleData): boolean {
    const own = this.own(data);
    if (own) return own.exit !== null;
    const stat = this.live(data);
    return stat === null || stat.state === "Z" || stat.state === "X";
  }

  async waitLeaderGone(data: ProcessHandleData, timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (!this.leaderGone(data)) {
      if (Date.now() >= deadline) return false;
      await sleep(5);
    }
    return true;
  }

  /**
   * Stops a live sandbox's processes: SIGTERM (and SIGCONT, so a paused sandbox can act on it) to its group and
   * its descendants, SIGKILL after `graceMs` and to whatever is left. Whether the leader ended within the grace.
   */
  async stop(data: ProcessHandleData, graceMs: number): Promise<boolean> {
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
      data.isolation === "bwrap" ? (pid: number) => this.isBwrapMonitor(pid) : undefined,
    );
    signal(-data.pgid, "SIGCONT");
    signalDescendants("SIGCONT");
    const graceful = await this.waitLeaderGone(data, graceMs);
    // A group id is not reused while the group has members, so members left behind are still ours.
    if (!graceful || signal(-data.pgid, 0)) signal(-data.pgid, "SIGKILL");
    signalDescendants("SIGKILL");
    if (!graceful) await this.waitLeaderGone(data, 1000);
    return graceful;
  }
}

/** The handle's data, checked (it comes from storage), or null when it is not a process sandbox's. */
export function parseHandleData(data: Record<string, unknown>): ProcessHandleData | null {
  const { pid, pgid, port, workspace, startTimeTicks, isolation, uid, sandboxId, net } = data;
  const isInt = (v: unknown): v is number => typeof v === "number" && Number.isInteger(v) && v > 0;
  if (
    !isInt(pid) ||
    !isInt(pgid) ||
    !isInt(port) ||
    !isInt(startTimeTicks) ||
    typeof workspace !== "string"
  ) {
    return null;
  }
  return {
    pid,
    pgid,
    port,
    workspace,
    startTimeTicks,
    ...(isolation === "bwrap" && isInt(uid) ? { isolation: "bwrap" as const, uid } : {}),
    ...(typeof sandboxId === "string" && WORKSPACE_FOLDER.test(sandboxId) ? { sandboxId } : {}),
    ...(isNetLease(net) ? { net } : {}),
  };
}

function isNetLease(v: unknown): v is NetLease {
  if (typeof v !== "object" || v === null) return false;
  const { index, name, hostIf, address, gateway } = v as Record<string, unknown>;
  const addr = (a: unknown): boolean => typeof a === "string" && /^\d{1,3}(\.\d{1,3}){3}$/.test(a);
  return (
    typeof index === "number" &&
    typeof name === "string" &&
    typeof hostIf === "string" &&
    addr(address) &&
    addr(gateway)
  );
}

/**
 * A listening loopback socket and its descriptor, to pass to the agent as fd 3; null when the descriptor cannot be
 * read (the agent then binds the port itself). Node has no public accessor for a server's descriptor, so its
 * handle's `fd` is read, and anything but a descriptor number falls back to the agent binding the port.
 */
