import { expect } from "vitest";
import { readProcText } from "../../agent/shared/proc-tree.ts";
import { findSandboxProcesses } from "../../src/adapters/runtimes/process/sandbox-processes.ts";

/** A process's command line, its arguments joined by spaces ("" once the process is gone). */
export const cmdline = (pid: number): string =>
  readProcText(`/proc/${pid}/cmdline`)?.replaceAll("\0", " ") ?? "";

/**
 * The Node processes running the built-in agent's main.ts in a process sandbox's `workspace`, not the wrappers
 * that start it (bwrap, prlimit, setpriv, sh).
 */
export const agentProcesses = (workspace: string) =>
  findSandboxProcesses(workspace).filter((p) => {
    const argv = cmdline(p.pid);
    return /agent\/main\.ts/.test(argv) && !/^\S*(bwrap|prlimit|setpriv|sh)\s/.test(argv);
  });

/** kill -9 of the workspace's agent process, which must be exactly one. */
export function killAgent(workspace: string): void {
  const agents = agentProcesses(workspace);
  expect(agents).toHaveLength(1);
  for (const p of agents) process.kill(p.pid, "SIGKILL");
}
