/**
 * A process sandbox's launch, described without I/O: from the spec, the port, the user and network chosen for it
 * and the runtime's settings, its environment, its command, bubblewrap's layout, the network's prefix, what goes on
 * its stdin and the handle it gets. The launcher (sandbox-launch.ts) makes the folders, claims the uid, checks the
 * disk, leases the network and spawns.
 */
import { isBuiltinAgentCommand } from "../../../../agent/shared/builtin-agent.ts";
import type { RuntimeHandle, RuntimeSpec } from "../../../ports/sandbox-runtime.ts";
import { withPort } from "../free-port.ts";
import type { BwrapLayout, SandboxUser } from "./bwrap.ts";
import type { ProcessHandleData } from "./process-table.ts";
import { type NetLease, viaGateway } from "./sandbox-network.ts";

/** The variables holding the sandbox's session key, which a built-in agent takes on its stdin instead. */
const KEY_VARIABLES = ["SESSION_API_KEY", "OH_SESSION_API_KEYS_0"] as const;

/**
 * Node options that open the inspector (a debugger anyone on the host's loopback could reach): taken out of a
 * spec's NODE_OPTIONS for the built-in agent, with the value of a separate `--inspect-port N`.
 */
const INSPECTOR_OPTION = /^--(inspect|debug)(-[a-z-]+)?(=|$)/;

/** NODE_OPTIONS without the options that open Node's inspector; undefined when nothing else is left. */
export function withoutInspector(options: string): string | undefined {
  const kept: string[] = [];
  const words = options.split(/\s+/).filter((w) => w !== "");
  for (let i = 0; i < words.length; i++) {
    const word = words[i] as string;
    if (!INSPECTOR_OPTION.test(word)) {
      kept.push(word);
      continue;
    }
    // `--inspect-port 9229`, `--debug-port 9229`: the value is the next word.
    if (/^--(inspect|debug)-port$/.test(word)) i++;
  }
  return kept.length > 0 ? kept.join(" ") : undefined;
}

/** What every launch of a runtime shares (see LaunchContext, which carries the same fields). */
export interface LaunchSettings {
  /** Address the agent listens on on the host's network, and the host of its URL there. */
  host: string;
  urlHost: string;
  baseEnv: Record<string, string>;
  /** The built-in agent's compile cache folder; null or "" for none. */
  compileCacheDir: string | null;
  /** What runs the built-in agent (node and its main file). */
  agentCommand: readonly string[];
  /** As root: the execute-only Node binary isolated built-in agents run from; null: none. */
  agentBinary: string | null;
  /** What the built-in agent reads (given read-only to isolated sandboxes). */
  agentFiles: readonly string[];
  readOnlyPaths: readonly string[];
  asRoot: boolean;
}

/** What the environment of a sandbox's main process depends on (see {@link sandboxEnv}). */
export interface EnvRequest {
  workspace: string;
  cwd: string;
  spec: RuntimeSpec;
  /** Null for a warm agent, which takes its claim on its stdin. */
  sessionApiKey: string | null;
  port: number;
  /** The agent is handed its socket already listening, as descriptor 3. */
  listening: boolean;
  /** Its network of its own; null: the host's. */
  net: NetLease | null;
}

/**
 * The environment of a sandbox's main process (a warm agent gets it at its claim, the same way): the base
 * environment, HOME = the workspace, the spec's `initialEnv`, the session key (or `SANDBOX_AGENT_CLAIM=stdin` for a
 * warm agent), `PORT`, `HOST`, `WORKSPACE_DIR`, `LISTEN_FD`, the built-in agent's compile cache; in a network of its
 * own its gateway (`SANDBOX_HOST_GATEWAY`), through which a loopback webhook URL goes. The built-in agent's
 * NODE_OPTIONS lose what opens an inspector.
 */
