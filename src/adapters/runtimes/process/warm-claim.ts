import { BUILTIN_AGENT_COMMAND, isBuiltinAgentCommand } from "../../../../agent/shared/builtin-agent.ts";
import type { RuntimeHandle, RuntimeSpec } from "../../../ports/sandbox-runtime.ts";
import type { SandboxUser } from "./bwrap.ts";
import { type ProcessHandleData, parseHandleData } from "./process-table.ts";
import type { SandboxLauncher, WarmChild } from "./sandbox-launch.ts";

/** What a warm agent is started as: the built-in agent with the default layout, and no key. */
const WARM_SPEC: RuntimeSpec = {
  id: "warm-agent",
  command: [BUILTIN_AGENT_COMMAND],
  initialEnv: {},
  workingDir: "",
};

/**
 * Variables that change how Node or the C library start (read before the agent's code runs). A spec that sets one
 * gets a cold start, so that its agent process starts with them, as without warm agents.
 */
const STARTUP_ENV = /^(NODE_|UV_|LD_|MALLOC_|GLIBC_|OPENSSL_|SSL_CERT_|LANG$|LC_|TZ$)/;

/** True when a warm agent can serve this spec: the built-in agent without extra arguments or startup variables. */
export function servesWarm(spec: RuntimeSpec): boolean {
  return (
    isBuiltinAgentCommand(spec.command) &&
    spec.command.length <= 1 &&
    !Object.keys(spec.initialEnv).some((name) => STARTUP_ENV.test(name))
  );
}

/** Starts a warm agent in the folder `folder` (for the WarmPool): booted, waiting on its stdin for its claim. */
export async function spawnWarmAgent(launcher: SandboxLauncher, folder: string): Promise<WarmChild> {
  const { child, own } = await launcher.launch(folder, null, WARM_SPEC, "", null);
  const stdin = child.stdin;
  if (!stdin) throw new Error("warm agent without stdin");
  stdin.on("error", () => {}); // it died before its claim: its exit is handled
  own.warm = { folder, own, stdin, alive: () => own.exit === null };
  return own.warm;
}

/** Makes a warm agent the sandbox `sandboxId`: its working directory, then its environment on its stdin. */
export function claimWarmAgent(
  launcher: SandboxLauncher,
  ownUser: SandboxUser,
  log: (msg: string, data?: object) => void,
  agent: WarmChild,
  claim: { sandboxId: string; spec: RuntimeSpec; sessionApiKey: string; rel: string },
): RuntimeHandle {
  const { sandboxId, spec, sessionApiKey, rel } = claim;
  const data = parseHandleData(agent.own.handle.data) as ProcessHandleData;
  const user = data.uid === undefined ? ownUser : { uid: data.uid, gid: data.uid };
  const cwd = launcher.makeCwd(data.workspace, rel, user, data.isolation === "bwrap");
  const env = launcher.env(
    data.workspace,
    cwd,
    spec,
    sessionApiKey,
    data.port,
    data.net === undefined,
    data.net ?? null,
  );
  agent.own.label = sandboxId;
  agent.stdin.end(`${JSON.stringify({ env, cwd })}\n`);
  const handle: RuntimeHandle = { ...agent.own.handle, data: { ...data, sandboxId } };
  agent.own.handle = handle;
  log("sandbox process started", {
    sandboxId,
    pid: data.pid,
    port: data.port,
    command: "built-in agent (warm)",
    isolation: data.isolation === "bwrap" ? { bwrap: true, uid: data.uid } : "none",
  });
  return handle;
}
