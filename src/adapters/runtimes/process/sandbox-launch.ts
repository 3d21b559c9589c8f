import { type ChildProcess, spawn } from "node:child_process";
import { chmodSync, closeSync, fchownSync, fstatSync, mkdirSync, writeSync } from "node:fs";
import type { Server } from "node:net";
import { join, relative, resolve } from "node:path";
import type { Writable } from "node:stream";
import { isBuiltinAgentCommand } from "../../../../agent/shared/builtin-agent.ts";
import { readProcStat, signal } from "../../../../agent/shared/proc-tree.ts";
import { failedPrecondition } from "../../../core/errors.ts";
import type { RuntimeHandle, RuntimeSpec } from "../../../ports/sandbox-runtime.ts";
import { freePort, listeningSocket } from "../free-port.ts";
import { type BwrapTools, bwrapArgs, DEFAULT_PATH, findExecutable, type SandboxUser } from "./bwrap.ts";
import type { CompileCache } from "./compile-cache.ts";
import { describeLaunch, type LaunchSettings, launchedHandle, sandboxEnv } from "./launch-description.ts";
import { LinkRefused, makeDirsAt, openAppendAt } from "./no-follow.ts";
import type { ProcessIsolation } from "./process-runtime-types.ts";
import type { ProcessTable } from "./process-table.ts";
import type { RuntimeLimits } from "./runtime-limits.ts";
import { limitedArgv } from "./sandbox-limits.ts";
import { type NetLease, SANDBOX_AGENT_PORT, type SandboxNetwork } from "./sandbox-network.ts";
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

/**
 * Where a sandbox's output goes, relative to its workspace: on the workspace's own disk, so that it is bounded by
 * the workspace's size (SANDBOX_DISK_MB) like anything else the sandbox writes, and removed with it.
 */
export const SANDBOX_LOG_DIR = ".openhands/logs";
export const SANDBOX_LOG_FILE = "sandbox.log";

export { withoutInspector } from "./launch-description.ts";

/** What the launcher shares with the runtime that made it (createProcessRuntime). */
export interface LaunchContext extends LaunchSettings {
  workspaceRoot: string;
  compileCache: CompileCache;
  isolation: ProcessIsolation;
  ownUser: SandboxUser;
  /** bubblewrap and its helpers (throws when they are missing). */
  tools: () => BwrapTools;
  uids: SandboxUids;
  limits: RuntimeLimits;
  procs: ProcessTable<OwnChild>;
  log: (msg: string, data?: object) => void;
  /** Networks of their own for isolated sandboxes (null: they share the host's). */
  network: SandboxNetwork | null;
  /** Deletes a workspace folder, giving back its uid, loop disk and cgroup. */
  removeWorkspace: (folder: string) => void;
  /** A warm agent not claimed yet exited. */
  onWarmExit: (agent: WarmChild) => void;
}

