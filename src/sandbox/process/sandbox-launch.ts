import { type ChildProcess, spawn } from "node:child_process";
import { chmodSync, chownSync, closeSync, mkdirSync, openSync } from "node:fs";
import type { Server } from "node:net";
import { dirname, join, resolve } from "node:path";
import type { Writable } from "node:stream";
import { failedPrecondition } from "../../core/errors.ts";
import type { RuntimeHandle, RuntimeSpec } from "../../ports/sandbox-runtime.ts";
import { isBuiltinAgentCommand } from "../../sandbox-agent/builtin-agent.ts";
import { readProcStat, signal } from "../../sandbox-agent/proc-tree.ts";
import { freePort, listeningSocket, withPort } from "../free-port.ts";
import { type BwrapTools, bwrapArgs, findExecutable, type SandboxUser } from "./bwrap.ts";
import type { CompileCache } from "./compile-cache.ts";
import type { ProcessIsolation } from "./process-runtime.ts";
import type { ProcessHandleData, ProcessTable } from "./process-table.ts";
import type { RuntimeLimits } from "./runtime-limits.ts";
import { limitedArgv } from "./sandbox-limits.ts";
import type { SandboxUids } from "./sandbox-uids.ts";
import type { WarmAgent } from "./warm-agents.ts";
import { freeBytes } from "./workspace-disk.ts";

/** A process this instance spawned (and so reaps and sees exit). */
export interface OwnChild {
  handle: RuntimeHandle;
  /** The sandbox id it runs (for logs); null for a warm agent not claimed yet. */
  label: string | null;
  /** Set when it was started as a warm agent. */
  warm?: WarmChild;
  startTimeTicks: number;
  exit: { code: number | null; signal: NodeJS.Signals | null } | null;
  exited: Promise<void>;
}

/** A warm agent this instance spawned: its process, and its stdin, on which its claim is written. */
export interface WarmChild extends WarmAgent {
  own: OwnChild;
  stdin: Writable;
}

export const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** What the launcher shares with the runtime that made it (createProcessRuntime). */
export interface LaunchContext {
  workspaceRoot: string;
  logDir: string;
  /** Address the agent listens on, and the host of its URL. */
  host: string;
  urlHost: string;
  baseEnv: Record<string, string>;
  /** The built-in agent's compile cache folder; null or "" for none. */
  compileCacheDir: string | null;
  compileCache: CompileCache;
  /** What runs the built-in agent (node and its main file). */
  agentCommand: readonly string[];
  /** What the built-in agent reads (given read-only to isolated sandboxes). */
  agentFiles: readonly string[];
  readOnlyPaths: readonly string[];
  isolation: ProcessIsolation;
  asRoot: boolean;
  ownUser: SandboxUser;
  /** bubblewrap and its helpers (throws when they are missing). */
  tools: () => BwrapTools;
  uids: SandboxUids;
  limits: RuntimeLimits;
  procs: ProcessTable<OwnChild>;
  log: (msg: string, data?: object) => void;
  /** Deletes a workspace folder, giving back its uid, loop disk and cgroup. */
  removeWorkspace: (folder: string) => void;
  /** A warm agent not claimed yet exited. */
  onWarmExit: (agent: WarmChild) => void;
}

/**
 * Starts sandbox processes for the process runtime: a sandbox's environment and working directory, and the spawn
 * itself (workspace folder, uid, disk, cgroup and rlimits, bubblewrap, the built-in agent's listening socket), for
 * a cold start and for a warm agent alike. The runtime's lifecycle is in process-runtime.ts; claiming a warm agent
 * in warm-claim.ts.
 */
export class SandboxLauncher {
  readonly #o: LaunchContext;

  constructor(context: LaunchContext) {
    this.#o = context;
  }

