// Mounts a test may leave behind: process sandboxes' workspaces are loop-mounted file systems where the host allows
// (src/adapters/runtimes/process/workspace-disk.ts). A test that kills a server and deletes its DATA_DIR without deleting its
// sandboxes first leaves them mounted: these unmount them (lazily), so that the folder can be deleted.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";

/** Mount points at or below `dir`, deepest first. */
export function mountsUnder(dir: string): string[] {
  const root = dir.replace(/\/+$/, "");
  let text = "";
  try {
    text = readFileSync("/proc/self/mountinfo", "utf8");
  } catch {
    return [];
  }
  return text
    .split("\n")
    .map((line) => line.split(" ")[4] ?? "")
    .filter((p) => p === root || p.startsWith(`${root}/`))
    .sort((a, b) => b.length - a.length);
}

/** Unmounts (lazily) every mount point at or below `dir`; returns them. */
export function unmountUnder(dir: string): string[] {
  const found = mountsUnder(dir);
  for (const path of found) spawnSync("umount", ["-l", path], { stdio: "ignore" });
  return found;
}
