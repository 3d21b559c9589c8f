/**
 * Warm agents: built-in agents the process runtime starts ahead of need, so that starting a sandbox does not wait
 * for a Node process to boot (most of a cold start). A warm agent runs exactly as a sandbox does (same bwrap
 * layout, its own uid and workspace folder, its own listening socket) but has no session key, serves nothing and
 * holds no user data. Claiming it writes the sandbox's environment and working directory to its stdin (see
 * agent/main.ts); from then on it is that sandbox, and its workspace folder keeps its own name.
 *
 * The folders under the workspace root say who is what, so that any server on the same root can clean up after
 * one that died:
 * - `.warm/<folder>`: an unclaimed agent, with the pid and start time of the server that owns it. The agent exits
 *   by itself when its stdin closes, i.e. when that server dies; the folder is removed by the next sweep of any
 *   server that finds the owner gone.
 * - `.claimed/<sandboxId>`: the workspace folder of a sandbox started from a warm agent, written before the claim,
 *   so that removal by sandbox id finds it even when the handle was never saved.
 */
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { readProcStat } from "../../../../agent/shared/proc-tree.ts";
import { base62 } from "../../../core/ids.ts";

/** An agent started ahead of need, as the runtime spawned it. */
export interface WarmAgent {
  /** Its workspace folder, a direct child of the workspace root. */
  folder: string;
  /** False once the process exited. */
  alive(): boolean;
}

export interface WarmPoolOptions {
  /** The workspace root: workspace folders, `.warm/` and `.claimed/` are below it. */
  root: string;
  /** How many unclaimed agents to keep (booting ones included). */
  size: number;
  /** Starts an agent in a new workspace folder of this name; rejects when it cannot. */
  spawn(folder: string): Promise<WarmAgent>;
  /** Stops whatever runs in this workspace folder and removes it (and its log). */
  discard(folder: string): Promise<void>;
  log: (msg: string, data?: object) => void;
  /** Settles when agents may be started (after the runtime's sweep of what dead servers left). */
  after: Promise<void>;
}

/** Delay of a refill after a claimed agent answered its first health probe. */
const REFILL_DELAY_MS = 10;
/** Delay of a refill after a claim when nobody waits for the claimed agent's health. */
const REFILL_FALLBACK_MS = 1000;
/** Consecutive agents that may die unclaimed before the pool stops refilling until the next claim. */
const MAX_FAILURES = 3;
/**
 * A workspace folder's name, a direct child of the workspace root: a sandbox id (which must be one to be started
 * as a process sandbox) or a warm agent's `ws-…` name.
 */
export const WORKSPACE_FOLDER = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** The agents kept warm by one runtime instance, and the on-disk bookkeeping shared by every instance. */
export class WarmPool {
  readonly #o: WarmPoolOptions;
  readonly #warmDir: string;
  readonly #claimedDir: string;
  readonly #owner: string;
  /** Unclaimed agents, oldest first. */
  readonly #ready: WarmAgent[] = [];
  /** Agents being started. */
  readonly #starting = new Set<Promise<void>>();
  #failures = 0;
  #closed = false;
  /** The pending refill, if any. */
  #refill: { at: number; timer: NodeJS.Timeout } | null = null;

  constructor(options: WarmPoolOptions) {
    this.#o = options;
    this.#warmDir = join(options.root, ".warm");
    this.#claimedDir = join(options.root, ".claimed");
    this.#owner = `${process.pid}:${readProcStat(process.pid)?.startTime ?? 0}`;
  }