  /** The environment of a sandbox's main process (a warm agent gets it at its claim, the same way). */
  env(
    workspace: string,
    cwd: string,
    spec: RuntimeSpec,
    sessionApiKey: string | null,
    port: number,
    listening: boolean,
  ): Record<string, string> {
    const { baseEnv, host, compileCacheDir } = this.#o;
    return {
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
      ...(compileCacheDir && isBuiltinAgentCommand(spec.command)
        ? { NODE_COMPILE_CACHE: compileCacheDir }
        : {}),
    };
  }

  /** Creates the working directory `rel` inside a workspace (owned by the sandbox's user) and returns its path. */
  makeCwd(workspace: string, rel: string, user: SandboxUser, isolated: boolean): string {
    const { asRoot } = this.#o;
    const cwd = resolve(workspace, rel);
    mkdirSync(cwd, { recursive: true });
    if (isolated && asRoot) {
      for (let dir = cwd; dir.startsWith(workspace); dir = dirname(dir)) chownSync(dir, user.uid, user.gid);
    }
    return cwd;
  }

  /**
   * Spawns a sandbox's main process in the workspace folder `folder` (the sandbox id, or a warm agent's name):
   * `sessionApiKey` null starts a warm agent, which waits on its stdin for its claim.
   */
  async launch(
    folder: string,
    label: string | null,
    spec: RuntimeSpec,
    rel: string,
    sessionApiKey: string | null,
  ): Promise<{ handle: RuntimeHandle; child: ChildProcess; own: OwnChild }> {
    const {
      workspaceRoot,
      logDir,
      asRoot,
      host,
      urlHost,
      agentCommand,
      agentFiles,
      readOnlyPaths,
      isolation,
      ownUser,
      uids,
      compileCacheDir,
      compileCache,
      procs,
      log,
      removeWorkspace,
    } = this.#o;
    const { limits, cgroups, prlimit, loopDisks, diskReserveBytes, rlimits } = this.#o.limits;
    const workspace = join(workspaceRoot, folder);
    mkdirSync(logDir, { recursive: true, mode: 0o700 });
    const builtin = isBuiltinAgentCommand(spec.command);
    // The built-in agent is handed its socket already listening (LISTEN_FD): no port race, and health probes
    // made before it runs wait in the backlog instead of being refused. Other commands bind {port} themselves.
    const listener = builtin ? await inheritableListener(host) : null;
    const port = listener?.port ?? (await freePort(host));
    let child: ChildProcess;
    let isolated: boolean;
    let user: SandboxUser;
    try {
      // From here to the spawn nothing awaits: the uid chosen is owned by the new workspace before anyone looks again.
      isolated = isolation.mode === "bwrap";
      const free = freeBytes(workspaceRoot);
      if (free !== null && free < diskReserveBytes)
        throw failedPrecondition(
          `the disk of the sandbox workspaces has ${Math.floor(free / 1048576)} MB free, less than the ${Math.floor(diskReserveBytes / 1048576)} MB kept in reserve: no new sandbox starts until space is freed`,
        );
      user = isolated ? (uids.reuse(workspace) ?? uids.allocate(folder)) : ownUser;
      mkdirSync(workspace, { recursive: true, mode: 0o700 });
      try {
        loopDisks?.create(folder);
      } catch (e: unknown) {
        removeWorkspace(folder);
        throw e;
      }
      chmodSync(workspace, 0o700);
      const cwd = this.makeCwd(workspace, rel, user, isolated);
      const command = withPort(builtin ? [...agentCommand, ...spec.command.slice(1)] : spec.command, port);
      const env = this.env(workspace, cwd, spec, sessionApiKey, port, listener !== null);
      const readOnly = [...readOnlyPaths];
      if (builtin) {
        readOnly.push(...agentFiles);
        if (compileCacheDir) {
          mkdirSync(compileCacheDir, { recursive: true });
          // Shared by every sandbox, so isolated ones only read it; the server fills it (see CompileCache.warm).
          if (isolated) {
            readOnly.push(compileCacheDir);
            compileCache.warm(compileCacheDir);
            compileCache.share(compileCacheDir, user.uid);
          }
        }
      }
      const sandboxed = isolated
        ? [
            ...bwrapArgs(this.#o.tools(), {
              workspace,
              cwd,
              readOnly,
              user,
              asRoot,
              ...(limits.tmpBytes ? { tmpBytes: limits.tmpBytes } : {}),
              ...(limits.shmBytes ? { shmBytes: limits.shmBytes } : {}),
            }),
            ...command,
          ]
        : command;
      const argv = limitedArgv(sandboxed, cgroups ? cgroups.create(folder) : [], rlimits, prlimit);
      const [file, ...args] = argv;
      if (file === undefined || command[0] === undefined) throw new Error("empty sandbox command");
      // bwrap starts whatever it is given and fails later: check the command is there first, as spawn does.
      if (isolated && !findExecutable(command[0], env.PATH ?? DEFAULT_PATH, cwd)) {
        removeWorkspace(folder);
        throw Object.assign(new Error(`spawn ${command[0]} ENOENT`), { code: "ENOENT" });
      }
      const logFd = openSync(join(logDir, `${folder}.log`), "a");
      const stdin = sessionApiKey === null ? "pipe" : "ignore";
      try {
        child = spawn(file, args, {
          cwd,
          env,
          detached: true,
          stdio: listener ? [stdin, logFd, logFd, listener.fd] : [stdin, logFd, logFd],
        });
      } finally {
        closeSync(logFd);
      }
    } finally {
      // The sandbox holds its own copy (or never started); this one is closed before the event loop could accept
      // on it.
      listener?.server.close();
    }
    // Read the start time at once: the process exists (at worst as a zombie) until the event loop reaps it.
    const stat = child.pid === undefined ? null : readProcStat(child.pid);
    try {
      await new Promise<void>((ok, fail) => {
        child.once("spawn", ok);
        child.once("error", fail);
      });
    } catch (e: unknown) {
      removeWorkspace(folder);
      throw e;
    }
    const pid = child.pid;
    if (pid === undefined || stat === null)
      throw new Error(`sandbox process of ${label ?? folder} vanished at start`);
    child.unref();
    const data: ProcessHandleData = {
      pid,
      pgid: pid,
      port,
      workspace,
      startTimeTicks: stat.startTime,
      ...(isolated ? { isolation: "bwrap" as const, uid: user.uid } : {}),
    };
    const handle: RuntimeHandle = { data: { ...data }, agentUrl: `http://${urlHost}:${port}`, port };
    const exited = Promise.withResolvers<void>();
    const own: OwnChild = {
      handle,
      label,
      startTimeTicks: stat.startTime,
      exit: null,
      exited: exited.promise,
    };
    procs.children.set(pid, own);
    child.once("exit", (code, sig) => {
      own.exit = { code, signal: sig };
      exited.resolve();
      // The sandbox is over: stop what it left running in its group (background jobs of its commands). The group
      // still has those members, so its id cannot belong to anyone else yet.
      signal(-pid, "SIGKILL");
      if (own.label !== null) log("sandbox process exited", { sandboxId: own.label, pid, code, signal: sig });
      else if (own.warm) this.#o.onWarmExit(own.warm);
    });
    if (label !== null)
      log("sandbox process started", {
        sandboxId: label,
        pid,
        port,
        command: builtin ? "built-in agent" : spec.command[0],
        isolation: isolated ? { bwrap: true, uid: user.uid } : "none",
      });
    return { handle, child, own };
  }
}

/** A loopback socket already listening, whose descriptor a child can inherit; null where that cannot be done. */
async function inheritableListener(
  host: string,
): Promise<{ server: Server; port: number; fd: number } | null> {
  const { server, port } = await listeningSocket(host);
  const fd = (server as unknown as { _handle?: { fd?: unknown } })._handle?.fd;
  if (typeof fd === "number" && fd > 2) return { server, port, fd };
  server.close();
  return null;
}
