import Docker from "dockerode";
import { failedPrecondition } from "../../../core/errors.ts";
import type {
  ExposedPort,
  RuntimeHandle,
  RuntimeSpec,
  RuntimeStartRequest,
  RuntimeState,
  SandboxRuntime,
  WarmClaim,
  WarmPlan,
} from "../../../ports/sandbox-runtime.ts";
import { pollAlive, probeAlive } from "../agent-health.ts";
import { freePort } from "../free-port.ts";
import {
  containerFingerprint,
  containerPortNames,
  containerSettings,
  describeContainer,
} from "./container-description.ts";
import { DockerDisks } from "./docker-disks.ts";
import { DockerImages, type PullProgressEvent } from "./docker-images.ts";
import { GatewayPorts } from "./gateway-ports.ts";
import { ManagedContainers, parseHandleData, tolerate, unpause } from "./managed-containers.ts";
import { WarmContainers } from "./warm-containers.ts";

export type { PullProgressEvent } from "./docker-images.ts";
export { unpause } from "./managed-containers.ts";

/** Options of {@link createDockerRuntime}. */
export interface DockerRuntimeOptions {
  /** The engine client; default: a client of `socketPath`. */
  docker?: Docker;
  /** Engine socket when `docker` is not given (default /var/run/docker.sock). */
  socketPath?: string;
  /**
   * Network of sandbox containers (default "bridge", as the reference):
   * - "host": the agent (`{host}` = 127.0.0.1) and VS Code listen on free loopback ports of this machine chosen by
   *   the runtime;
   * - "none": no network; the agent cannot be reached (handle port 0), so health is the container's running state;
   * - any other network: the agent listens on `agentPort` (VS Code 8001, workers 8011/8012) in the container, each
   *   published on 127.0.0.1:<free port>; the webhook URL's loopback host becomes host.docker.internal (the host
   *   gateway).
   */
  network?: string;
  /** Prefix of the labels the runtime sets and trusts (default "workspace."): `<prefix>managed=true`, ... */
  labelPrefix?: string;
  /** Extra labels on every container and volume (e.g. a test run id, to clean up by label). */
  labels?: Record<string, string>;
  /** Container names: prefix + sandbox id (default "oh-agent-server-"). */
  containerNamePrefix?: string;
  /** Workspace volumes: prefix + sandbox id (default "openhands-workspace-"). */
  volumePrefix?: string;
  /** Agent port inside the container on networks other than host (default 8000). */
  agentPort?: number;
  /**
   * Host loopback ports containers on a bridge network reach at the host gateway (host.docker.internal): a model
   * at `localhost:<port>` in a user's settings (SANDBOX_HOST_PORTS). Needs root, `iptables` and a local engine
   * (see host-loopback.ts); elsewhere only services listening beyond loopback are reached there.
   */
  hostPorts?: readonly number[];
  /** Where iptables is looked up for hostPorts (default: the standard system folders). */
  searchPath?: string;
  /**
   * `uid[:gid]` the container's processes run as, given the working folder and the agent-server's state folders
   * (default: the image's own user; 1000:1000 for an image that would run as root).
   */
  user?: string;
  /** Size of the container's /dev/shm in bytes (default 512 MiB). */
  shmBytes?: number;
  /** Memory limit in bytes (default 4 GiB). */
  memoryBytes?: number;
  nanoCpus?: number;
  /** Process limit of the container (default 2048). */
  pidsLimit?: number;
  /** Run a tiny init (docker-init) as PID 1 to reap orphans and forward signals (default true). */
  init?: boolean;
  /** Grace period of `docker stop` on removal (default 10 s, as the reference). */
  stopTimeoutSeconds?: number;
  /** Interval of health polls in waitHealthy (default 10 ms). */
  healthPollMs?: number;
  /** Timeout of the health probe made by inspect (default 1000 ms). */
  probeTimeoutMs?: number;
  /**
   * Host folders bound read-only into every container at the same path (LOCAL_REPOSITORY_ROOTS: repositories a
   * conversation clones by local path).
   */
  readOnlyPaths?: readonly string[];
  /**
   * Containers kept created, started and healthy ahead of need per sandbox spec, once the service gives the plan
   * (see warm-containers.ts); default 0: none, and warm containers found on the engine are removed.
   */
  warmContainers?: number;
  /** Warm containers being created at once (default 2). */
  warmConcurrency?: number;
  /** Name prefix of unclaimed warm containers (default "oh-warm-"). */
  warmNamePrefix?: string;
  /** How long a warm container may take to become healthy before it is removed (default 120 s). */
  warmReadyTimeoutMs?: number;
  /**
   * Size of each workspace volume in bytes (SANDBOX_DISK_MB): an ext4 file system on a loop device per volume
   * (see docker-disks.ts), where this host allows (root, a local engine socket); default 0: no limit.
   */
  diskBytes?: number;
  /** Folder of the workspace volumes' images (default: no size limit without it). */
  diskDir?: string;
  /** Where mkfs.ext4, debugfs and losetup are looked up (default: the system folders; tests put wrappers first). */
  diskToolsPath?: string;
  /** Image pull progress (default: logged on each status change). */
  onPullProgress?: (image: string, event: PullProgressEvent) => void;
  log?: (msg: string, data?: object) => void;
}

