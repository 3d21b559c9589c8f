/**
 * The containers and volumes a Docker runtime manages on the engine: made as described (container-description.ts),
 * found by its managed label (a container or volume without it is never touched), checked before a restart,
 * stopped and removed with their volumes.
 */
import type Docker from "dockerode";
import type { ContainerInspectInfo } from "dockerode";
import tar from "tar-stream";
import { failedPrecondition } from "../../../core/errors.ts";
import type { RuntimeHandle } from "../../../ports/sandbox-runtime.ts";
import type { ContainerDescription } from "./container-description.ts";
import type { DockerDisks } from "./docker-disks.ts";

/** What the runtime stores in {@link RuntimeHandle.data}. */
export interface DockerHandleData {
  containerId: string;
  containerName: string;
  volume: string;
  network: string;
  /** False on network "none": health is then the container state. */
  reachable: boolean;
}

/** Validates stored handle data; null when it is not what the runtime wrote. */
export function parseHandleData(data: Record<string, unknown>): DockerHandleData | null {
  const { containerId, containerName, volume, network, reachable } = data;
  if (
    typeof containerId !== "string" ||
    containerId === "" ||
    typeof containerName !== "string" ||
    typeof volume !== "string" ||
    typeof network !== "string"
  ) {
    return null;
  }
  return { containerId, containerName, volume, network, reachable: reachable !== false };
}

/** An engine error carrying the HTTP status (dockerode sets `statusCode`). */
export const statusOf = (e: unknown): number | undefined =>
  typeof e === "object" && e !== null && "statusCode" in e && typeof e.statusCode === "number"
    ? e.statusCode
    : undefined;

/** Runs `fn`, treating the given engine statuses (e.g. 404 not found, 304 not modified) as success. */
export async function tolerate(statuses: number[], fn: () => Promise<unknown>): Promise<void> {
  try {
    await fn();
  } catch (e: unknown) {
    const status = statusOf(e);
    if (status === undefined || !statuses.includes(status)) throw e;
  }
}

/**
 * Unpauses a container; one that is gone (404) or not paused (409) is fine. The engine may also answer 500 "…is
 * not paused" (its record said paused while the container's cgroup was already thawed, seen under load): the
 * wanted state holds then too.
 */
export async function unpause(container: { unpause(): Promise<unknown> }): Promise<void> {
  try {
    await container.unpause();
  } catch (e: unknown) {
    const status = statusOf(e);
    if (status === 404 || status === 409) return;
    if (status === 500 && e instanceof Error && /is not paused/i.test(e.message)) return;
    throw e;
  }
}

export interface ManagedContainersOptions {
  docker: Docker;
  /** `<prefix>managed`: the label (value "true") of everything the runtime made. */
  managedLabel: string;
  /** Grace period of a container's stop on removal. */
  stopTimeoutSeconds: number;
  /** The workspace volumes' loop disks, or null (no size limit). */
  disks: DockerDisks | null;
}

/** The runtime's containers and volumes on the engine (see the file's comment). */
export class ManagedContainers {
  readonly #o: ManagedContainersOptions;

  constructor(options: ManagedContainersOptions) {
    this.#o = options;
  }

  /**
   * Makes and starts a described container: its volume first (on a loop disk when sizes are limited), then the
   * container, its folders given to its user. Leaves nothing half-made behind when a step fails; its container id.
   */
  async create(d: Pick<ContainerDescription, "create" | "volume" | "labels" | "owned">): Promise<string> {
    const { docker, disks } = this.#o;
    const { volume } = d;
    try {
      await docker.createVolume({
        Name: volume,
        Labels: d.labels,
        ...(disks === null ? {} : { Driver: "local", DriverOpts: { ...disks.create(volume) } }),
      });
    } catch (e: unknown) {
      disks?.remove(volume);
      throw e;
    }
    let containerId: string | undefined;
    try {
      const container = await docker.createContainer(d.create);
      containerId = container.id;
      // The folders the run user must own (see describeContainer): a tar of folder entries extracted by the
      // engine, which chowns what it extracts.
      if (d.owned !== null)
        await container.putArchive(await ownedFoldersTar(d.owned.folders, d.owned.owner), { path: "/" });
      await container.start();
    } catch (e: unknown) {
      // A name conflict means the container is someone else's: keep it.
      if (containerId) await this.remove(containerId, volume, false).catch(() => {});
      // 409: a container of that name exists (the same sandbox id started twice): the volume is its.
      else if (statusOf(e) !== 409) await this.removeVolume(volume).catch(() => {});
      throw e;
    }
    return containerId;
  }

