// Several server processes ("replicas") on one data store, killed and restarted by a test, and an independent view
// of the process sandboxes they run, read from /proc (not through the product's own process-finding code).
import type { ChildProcess } from "node:child_process";
import { appendFileSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { WORKSPACE_FOLDER } from "../../src/adapters/runtimes/process/warm-agents.ts";
import { unmountUnder } from "./mounts.ts";
import { LISTENING, spawnServer } from "./server-process.ts";

/** What one replica runs: `node <entry> serve` with this environment (PORT and GRPC_PORT are added). */
export interface ReplicaSpec {
  index: number;
  entry: string;
  env: Record<string, string>;
  port: number;
  grpcPort: number;
  /** Every line of every incarnation is appended here, prefixed with `[incarnation]`. */
  logFile: string;
}

/**
 * One replica: at most one process (an "incarnation") at a time, always on the same ports. `up` is true from the
 * moment the process logs that it listens until it is killed (set before the signal is sent, so that a request
 * failing because of the kill sees `up === false` or a newer `incarnation`).
 */
export class Replica {
  readonly index: number;
  readonly port: number;
  readonly grpcPort: number;
  readonly url: string;
  /** Every line every incarnation wrote on stdout and stderr. */
  readonly lines: string[] = [];
  incarnation = 0;
  kills = 0;
  /** Milliseconds from spawn to listening, of each incarnation that got there. */
  readonly startupMs: number[] = [];
  up = false;
  proc: ChildProcess | null = null;
  readonly #spec: ReplicaSpec;

  constructor(spec: ReplicaSpec) {
    this.#spec = spec;
    this.index = spec.index;
    this.port = spec.port;
    this.grpcPort = spec.grpcPort;
    this.url = `http://127.0.0.1:${spec.port}`;
  }

  /** Spawns a new incarnation; resolves once it listens, rejects when it exits first or after `timeoutMs`. */
  async start(timeoutMs = 20_000): Promise<void> {
    if (this.proc !== null) throw new Error(`replica ${this.index} is already running`);
    const inc = ++this.incarnation;
    const log = (line: string) => {
      this.lines.push(line);
      appendFileSync(this.#spec.logFile, `[${inc}] ${line}\n`);
    };
    const server = spawnServer({
      entry: this.#spec.entry,
      env: { ...this.#spec.env, PORT: String(this.port), GRPC_PORT: String(this.grpcPort) },
      onLine: log,
    });
    const proc = server.proc;
    this.proc = proc;
    const spawnedAt = Date.now();
    log(`harness: incarnation ${inc} spawned (pid ${proc.pid}) at ${spawnedAt}`);
    proc.once("exit", (code, signal) => {
      log(`harness: incarnation ${inc} exited (code ${code}, signal ${signal})`);
      if (this.proc === proc) {
        this.proc = null;
        this.up = false;
      }
    });
    try {
      await server.waitFor(LISTENING, timeoutMs);
    } catch {
      if (proc.exitCode !== null || proc.signalCode !== null)
        throw new Error(
          `replica ${this.index} (incarnation ${inc}) exited before listening (${proc.exitCode ?? proc.signalCode})`,
        );
      log(`harness: incarnation ${inc} did not listen within ${timeoutMs} ms: SIGKILL`);
      if (this.proc === proc) {
        this.proc = null;
        this.up = false;
      }
      proc.kill("SIGKILL");
      throw new Error(`replica ${this.index} (incarnation ${inc}) did not listen within ${timeoutMs} ms`);
    }
    if (this.proc === proc) {
      this.up = true;
      this.startupMs.push(Date.now() - spawnedAt);
    }
  }

  /** SIGKILL to the current incarnation (if any); resolves once it has exited. */
  async kill(): Promise<boolean> {
    const proc = this.proc;
    if (proc === null) return false;
    this.up = false;
    this.proc = null;
    this.kills++;
    appendFileSync(this.#spec.logFile, `[${this.incarnation}] harness: SIGKILL at ${Date.now()}\n`);
    const exited = new Promise<void>((r) => {
      if (proc.exitCode !== null || proc.signalCode !== null) r();
      else proc.once("exit", () => r());
    });
    proc.kill("SIGKILL");
    await exited;
    return true;
  }

  /** Lines containing `text`, over every incarnation. */
  count(text: string): number {
    return this.lines.filter((l) => l.includes(text)).length;
  }

  /** Log lines at warn level or above (pino levels 40+), with lines that are not JSON (crashes). */
  problems(): string[] {
    return this.lines.filter((l) => {
      if (l.startsWith("harness:")) return l.includes("did not listen") || /exited \(code \d+/.test(l);
      try {
        return ((JSON.parse(l) as { level?: number }).level ?? 0) >= 40;
      } catch {
        return l.trim() !== "";
      }
    });
  }
}

/**
 * `n` distinct loopback ports that are free now, below the kernel's ephemeral range, so that no sandbox agent nor
 * outgoing connection (both get ephemeral ports) can take the port of a replica while it is down.
 */
export async function freeFixedPorts(n: number): Promise<number[]> {
  let low = 32768;
  try {
    low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
  } catch {
    // keep the usual default
  }
  const ports: number[] = [];
  for (let tries = 0; ports.length < n && tries < 1000; tries++) {
    const port = Math.max(1024, low - 15_000) + Math.floor(Math.random() * 14_000);
    if (ports.includes(port)) continue;
    const free = await new Promise<boolean>((resolve) => {
      const s = createServer();
      s.once("error", () => resolve(false));
      s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
    });
    if (free) ports.push(port);
  }
  if (ports.length < n) throw new Error(`could not find ${n} free ports`);
  return ports;
}

/** One line of /proc/<pid>/stat: the fields used here. */
interface Stat {
  pid: number;
  ppid: number;
  state: string;
  startTime: number;
}

function readStat(pid: number): Stat | null {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, "latin1");
    const f = text.slice(text.lastIndexOf(")") + 2).split(" ");
    return { pid, state: f[0] ?? "?", ppid: Number(f[1]), startTime: Number(f[19]) };
  } catch {
    return null;
  }
}

function allPids(): number[] {
  return readdirSync("/proc")
    .filter((n) => /^\d+$/.test(n))
    .map(Number)
    .filter((pid) => pid !== process.pid);
}

/** A live (not zombie) process of a sandbox. */
export interface SandboxProcess {
  pid: number;
  ppid: number;
  sandboxId: string;
  state: string;
}

/** A sandbox as seen in /proc: `stopped` when every live process of it is stopped (T/t: paused). */
export interface SandboxInRuntime {
  sandboxId: string;
  stopped: boolean;
  pids: number[];
}

/**
 * Finds the processes of the process sandboxes whose workspaces are `<root>/<sandbox id>` (or, for one started from
 * a warm agent, the folder `<root>/.claimed/<sandbox id>` names), as the process runtime lays them out: a process belongs to a sandbox when its working directory is inside the workspace (the agent,
 * bwrap, commands), its environment has HOME or WORKSPACE_DIR there (the agent), an argument is the workspace
 * itself (bwrap's `--bind <workspace> <workspace>`), or its parent belongs to it. Zombies are left out.
 */
export class SandboxProcessScanner {
  readonly #root: string;
  /** `pid:starttime` → sandbox id (null: none; re-checked while the process is young, it may still exec). */
  readonly #known = new Map<string, { id: string | null; firstSeen: number }>();

  constructor(root: string) {
    this.#root = root.replace(/\/+$/, "");
  }

  #idOfPath(path: string): string | null {
    if (!path.startsWith(`${this.#root}/`)) return null;
    const seg = path.slice(this.#root.length + 1).split("/")[0] ?? "";
    return WORKSPACE_FOLDER.test(seg) ? seg : null;
  }

  #identify(pid: number): string | null {
    try {
      const id = this.#idOfPath(readlinkSync(`/proc/${pid}/cwd`));
      if (id !== null) return id;
    } catch {
      // gone
    }
    try {
      for (const arg of readFileSync(`/proc/${pid}/cmdline`, "latin1").split("\0")) {
        const id = this.#idOfPath(arg);
        if (id !== null && arg === `${this.#root}/${id}`) return id;
      }
    } catch {
      // gone
    }
    try {
      for (const e of readFileSync(`/proc/${pid}/environ`, "latin1").split("\0")) {
        if (e.startsWith("HOME=") || e.startsWith("WORKSPACE_DIR=")) {
          const id = this.#idOfPath(e.slice(e.indexOf("=") + 1));
          if (id !== null) return id;
        }
      }
    } catch {
      // gone
    }
    return null;
  }

  /** The live processes of every sandbox. */
  processes(): SandboxProcess[] {
    const now = Date.now();
    // The claim records first, then the process states: a warm agent already runs when it is claimed, and a start
    // claims it only after pausing what it evicted. Read the other way round, a sample could pair a sandbox's
    // state from before that pause with a claim made after it, and count both as running.
    const claimed = this.#claimedFolders();
    const stats = new Map<number, Stat>();
    for (const pid of allPids()) {
      const s = readStat(pid);
      if (s) stats.set(pid, s);
    }
    const direct = new Map<number, string | null>();
    const live = new Set<string>();
    for (const s of stats.values()) {
      const key = `${s.pid}:${s.startTime}`;
      live.add(key);
      let k = this.#known.get(key);
      if (k === undefined || (k.id === null && now - k.firstSeen < 3000)) {
        k = { id: this.#identify(s.pid), firstSeen: k?.firstSeen ?? now };
        this.#known.set(key, k);
      }
      direct.set(s.pid, k.id);
    }
    for (const key of this.#known.keys()) if (!live.has(key)) this.#known.delete(key);
    const idOf = (pid: number): string | null => {
      for (let p = pid, depth = 0; depth < 64; depth++) {
        const id = direct.get(p);
        if (id) return id;
        const parent = stats.get(p)?.ppid;
        if (parent === undefined || parent <= 1) return null;
        p = parent;
      }
      return null;
    };
    const out: SandboxProcess[] = [];
    for (const s of stats.values()) {
      if (s.state === "Z" || s.state === "X") continue;
      const folder = idOf(s.pid);
      const id = folder === null ? null : this.#sandboxOf(folder, claimed);
      if (id !== null) out.push({ pid: s.pid, ppid: s.ppid, sandboxId: id, state: s.state });
    }
    return out;
  }

  /**
   * Workspace folder → sandbox id for sandboxes started from a warm agent (the runtime's `.claimed/<id>` files,
   * read afresh: an agent becomes a sandbox when it is claimed, with the same pid).
   */
  #claimedFolders(): Map<string, string> {
    const out = new Map<string, string>();
    const dir = join(this.#root, ".claimed");
    let ids: string[] = [];
    try {
      ids = readdirSync(dir);
    } catch {
      return out;
    }
    for (const id of ids) {
      try {
        out.set(readFileSync(join(dir, id), "utf8"), id);
      } catch {
        // removed meanwhile
      }
    }
    return out;
  }

  /** The sandbox a workspace folder belongs to; null for a warm agent not claimed (not a sandbox yet). */
  #sandboxOf(folder: string, claimed: Map<string, string>): string | null {
    return claimed.get(folder) ?? (folder.startsWith("ws-") ? null : folder);
  }

  /** The sandboxes that have live processes, with whether they are stopped (paused). */
  sandboxes(): Map<string, SandboxInRuntime> {
    const out = new Map<string, SandboxInRuntime>();
    for (const p of this.processes()) {
      const stopped = p.state === "T" || p.state === "t";
      const s = out.get(p.sandboxId);
      if (s) {
        s.stopped &&= stopped;
        s.pids.push(p.pid);
      } else out.set(p.sandboxId, { sandboxId: p.sandboxId, stopped, pids: [p.pid] });
    }
    return out;
  }
}

/**
 * SIGKILLs every process that carries `dir` (working directory, an argument, or HOME/WORKSPACE_DIR/DATA_DIR in
 * its environment) and everything below them, until none is left (at most ~3 s). Returns how many were killed.
 */
export async function killProcessesUnder(dir: string): Promise<number> {
  const root = dir.replace(/\/+$/, "");
  const inside = (p: string) => p === root || p.startsWith(`${root}/`);
  const carries = (pid: number): boolean => {
    try {
      if (inside(readlinkSync(`/proc/${pid}/cwd`))) return true;
    } catch {
      // gone
    }
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, "latin1").split("\0").some(inside)) return true;
    } catch {
      // gone
    }
    try {
      return readFileSync(`/proc/${pid}/environ`, "latin1")
        .split("\0")
        .some((e) => /^(HOME|WORKSPACE_DIR|DATA_DIR)=/.test(e) && inside(e.slice(e.indexOf("=") + 1)));
    } catch {
      return false;
    }
  };
  let killed = 0;
  for (let round = 0; round < 30; round++) {
    const stats = allPids()
      .map(readStat)
      .filter((s): s is Stat => s !== null && s.state !== "Z" && s.state !== "X");
    const hit = new Set(stats.filter((s) => carries(s.pid)).map((s) => s.pid));
    for (let grew = true; grew; ) {
      grew = false;
      for (const s of stats)
        if (!hit.has(s.pid) && hit.has(s.ppid)) {
          hit.add(s.pid);
          grew = true;
        }
    }
    hit.delete(process.pid);
    if (hit.size === 0) {
      // Their loop-mounted workspaces, so that the folder can be deleted.
      unmountUnder(root);
      return killed;
    }
    for (const pid of hit) {
      try {
        process.kill(pid, "SIGKILL");
        killed++;
      } catch {
        // gone
      }
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return killed;
}