/** The Docker runtime, plus a test helper. */
export interface DockerRuntime extends SandboxRuntime {
  readonly kind: "docker";
  /** Removes every container (and its volume) carrying this runtime's labels, including `options.labels`. */
  removeAll(): Promise<void>;
  /** Warm containers ready to be claimed now (see {@link DockerRuntimeOptions.warmContainers}). */
  warmReady(): number;
  /** How the workspace volumes' size is bounded: "ext4 on a loop device", or why it is not. */
  readonly workspaceLimit: string;
}

/**
 * Sandboxes as Docker containers: one container and one named volume (mounted at the spec's `workingDir`) per
 * sandbox, with the spec id as image (pulled when missing, progress reported).
 *
 * - start: a warm container claimed under the sandbox id, else a new container as `describeContainer` says
 *   (container-description.ts: environment, command, labels, user, limits, ports), its ports chosen free on
 *   127.0.0.1, its volume created first and its folders given to its user before it starts.
 * - inspect (container state → runtime state): running → `running` if `/alive` answers (else `starting`);
 *   paused → `paused`; exited with code 0 → `paused` (stopped, as the reference); exited otherwise or OOM-killed →
 *   `error`; created/restarting → `starting`; removing or no such container → `missing`; dead and anything else →
 *   `error`.
 * - pause = `docker pause` if running; resume = unpause if paused, start if exited/created; both idempotent and
 *   raise FAILED_PRECONDITION when the container is gone.
 * - remove = stop (grace `stopTimeoutSeconds`) + remove container + remove volume; idempotent.
 *
 * Containers without `<prefix>managed=true` are never touched: a handle pointing at one is `missing`.
 */
