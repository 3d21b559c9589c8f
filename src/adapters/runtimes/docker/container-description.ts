/**
 * The container of a Docker sandbox, described without Docker: from the spec, the image's configuration, the
 * loopback ports chosen for it and the runtime's settings, the options `createContainer` takes and the handle they
 * imply. No I/O: the runtime (docker-runtime.ts) pulls the image, picks the ports and talks to the engine.
 */
import type { ContainerCreateOptions } from "dockerode";
import { isBuiltinAgentCommand } from "../../../../agent/shared/builtin-agent.ts";
import type { ExposedPort, RuntimeHandle, RuntimeSpec } from "../../../ports/sandbox-runtime.ts";
import { withPort } from "../free-port.ts";

/** The user of a container whose image would run as root (and SANDBOX_DOCKER_USER is not set). */
export const FALLBACK_USER = "1000:1000";
/** Sized for the agent-server with its browser (Chromium) and VS Code: each is several hundred MiB and threads. */
export const DEFAULT_MEMORY_BYTES = 4096 * 1024 * 1024;
export const DEFAULT_PIDS_LIMIT = 2048;
/** /dev/shm: Chromium keeps its renderer memory there; Docker's own default (64 MiB) makes it crash. */
export const DEFAULT_SHM_BYTES = 512 * 1024 * 1024;

/**
 * The ports a sandbox publishes, named and numbered inside the container as the reference's Docker sandboxes do:
 * the agent-server, VS Code, and two for applications the agent starts.
 */
const PUBLISHED_PORTS: readonly { name: string; containerPort: number }[] = [
  { name: "AGENT_SERVER", containerPort: 8000 },
  { name: "VSCODE", containerPort: 8001 },
  { name: "WORKER_1", containerPort: 8011 },
  { name: "WORKER_2", containerPort: 8012 },
];

/** The host as a container on a network of its own reaches it (mapped with ExtraHosts host-gateway). */
export const HOST_GATEWAY = "host.docker.internal";

/** A URL on this machine's loopback rewritten to the host gateway, as a container on its own network reaches it. */
export function viaHostGateway(url: string): string {
  return url.replace(
    /^(https?:\/\/)(localhost|127(?:\.\d{1,3}){3}|\[::1\])(?=[:/]|$)/,
    "$1host.docker.internal",
  );
}

/** The runtime's options that shape every container it makes, defaults applied (see {@link containerSettings}). */
export interface ContainerSettings {
  /** "host", "none" or the network the containers join (a bridge). */
  network: string;
  /** Prefix of the runtime's labels (`<prefix>managed`, ...). */
  labelPrefix: string;
  /** Labels on every container and volume. */
  extraLabels: Record<string, string>;
  /** Workspace volumes: prefix + sandbox id. */
  volumePrefix: string;
  /** The agent's port inside the container on networks other than host. */
  agentPort: number;
  /** `uid[:gid]` the container runs as; undefined: the image's own user ({@link FALLBACK_USER} for root). */
  user: string | undefined;
  memoryBytes: number;
  pidsLimit: number;
  shmBytes: number;
  nanoCpus: number | undefined;
  /** docker-init as PID 1. */
  init: boolean;
  /** Host folders bound read-only at the same path. */
  readOnlyPaths: readonly string[];
}

/** {@link ContainerSettings} from the runtime's options (DockerRuntimeOptions), with the runtime's defaults. */
export function containerSettings(options: {
  network?: string;
  labelPrefix?: string;
  labels?: Record<string, string>;
  volumePrefix?: string;
  agentPort?: number;
  user?: string;
  memoryBytes?: number;
  pidsLimit?: number;
  shmBytes?: number;
  nanoCpus?: number;
  init?: boolean;
  readOnlyPaths?: readonly string[];
}): ContainerSettings {
  return {
    network: options.network ?? "bridge",
    labelPrefix: options.labelPrefix ?? "workspace.",
    extraLabels: options.labels ?? {},
    volumePrefix: options.volumePrefix ?? "openhands-workspace-",
    agentPort: options.agentPort ?? 8000,
    user: options.user,
    memoryBytes: options.memoryBytes ?? DEFAULT_MEMORY_BYTES,
    pidsLimit: options.pidsLimit ?? DEFAULT_PIDS_LIMIT,
    shmBytes: options.shmBytes ?? DEFAULT_SHM_BYTES,
    nanoCpus: options.nanoCpus,
    init: options.init ?? true,
    readOnlyPaths: options.readOnlyPaths ?? [],
  };
}

/**
 * Everything of the settings that shapes a container, as one string: a warm container made under other settings is
 * not adopted (see warm-containers.ts). Its form is what warm containers already on an engine carry: keep it.
 */
export function containerFingerprint(s: ContainerSettings): string {
  return JSON.stringify([
    s.network,
    s.user ?? null,
    s.memoryBytes,
    s.pidsLimit,
    s.nanoCpus ?? null,
    s.shmBytes,
    s.init,
    s.agentPort,
    s.volumePrefix,
    s.readOnlyPaths,
  ]);
}

