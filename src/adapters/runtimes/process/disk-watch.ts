/**
 * Watched workspaces (a workspace size where loop-mounted disks are not available, see workspace-disk.ts): each
 * sandbox this runtime runs is measured in turn; one past its size is stopped (its processes killed; its files
 * stay until it is deleted) and the reason is recorded for failureReason. One job of the process runtime.
 */
import { relative } from "node:path";
import { descendantsOf, signal } from "../../../../agent/shared/proc-tree.ts";
import { type ProcessTable, parseHandleData } from "./process-table.ts";
import type { OwnChild } from "./sandbox-launch.ts";
import { usedBytes } from "./workspace-disk.ts";

export interface DiskWatchOptions {
  workspaceRoot: string;
  procs: ProcessTable<OwnChild>;
  /** Size of each workspace in bytes. */
  diskBytes: number;
  /** How often the workspaces are measured. */
  everyMs: number;
  /** Called with a stopped sandbox's workspace folder and why it was stopped. */
  stopped: (folder: string, reason: string) => void;
  log: (msg: string, data?: object) => void;
}

/** The periodic measure of this runtime's workspaces, from construction until {@link close}. */
export class DiskWatch {
  readonly #o: DiskWatchOptions;
  readonly #timer: NodeJS.Timeout;
  #measuring = false;

  constructor(options: DiskWatchOptions) {
    this.#o = options;
    this.#timer = setInterval(() => void this.#measure(), options.everyMs);
    this.#timer.unref();
  }

  close(): void {
    clearInterval(this.#timer);
  }

  async #measure(): Promise<void> {
    if (this.#measuring) return;
    this.#measuring = true;
    const { workspaceRoot, procs, diskBytes, log } = this.#o;
    try {
      for (const own of [...procs.children.values()]) {
        const data = parseHandleData(own.handle.data);
        if (own.exit || !data) continue;
        const folder = relative(workspaceRoot, data.workspace);
        const used = await usedBytes(data.workspace);
        if (used === null || used <= diskBytes || own.exit) continue;
        const reason = `stopped: its workspace holds ${Math.ceil(used / 1048576)} MB, more than its ${Math.floor(diskBytes / 1048576)} MB`;
        this.#o.stopped(folder, reason);
        log("sandbox stopped: workspace over its size", {
          sandboxId: own.label ?? folder,
          used,
          limit: diskBytes,
        });
        for (const pid of descendantsOf(data.pid)) signal(pid, "SIGKILL");
        signal(-data.pgid, "SIGKILL");
      }
    } finally {
      this.#measuring = false;
    }
  }
}
