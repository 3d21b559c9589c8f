import type { ContainerInspectInfo, ImageInspectInfo } from "dockerode";
import Docker from "dockerode";
import tar from "tar-stream";
import { failedPrecondition } from "../../core/errors.ts";
import type {
  ExposedPort,
  RuntimeHandle,
  RuntimeSpec,
  RuntimeStartRequest,
  RuntimeState,
  SandboxRuntime,
  WarmClaim,
  WarmPlan,
} from "../../ports/sandbox-runtime.ts";
import { pollAlive, probeAlive } from "../agent-health.ts";
import { freePort } from "../free-port.ts";
import { isLoopbackHost, LoopbackPorts } from "../host-loopback.ts";
import { rootTools } from "../host-tools.ts";
import {
  containerFingerprint,
  containerPortNames,
  containerSettings,
  describeContainer,
} from "./container-description.ts";
import { DockerDisks } from "./docker-disks.ts";
import { WarmContainers } from "./warm-containers.ts";

const DEFAULT_SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** One progress event of an image pull, as the Docker engine streams it. */
export interface PullProgressEvent {
  status?: string;
  id?: string;
  progress?: string;
  error?: string;
}

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

/** What the runtime stores in {@link RuntimeHandle.data}. */
interface DockerHandleData {
  containerId: string;
  containerName: string;
  volume: string;
  network: string;
  /** False on network "none": health is then the container state. */
  reachable: boolean;
}

/** An engine error carrying the HTTP status (dockerode sets `statusCode`). */
const statusOf = (e: unknown): number | undefined =>
  typeof e === "object" && e !== null && "statusCode" in e && typeof e.statusCode === "number"
    ? e.statusCode
    : undefined;

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

