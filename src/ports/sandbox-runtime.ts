/**
 * A sandbox runtime starts and controls the environment a sandbox runs in (a child process, a container).
 * It knows nothing about users or storage: the sandbox service keeps the registry and calls it.
 */
export interface RuntimeSpec {
  id: string;
  /** Command (process: argv; docker: the container command). */
  command: string[];
  initialEnv: Record<string, string>;
  workingDir: string;
}

export interface RuntimeStartRequest {
  sandboxId: string;
  spec: RuntimeSpec;
  /** The key the agent server inside must require in X-Session-API-Key. */
  sessionApiKey: string;
  /** The user the sandbox belongs to (a runtime that cannot isolate users from each other may refuse a second one). */
  ownerId?: string;
}

/** Observed state of one sandbox in its runtime. */
export type RuntimeState =
  | "starting" // up but not yet healthy
  | "running" // healthy
  | "paused"
  | "error" // crashed / exited with failure / unhealthy
  | "missing"; // gone (process reaped by someone else, container removed)

/** A port of the sandbox published on this machine's loopback, under the name the reference gives it. */
export interface ExposedPort {
  /** AGENT_SERVER, VSCODE, WORKER_1, WORKER_2. */
  name: string;
  /** The port on 127.0.0.1. */
  port: number;
}

export interface RuntimeHandle {
  /** JSON-compatible data the runtime needs to find the sandbox again after a server restart. */
  data: Record<string, unknown>;
  /** Base URL of the agent server, e.g. http://127.0.0.1:41234. */
  agentUrl: string;
  port: number;
  /**
   * The sandbox's other published ports (VS Code, application workers), beside the agent's; absent when the runtime
   * publishes only the agent.
   */
  exposedPorts?: ExposedPort[];
  /** The folder VS Code opens (the spec's working folder), when the sandbox publishes VS Code. */
  workingDir?: string;
  /**
   * The host as the sandbox reaches it, where its loopback is its own (a process sandbox's gateway address, a
   * container's host.docker.internal): a loopback URL the service hands the agent (the model's) is rewritten there.
   */
  hostGateway?: string;
}

/** What a runtime with a warm pool needs to start sandboxes ahead of need (see {@link SandboxRuntime.warm}). */
export interface WarmPlan {
  /** The specs to keep warm sandboxes of. */
  specs: readonly RuntimeSpec[];
  /**
   * The spec a sandbox of this id runs, as the service would start it (e.g. with its webhook URL in the
   * environment): a warm sandbox runs exactly that, under an id chosen ahead of need.
   */
  prepare(spec: RuntimeSpec, sandboxId: string): RuntimeSpec;
}

/** A warm sandbox taken for good: the sandbox id and session key it was started with. */
export interface WarmClaim {
  sandboxId: string;
  sessionApiKey: string;
}

export interface SandboxRuntime {
  readonly kind: "process" | "docker";
  /**
   * Throws (FAILED_PRECONDITION) when this runtime will not start sandboxes for this user, e.g. process sandboxes
   * without isolation serve one user only. The service asks before recording a new sandbox; start checks again.
   */
  admit?(ownerId: string): void;
  /**
   * Sandboxes may reach the host endpoint of `url` (the service's webhook URL, a loopback one included): for a
   * runtime whose sandboxes have networks of their own, where the host's loopback is otherwise closed to them.
   */
  reachHost?(url: string): void;
  /** Starts the sandbox and resolves once it is created (not necessarily healthy). */
  start(request: RuntimeStartRequest): Promise<RuntimeHandle>;
  /** Resolves true once the agent server answers its health check, false after timeoutMs. */
  waitHealthy(handle: RuntimeHandle, timeoutMs: number): Promise<boolean>;
  /** Current state; never throws for a vanished sandbox (returns "missing"). */
  /**
   * With `probe: false` a live sandbox is reported "running" without asking its agent (for callers that only need
   * to know whether it ended: paused, crashed or gone are told as always).
   */
  inspect(handle: RuntimeHandle, options?: { probe?: boolean }): Promise<RuntimeState>;
  pause(handle: RuntimeHandle): Promise<void>;
  /** Resumes a paused (or stopped) sandbox; may return an updated handle. */
  resume(handle: RuntimeHandle): Promise<RuntimeHandle>;
  /**
   * Starts again, on the same workspace, a sandbox whose agent ended (crashed, killed, the host restarted): the
   * process runtime starts a new agent process in the workspace folder, Docker starts the stopped container.
   * Throws FAILED_PRECONDITION when that cannot help (the workspace or container is gone) or when the sandbox still
   * runs: a workspace never has two agents. Returns the new handle.
   */
  restart?(handle: RuntimeHandle, request: RuntimeStartRequest): Promise<RuntimeHandle>;
  /** Terminates and removes the sandbox and its workspace; idempotent. */
  remove(handle: RuntimeHandle): Promise<void>;
  /**
   * Terminates and removes whatever this runtime runs for `sandboxId`, found by the id it carries (a container
   * label, the workspace folder of a process) rather than by a handle: for records whose handle was never saved.
   * Resolves with how many runtime objects (processes, containers) it stopped; idempotent.
   */
  removeBySandboxId(sandboxId: string): Promise<number>;
  /** Why a sandbox ended in error, when the runtime knows (e.g. killed by its memory limit); else null. */
  failureReason?(handle: RuntimeHandle): string | null;
  /**
   * Starts keeping sandboxes of `plan.specs` started ahead of need (a warm pool), when this runtime has one: adopts
   * or removes the warm sandboxes an earlier server left, then fills the pool in the background.
   */
  warm?(plan: WarmPlan): Promise<void>;
  /**
   * Takes a warm sandbox of `spec` (as given to the plan, before `prepare`) for good, atomically: no other call, on
   * any server sharing the runtime, gets the same one. Null when none is ready (start cold). The caller then
   * starts it with {@link start} under the claim's sandbox id and session key, which answers at once.
   */
  claimWarm?(spec: RuntimeSpec): Promise<WarmClaim | null>;
  /**
   * The session key of a warm sandbox claimed under `sandboxId` (by any server) and not yet started, else null:
   * for a start that knows the id only (a conversation start saves it before starting the sandbox).
   */
  claimedWarm?(sandboxId: string): Promise<string | null>;
  /**
   * Removes warm sandboxes that died, and claimed ones that no record took (`hasRecord` false on two sweeps in a
   * row: a claim whose start never came).
   */
  sweepWarm?(hasRecord: (sandboxId: string) => Promise<boolean>): Promise<void>;
  /** Resolves when the runtime can start sandboxes (readiness: workspace writable, engine reachable). */
  ping(): Promise<void>;
  /** Releases runtime resources held by the server (not the sandboxes). */
  close(): Promise<void>;
}