/**
 * The names of the ports a container on `network` publishes, for which the runtime picks a free loopback port each
 * (in this order: the agent's first); none on network "none", where nothing can be reached.
 */
export function containerPortNames(network: string): string[] {
  return network === "none" ? [] : PUBLISHED_PORTS.map((p) => p.name);
}

/** One container to describe: the sandbox, its image's configuration and the loopback ports chosen for it. */
export interface ContainerRequest {
  sandboxId: string;
  /** Its `id` is the image. */
  spec: RuntimeSpec;
  sessionApiKey: string;
  containerName: string;
  /** Labels beside the runtime's own (a warm container's). */
  labels: Record<string, string>;
  /** The image's configuration: its user and default command. */
  image: { User?: string; Cmd?: readonly string[] | null };
  /** A free port of 127.0.0.1 for each of {@link containerPortNames}, in that order. */
  ports: readonly ExposedPort[];
}

/** What {@link describeContainer} gives. */
export interface ContainerDescription {
  /** What the engine's createContainer takes. */
  create: ContainerCreateOptions;
  /** The sandbox's handle, its container id "" until the engine made it (the `<prefix>handle` label holds it). */
  handle: RuntimeHandle;
  /** The workspace volume, mounted at the working folder. */
  volume: string;
  /** The labels of the container, which its volume carries too. */
  labels: Record<string, string>;
  /** The user the container runs as. */
  user: string;
  /**
   * Folders to give that user before the container starts, parents first (for a numeric user other than the
   * image's): null when there are none.
   */
  owned: { folders: string[]; owner: { uid: number; gid: number } } | null;
}

/**
 * The container of a sandbox:
 * - env = the spec's `initialEnv` + `OH_SESSION_API_KEYS_0`/`SESSION_API_KEY` + `PORT` + `HOST` + `WORKSPACE_DIR`,
 *   each published port's number under its name and `OH_VSCODE_PORT`; off the host's network a loopback webhook
 *   URL goes through the host gateway, which `SANDBOX_HOST_GATEWAY` names;
 * - command = the spec's (`{port}`, `{host}` replaced), or for the built-in marker the image's default (plus any
 *   arguments after the marker, replaced the same way);
 * - labels `<prefix>managed=true`, `<prefix>sandbox.id`, `<prefix>volume`, `<prefix>handle` (the handle's JSON);
 * - user `settings.user`, else the image's unless it is root, else {@link FALLBACK_USER};
 * - nothing of the host but the workspace volume and the read-only paths; every capability dropped,
 *   `no-new-privileges`, memory, pids and /dev/shm limits, the engine's log bounded; on a bridge the ports published
 *   on 127.0.0.1 and host.docker.internal mapped to the host gateway.
 */