/** Runs `fn`, treating the given engine statuses (e.g. 404 not found, 304 not modified) as success. */
async function tolerate(statuses: number[], fn: () => Promise<unknown>): Promise<void> {
  try {
    await fn();
  } catch (e: unknown) {
    const status = statusOf(e);
    if (status === undefined || !statuses.includes(status)) throw e;
  }
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
  const stopTimeoutSeconds = options.stopTimeoutSeconds ?? 10;
  const healthPollMs = options.healthPollMs ?? 10;
  const probeTimeoutMs = options.probeTimeoutMs ?? 1000;
  const log = options.log ?? (() => {});
  const onPullProgress = options.onPullProgress ?? pullLogger(log);
  const pulls = new Map<string, Promise<ImageInspectInfo>>();
  /** Why a container ended, as its last inspect saw it (its memory limit), by container id (see failureReason). */
  const ended = new Map<string, string>();
  const memoryLimitBytes = settings.memoryBytes;
  const diskBytes = options.diskBytes ?? 0;
  const opened =
    diskBytes <= 0 || options.diskDir === undefined
      ? "not limited (SANDBOX_DISK_MB=0)"
      : typeof (docker.modem as { socketPath?: unknown }).socketPath !== "string"
        ? "not limited: the engine is not on a local socket (a loop device would be this host's, not the engine's)"
        : DockerDisks.open(options.diskDir, diskBytes, options.diskToolsPath);
  const disks = typeof opened === "string" ? null : opened;
  const workspaceLimit =
    typeof opened === "string" ? opened : `${Math.round(diskBytes / 1048576)} MiB (ext4 on a loop device)`;

  /** The image's configuration (its user, default command), pulled first when it is missing. */
  const ensureImage = (image: string): Promise<ImageInspectInfo> => {
    const pending = pulls.get(image);
    if (pending) return pending;
    const pull = (async () => {
      try {
        return await docker.getImage(image).inspect();
      } catch (e: unknown) {
        if (statusOf(e) !== 404) throw e;
      }
      log("pulling image", { image });
      const stream = await docker.pull(image);
      await new Promise<void>((resolve, reject) => {
        docker.modem.followProgress(
          stream,
          (error: Error | null, events: PullProgressEvent[]) => {
            const failed = events?.find((event) => event.error);
            if (error || failed) reject(error ?? new Error(`pull of ${image} failed: ${failed?.error}`));
            else resolve();
          },
          (event: PullProgressEvent) => onPullProgress(image, event),
        );
      });
      log("pulled image", { image });
      return await docker.getImage(image).inspect();
    })().finally(() => pulls.delete(image));
    pulls.set(image, pull);
    return pull;
  };

  /** The managed container behind the handle, or null when it is gone (or not ours). */
  const inspectManaged = async (data: DockerHandleData): Promise<ContainerInspectInfo | null> => {
    try {
      const info = await docker.getContainer(data.containerId).inspect();
      return info.Config.Labels?.[managedLabel] === "true" ? info : null;
    } catch (e: unknown) {
      if (statusOf(e) === 404) return null;
      throw e;
    }
  };

  const requireManaged = async (handle: RuntimeHandle): Promise<[DockerHandleData, ContainerInspectInfo]> => {
    const data = parseHandleData(handle.data);
    const info = data && (await inspectManaged(data));
    if (!data || !info) throw failedPrecondition("the sandbox container does not exist");
    return [data, info];
  };

  /** Removes a workspace volume if it carries our managed label (also when its container is already gone). */
  const removeVolume = async (volume: string): Promise<void> => {
    try {
      const info = await docker.getVolume(volume).inspect();
      if (info.Labels?.[managedLabel] !== "true") return;
    } catch (e: unknown) {
      if (statusOf(e) === 404) return disks?.remove(volume);
      throw e;
    }
    await removeEngineVolume(volume);
    // Its file system after the engine let go of it (the volume's name is ours: no one else's image).
    disks?.remove(volume);
  };

  /**
   * Before a stopped container starts again (its volume is mounted anew): a volume on a loop device must still have
   * that device attached to its own image. After a reboot the device is gone, or another volume's image may hold
   * its number: FAILED_PRECONDITION rather than mounting another sandbox's workspace.
   */
  const checkDisk = async (volume: string): Promise<void> => {
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
  };

  const removeEngineVolume = async (volume: string): Promise<void> => {
    // The engine may release the volume a moment after the container is gone (409: in use).
    for (let attempt = 0; ; attempt++) {
      try {
        await tolerate([404], () => docker.getVolume(volume).remove());
        return;
      } catch (e: unknown) {
        if (statusOf(e) !== 409 || attempt >= 20) throw e;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
  };

  const removeContainerAndVolume = async (
    containerId: string,
    volume: string | undefined,
    paused: boolean,
  ): Promise<void> => {
    const container = docker.getContainer(containerId);
    // A paused container cannot act on SIGTERM: unpause first so that the stop is graceful.
    if (paused) await unpause(container);
    await tolerate([304, 404], () => container.stop({ t: stopTimeoutSeconds }));
    await tolerate([404], () => container.remove({ force: true, v: true }));
    if (volume) await removeVolume(volume);
  };

  // Containers on a bridge reach the host at host.docker.internal, where the host's loopback services are not:
  // the allowed ports are forwarded there (host-loopback.ts), made once, at the first start that needs them.
  const bridged = network !== "host" && network !== "none";
  const hostPortsWanted = new Set(options.hostPorts ?? []);
  let forwarding: Promise<LoopbackPorts | null> | null = null;
  const gatewayPorts = (): Promise<LoopbackPorts | null> => {
    forwarding ??= (async () => {
      const tools = rootTools(["iptables"], options.searchPath ?? DEFAULT_SEARCH_PATH, "not root");
      const local = typeof (docker.modem as { socketPath?: unknown }).socketPath === "string";
      if (!bridged || typeof tools === "string" || !local) {
        if (hostPortsWanted.size > 0)
          log(
            "host loopback ports not forwarded to containers: that needs root, iptables and a local engine",
            {
              ports: [...hostPortsWanted],
            },
          );
        return null;
      }
      try {
        const info = (await docker.getNetwork(network).inspect()) as {
          Id: string;
          Driver?: string;
          Options?: Record<string, string>;
        };
        const iface =
          info.Options?.["com.docker.network.bridge.name"] ??
          (info.Driver === "bridge" ? `br-${info.Id.slice(0, 12)}` : null);
        if (iface === null) return null;
        const ports = new LoopbackPorts(tools.iptables);
        ports.forwardFrom(iface);
        for (const port of hostPortsWanted) ports.allowPort(port);
        log("host loopback ports forwarded to containers at the host gateway", {
          bridge: iface,
          ports: ports.ports,
        });
        return ports;
      } catch (e: unknown) {
        log("host loopback ports not forwarded to containers", { error: String(e) });
        return null;
      }
    })();
    return forwarding;
  };

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
    const imageConfig = (await ensureImage(image)).Config;
    // A free loopback port of this machine for each port the container publishes (none on network "none").
    const ports: ExposedPort[] = await Promise.all(
      containerPortNames(network).map(async (name) => ({ name, port: await freePort("127.0.0.1") })),
    );
    if (bridged && hostPortsWanted.size > 0) await gatewayPorts();
    const { create, handle, volume, labels, user, owned } = describeContainer(settings, {
      ...args,
      image: imageConfig,
      ports,
    });
    try {
      await docker.createVolume({
        Name: volume,
        Labels: labels,
        ...(disks === null ? {} : { Driver: "local", DriverOpts: { ...disks.create(volume) } }),
      });
    } catch (e: unknown) {
      disks?.remove(volume);
      throw e;
    }
    let containerId: string | undefined;
    try {
      const container = await docker.createContainer(create);
      containerId = container.id;
      // The folders the run user must own (see describeContainer): a tar of folder entries extracted by the
      // engine, which chowns what it extracts.
      if (owned !== null)
        await container.putArchive(await ownedFoldersTar(owned.folders, owned.owner), { path: "/" });
      await container.start();
    } catch (e: unknown) {
      // Leave nothing half-made behind (a name conflict means the container is someone else's: keep it).
      if (containerId) await removeContainerAndVolume(containerId, volume, false).catch(() => {});
      // 409: a container of that name exists (the same sandbox id started twice): the volume is its.
      else if (statusOf(e) !== 409) await removeVolume(volume).catch(() => {});
      throw e;
    }
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
    const notRunning = async (): Promise<boolean> => (await inspectManaged(data))?.State.Running !== true;
    if (!data.reachable) {
      // Nothing to probe: healthy means running (a container that exits at once never becomes healthy).
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const info = await inspectManaged(data);
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
    imageId: async (image) => (await ensureImage(image)).Id,
    create: (args) => createSandbox(args),
    alive: async (handle) =>
      parseHandleData(handle.data)?.reachable === false
        ? (await runtime.inspect(handle)) === "running"
        : probeAlive(handle.agentUrl, probeTimeoutMs),
    // Not a user's wait: a coarser poll than a start's (the pool counts a container once it answers).
    waitHealthy: (handle, timeoutMs, stop) => healthWait(handle, timeoutMs, stop, 25),
    remove: (containerId, volume, paused) => removeContainerAndVolume(containerId, volume, paused),
    log,
  });

  const runtime: DockerRuntime = {
    kind: "docker",
    workspaceLimit,

    reachHost(url: string): void {
      let parsed: URL;
      try {
        parsed = new URL(url);
      } catch {
        return;
      }
      if (!isLoopbackHost(parsed.hostname) || !bridged) return;
      const port = Number(parsed.port || (parsed.protocol === "https:" ? 443 : 80));
      hostPortsWanted.add(port);
      void gatewayPorts().then((ports) => ports?.allowPort(port));
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
      const info = data && (await inspectManaged(data));
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
      const [data, info] = await requireManaged(handle);
      if (info.State.Status === "running" && !info.State.Paused) {
        // 409: it stopped or got paused in between; the caller's next inspect tells which.
        await tolerate([409], () => docker.getContainer(data.containerId).pause());
      }
    },

    async resume(handle: RuntimeHandle): Promise<RuntimeHandle> {
      const [data, info] = await requireManaged(handle);
      const container = docker.getContainer(data.containerId);
      if (info.State.Paused || info.State.Status === "paused") await unpause(container);
      else if (info.State.Status === "exited" || info.State.Status === "created") {
        await checkDisk(data.volume);
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
      const [data, info] = await requireManaged(handle);
      if (info.State.Status === "running" && !info.State.Paused)
        throw failedPrecondition("the sandbox container is still running");
      if (info.State.Status === "removing")
        throw failedPrecondition("the sandbox container is being removed");
      if (info.State.Paused || info.State.Status === "paused")
        await unpause(docker.getContainer(data.containerId));
      else {
        await checkDisk(data.volume);
        await tolerate([304], () => docker.getContainer(data.containerId).start());
      }
      return handle;
    },

    async remove(handle: RuntimeHandle): Promise<void> {
      const data = parseHandleData(handle.data);
      if (!data) return;
      ended.delete(data.containerId);
      const info = await inspectManaged(data);
      // Container removed behind our back: its volume may still be there.
      if (!info) return removeVolume(data.volume);
      await removeContainerAndVolume(
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
        await removeContainerAndVolume(c.Id, c.Labels[`${prefix}volume`], c.State === "paused");
      await removeVolume(`${volumePrefix}${sandboxId}`);
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
      (await forwarding)?.close();
    },

    async removeAll(): Promise<void> {
      const filters = [`${managedLabel}=true`, ...Object.entries(extraLabels).map(([k, v]) => `${k}=${v}`)];
      const containers = await docker.listContainers({ all: true, filters: { label: filters } });
      const results = await Promise.allSettled(
        containers.map((c) =>
          removeContainerAndVolume(c.Id, c.Labels[`${prefix}volume`], c.State === "paused"),
        ),
      );
      const { Volumes } = await docker.listVolumes({ filters: { label: filters } });
      results.push(...(await Promise.allSettled((Volumes ?? []).map((v) => removeVolume(v.Name)))));
      const failures = results.filter((r) => r.status === "rejected").map((r) => r.reason);
      if (failures.length > 0)
        throw new AggregateError(failures, "some sandbox containers could not be removed");
    },
  };
  return runtime;
}

/** Logs pull progress only when an event's status changes (the engine sends many progress ticks). */
function pullLogger(
  log: (msg: string, data?: object) => void,
): (image: string, event: PullProgressEvent) => void {
  const last = new Map<string, string>();
  return (image, event) => {
    const key = `${image}/${event.id ?? ""}`;
    if (event.status === undefined || last.get(key) === event.status) return;
    last.set(key, event.status);
    log("image pull progress", { image, id: event.id, status: event.status });
  };
}

/** Validates stored handle data; null when it is not what this runtime wrote. */
function parseHandleData(data: Record<string, unknown>): DockerHandleData | null {
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
