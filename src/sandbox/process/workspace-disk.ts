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
  truncateSync,
} from "node:fs";
import { join } from "node:path";
import { afterTrial, rootTools } from "../host-tools.ts";

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
  try {
    // Octal escapes (\040 for a space…) in mountinfo; our paths are plain folder names.
    return readFileSync("/proc/self/mountinfo", "utf8")
      .split("\n")
      .some((line) => line.split(" ")[4] === path);
  } catch {
    return false;
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
        disks.remove(join(root, trial), trial);
        rmSync(join(root, trial), { recursive: true, force: true });
      },
      "loop-mounted workspaces do not work here",
    );
  }

  /**
   * Makes `workspace` (an existing empty folder) a file system of its own of the configured size; a workspace
   * already mounted is left as it is, an image without its mount (after a reboot) is mounted again.
   */
  create(folder: string, bytes = this.#bytes, workspace = join(this.#dir, "..", folder)): void {
    if (isMountPoint(workspace)) return;
    mkdirSync(this.#dir, { recursive: true, mode: 0o700 });
    const image = join(this.#dir, `${folder}.img`);
    if (!existsSync(image)) {
      // Sparse: the image takes only what the sandbox writes.
      closeSync(openSync(image, "w", 0o600));
      truncateSync(image, bytes);
      // No reserved blocks (one user), lazy init: a few ms even for gigabytes.
      run(this.#tools.mkfs, [
        "-q",
        "-F",
        "-m",
        "0",
        "-E",
        "nodiscard,lazy_itable_init=1,lazy_journal_init=1",
        image,
      ]);
    }
    run(this.#tools.mount, ["-o", "loop,nosuid,nodev,noatime", image, workspace]);
    rmSync(join(workspace, "lost+found"), { recursive: true, force: true });
  }

  /** Unmounts `workspace` (lazily, should a process still hold it) and deletes its image; idempotent. */
  remove(workspace: string, folder: string): void {
    if (isMountPoint(workspace)) spawnSync(this.#tools.umount, ["-l", workspace], { stdio: "ignore" });
    rmSync(join(this.#dir, `${folder}.img`), { force: true });
  }

  /** Deletes the images whose workspace folder is gone (a server that died between the two). */
  sweep(root: string): void {
    for (const name of listDir(this.#dir)) {
      const folder = name.replace(/\.img$/, "");
      if (!existsSync(join(root, folder))) rmSync(join(this.#dir, name), { force: true });
    }
  }
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