/**
 * Starts sandbox processes for the process runtime: a sandbox's environment and working directory, and the spawn
 * itself (workspace folder, uid, disk, cgroup and rlimits, bubblewrap, the built-in agent's listening socket), for
 * a cold start and for a warm agent alike. The runtime's lifecycle is in process-sandbox-runtime.ts; claiming a warm agent
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
    net: NetLease | null = null,
  ): Record<string, string> {
    return sandboxEnv(this.#o, { workspace, cwd, spec, sessionApiKey, port, listening, net });
  }

  /**
   * Creates the working directory `rel` inside a workspace (the workspace and each folder on the way owned by the
   * sandbox's user) and returns its path. The workspace is the sandbox's: a folder on the way that it replaced
   * with a symlink is refused (FAILED_PRECONDITION), never followed (see no-follow.ts).
   */
  makeCwd(workspace: string, rel: string, user: SandboxUser, isolated: boolean): string {
    const { asRoot } = this.#o;
    const cwd = resolve(workspace, rel);
    try {
      closeSync(makeDirsAt(workspace, relative(workspace, cwd), isolated && asRoot ? user : null));
    } catch (e: unknown) {
      if (e instanceof LinkRefused)
        throw failedPrecondition(`the sandbox's working directory cannot be made: ${e.message}`);
      throw e;
    }
    return cwd;
  }

  /**
   * Opens the sandbox's log for its output, `<workspace>/.openhands/logs/sandbox.log` (see SANDBOX_LOG_DIR): on the
   * workspace's disk, so the workspace's size bounds it; made without following any link the sandbox planted, and
   * handed to the sandbox's user. Null (the output is dropped, and the server's log says why) when the sandbox put
   * something else there.
   */
  #openLog(workspace: string, owner: SandboxUser | null, label: string): number | null {
    let dir: number | null = null;
    try {
      dir = makeDirsAt(workspace, SANDBOX_LOG_DIR, owner);
      const fd = openAppendAt(dir, SANDBOX_LOG_FILE, join(workspace, SANDBOX_LOG_DIR, SANDBOX_LOG_FILE));
      if (owner) fchownSync(fd, owner.uid, owner.gid);
      try {
        // Kept out of git's changes (the UI's Changes tab) should the workspace be a repository.
        const ignore = openAppendAt(dir, ".gitignore", join(workspace, SANDBOX_LOG_DIR, ".gitignore"), 0o644);
        try {
          if (owner) fchownSync(ignore, owner.uid, owner.gid);
          if (fstatSync(ignore).size === 0) writeSync(ignore, "*\n");
        } finally {
          closeSync(ignore);
        }
      } catch {
        // the sandbox's own business: its log is open
      }
      return fd;
    } catch (e: unknown) {
      this.#o.log("sandbox output not logged: its log cannot be opened", {
        sandbox: label,
        error: e instanceof Error ? e.message : String(e),
      });
      return null;
    } finally {
      if (dir !== null) closeSync(dir);
    }
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
      asRoot,
      host,
      isolation,
      ownUser,
      uids,
      compileCache,
      procs,
      log,
      removeWorkspace,
    } = this.#o;
    const { limits, cgroups, prlimit, loopDisks, diskReserveBytes, rlimits, priority } = this.#o.limits;
    const workspace = join(workspaceRoot, folder);
    const builtin = isBuiltinAgentCommand(spec.command);
    // The free space, and the workspace's disk first, its mkfs and mount awaited (not run on the event loop, which
    // every request shares): it needs no uid, and its root keeps the owner a restarted sandbox's uid is found by.
    const isolated = isolation.mode === "bwrap";
    const free = freeBytes(workspaceRoot);
    if (free !== null && free < diskReserveBytes)
      throw failedPrecondition(
        `the disk of the sandbox workspaces has ${Math.floor(free / 1048576)} MB free, less than the ${Math.floor(diskReserveBytes / 1048576)} MB kept in reserve: no new sandbox starts until space is freed`,
      );
    mkdirSync(workspace, { recursive: true, mode: 0o700 });
    try {
      await loopDisks?.make(folder);
    } catch (e: unknown) {
      removeWorkspace(folder);
      throw e;
    }
    // In a network of its own (see sandbox-network.ts) the agent listens inside it, on the agent-server's port.
    const net = isolation.mode === "bwrap" && this.#o.network ? await this.#o.network.lease(folder) : null;
    // Else the built-in agent is handed its socket already listening (LISTEN_FD): no port race, and health probes
    // made before it runs wait in the backlog instead of being refused. Other commands bind {port} themselves.
    const listener = builtin && net === null ? await inheritableListener(host) : null;
    const port = net !== null ? SANDBOX_AGENT_PORT : (listener?.port ?? (await freePort(host)));
    let child: ChildProcess;
    let user: SandboxUser;
    try {
      // From here to the spawn nothing awaits: the uid chosen is owned by the new workspace before anyone looks again.
      user = isolated ? (uids.reuse(workspace) ?? uids.allocate(folder)) : ownUser;
      chmodSync(workspace, 0o700);
      const cwd = this.makeCwd(workspace, rel, user, isolated);
      const plan = describeLaunch(this.#o, {
        workspace,
        cwd,
        spec,
        sessionApiKey,
        port,
        listening: listener !== null,
        net,
        isolation: isolated ? { user, tmpBytes: limits.tmpBytes, shmBytes: limits.shmBytes } : null,
        network: this.#o.network,
        execPath: process.execPath,
      });
      const { command, env } = plan;
      if (plan.compileCache !== null) {
        mkdirSync(plan.compileCache.dir, { recursive: true });
        if (plan.compileCache.shared) {
          compileCache.warm(plan.compileCache.dir);
          compileCache.share(plan.compileCache.dir, user.uid);
        }
      }
      const sandboxed = plan.layout ? [...bwrapArgs(this.#o.tools(), plan.layout), ...command] : command;
      // Niced first: everything the sandbox runs, its cgroup join and rlimits included, inherits the priority.
      const argv = [
        ...priority,
        ...limitedArgv(
          [...plan.enter, ...sandboxed],
          cgroups ? cgroups.create(folder) : [],
          rlimits,
          prlimit,
        ),
      ];
      const [file, ...args] = argv;
      if (file === undefined || command[0] === undefined) throw new Error("empty sandbox command");
      // bwrap starts whatever it is given and fails later: check the command is there first, as spawn does.
      if (isolated && !findExecutable(command[0], env.PATH ?? DEFAULT_PATH, cwd)) {
        removeWorkspace(folder);
        throw Object.assign(new Error(`spawn ${command[0]} ENOENT`), { code: "ENOENT" });
      }
      const logFd = this.#openLog(workspace, isolated && asRoot ? user : null, label ?? folder);
      const { claim } = plan;
      const out = logFd ?? "ignore";
      try {
        child = spawn(file, args, {
          cwd,
          env: plan.spawnEnv,
          detached: true,
          stdio: listener ? [plan.stdin, out, out, listener.fd] : [plan.stdin, out, out],
        });
      } finally {
        if (logFd !== null) closeSync(logFd);
      }
      if (claim !== null) {
        child.stdin?.on("error", () => {}); // it died before reading it: its exit is handled
        child.stdin?.end(claim);
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
    const handle = launchedHandle(this.#o, {
      pid,
      startTimeTicks: stat.startTime,
      port,
      workspace,
      isolatedUid: isolated ? user.uid : null,
      net,
    });
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
        ...(net === null ? {} : { network: { address: net.address, namespace: net.name } }),
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
