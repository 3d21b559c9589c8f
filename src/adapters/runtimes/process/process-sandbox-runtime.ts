/**
 * The process runtime's methods (SandboxRuntime over local child processes), each a small step over the jobs that
 * createProcessRuntime (process-runtime.ts) composed and hands to it by name: the process table, the launcher,
 * the workspaces, the warm pool, the network, the leftover sweep and the disk watch. The behaviour of each method
 * is described at createProcessRuntime.
 */
import { lookup } from "node:dns/promises";
import { accessSync, constants, existsSync, mkdirSync } from "node:fs";
import { isIPv4 } from "node:net";
import { basename, relative } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { readProcStat } from "../../../../agent/shared/proc-tree.ts";
import { failedPrecondition } from "../../../core/errors.ts";
import type { RuntimeHandle, RuntimeStartRequest, RuntimeState } from "../../../ports/sandbox-runtime.ts";
import { pollAlive, probeAlive } from "../agent-health.ts";
import type { SandboxUser } from "./bwrap.ts";
import type { DiskWatch } from "./disk-watch.ts";
import type { LeftoverSweep } from "./leftover-sweep.ts";
import type {
  ProcessIsolation,
  ProcessLimitsReport,
  ProcessNetworkReport,
  ProcessRuntime,
} from "./process-runtime-types.ts";
import { type ProcessTable, parseHandleData } from "./process-table.ts";
import type { RuntimeLimits } from "./runtime-limits.ts";
import { checkSingleUser, workingDirOf } from "./runtime-setup.ts";
import type { OwnChild, SandboxLauncher, WarmChild } from "./sandbox-launch.ts";
import { isLoopbackHost, type SandboxNetwork } from "./sandbox-network.ts";
import { stopSandboxProcesses } from "./sandbox-processes.ts";
import type { SandboxWorkspaces } from "./sandbox-workspaces.ts";
import { claimedFolder, forgetClaim, type WarmPool, WORKSPACE_FOLDER } from "./warm-agents.ts";
import { claimWarmAgent, servesWarm } from "./warm-claim.ts";

/** The collaborators and settings of a process runtime, as createProcessRuntime composed them. */
export interface ProcessRuntimeParts {
  workspaceRoot: string;
  isolation: ProcessIsolation;
  /** Networks of their own for isolated sandboxes (null: they share the host's), and the report of them. */
  network: SandboxNetwork | null;
  networkReport: ProcessNetworkReport;
  limitsReport: ProcessLimitsReport;
  procs: ProcessTable<OwnChild>;
  workspaces: SandboxWorkspaces;
  launcher: SandboxLauncher;
  warm: WarmPool | null;
  leftovers: LeftoverSweep;
  diskWatch: DiskWatch | null;
  cgroups: RuntimeLimits["cgroups"];
  /** Where the one user of unisolated sandboxes is written (see checkSingleUser). */
  singleUserFile: string;
  ownUser: SandboxUser;
  stopGraceMs: number;
  healthPollMs: number;
  probeTimeoutMs: number;
  log: (msg: string, data?: object) => void;
}

/**
 * Sandboxes as local child processes (see createProcessRuntime). Its SandboxRuntime methods are bound fields, own
 * properties of the runtime as those of an object literal are: whoever wraps it by spreading it or by deriving from
 * it (to count or gate some calls, as tests do) gets methods that still work.
 */
export class ProcessSandboxRuntime implements ProcessRuntime {
  readonly kind = "process";
  readonly isolation: ProcessIsolation;
  readonly network: ProcessNetworkReport;
  readonly limits: ProcessLimitsReport;
  readonly #p: ProcessRuntimeParts;

  constructor(parts: ProcessRuntimeParts) {
    this.#p = parts;
    this.isolation = parts.isolation;
    this.network = parts.networkReport;
    this.limits = parts.limitsReport;
  }

  readonly admit = (ownerId: string): void => {
    this.#checkSingleUser(ownerId);
  };