export function sandboxEnv(settings: LaunchSettings, request: EnvRequest): Record<string, string> {
  const { baseEnv, compileCacheDir } = settings;
  const { workspace, cwd, spec, sessionApiKey, port, listening, net } = request;
  const host = net === null ? settings.host : "0.0.0.0";
  const builtin = isBuiltinAgentCommand(spec.command);
  const env: Record<string, string> = {
    ...baseEnv,
    HOME: workspace,
    ...spec.initialEnv,
    ...(sessionApiKey === null
      ? { SANDBOX_AGENT_CLAIM: "stdin" }
      : { SESSION_API_KEY: sessionApiKey, OH_SESSION_API_KEYS_0: sessionApiKey }),
    PORT: String(port),
    HOST: host,
    WORKSPACE_DIR: cwd,
    ...(listening ? { LISTEN_FD: "3" } : {}),
    ...(compileCacheDir && builtin ? { NODE_COMPILE_CACHE: compileCacheDir } : {}),
    ...(net === null ? {} : { SANDBOX_HOST_GATEWAY: net.gateway }),
  };
  // In a network of its own the sandbox reaches the host at its gateway: a loopback webhook URL is rewritten
  // there (its port is let through by reachHost, from the service's own configuration).
  if (net !== null && env.OH_WEBHOOKS_0_BASE_URL !== undefined)
    env.OH_WEBHOOKS_0_BASE_URL = viaGateway(env.OH_WEBHOOKS_0_BASE_URL, net.gateway);
  // No debugger for the built-in agent, whatever the spec says: it holds the session key, the model key and the
  // secrets, and its inspector would listen on the host's loopback, which other sandboxes reach.
  if (builtin && env.NODE_OPTIONS !== undefined) {
    const kept = withoutInspector(env.NODE_OPTIONS);
    if (kept === undefined) delete env.NODE_OPTIONS;
    else env.NODE_OPTIONS = kept;
  }
  return env;
}

/** The sandbox networks as a launch needs them (SandboxNetwork). */
export interface LaunchNetwork {
  /** The argv prefix that runs a command in a lease's network (nsenter). */
  enter(lease: NetLease): string[];
  /** A resolv.conf naming the networks' DNS forwarder, bound over /etc/resolv.conf; null: none. */
  readonly resolvConf: string | null;
}

/** One launch to describe: {@link EnvRequest} plus how it is isolated. */
export interface LaunchRequest extends EnvRequest {
  /** Under bubblewrap as `user`, with these tmpfs sizes; null: a plain child process. */
  isolation: { user: SandboxUser; tmpBytes?: number | undefined; shmBytes?: number | undefined } | null;
  /** The runtime's sandbox networks (null: sandboxes share the host's). */
  network: LaunchNetwork | null;
  /** The Node binary this server runs (process.execPath): a built-in agent run by it may run from agentBinary. */
  execPath: string;
}

/** What {@link describeLaunch} gives. */
export interface LaunchDescription {
  /** The sandbox's own command: the built-in agent's or the spec's, `{port}` and `{host}` replaced. */
  command: string[];
  env: Record<string, string>;
  /** bubblewrap's layout, whose argv goes before the command (bwrapArgs); null: not isolated. */
  layout: BwrapLayout | null;
  /** What enters the sandbox's network, before everything else (nsenter); [] without one. */
  enter: string[];
  /** The built-in agent's compile cache, made when missing; `shared`: filled by the server, read-only to it. */
  compileCache: { dir: string; shared: boolean } | null;
  /** The line the built-in agent reads on its stdin at once (its environment and cwd); null: none now. */
  claim: string | null;
  /** The environment it is spawned with: without the key when the key goes on its stdin. */
  spawnEnv: Record<string, string>;
  stdin: "pipe" | "ignore";
}

/**
 * The launch of a sandbox's main process:
 * - command: the built-in agent's argv plus what follows the marker (isolated as root: from the execute-only Node
 *   binary, so that the commands it runs, which share its uid, cannot read its memory), or the spec's; `{port}`
 *   replaced, `{host}` 0.0.0.0 in a network of its own;
 * - layout: the workspace read-write, the runtime's read-only paths, for the built-in agent its files, its binary
 *   and the shared compile cache read-only; tmpfs sizes; the network's resolv.conf;
 * - stdin: a warm agent's claim comes later ("pipe"); the built-in agent takes its environment, key included, at
 *   once, so that its /proc environ, which the commands it runs can read, holds no key; others get none.
 */
