/**
 * The Node binary the built-in agent runs from in an isolated sandbox as root: a copy only root can read (mode
 * 0711). The kernel makes a process that executes a file it cannot read non-dumpable, and the /proc files of a
 * non-dumpable process (environ, mem, maps) belong to root, and ptrace needs CAP_SYS_PTRACE: the commands the agent
 * runs, which share its uid, can no longer read its memory (the session key, the model key, the conversation's
 * secrets) where the host lets a process trace another of its uid (no Yama, or ptrace_scope 0). Commands it starts
 * execute readable binaries, so they are ordinary processes.
 */
import { chmodSync, copyFileSync, mkdirSync, renameSync, statSync } from "node:fs";
import { join } from "node:path";

/**
 * `<dir>/node`, an execute-only copy of `source` made (again) when missing or older than `source`; null when it
 * cannot be made (the caller then runs `source`, and the start log says the agent's memory is readable).
 */
export function executeOnlyCopy(source: string, dir: string): string | null {
  const target = join(dir, "node");
  try {
    const src = statSync(source);
    try {
      const dst = statSync(target);
      if (dst.size === src.size && dst.mtimeMs >= src.mtimeMs && (dst.mode & 0o777) === 0o711) return target;
    } catch {
      // not made yet
    }
    mkdirSync(dir, { recursive: true, mode: 0o711 });
    chmodSync(dir, 0o711);
    // Copied beside and renamed into place: an agent starting meanwhile never executes a half-written file.
    const part = `${target}.${process.pid}.part`;
    copyFileSync(source, part);
    chmodSync(part, 0o711);
    renameSync(part, target);
    return target;
  } catch {
    return null;
  }
}
