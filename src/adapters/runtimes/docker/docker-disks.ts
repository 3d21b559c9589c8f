/**
 * The size limit of Docker sandboxes' workspaces (SANDBOX_DISK_MB): each workspace volume is an ext4 file system of
 * that size in a sparse image file `<dir>/<volume>.img`, attached to a loop device, and the volume is the local
 * driver's mount of that device (`type=ext4, device=/dev/loopN`). Writing past the size fails with ENOSPC inside
 * that sandbox only; the image takes only the space written. The engine's local driver mounts with mount(2), which
 * knows no `loop` option, hence the device attached here.
 *
 * The file system's root is left empty (its lost+found removed), so that the engine copies the image's folder (its
 * owner, e.g. the agent-server's user) into the volume on first use, as it does for any new volume.
 *
 * Needs root, mkfs.ext4, debugfs and losetup on the engine's own host (a local socket): the device path must name
 * the same loop device for the engine.
 */
import { spawnSync } from "node:child_process";
import { closeSync, existsSync, mkdirSync, openSync, rmSync, truncateSync } from "node:fs";
import { join } from "node:path";
import { afterTrial, rootTools } from "../host-tools.ts";

const SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin";
/** Volume names the runtime makes (prefix + sandbox id): safe as file names. */
const VOLUME_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$/;

/** Runs a tool; its stdout, or throws with its stderr. */
function run(file: string, args: string[]): string {
  const r = spawnSync(file, args, { encoding: "utf8", timeout: 30_000, stdio: ["ignore", "pipe", "pipe"] });
  if (r.error) throw r.error;
  if (r.status !== 0) throw new Error(`${file} ${args.join(" ")}: ${r.stderr.trim().slice(0, 300)}`);
  return r.stdout;
}

/** The local volume driver's options of a workspace volume on its own file system. */
export interface DiskVolumeOptions {
  type: "ext4";
  device: string;
  o: string;
}

/** Size-limited workspace volumes on loop devices (see the file's comment). */
export class DockerDisks {
  readonly #dir: string;
  readonly #bytes: number;
  readonly #tools: { mkfs: string; debugfs: string; losetup: string };

  private constructor(dir: string, bytes: number, tools: { mkfs: string; debugfs: string; losetup: string }) {
    this.#dir = dir;
    this.#bytes = bytes;
    this.#tools = tools;
  }

  /** Disks when this host allows them (a trial disk is made and attached), else why not. */
  static open(dir: string, bytes: number, searchPath = SYSTEM_PATH): DockerDisks | string {
    const tools = rootTools(
      ["mkfs.ext4", "debugfs", "losetup"],
      searchPath,
      "size-limited workspace volumes need root (loop devices)",
    );
    if (typeof tools === "string") return tools;
    const disks = new DockerDisks(dir, bytes, {
      mkfs: tools["mkfs.ext4"],
      debugfs: tools.debugfs,
      losetup: tools.losetup,
    });
    const trial = `disk-probe-${process.pid}`;
    return afterTrial(
      disks,
      () => disks.create(trial, 16 * 1024 * 1024),
      () => disks.remove(trial),
      "loop devices do not work here",
    );
  }

  /** Makes (or finds) the file system of `volume` and its loop device; the volume's driver options. */
  create(volume: string, bytes = this.#bytes): DiskVolumeOptions {
    if (!VOLUME_NAME.test(volume)) throw new Error(`not a workspace volume name: ${volume}`);
    mkdirSync(this.#dir, { recursive: true, mode: 0o700 });
    const image = join(this.#dir, `${volume}.img`);
    let device = this.#devices(image)[0];
    if (device === undefined) {
      if (!existsSync(image)) {
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
        // An empty root, so that the engine copies the image's folder and its owner into the new volume.
        run(this.#tools.debugfs, ["-w", "-R", "rmdir lost+found", image]);
      }
      device = run(this.#tools.losetup, ["--find", "--show", image]).trim();
    }
    return { type: "ext4", device, o: "nosuid,nodev,noatime" };
  }

  /** Detaches the loop devices of `volume`'s image and deletes it; idempotent. */
  remove(volume: string): void {
    if (!VOLUME_NAME.test(volume)) return;
    const image = join(this.#dir, `${volume}.img`);
    for (const device of this.#devices(image))
      spawnSync(this.#tools.losetup, ["-d", device], { stdio: "ignore" });
    rmSync(image, { force: true });
  }

  /** True when `device` is attached to `volume`'s own image. */
  holds(volume: string, device: string): boolean {
    return VOLUME_NAME.test(volume) && this.#devices(join(this.#dir, `${volume}.img`)).includes(device);
  }

  /** The loop devices attached to `image`. */
  #devices(image: string): string[] {
    if (!existsSync(image)) return [];
    const r = spawnSync(this.#tools.losetup, ["-j", image], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
    });
    return (r.stdout ?? "")
      .split("\n")
      .map((line) => line.split(":")[0]?.trim() ?? "")
      .filter((d) => d.startsWith("/dev/"));
  }
}
