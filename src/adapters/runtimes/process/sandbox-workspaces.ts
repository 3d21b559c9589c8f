/**
 * Removing process sandboxes' workspace folders, with everything a workspace holds on the host: the uid claimed
 * for it, its loop disk, its network and its cgroup (what is still running in it is killed first). And why a
 * sandbox ended, as its workspace tells: stopped for passing its size (see disk-watch.ts), or killed by its
 * memory limit (its cgroup's OOM count). One job of the process runtime (process-runtime.ts).
 */
import { rmSync } from "node:fs";
import { join } from "node:path";
import { signal } from "../../../../agent/shared/proc-tree.ts";
import type { ProcessTable } from "./process-table.ts";
import type { RuntimeLimits } from "./runtime-limits.ts";
import type { OwnChild } from "./sandbox-launch.ts";
import type { SandboxNetwork } from "./sandbox-network.ts";
import { stopSandboxProcesses } from "./sandbox-processes.ts";
import type { SandboxUids } from "./sandbox-uids.ts";

export interface SandboxWorkspacesOptions {
  workspaceRoot: string;
  /** The sandboxes' cgroups, loop disks and memory limit. */
  limits: Pick<RuntimeLimits, "cgroups" | "loopDisks" | "limits">;
  uids: Pick<SandboxUids, "release">;
  network: SandboxNetwork | null;
  procs: ProcessTable<OwnChild>;
  /** How long stopping a workspace's processes waits after SIGTERM before SIGKILL. */
  stopGraceMs: number;
  log: (msg: string, data?: object) => void;
}

/** The workspace folders of one runtime's sandboxes: their removal, and why their sandbox ended. */
export class SandboxWorkspaces {
  readonly #o: SandboxWorkspacesOptions;
  /** Workspaces stopped for passing their size, with the reason (see failureReason). */
  readonly #diskStops = new Map<string, string>();

  constructor(options: SandboxWorkspacesOptions) {
    this.#o = options;
  }

  /**
   * Deletes the workspace folder `folder`, giving back the uid claimed for it. What is left in the sandbox's cgroup
   * (a process that escaped its group) is killed first, so that nothing of the sandbox can swap a folder for a
   * symlink while root deletes the tree; a loop-mounted workspace is unmounted before, leaving an empty folder.
   * Settles once its loop disk is detached for good (whoever still held it killed: LoopDisks.remove).
   */
  remove(folder: string): Promise<void> {
    const { workspaceRoot, uids, network, log } = this.#o;
    const { cgroups, loopDisks } = this.#o.limits;
    for (const pid of cgroups?.pids(folder) ?? []) signal(pid, "SIGKILL");
    uids.release(folder);
    const detached = loopDisks?.remove(join(workspaceRoot, folder), folder).then(({ killed, detached }) => {
      if (killed.length > 0)
        log("sandbox disk: processes still holding it were killed before it was detached", {
          folder,
          pids: killed,
        });
      if (!detached) log("sandbox disk: still attached after its removal", { folder });
    });
    rmSync(join(workspaceRoot, folder), { recursive: true, force: true });
    this.#diskStops.delete(folder);
    const released = network
      ?.release(folder)
      .catch((e: unknown) => log("sandbox network could not be removed", { folder, error: String(e) }));
    if (cgroups) {
      for (const pid of cgroups.pids(folder)) signal(pid, "SIGKILL");
      if (!cgroups.remove(folder)) setTimeout(() => this.#removeCgroupLater(folder, 10), 50).unref();
    }
    return Promise.all([detached, released]).then(() => {});
  }

  /** Stops the processes that carry the workspace folder `folder` and removes it; how many it stopped. */
  async removeWithProcesses(folder: string): Promise<number> {
    const workspace = join(this.#o.workspaceRoot, folder);
    const stopped = await stopSandboxProcesses(workspace, this.#o.stopGraceMs);
    const { procs } = this.#o;
    for (const [pid, own] of procs.children)
      if (own.handle.data.workspace === workspace) procs.children.delete(pid);
    await this.remove(folder);
    return stopped;
  }

  /**
   * Clears what the sandbox of `folder` left before it is started again on the same workspace: whatever is left in
   * its cgroup is killed and the cgroup made anew (its OOM count then tells about the new agent), and a stop for
   * its size is forgotten.
   */
  reset(folder: string): void {
    const { cgroups } = this.#o.limits;
    for (const pid of cgroups?.pids(folder) ?? []) signal(pid, "SIGKILL");
    cgroups?.remove(folder);
    this.#diskStops.delete(folder);
  }

  /** Records that the sandbox of `folder` was stopped for passing its size, and why. */
  stoppedOverSize(folder: string, reason: string): void {
    this.#diskStops.set(folder, reason);
  }

  /** Why the sandbox of `folder` ended when the workspace tells (its size, its memory limit), else null. */
  failureReason(folder: string): string | null {
    const stopped = this.#diskStops.get(folder);
    if (stopped) return stopped;
    const { cgroups, limits } = this.#o.limits;
    if (!cgroups) return null;
    return cgroups.oomKilled(folder) ? `killed by its memory limit (${limits.memoryBytes} bytes)` : null;
  }

  /** Retries removing a cgroup whose last processes were still exiting. */
  #removeCgroupLater(folder: string, tries: number): void {
    const { cgroups } = this.#o.limits;
    if (!cgroups) return;
    for (const pid of cgroups.pids(folder)) signal(pid, "SIGKILL");
    if (cgroups.remove(folder)) return;
    if (tries > 0) setTimeout(() => this.#removeCgroupLater(folder, tries - 1), 200).unref();
    else this.#o.log("sandbox cgroup could not be removed", { folder });
  }
}