  readonly reachHost = (url: string): void => {
    const { network, log } = this.#p;
    if (network === null) return;
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      return;
    }
    const port = Number(parsed.port || (parsed.protocol === "https:" ? 443 : 80));
    const host = parsed.hostname.replace(/^\[|\]$/g, "");
    // On loopback: through the gateway. Elsewhere: that address of the host (a name: the addresses it has now).
    if (isLoopbackHost(host)) network.allowPort(port);
    else if (isIPv4(host)) network.allowAddress(host, port);
    else
      void lookup(host, { all: true, family: 4 }).then(
        (found) => {
          for (const { address } of found) network.allowAddress(address, port);
        },
        (e: unknown) =>
          log("sandboxes cannot be let reach a host name that does not resolve", { url, error: String(e) }),
      );
    if (this.network.mode === "isolated") this.network.hostPorts = network.allowedPorts;
  };

  readonly start = async (request: RuntimeStartRequest): Promise<RuntimeHandle> => {
    const { sandboxId, spec, sessionApiKey } = request;
    if (!WORKSPACE_FOLDER.test(sandboxId))
      throw new Error(`invalid sandbox id for a folder name: ${sandboxId}`);
    const rel = workingDirOf(spec);
    this.#checkSingleUser(request.ownerId);
    const { warm, launcher, ownUser, log } = this.#p;
    const agent = warm && servesWarm(spec) ? warm.take(sandboxId) : null;
    if (agent)
      return claimWarmAgent(launcher, ownUser, log, agent as WarmChild, {
        sandboxId,
        spec,
        sessionApiKey,
        rel,
      });
    return (await launcher.launch(sandboxId, sandboxId, spec, rel, sessionApiKey)).handle;
  };

  readonly waitHealthy = async (handle: RuntimeHandle, timeoutMs: number): Promise<boolean> => {
    const data = parseHandleData(handle.data);
    if (!data) return false;
    const healthy = await pollAlive(handle.agentUrl, timeoutMs, {
      intervalMs: this.#p.healthPollMs,
      gaveUp: () => this.#p.procs.leaderGone(data),
    });
    // A claimed warm agent is serving: now its replacement may start (see WarmPool.take).
    if (data.sandboxId !== undefined) this.#p.warm?.refillSoon();
    return healthy;
  };

  readonly inspect = async (handle: RuntimeHandle, options?: { probe?: boolean }): Promise<RuntimeState> => {
    const { procs } = this.#p;
    const data = parseHandleData(handle.data);
    if (!data) return "missing";
    const own = procs.own(data);
    let stat = own?.exit ? null : readProcStat(data.pid);
    if (own && !own.exit && stat?.state === "Z") {
      // Our child died and is about to be reaped: wait for its exit status to tell a crash from a clean exit.
      await Promise.race([own.exited, sleep(100)]);
      stat = own.exit ? null : stat;
    }
    if (own?.exit) return own.exit.code === 0 ? "missing" : "error";
    // Vanished without being removed (its workspace is still there: a reboot, a kill seen by no parent of ours):
    // it ended, and a resume can start it again (see restart).
    if (!stat || stat.startTime !== data.startTimeTicks)
      return procs.workspaceOf(data) !== null && existsSync(data.workspace) && own === undefined
        ? "error"
        : "missing";
    // Dead, and its parent (not us) has not reaped it: judge by its exit status, as for our own children; a
    // sandbox whose workspace is gone was removed (stopped by a signal), not crashed.
    if (stat.state === "Z" || stat.state === "X")
      return stat.exitStatus === 0 || !existsSync(data.workspace) ? "missing" : "error";
    if (stat.state === "T" || stat.state === "t") return "paused";
    if (options?.probe === false) return "running";
    return (await probeAlive(handle.agentUrl, this.#p.probeTimeoutMs)) ? "running" : "starting";
  };

  readonly pause = async (handle: RuntimeHandle): Promise<void> => {
    const { procs } = this.#p;
    const data = procs.requireLive(handle);
    procs.signal(data, "SIGSTOP");
    await procs.settle(data, (state) => state === "T" || state === "t");
  };

  readonly resume = async (handle: RuntimeHandle): Promise<RuntimeHandle> => {
    const { procs } = this.#p;
    const data = procs.requireLive(handle);
    procs.signal(data, "SIGCONT");
    await procs.settle(data, (state) => state !== "T" && state !== "t");
    return handle;
  };

  readonly restart = async (handle: RuntimeHandle, request: RuntimeStartRequest): Promise<RuntimeHandle> => {
    const { procs, workspaces, launcher } = this.#p;
    const data = parseHandleData(handle.data);
    const workspace = data && procs.workspaceOf(data);
    if (!data || !workspace || !existsSync(workspace))
      throw failedPrecondition("the sandbox's workspace is gone: it cannot be started again; delete it");
    this.#checkSingleUser(request.ownerId);
    // Never two agents on one workspace: whatever is left of the old one (its group, processes in its folder).
    if (!procs.leaderGone(data)) throw failedPrecondition("the sandbox process is still running");
    await stopSandboxProcesses(workspace, 0);
    if (procs.own(data)) procs.children.delete(data.pid);
    const folder = basename(workspace);
    workspaces.reset(folder);
    const rel = workingDirOf(request.spec);
    const { handle: fresh } = await launcher.launch(
      folder,
      request.sandboxId,
      request.spec,
      rel,
      request.sessionApiKey,
    );
    return folder === request.sandboxId
      ? fresh
      : { ...fresh, data: { ...fresh.data, sandboxId: request.sandboxId } };
  };

  readonly remove = async (handle: RuntimeHandle): Promise<void> => {
    const { procs, workspaceRoot, log } = this.#p;
    const data = parseHandleData(handle.data);
    if (!data) return;
    if (procs.live(data)) {
      const graceful = await procs.stop(data, this.#p.stopGraceMs);
      log("sandbox process removed", { pid: data.pid, graceful });
    }
    const workspace = procs.workspaceOf(data);
    if (workspace) await this.#p.workspaces.remove(relative(workspaceRoot, workspace));
    if (data.sandboxId) forgetClaim(workspaceRoot, data.sandboxId);
    if (procs.own(data)) procs.children.delete(data.pid);
  };

  readonly removeBySandboxId = async (sandboxId: string): Promise<number> => {
    const { workspaceRoot, workspaces, log } = this.#p;
    if (!WORKSPACE_FOLDER.test(sandboxId)) return 0;
    const stopped = await workspaces.removeWithProcesses(
      claimedFolder(workspaceRoot, sandboxId) ?? sandboxId,
    );
    forgetClaim(workspaceRoot, sandboxId);
    if (stopped > 0) log("sandbox processes removed by sandbox id", { sandboxId, processes: stopped });
    return stopped;
  };

  readonly ping = async (): Promise<void> => {
    mkdirSync(this.#p.workspaceRoot, { recursive: true });
    accessSync(this.#p.workspaceRoot, constants.W_OK);
  };

  readonly close = async (): Promise<void> => {
    // Sandboxes keep running; the exit listeners hold no reference that keeps Node alive (children are unref'd).
    // Warm agents are not sandboxes: they go.
    await this.#stopBackground();
    this.#p.cgroups?.release();
    this.#p.network?.close();
  };

  readonly warmReady = (): number => {
    return this.#p.warm?.ready ?? 0;
  };

  readonly failureReason = (handle: RuntimeHandle): string | null => {
    const data = parseHandleData(handle.data);
    const workspace = data && this.#p.procs.workspaceOf(data);
    if (!workspace) return null;
    return this.#p.workspaces.failureReason(relative(this.#p.workspaceRoot, workspace));
  };

  readonly killAll = async (): Promise<void> => {
    await this.#stopBackground();
    await Promise.all([...this.#p.procs.children.values()].map((own) => this.remove(own.handle)));
    this.#p.cgroups?.release();
  };

  /** Stops the disk watch and the leftover sweep (a sweep in progress ends first) and the warm agents. */
  async #stopBackground(): Promise<void> {
    const { diskWatch, leftovers, warm } = this.#p;
    diskWatch?.close();
    await Promise.all([warm?.close(), leftovers.close()]);
  }

  #checkSingleUser(ownerId: string | undefined): void {
    checkSingleUser(this.isolation, this.#p.singleUserFile, ownerId);
  }
}