export function createDockerRuntime(options: DockerRuntimeOptions = {}): DockerRuntime {
  const docker = options.docker ?? new Docker({ socketPath: options.socketPath ?? "/var/run/docker.sock" });
  const settings = containerSettings(options);
  const { network, labelPrefix: prefix, extraLabels, volumePrefix } = settings;
  const managedLabel = `${prefix}managed`;
  const namePrefix = options.containerNamePrefix ?? "oh-agent-server-";
  const healthPollMs = options.healthPollMs ?? 10;
  const probeTimeoutMs = options.probeTimeoutMs ?? 1000;
  const log = options.log ?? (() => {});
  /** Why a container ended, as its last inspect saw it (its memory limit), by container id (see failureReason). */
  const ended = new Map<string, string>();
  const memoryLimitBytes = settings.memoryBytes;
  const { disks, workspaceLimit } = openDisks(docker, options);
  const images = new DockerImages(docker, log, options.onPullProgress);
  const managed = new ManagedContainers({
    docker,
    managedLabel,
    stopTimeoutSeconds: options.stopTimeoutSeconds ?? 10,
    disks,
  });
  const gateway = new GatewayPorts({
    docker,
    network,
    hostPorts: options.hostPorts,
    searchPath: options.searchPath,
    log,
  });

  /**
   * Creates and starts the container of a sandbox (the start of one not taken from the warm pool, and the warm
   * containers themselves): named `containerName`, with `labels` beside the runtime's own.
   */
  const createSandbox = async (
    args: RuntimeStartRequest & {
      containerName: string;
      labels: Record<string, string>;
    },
  ): Promise<RuntimeHandle> => {
    const { sandboxId, spec, containerName } = args;
    const image = spec.id;
    const imageConfig = (await images.ensure(image)).Config;
    // A free loopback port of this machine for each port the container publishes (none on network "none").
    const ports: ExposedPort[] = await Promise.all(
      containerPortNames(network).map(async (name) => ({ name, port: await freePort("127.0.0.1") })),
    );
    await gateway.ready();
    const described = describeContainer(settings, { ...args, image: imageConfig, ports });
    const containerId = await managed.create(described);
    const { handle, user } = described;
    log("sandbox container started", { sandboxId, containerName, image, user, port: handle.port });
    return { ...handle, data: { ...handle.data, containerId } };
  };

  /** Resolves true once the sandbox is healthy, false after `timeoutMs`, once it ended, or once `stop()` is true. */
  const healthWait = async (
    handle: RuntimeHandle,
    timeoutMs: number,
    stop: () => boolean,
    intervalMs = healthPollMs,
  ): Promise<boolean> => {
    const data = parseHandleData(handle.data);
    if (!data) return false;
    const notRunning = async (): Promise<boolean> => (await managed.inspect(data))?.State.Running !== true;
    if (!data.reachable) {
      // Nothing to probe: healthy means running (a container that exits at once never becomes healthy).
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const info = await managed.inspect(data);
        if (info?.State.Running && !info.State.Paused) return true;
        if (
          !info ||
          info.State.Status === "exited" ||
          info.State.Status === "dead" ||
          Date.now() >= deadline ||
          stop()
        ) {
          return false;
        }
        await new Promise((resolve) => setTimeout(resolve, intervalMs));
      }
    }
    // Between probes, look at the container now and then: one that exited will never answer.
    let polls = 0;
    return pollAlive(handle.agentUrl, timeoutMs, {
      intervalMs,
      gaveUp: () => stop() || (++polls % 10 === 0 ? notRunning() : false),
    });
  };

  const warm = new WarmContainers({
    docker,
    size: options.warmContainers ?? 0,
    concurrency: options.warmConcurrency ?? 2,
    prefix,
    extraLabels,
    warmNamePrefix: options.warmNamePrefix ?? "oh-warm-",
    sandboxNamePrefix: namePrefix,
    // Everything of the runtime's options that shapes a container: a warm one made under others is not adopted.
    fingerprint: containerFingerprint(settings),
    readyTimeoutMs: options.warmReadyTimeoutMs ?? 120_000,
    imageId: async (image) => (await images.ensure(image)).Id,
    create: (args) => createSandbox(args),
    alive: async (handle) =>
      parseHandleData(handle.data)?.reachable === false
        ? (await runtime.inspect(handle)) === "running"
        : probeAlive(handle.agentUrl, probeTimeoutMs),
    // Not a user's wait: a coarser poll than a start's (the pool counts a container once it answers).
    waitHealthy: (handle, timeoutMs, stop) => healthWait(handle, timeoutMs, stop, 25),
    remove: (containerId, volume, paused) => managed.remove(containerId, volume, paused),
    log,
  });

  const runtime: DockerRuntime = {
    kind: "docker",
    workspaceLimit,

    reachHost(url: string): void {
      gateway.reach(url);
    },

    async start(request: RuntimeStartRequest): Promise<RuntimeHandle> {
      const { sandboxId, sessionApiKey } = request;
      // A warm container claimed under this id (by this server or another sharing the engine) is the sandbox.
      const claimed = await warm.take(sandboxId, sessionApiKey);
      if (claimed) {
        log("sandbox started from a warm container", {
          sandboxId,
          containerName: claimed.data.containerName,
        });
        return claimed;
      }
      const containerName = sandboxId.startsWith(namePrefix) ? sandboxId : `${namePrefix}${sandboxId}`;
      return createSandbox({ ...request, containerName, labels: {} });
    },

    waitHealthy(handle: RuntimeHandle, timeoutMs: number): Promise<boolean> {
      return healthWait(handle, timeoutMs, () => false);
    },

    async inspect(handle: RuntimeHandle, options?: { probe?: boolean }): Promise<RuntimeState> {
      const data = parseHandleData(handle.data);
      const info = data && (await managed.inspect(data));
      if (!data || !info) return "missing";
      const state = info.State;
      switch (state.Status) {
        case "running":
          if (state.Paused) return "paused";
          if (!data.reachable || options?.probe === false) return "running";
          return (await probeAlive(handle.agentUrl, probeTimeoutMs)) ? "running" : "starting";
        case "paused":
          return "paused";
        case "exited":
          if (state.OOMKilled)
            ended.set(data.containerId, `killed by its memory limit (${memoryLimitBytes} bytes)`);
          else ended.delete(data.containerId);
          return state.ExitCode === 0 && !state.OOMKilled ? "paused" : "error";
        case "created":
        case "restarting":
          return "starting";
        case "removing":
          return "missing";
        default:
          return "error";
      }
    },

    async pause(handle: RuntimeHandle): Promise<void> {
      const [data, info] = await managed.require(handle);
      if (info.State.Status === "running" && !info.State.Paused) {
        // 409: it stopped or got paused in between; the caller's next inspect tells which.
        await tolerate([409], () => docker.getContainer(data.containerId).pause());
      }
    },

    async resume(handle: RuntimeHandle): Promise<RuntimeHandle> {
      const [data, info] = await managed.require(handle);
      const container = docker.getContainer(data.containerId);
      if (info.State.Paused || info.State.Status === "paused") await unpause(container);
      else if (info.State.Status === "exited" || info.State.Status === "created") {
        await managed.checkDisk(data.volume);
        await tolerate([304], () => container.start());
      }
      return handle;
    },

    failureReason(handle: RuntimeHandle): string | null {
      const data = parseHandleData(handle.data);
      return (data && ended.get(data.containerId)) ?? null;
    },

    async restart(handle: RuntimeHandle): Promise<RuntimeHandle> {
      // The container keeps its file system and volume: starting it again runs its agent on the same workspace.
      const [data, info] = await managed.require(handle);
      if (info.State.Status === "running" && !info.State.Paused)
        throw failedPrecondition("the sandbox container is still running");
      if (info.State.Status === "removing")
        throw failedPrecondition("the sandbox container is being removed");
      if (info.State.Paused || info.State.Status === "paused")
        await unpause(docker.getContainer(data.containerId));
      else {
        await managed.checkDisk(data.volume);
        await tolerate([304], () => docker.getContainer(data.containerId).start());
      }
      return handle;
    },

    async remove(handle: RuntimeHandle): Promise<void> {
      const data = parseHandleData(handle.data);
      if (!data) return;
      ended.delete(data.containerId);
      const info = await managed.inspect(data);
      // Container removed behind our back: its volume may still be there.
      if (!info) return managed.removeVolume(data.volume);
      await managed.remove(
        info.Id,
        info.Config.Labels?.[`${prefix}volume`] ?? data.volume,
        info.State.Paused,
      );
      log("sandbox container removed", { containerName: data.containerName });
    },

    async removeBySandboxId(sandboxId: string): Promise<number> {
      warm.forget(sandboxId);
      const containers = await docker.listContainers({
        all: true,
        filters: { label: [`${managedLabel}=true`, `${prefix}sandbox.id=${sandboxId}`] },
      });
      for (const c of containers)
        await managed.remove(c.Id, c.Labels[`${prefix}volume`], c.State === "paused");
      await managed.removeVolume(`${volumePrefix}${sandboxId}`);
      if (containers.length > 0)
        log("sandbox containers removed by sandbox id", { sandboxId, containers: containers.length });
      return containers.length;
    },

    async ping(): Promise<void> {
      await docker.ping();
    },

    warm(plan: WarmPlan): Promise<void> {
      return warm.configure(plan);
    },

    claimWarm(spec: RuntimeSpec): Promise<WarmClaim | null> {
      return warm.claim(spec);
    },

    claimedWarm(sandboxId: string): Promise<string | null> {
      return warm.claimedKey(sandboxId);
    },

    sweepWarm(hasRecord: (sandboxId: string) => Promise<boolean>): Promise<void> {
      return warm.sweep(hasRecord);
    },

    warmReady(): number {
      return warm.ready;
    },

    async close(): Promise<void> {
      // Containers keep running, warm ones too (the next server adopts them); no more are warmed.
      await warm.close();
      await gateway.close();
    },

    async removeAll(): Promise<void> {
      const filters = [`${managedLabel}=true`, ...Object.entries(extraLabels).map(([k, v]) => `${k}=${v}`)];
      const containers = await docker.listContainers({ all: true, filters: { label: filters } });
      const results = await Promise.allSettled(
        containers.map((c) => managed.remove(c.Id, c.Labels[`${prefix}volume`], c.State === "paused")),
      );
      const { Volumes } = await docker.listVolumes({ filters: { label: filters } });
      results.push(...(await Promise.allSettled((Volumes ?? []).map((v) => managed.removeVolume(v.Name)))));
      const failures = results.filter((r) => r.status === "rejected").map((r) => r.reason);
      if (failures.length > 0)
        throw new AggregateError(failures, "some sandbox containers could not be removed");
    },
  };
  return runtime;
}

/** The workspace volumes' loop disks (SANDBOX_DISK_MB, see docker-disks.ts) where this host allows, and what bounds them. */
function openDisks(
  docker: Docker,
  options: Pick<DockerRuntimeOptions, "diskBytes" | "diskDir" | "diskToolsPath">,
): { disks: DockerDisks | null; workspaceLimit: string } {
  const diskBytes = options.diskBytes ?? 0;
  const opened =
    diskBytes <= 0 || options.diskDir === undefined
      ? "not limited (SANDBOX_DISK_MB=0)"
      : typeof (docker.modem as { socketPath?: unknown }).socketPath !== "string"
        ? "not limited: the engine is not on a local socket (a loop device would be this host's, not the engine's)"
        : DockerDisks.open(options.diskDir, diskBytes, options.diskToolsPath);
  return typeof opened === "string"
    ? { disks: null, workspaceLimit: opened }
    : { disks: opened, workspaceLimit: `${Math.round(diskBytes / 1048576)} MiB (ext4 on a loop device)` };
}