export function describeContainer(
  settings: ContainerSettings,
  request: ContainerRequest,
): ContainerDescription {
  const { network, agentPort, labelPrefix: prefix } = settings;
  const { sandboxId, spec, sessionApiKey, containerName, ports } = request;
  const image = spec.id;
  const volume = `${settings.volumePrefix}${sandboxId}`;
  const workingDir = spec.workingDir || "/workspace";
  const hostNetwork = network === "host";
  const reachable = network !== "none";
  // Every published port has its own free loopback port of this machine. Host network: the agent binds those
  // ports itself, on loopback only. Other networks: the container's fixed ports are published on 127.0.0.1.
  // Network "none": nothing can be reached, port 0 (a URL that can never hit an unrelated service).
  const hostPort = ports[0]?.port ?? 0;
  const inContainer = (name: string): number => {
    if (hostNetwork) return ports.find((p) => p.name === name)?.port ?? 0;
    return name === "AGENT_SERVER"
      ? agentPort
      : (PUBLISHED_PORTS.find((p) => p.name === name)?.containerPort ?? 0);
  };
  const containerPort = hostNetwork ? hostPort : agentPort;
  const listenHost = hostNetwork || !reachable ? "127.0.0.1" : "0.0.0.0";
  const handle: RuntimeHandle = {
    data: { containerId: "", containerName, volume, network, reachable },
    agentUrl: `http://127.0.0.1:${hostPort}`,
    port: hostPort,
    ...(reachable && !hostNetwork ? { hostGateway: HOST_GATEWAY } : {}),
    ...(ports.length > 1 ? { exposedPorts: ports.slice(1), workingDir } : {}),
  };
  const labels: Record<string, string> = {
    ...settings.extraLabels,
    ...request.labels,
    [`${prefix}managed`]: "true",
    [`${prefix}sandbox.id`]: sandboxId,
    [`${prefix}volume`]: volume,
    // What a warm container's claim needs to answer without asking the engine about ports.
    [`${prefix}handle`]: JSON.stringify(handle),
  };
  const env: Record<string, string> = {
    ...spec.initialEnv,
    OH_SESSION_API_KEYS_0: sessionApiKey,
    SESSION_API_KEY: sessionApiKey,
    PORT: String(containerPort),
    HOST: listenHost,
    WORKSPACE_DIR: workingDir,
  };
  // As the reference: each published port's number under its name (the agent tells the model where it can
  // serve applications); VS Code on its own port, so that sandboxes sharing the host network never collide.
  for (const p of ports) env[p.name] = String(p.port);
  if (reachable) env.OH_VSCODE_PORT = String(inContainer("VSCODE"));
  // The webhook must reach this service from inside the container: through the host gateway on a network of
  // its own (host.docker.internal, mapped below), where loopback would be the container itself.
  const hook = env.OH_WEBHOOKS_0_BASE_URL;
  if (hook !== undefined && !hostNetwork) env.OH_WEBHOOKS_0_BASE_URL = viaHostGateway(hook);
  // The built-in agent rewrites a loopback model URL there too (the agent-server gets it rewritten in its start
  // request: RuntimeHandle.hostGateway).
  if (reachable && !hostNetwork) env.SANDBOX_HOST_GATEWAY = HOST_GATEWAY;
  // The image's own user (as the reference, which passes none), unless `settings.user` says otherwise; never
  // root: an image without a user runs as FALLBACK_USER. A user other than the image's gets the workspace and
  // the agent-server's state folders, which the image made for its own user.
  const imageUser = nonRootUser(request.image.User);
  const user = settings.user ?? imageUser ?? FALLBACK_USER;
  const owner = settings.user !== undefined || imageUser === null ? numericUser(user) : null;
  // Nothing of the host but the workspace volume (and the local repository folders, read-only); a non-root user
  // without capabilities that cannot gain privileges (setuid binaries: the image's sudo does not work), with
  // memory and process limits.
  const hostConfig: NonNullable<ContainerCreateOptions["HostConfig"]> = {
    NetworkMode: network,
    Init: settings.init,
    Mounts: [
      { Type: "volume", Source: volume, Target: workingDir },
      ...settings.readOnlyPaths.map((path) => ({
        Type: "bind" as const,
        Source: path,
        Target: path,
        ReadOnly: true,
      })),
    ],
    Privileged: false,
    CapDrop: ["ALL"],
    SecurityOpt: ["no-new-privileges"],
    Memory: settings.memoryBytes,
    PidsLimit: settings.pidsLimit,
    ShmSize: settings.shmBytes,
    // The container's output kept by the engine is bounded (2 files of 10 MB), whatever the engine's default
    // driver: a sandbox printing without end fills no disk.
    LogConfig: { Type: "json-file", Config: { "max-size": "10m", "max-file": "2" } },
  };
  if (!hostNetwork && reachable) hostConfig.ExtraHosts = ["host.docker.internal:host-gateway"];
  if (settings.nanoCpus !== undefined) hostConfig.NanoCpus = settings.nanoCpus;
  const create: ContainerCreateOptions = {
    name: containerName,
    Image: image,
    User: user,
    Env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
    WorkingDir: workingDir,
    Labels: labels,
    HostConfig: hostConfig,
  };
  if (!isBuiltinAgentCommand(spec.command)) create.Cmd = withPort(spec.command, containerPort, listenHost);
  else if (spec.command.length > 1) {
    // The built-in marker with extra arguments: the image's default command plus those arguments.
    create.Cmd = withPort(
      [...(request.image.Cmd ?? []), ...spec.command.slice(1)],
      containerPort,
      listenHost,
    );
  }
  if (reachable && !hostNetwork) {
    create.ExposedPorts = {};
    hostConfig.PortBindings = {};
    for (const p of ports) {
      const key = `${inContainer(p.name)}/tcp`;
      create.ExposedPorts[key] = {};
      hostConfig.PortBindings[key] = [{ HostIp: "127.0.0.1", HostPort: String(p.port) }];
    }
  }
  // Folders the run user must own: the working folder (a new volume belongs to root unless the image has the
  // folder it is mounted on) and, for a user other than the image's, the agent-server's state folders and their
  // parent.
  const owned = owner === null ? null : { folders: ownedFolders(workingDir, env), owner };
  return { create, handle, volume, labels, user, owned };
}

/** `user` unless it is empty or root (by name or uid 0), else null. */
function nonRootUser(user: string | undefined): string | null {
  const u = (user ?? "").trim();
  return u === "" || /^(root|0)(:.*)?$/.test(u) ? null : u;
}

/** The uid and gid of a numeric `uid[:gid]` (gid defaults to the uid), else null (a user name). */
function numericUser(user: string): { uid: number; gid: number } | null {
  const m = /^(\d+)(?::(\d+))?$/.exec(user);
  return m ? { uid: Number(m[1]), gid: Number(m[2] ?? m[1]) } : null;
}

/**
 * The folders a container's user other than the image's must own, parents first: the working folder's parent
 * (the agent-server's `/workspace`) unless it is `/`, the working folder, and the agent-server's state folders
 * named by its environment.
 */
function ownedFolders(workingDir: string, env: Record<string, string>): string[] {
  const folders = new Set<string>();
  const parent = workingDir.replace(/\/+$/, "").replace(/\/[^/]*$/, "");
  if (parent !== "") folders.add(parent);
  folders.add(workingDir);
  for (const name of ["OH_CONVERSATIONS_PATH", "OH_BASH_EVENTS_DIR"]) {
    const path = env[name];
    if (path?.startsWith("/")) folders.add(path);
  }
  return [...folders];
}