  /**
   * The oldest unclaimed agent, recorded as `sandboxId`'s workspace before it is returned; null when none is
   * there (start cold). A replacement follows either way (see refillSoon).
   */
  take(sandboxId: string): WarmAgent | null {
    let agent = this.#ready.shift();
    while (agent !== undefined && !agent.alive()) agent = this.#ready.shift();
    this.#failures = 0;
    // Not at once: spawning blocks the server's event loop for ~10 ms (a fork of the server), which would land in
    // the start being served. The runtime calls refillSoon once the claimed agent answers; this is the fallback.
    this.#refillAfter(agent === undefined ? 0 : REFILL_FALLBACK_MS);
    if (agent === undefined) return null;
    mkdirSync(this.#claimedDir, { recursive: true, mode: 0o700 });
    writeFileSync(join(this.#claimedDir, sandboxId), agent.folder, { mode: 0o600 });
    rmSync(join(this.#warmDir, agent.folder), { force: true });
    return agent;
  }

  /** Starts the replacements of claimed agents shortly (after the current turn's answers went out). */
  refillSoon(): void {
    this.#refillAfter(REFILL_DELAY_MS);
  }

  #refillAfter(ms: number): void {
    const at = Date.now() + ms;
    if (this.#refill !== null && this.#refill.at <= at) return;
    if (this.#refill !== null) clearTimeout(this.#refill.timer);
    const timer = setTimeout(() => {
      this.#refill = null;
      this.fill();
    }, ms);
    timer.unref();
    this.#refill = { at, timer };
  }

  /** Starts agents until `size` are ready or starting. */
  fill(): void {
    if (this.#closed || this.#o.size <= 0 || this.#failures >= MAX_FAILURES) return;
    while (this.#ready.length + this.#starting.size < this.#o.size) {
      const folder = `ws-${base62(20)}`;
      const started: Promise<void> = this.#o.after
        .then(() => {
          if (this.#closed) throw new Error("closed");
          mkdirSync(this.#warmDir, { recursive: true, mode: 0o700 });
          // Written whole (a file renamed into place): another server's sweep never reads it half-written.
          const record = join(this.#warmDir, folder);
          writeFileSync(`${record}.tmp`, this.#owner, { mode: 0o600 });
          renameSync(`${record}.tmp`, record);
          return this.#o.spawn(folder);
        })
        .then(
          async (agent) => {
            if (this.#closed) await this.#discard(folder);
            else this.#ready.push(agent);
          },
          async (e: unknown) => {
            if (this.#closed) return this.#discard(folder);
            this.#o.log("warm agent could not be started", { error: String(e) });
            await this.#failed(folder);
          },
        )
        .finally(() => this.#starting.delete(started));
      this.#starting.add(started);
    }
  }

  /** Called by the runtime when an agent it started for the pool exits: an unclaimed one is discarded. */
  exited(agent: WarmAgent): void {
    const at = this.#ready.indexOf(agent);
    if (at < 0) return;
    this.#ready.splice(at, 1);
    this.#o.log("warm agent exited unclaimed", { folder: agent.folder });
    void this.#failed(agent.folder);
  }

  /** Unclaimed agents (the Node process of one may still be starting). */
  get ready(): number {
    return this.#ready.length;
  }

  /** Stops and removes every unclaimed agent of this instance, starting ones included; no more are started. */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#refill !== null) clearTimeout(this.#refill.timer);
    const agents = this.#ready.splice(0);
    await Promise.all([...agents.map((agent) => this.#discard(agent.folder)), ...this.#starting]);
  }

  /** An agent that failed: removed, and replaced a second later unless too many failed in a row. */
  async #failed(folder: string): Promise<void> {
    this.#failures++;
    await this.#discard(folder);
    setTimeout(() => this.fill(), 1000).unref();
  }

  async #discard(folder: string): Promise<void> {
    try {
      await this.#o.discard(folder);
      rmSync(join(this.#warmDir, folder), { force: true });
    } catch (e: unknown) {
      // The next sweep (any server's, once this one is gone) removes what is left.
      this.#o.log("warm agent could not be removed", { folder, error: String(e) });
    }
  }
}

/**
 * Removes what servers that are gone left on this root: their unclaimed agents' folders (the agents exited with
 * their server), and claim records whose workspace no longer exists. Any server on the root may run it.
 */
export async function sweepWarmAgents(
  root: string,
  discard: (folder: string) => Promise<void>,
  log: (msg: string, data?: object) => void,
): Promise<void> {
  const warmDir = join(root, ".warm");
  const stale: string[] = [];
  for (const folder of listDir(warmDir)) {
    // A record being written (its temporary file) is a live server's; one left by a crash goes after a minute.
    if (folder.endsWith(".tmp")) {
      if (ageMs(join(warmDir, folder)) > 60_000) rmSync(join(warmDir, folder), { force: true });
      continue;
    }
    let owner = "";
    try {
      owner = readFileSync(join(warmDir, folder), "utf8");
    } catch {
      continue;
    }
    const [pid, ticks] = owner.split(":").map(Number);
    const alive = pid !== undefined && pid > 0 && readProcStat(pid)?.startTime === ticks;
    if (!alive && WORKSPACE_FOLDER.test(folder)) stale.push(folder);
  }
  for (const folder of stale) {
    await discard(folder);
    rmSync(join(warmDir, folder), { force: true });
  }
  if (stale.length > 0) log("warm agents of a stopped server removed", { count: stale.length });
  const folders = new Set(listDir(root));
  for (const sandboxId of listDir(join(root, ".claimed"))) {
    const folder = claimedFolder(root, sandboxId);
    if (folder === null || !folders.has(folder)) forgetClaim(root, sandboxId);
  }
}

/** The workspace folder of a sandbox started from a warm agent (by any server on this root); null for others. */
export function claimedFolder(root: string, sandboxId: string): string | null {
  if (!WORKSPACE_FOLDER.test(sandboxId)) return null;
  try {
    const folder = readFileSync(join(root, ".claimed", sandboxId), "utf8");
    return WORKSPACE_FOLDER.test(folder) ? folder : null;
  } catch {
    return null;
  }
}

/** Drops the record of a removed sandbox's workspace folder. */
export function forgetClaim(root: string, sandboxId: string): void {
  if (WORKSPACE_FOLDER.test(sandboxId)) rmSync(join(root, ".claimed", sandboxId), { force: true });
}

/** How long ago a file was last written (0 when it is gone). */
function ageMs(path: string): number {
  try {
    return Date.now() - statSync(path).mtimeMs;
  } catch {
    return 0;
  }
}

function listDir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}
