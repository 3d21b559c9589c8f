/**
 * What the process runtime decides once, when it is created (see createProcessRuntime): how sandboxes are isolated,
 * whether they get networks of their own, and which files the built-in agent reads (for bubblewrap's read-only
 * binds). And the checks of each start that follow from those decisions: the working directory inside the
 * workspace, and one user only where sandboxes are not isolated.
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, isAbsolute, join, relative, resolve } from "node:path";
import { BUILTIN_AGENT_MAIN, BUILTIN_AGENT_PACKAGES } from "../../../../agent/shared/builtin-agent.ts";
import { failedPrecondition } from "../../../core/errors.ts";
import type { RuntimeSpec } from "../../../ports/sandbox-runtime.ts";
import type { IsolationSetting } from "./bwrap.ts";
import { DEFAULT_PATH } from "./bwrap.ts";
import type {
  ProcessIsolation,
  ProcessNetworkReport,
  ProcessRuntimeOptions,
} from "./process-runtime-types.ts";
import { SandboxNetwork } from "./sandbox-network.ts";

/**
 * The isolation a runtime uses: bwrap when asked (throws when the probe fails) or when auto and the probe
 * succeeds; else none, restricted to one user unless `none` was asked for explicitly.
 */
export function decideIsolation(setting: IsolationSetting, probe: () => string | null): ProcessIsolation {
  if (setting === "none") return { mode: "none", singleUser: false };
  const reason = probe();
  if (reason === null) return { mode: "bwrap", singleUser: false };
  if (setting === "bwrap")
    throw new Error(`SANDBOX_ISOLATION=bwrap, but bubblewrap cannot run sandboxes here: ${reason}`);
  return { mode: "none", singleUser: true, reason };
}

/**
 * The sandboxes' networks (null: they share the host's) and how they are networked, for the start log: networks of
 * their own under bubblewrap unless the setting says `host`; throws when `isolated` is asked and they cannot be.
 */
export function openNetwork(
  options: Pick<ProcessRuntimeOptions, "network" | "subnet" | "hostPorts" | "searchPath">,
  host: { workspaceRoot: string; isolation: ProcessIsolation; asRoot: boolean; log: (msg: string) => void },
): { network: SandboxNetwork | null; report: ProcessNetworkReport } {
  const setting = options.network ?? "auto";
  if (setting === "host") return { network: null, report: { mode: "host", reason: "SANDBOX_NETWORK=host" } };
  if (host.isolation.mode !== "bwrap")
    return { network: null, report: { mode: "host", reason: "sandboxes are not isolated (no bubblewrap)" } };
  const made = SandboxNetwork.create(
    {
      root: host.workspaceRoot,
      ...(options.subnet ? { subnet: options.subnet } : {}),
      hostPorts: options.hostPorts ?? [],
      searchPath: options.searchPath ?? DEFAULT_PATH,
      log: host.log,
    },
    host.asRoot,
  );
  if (typeof made === "string") {
    if (setting === "isolated")
      throw new Error(`SANDBOX_NETWORK=isolated, but sandboxes cannot have networks of their own: ${made}`);
    return { network: null, report: { mode: "host", reason: made } };
  }
  return {
    network: made,
    report: {
      mode: "isolated",
      subnet: made.subnet,
      hostPorts: made.allowedPorts,
      dns: made.resolvConf === null ? null : made.dnsAddress,
    },
  };
}

/**
 * What the built-in agent reads: its folder, the package.json that makes its modules ES modules, and the two
 * packages its conversations load (the events websocket and the model client), wherever Node resolves them.
 */
export function builtinAgentFiles(log?: (msg: string, data?: object) => void): string[] {
  const agentFiles = [dirname(BUILTIN_AGENT_MAIN)];
  for (let dir = dirname(BUILTIN_AGENT_MAIN); dir !== dirname(dir); dir = dirname(dir)) {
    if (existsSync(join(dir, "package.json"))) {
      agentFiles.push(join(dir, "package.json"));
      break;
    }
  }
  for (const pkg of BUILTIN_AGENT_PACKAGES) {
    // Where Node finds a bare import: node_modules/<pkg> in the agent's folder or the nearest ancestor holding it.
    let found: string | null = null;
    for (let dir = dirname(BUILTIN_AGENT_MAIN); found === null && dir !== dirname(dir); dir = dirname(dir))
      if (existsSync(join(dir, "node_modules", pkg, "package.json"))) found = join(dir, "node_modules", pkg);
    if (found !== null) agentFiles.push(found);
    else log?.("a package of the built-in agent is not installed: its conversations cannot use it", { pkg });
  }
  return agentFiles;
}

/** The spec's working directory relative to the workspace ("" for the workspace itself); throws when it leaves it. */
export function workingDirOf(spec: RuntimeSpec): string {
  if (!spec.workingDir || isAbsolute(spec.workingDir)) return "";
  const inside = relative("/w", resolve("/w", spec.workingDir));
  if (inside.startsWith("..")) throw new Error(`working dir outside the workspace: ${spec.workingDir}`);
  return inside;
}

/**
 * Refuses a second user when sandboxes are not isolated and that was not explicitly allowed: the first user to
 * start one is written to `file` (`<workspaceRoot>/.single-user`), so the restriction outlives the server.
 */
export function checkSingleUser(
  isolation: ProcessIsolation,
  file: string,
  ownerId: string | undefined,
): void {
  if (!isolation.singleUser || ownerId === undefined) return;
  let owner: string | null = null;
  try {
    owner = readFileSync(file, "utf8");
  } catch {
    writeFileSync(file, ownerId, { mode: 0o600 });
    return;
  }
  if (owner !== ownerId)
    throw failedPrecondition(
      "process sandboxes are not isolated on this server (bubblewrap is unavailable), so they are started for one user only; install bubblewrap, or set SANDBOX_ISOLATION=none to run every user's sandboxes unisolated",
    );
}
