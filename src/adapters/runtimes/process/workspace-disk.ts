/**
 * The size limit of process sandboxes' workspaces (SANDBOX_DISK_MB), by the strongest means the host offers:
 * - `loop` (root, with mkfs.ext4, losetup and mount): each workspace is its own ext4 file system in a sparse image
 *   file `<root>/.disks/<folder>.img`, loop-mounted on the workspace folder (nosuid, nodev). Writing past the size
 *   fails with ENOSPC inside that sandbox only; the image takes only the space written.
 * - `watch` (anything else): the runtime measures each workspace it runs (`du`) every few seconds and stops a
 *   sandbox whose workspace passed the limit, with that reason; RLIMIT_FSIZE bounds any one file at once.
 * Either way, {@link freeBytes} lets the runtime refuse new workspaces while the file system holding them has less
 * than a reserve free, so that what shares it (DATA_DIR's database, by default) keeps working.
 */
import { spawn, spawnSync } from "node:child_process";
import {
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  statfsSync,
  statSync,
  truncateSync,
} from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { signal } from "../../../../agent/shared/proc-tree.ts";
import { afterTrial, rootTools, runTool } from "../host-tools.ts";

export type DiskMode = "loop" | "watch" | "off";

const SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin";

/** Runs a setup tool; throws with its stderr when it fails. */
function run(file: string, args: string[]): void {
  const r = spawnSync(file, args, { encoding: "utf8", timeout: 30_000, stdio: ["ignore", "ignore", "pipe"] });
  if (r.error) throw r.error;
  if (r.status !== 0) throw new Error(`${file} ${args.join(" ")}: ${r.stderr.trim().slice(0, 300)}`);
}

/** True when `path` is a mount point (listed in this process's mount table). */
export function isMountPoint(path: string): boolean {
  return mountSource(path) !== null;
}

/** The source (device) of the mount on `path` (the last one mounted there), or null when it is no mount point. */
function mountSource(path: string): string | null {
  try {
    // Octal escapes (\040 for a space…) in mountinfo; our paths are plain folder names. After the optional
    // fields, " - " is followed by the file system type and the source.
    const line = readFileSync("/proc/self/mountinfo", "utf8")
      .split("\n")
      .findLast((l) => l.split(" ")[4] === path);
    return line === undefined ? null : (line.split(" - ")[1]?.split(" ")[1] ?? "");
  } catch {
    return null;
  }
}

/** Loop-mounted ext4 workspaces of one workspace root. */
export class LoopDisks {
  readonly #dir: string;
  readonly #bytes: number;
  readonly #tools: { mkfs: string; mount: string; umount: string };

  private constructor(root: string, bytes: number, tools: { mkfs: string; mount: string; umount: string }) {
    this.#dir = join(root, ".disks");
    this.#bytes = bytes;
    this.#tools = tools;
  }

  /** Loop disks when the host allows them (a trial disk is made and mounted), else why not. */
  static open(root: string, bytes: number, searchPath = SYSTEM_PATH): LoopDisks | string {
    const tools = rootTools(
      ["mkfs.ext4", "mount", "umount"],
      searchPath,
      "loop-mounted workspaces need root",
    );
    if (typeof tools === "string") return tools;
    const disks = new LoopDisks(root, bytes, {
      mkfs: tools["mkfs.ext4"],
      mount: tools.mount,
      umount: tools.umount,
    });
    const trial = `.disk-probe-${process.pid}`;
    return afterTrial(
      disks,
      () => {
        mkdirSync(join(root, trial), { recursive: true, mode: 0o700 });
        disks.create(trial, 16 * 1024 * 1024);
      },
      () => {
        void disks.remove(join(root, trial), trial);
        rmSync(join(root, trial), { recursive: true, force: true });
      },
      "loop-mounted workspaces do not work here",
    );
  }

