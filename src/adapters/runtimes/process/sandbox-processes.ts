/**
 * Finding a process sandbox's processes without its handle, by what they carry: the sandbox's workspace folder as
 * working directory, as HOME or WORKSPACE_DIR in their environment, or as an argument of its own (bubblewrap's
 * `--bind <workspace> <workspace>`), plus everything below those processes. Used when a record lost its handle
 * (a crash between spawning and saving it): the workspace folder is named by the sandbox id, or recorded for it in
 * `.claimed/` (a sandbox started from a warm agent, see warm-agents.ts).
 */
import { readlinkSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import {
  descendantsOf,
  listProcesses,
  type ProcStat,
  readProcStat,
  readProcText,
  signal,
} from "../../../../agent/shared/proc-tree.ts";

/** True when the process carries `workspace` (see the module comment); unreadable details count as no. */
function carriesWorkspace(pid: number, workspace: string): boolean {
  const inside = (path: string): boolean => path === workspace || path.startsWith(`${workspace}/`);
  try {
    if (inside(readlinkSync(`/proc/${pid}/cwd`))) return true;
  } catch {
    // gone, or not ours to read
  }
  // Read into one reusable buffer (readProcText): this runs for every process on the host.
  const env = readProcText(`/proc/${pid}/environ`);
  if (
    env
      ?.split("\0")
      .some((e) => e === `HOME=${workspace}` || (e.startsWith("WORKSPACE_DIR=") && inside(e.slice(14))))
  )
    return true;
  return readProcText(`/proc/${pid}/cmdline`)?.split("\0").includes(workspace) ?? false;
}

/** The processes of the sandbox whose workspace is `workspace` and their descendants; never this process. */
export function findSandboxProcesses(workspace: string): ProcStat[] {
  const processes = listProcesses();
  const own = new Set([process.pid, process.ppid]);
  const found = new Map<number, ProcStat>();
  for (const p of processes) {
    if (own.has(p.pid) || found.has(p.pid) || !carriesWorkspace(p.pid, workspace)) continue;
    found.set(p.pid, p);
    for (const d of descendantsOf(p.pid, processes)) {
      const stat = processes.find((q) => q.pid === d);
      if (stat && !own.has(d)) found.set(d, stat);
    }
  }
  return [...found.values()];
}

const alive = (p: ProcStat): boolean => {
  const now = readProcStat(p.pid);
  return now !== null && now.startTime === p.startTime && now.state !== "Z" && now.state !== "X";
};

/**
 * Stops the sandbox's processes: SIGTERM (and SIGCONT, for a paused one) to each and to the groups they lead,
 * SIGKILL to what is left after `graceMs`. Resolves with how many processes were found.
 */
export async function stopSandboxProcesses(workspace: string, graceMs: number): Promise<number> {
  const found = findSandboxProcesses(workspace);
  if (found.length === 0) return 0;
  const ownGroup = readProcStat(process.pid)?.pgrp;
  const send = (sig: NodeJS.Signals): void => {
    for (const p of found) {
      if (!alive(p)) continue;
      signal(p.pid, sig);
      if (p.pgrp === p.pid && p.pgrp !== ownGroup) signal(-p.pgrp, sig);
    }
  };
  send("SIGTERM");
  send("SIGCONT");
  const deadline = Date.now() + graceMs;
  while (found.some(alive) && Date.now() < deadline) await sleep(10);
  send("SIGKILL");
  return found.length;
}