  /** The managed container behind the handle, or null when it is gone (or not ours). */
  async inspect(data: DockerHandleData): Promise<ContainerInspectInfo | null> {
    try {
      const info = await this.#o.docker.getContainer(data.containerId).inspect();
      return info.Config.Labels?.[this.#o.managedLabel] === "true" ? info : null;
    } catch (e: unknown) {
      if (statusOf(e) === 404) return null;
      throw e;
    }
  }

  /** The managed container behind the handle; FAILED_PRECONDITION when there is none. */
  async require(handle: RuntimeHandle): Promise<[DockerHandleData, ContainerInspectInfo]> {
    const data = parseHandleData(handle.data);
    const info = data && (await this.inspect(data));
    if (!data || !info) throw failedPrecondition("the sandbox container does not exist");
    return [data, info];
  }

  /** Removes a workspace volume if it carries our managed label (also when its container is already gone). */
  async removeVolume(volume: string): Promise<void> {
    const { docker, managedLabel, disks } = this.#o;
    try {
      const info = await docker.getVolume(volume).inspect();
      if (info.Labels?.[managedLabel] !== "true") return;
    } catch (e: unknown) {
      if (statusOf(e) === 404) return disks?.remove(volume);
      throw e;
    }
    await this.#removeEngineVolume(volume);
    // Its file system after the engine let go of it (the volume's name is ours: no one else's image).
    disks?.remove(volume);
  }

  /**
   * Before a stopped container starts again (its volume is mounted anew): a volume on a loop device must still have
   * that device attached to its own image. After a reboot the device is gone, or another volume's image may hold
   * its number: FAILED_PRECONDITION rather than mounting another sandbox's workspace.
   */
  async checkDisk(volume: string): Promise<void> {
    const { docker, disks } = this.#o;
    let device: string | undefined;
    try {
      const info = await docker.getVolume(volume).inspect();
      if (info.Driver !== "local" || info.Options?.type !== "ext4") return;
      device = info.Options.device;
    } catch (e: unknown) {
      if (statusOf(e) === 404) return;
      throw e;
    }
    if (device === undefined || disks === null || !disks.holds(volume, device))
      throw failedPrecondition(
        "the sandbox's workspace disk is no longer attached (the host restarted): it cannot be resumed",
      );
  }

  /** Stops (gracefully, unpaused first) and removes a container, then its volume when given. */
  async remove(containerId: string, volume: string | undefined, paused: boolean): Promise<void> {
    const container = this.#o.docker.getContainer(containerId);
    // A paused container cannot act on SIGTERM: unpause first so that the stop is graceful.
    if (paused) await unpause(container);
    await tolerate([304, 404], () => container.stop({ t: this.#o.stopTimeoutSeconds }));
    await tolerate([404], () => container.remove({ force: true, v: true }));
    if (volume) await this.removeVolume(volume);
  }

  async #removeEngineVolume(volume: string): Promise<void> {
    // The engine may release the volume a moment after the container is gone (409: in use).
    for (let attempt = 0; ; attempt++) {
      try {
        await tolerate([404], () => this.#o.docker.getVolume(volume).remove());
        return;
      } catch (e: unknown) {
        if (statusOf(e) !== 409 || attempt >= 20) throw e;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
  }
}

/** A tar holding only the folders `paths` (absolute, parents before children), owned by `owner`. */
async function ownedFoldersTar(paths: string[], owner: { uid: number; gid: number }): Promise<Buffer> {
  const pack = tar.pack();
  for (const path of paths)
    pack.entry({ name: `${path.replace(/^\/+|\/+$/g, "")}/`, type: "directory", mode: 0o755, ...owner });
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const chunk of pack) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks);
}