  /**
   * Makes `workspace` (an existing empty folder) a file system of its own of the configured size; a workspace
   * already mounted is left as it is, an image without its mount (after a reboot) is mounted again. Blocks the
   * event loop for mkfs and mount: for the start-up probe; a sandbox's start uses {@link make}.
   */
  create(folder: string, bytes = this.#bytes, workspace = join(this.#dir, "..", folder)): void {
    for (const [file, args] of this.#steps(folder, bytes, workspace)) run(file, args);
    this.#mounted(workspace);
  }

  /** {@link create} without blocking the event loop: mkfs and mount run as child processes awaited. */
  async make(folder: string, bytes = this.#bytes, workspace = join(this.#dir, "..", folder)): Promise<void> {
    for (const [file, args] of this.#steps(folder, bytes, workspace)) await runTool(file, args);
    this.#mounted(workspace);
  }

  /** The image made (sparse) if missing, and the commands left to run: mkfs when new, then mount; none if mounted. */
  #steps(folder: string, bytes: number, workspace: string): [string, string[]][] {
    if (isMountPoint(workspace)) return [];
    mkdirSync(this.#dir, { recursive: true, mode: 0o700 });
    const image = join(this.#dir, `${folder}.img`);
    const steps: [string, string[]][] = [];
    if (!existsSync(image)) {
      // Sparse: the image takes only what the sandbox writes.
      closeSync(openSync(image, "w", 0o600));
      truncateSync(image, bytes);
      // No reserved blocks (one user), lazy init: a few ms even for gigabytes.
      steps.push([
        this.#tools.mkfs,
        ["-q", "-F", "-m", "0", "-E", "nodiscard,lazy_itable_init=1,lazy_journal_init=1", image],
      ]);
    }
    steps.push([this.#tools.mount, ["-o", "loop,nosuid,nodev,noatime", image, workspace]]);
    return steps;
  }

  #mounted(workspace: string): void {
    rmSync(join(workspace, "lost+found"), { recursive: true, force: true });
  }

  /**
   * Unmounts `workspace` (lazily: a mount of it in a sandbox's namespace may outlive this one by a moment) and
   * deletes its image; idempotent. Its loop device (mounted with autoclear) is freed as soon as nothing holds the
   * file system. A process that still holds a file of it (a descriptor handed to another sandbox, a working
   * directory, a mapping) would keep the disk alive and writable past every limit: the promise returned settles
   * once the device is detached for good, whoever holds the file system killed meanwhile (it gives up after ~5 s:
   * `detached` false), with the pids killed.
   */
  remove(workspace: string, folder: string): Promise<{ killed: number[]; detached: boolean }> {
    const source = mountSource(workspace);
    let device: bigint | null = null;
    if (source !== null) {
      try {
        device = statSync(workspace, { bigint: true }).dev;
      } catch {
        // gone meanwhile
      }
      spawnSync(this.#tools.umount, ["-l", workspace], { stdio: "ignore" });
    }
    rmSync(join(this.#dir, `${folder}.img`), { force: true });
    const loop = source === null ? undefined : /^\/dev\/(loop\d+)$/.exec(source)?.[1];
    const attached = (): boolean => loop !== undefined && existsSync(`/sys/block/${loop}/loop/backing_file`);
    if (device === null || !attached()) return Promise.resolve({ killed: [], detached: true });
    const held = device;
    return (async () => {
      const killed: number[] = [];
      // The kernel lets go of a disk nothing holds within a moment; one still attached after that is held, found
      // by the file system's device whichever mount (another sandbox's bind) its holder reached it through.
      for (let round = 0; attached() && round < 500; round++) {
        if (round >= 5 && round % 5 === 0)
          for (const pid of holdersOf(held))
            if (signal(pid, "SIGKILL") && !killed.includes(pid)) killed.push(pid);
        await sleep(10);
      }
      return { killed, detached: !attached() };
    })();
  }

  /** Deletes the images whose workspace folder is gone (a server that died between the two). */
  sweep(root: string): void {
    for (const name of listDir(this.#dir)) {
      const folder = name.replace(/\.img$/, "");
      if (!existsSync(join(root, folder))) rmSync(join(this.#dir, name), { force: true });
    }
  }
}

/**
 * The processes (never this one) with a descriptor, working directory, root or memory mapping on the file system
 * of `device` (st_dev, as stat gives it).
 */
export function holdersOf(device: bigint): number[] {
  const major = ((device >> 8n) & 0xfffn) | ((device >> 32n) & ~0xfffn);
  const minor = (device & 0xffn) | ((device >> 12n) & ~0xffn);
  const mapped = ` ${major.toString(16).padStart(2, "0")}:${minor.toString(16).padStart(2, "0")} `;
  const on = (path: string): boolean => {
    try {
      return statSync(path, { bigint: true }).dev === device;
    } catch {
      return false;
    }
  };
  const out: number[] = [];
  for (const name of listDir("/proc")) {
    const pid = Number(name);
    if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid) continue;
    const base = `/proc/${pid}`;
    let holds = on(`${base}/cwd`) || on(`${base}/root`);
    if (!holds) holds = listDir(`${base}/fd`).some((fd) => on(`${base}/fd/${fd}`));
    if (!holds) {
      try {
        holds = readFileSync(`${base}/maps`, "utf8").includes(mapped);
      } catch {
        // gone, or no mappings
      }
    }
    if (holds) out.push(pid);
  }
  return out;
}

/** Bytes used by the files under `dir` on its own file system (`du -sxk`); null when it cannot be measured. */
export function usedBytes(dir: string): Promise<number | null> {
  return new Promise((resolve) => {
    const child = spawn("du", ["-sxk", dir], {
      stdio: ["ignore", "pipe", "ignore"],
      env: { PATH: SYSTEM_PATH },
    });
    let out = "";
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
    });
    child.once("error", () => resolve(null));
    child.once("close", () => {
      const kb = Number(out.split(/\s/)[0]);
      resolve(out !== "" && Number.isFinite(kb) ? kb * 1024 : null);
    });
  });
}

/** Free bytes (for unprivileged users) of the file system holding `path`; null when unknown. */
export function freeBytes(path: string): number | null {
  try {
    const s = statfsSync(path);
    return Number(s.bavail) * Number(s.bsize);
  } catch {
    return null;
  }
}

function listDir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}