export function describeLaunch(settings: LaunchSettings, request: LaunchRequest): LaunchDescription {
  const { agentCommand, agentBinary, compileCacheDir, asRoot } = settings;
  const { spec, sessionApiKey, port, net, isolation, network } = request;
  const builtin = isBuiltinAgentCommand(spec.command);
  const agentArgv =
    isolation !== null && asRoot && agentBinary !== null && agentCommand[0] === request.execPath
      ? [agentBinary, ...agentCommand.slice(1)]
      : agentCommand;
  const command = withPort(
    builtin ? [...agentArgv, ...spec.command.slice(1)] : spec.command,
    port,
    net === null ? undefined : "0.0.0.0",
  );
  const env = sandboxEnv(settings, request);
  const readOnly = [...settings.readOnlyPaths];
  let compileCache: LaunchDescription["compileCache"] = null;
  if (builtin) {
    readOnly.push(...settings.agentFiles);
    if (agentArgv !== agentCommand) readOnly.push(agentArgv[0] as string);
    if (compileCacheDir) {
      // Shared by every sandbox, so isolated ones only read it; the server fills it (see CompileCache.warm).
      compileCache = { dir: compileCacheDir, shared: isolation !== null };
      if (isolation !== null) readOnly.push(compileCacheDir);
    }
  }
  const layout: BwrapLayout | null =
    isolation === null
      ? null
      : {
          workspace: request.workspace,
          cwd: request.cwd,
          readOnly,
          user: isolation.user,
          asRoot,
          ...(isolation.tmpBytes ? { tmpBytes: isolation.tmpBytes } : {}),
          ...(isolation.shmBytes ? { shmBytes: isolation.shmBytes } : {}),
          ...(net !== null && network?.resolvConf ? { resolvConf: network.resolvConf } : {}),
        };
  const enter = net !== null && network ? network.enter(net) : [];
  const claim = builtin && sessionApiKey !== null ? `${JSON.stringify({ env, cwd: request.cwd })}\n` : null;
  const spawnEnv = claim === null ? env : { ...withoutKeys(env), SANDBOX_AGENT_CLAIM: "now" };
  const stdin = sessionApiKey === null || claim !== null ? "pipe" : "ignore";
  return { command, env, layout, enter, compileCache, claim, spawnEnv, stdin };
}

/**
 * The handle of a launched sandbox: its process (pid, group, start time), port, workspace, how it is isolated and
 * its network; its agent at the network's address or, on the host's network, at `urlHost`.
 */
export function launchedHandle(
  settings: Pick<LaunchSettings, "urlHost">,
  launched: {
    pid: number;
    startTimeTicks: number;
    port: number;
    workspace: string;
    /** The uid it runs as under bubblewrap; null: a plain child process. */
    isolatedUid: number | null;
    net: NetLease | null;
  },
): RuntimeHandle {
  const { pid, port, net } = launched;
  const data: ProcessHandleData = {
    pid,
    pgid: pid,
    port,
    workspace: launched.workspace,
    startTimeTicks: launched.startTimeTicks,
    ...(launched.isolatedUid !== null ? { isolation: "bwrap" as const, uid: launched.isolatedUid } : {}),
    ...(net === null ? {} : { net }),
  };
  return {
    data: { ...data },
    agentUrl: `http://${net === null ? settings.urlHost : net.address}:${port}`,
    port,
    ...(net === null ? {} : { hostGateway: net.gateway }),
  };
}

/** The environment without the session key's variables. */
function withoutKeys(env: Record<string, string>): Record<string, string> {
  const out = { ...env };
  for (const name of KEY_VARIABLES) delete out[name];
  return out;
}
