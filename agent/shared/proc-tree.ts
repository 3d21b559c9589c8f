/**
 * Reading Linux `/proc`: one process's status line and the tree of processes below a pid.
 * Shared by the agent (to kill a timed-out command's whole tree) and the process runtime (to signal a sandbox's
 * processes and to recognise its pid after a server restart). Only Node built-ins: the agent folder is copied
 * into container images on its own, and the service imports this module without loading the agent.
 */
import { closeSync, openSync, readdirSync, readSync } from "node:fs";

/** The fields of `/proc/<pid>/stat` this project uses. */
export interface ProcStat {
  pid: number;
  /** One letter: R running, S sleeping, D disk wait, T stopped, t traced, Z zombie, X dead, I idle. */
  state: string;
  ppid: number;
  /** Process group id. */
  pgrp: number;
  /** Clock ticks after boot when the process started (field 22): with the pid, it identifies a process. */
  startTime: number;
  /** A zombie's wait status (field 52, as waitpid reports it: exit code << 8 | signal; 0 = exited with 0); else 0. */
  exitStatus: number;
}

/**
 * One reusable buffer for stat lines (at most ~1 KiB). `readFileSync(path, "latin1")` would allocate a 64 KiB buffer
 * per call for a /proc file (its size reads as 0), and a scan of every process reads hundreds of them: tens of MiB
 * of short-lived external memory per pause or removal, which the server's RSS kept after the collection.
 */
const statBuffer = Buffer.allocUnsafe(4096);

/** Parses `/proc/<pid>/stat`; null when the process does not exist (or /proc is not there). */
export function readProcStat(pid: number): ProcStat | null {
  let text: string;
  let fd: number;
  try {
    fd = openSync(`/proc/${pid}/stat`, "r");
  } catch {
    return null;
  }
  try {
    const length = readSync(fd, statBuffer, 0, statBuffer.length, 0);
    text = statBuffer.toString("latin1", 0, length);
  } catch {
    return null;
  } finally {
    closeSync(fd);
  }
  return parseProcStat(pid, text);
}

/**
 * One reusable buffer for the other /proc files read per process (`environ`, `cmdline`), for the same reason: a
 * delete looks for processes carrying the sandbox's workspace by reading both files of every process on the host,
 * which with `readFileSync` made hundreds of short-lived 64 KiB buffers per delete; the allocator kept the freed
 * memory, and the server's RSS stayed ~20 MiB higher after a series of sandbox deletes. A file larger than it
 * (an environment above 64 KiB) is read into a buffer of its own.
 */
const PROC_TEXT_BYTES = 64 * 1024;
const textBuffer = Buffer.allocUnsafeSlow(PROC_TEXT_BYTES);

/** The whole of a /proc file as latin1 text (their sizes read as 0, so it is read to its end); null if unreadable. */
export function readProcText(path: string): string | null {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch {
    return null;
  }
  try {
    let buffer = textBuffer;
    let length = 0;
    for (;;) {
      if (length === buffer.length) {
        const bigger = Buffer.allocUnsafeSlow(buffer.length * 2);
        buffer.copy(bigger, 0, 0, length);
        buffer = bigger;
      }
      const n = readSync(fd, buffer, length, buffer.length - length, null);
      if (n === 0) break;
      length += n;
    }
    return buffer.toString("latin1", 0, length);
  } catch {
    return null;
  } finally {
    closeSync(fd);
  }
}

/** Parses one stat line. The command name (field 2) may contain spaces and parentheses: split after the last ")". */
export function parseProcStat(pid: number, text: string): ProcStat | null {
  const close = text.lastIndexOf(")");
  if (close < 0) return null;
  // Fields from 3 on: state(3) ppid(4) pgrp(5) session(6) ... starttime(22) ... exit_code(52).
  const f = text.slice(close + 2).split(" ");
  const state = f[0];
  const ppid = Number(f[1]);
  const pgrp = Number(f[2]);
  const startTime = Number(f[19]);
  const exitStatus = Number(f[49] ?? 0);
  if (
    state === undefined ||
    !Number.isFinite(ppid) ||
    !Number.isFinite(pgrp) ||
    !Number.isFinite(startTime)
  ) {
    return null;
  }
  return { pid, state, ppid, pgrp, startTime, exitStatus: Number.isFinite(exitStatus) ? exitStatus : 0 };
}

/** Every process visible in /proc (empty when there is no /proc). */
export function listProcesses(): ProcStat[] {
  let names: string[];
  try {
    names = readdirSync("/proc");
  } catch {
    return [];
  }
  const out: ProcStat[] = [];
  for (const name of names) {
    const pid = Number(name);
    if (!Number.isInteger(pid) || pid <= 0) continue;
    const stat = readProcStat(pid);
    if (stat) out.push(stat);
  }
  return out;
}

/** Pids of all descendants of `pid` (children first, breadth-first), from one snapshot of /proc. */
export function descendantsOf(pid: number, processes: readonly ProcStat[] = listProcesses()): number[] {
  const children = new Map<number, number[]>();
  for (const p of processes) {
    const list = children.get(p.ppid);
    if (list) list.push(p.pid);
    else children.set(p.ppid, [p.pid]);
  }
  const out: number[] = [];
  const queue = [pid];
  for (let i = 0; i < queue.length; i++) {
    for (const child of children.get(queue[i] ?? -1) ?? []) {
      out.push(child);
      queue.push(child);
    }
  }
  return out;
}

/**
 * Sends a signal (0: only checks existence) to a pid, or to a process group when negative, ignoring targets that
 * are already gone (ESRCH). Returns false when nothing was there.
 */
export function signal(pid: number, sig: NodeJS.Signals | 0): boolean {
  try {
    process.kill(pid, sig);
    return true;
  } catch (e: unknown) {
    if ((e as NodeJS.ErrnoException).code === "ESRCH") return false;
    throw e;
  }
}

/**
 * Kills a process and everything below it: stops the tree first so that nothing forks or gets re-parented
 * while it is being collected, then SIGKILLs it.
 */
export function killTree(pid: number): void {
  const stopped = new Set<number>([pid]);
  signal(pid, "SIGSTOP");
  for (let round = 0; round < 3; round++) {
    const fresh = descendantsOf(pid).filter((p) => !stopped.has(p));
    if (fresh.length === 0) break;
    for (const p of fresh) {
      signal(p, "SIGSTOP");
      stopped.add(p);
    }
  }
  for (const p of stopped) signal(p, "SIGKILL");
}
