// WORKERS=N: N server processes sharing the HTTP and gRPC ports through node:cluster (docs/workers.md).
import cluster, { type Worker } from "node:cluster";
import { subscribe } from "node:diagnostics_channel";
import type { ServerResponse } from "node:http";
import type { Server } from "node:net";
import { type Logger, pino } from "pino";
import type { Config } from "./config-types.ts";

/** How the cluster primary paces restarts and stops. */
export const CLUSTER_TIMINGS = Object.freeze({
  /** Delay before restarting a worker that died; doubled for every further death of its slot, up to the max. */
  restartDelayMs: 500,
  maxRestartDelayMs: 30_000,
  /** A worker that ran at least this long before it died restarts after the first delay again. */
  stableMs: 60_000,
  /** A stopping worker still running this long after SIGTERM is killed (SIGKILL). */
  stopGraceMs: 30_000,
  /** A rolling restart gives up (keeping the running workers) when a new worker does not listen within this. */
  readyTimeoutMs: 120_000,
  /** Rolling restart: how long a worker being replaced drains (see runWorker) before its SIGTERM. */
  drainMs: 1_000,
});

/** The message asking a worker to drain before its SIGTERM (see {@link runWorker}). */
interface DrainMessage {
  type: "agent-workspace:drain";
  /** Refuse new connections (round-robin scheduling: the primary hands them to another worker). */
  refuseConnections: boolean;
}
const DRAIN = "agent-workspace:drain";

/** The server, imported when this process serves: the primary never loads it (its RSS: ~57 MiB instead of ~100). */
async function serve(config: Readonly<Config>): Promise<void> {
  const { serve: run } = await import("./serve.ts");
  await run(config);
}

/**
 * Runs the server as configured and resolves with the process's exit code: with WORKERS=1, the server in this
 * process (`serve`); otherwise this process becomes the cluster primary and forks WORKERS workers, each of which
 * runs the same command and ends up in `serve` too (see {@link runWorker}).
 */
export async function runServer(config: Readonly<Config>): Promise<number> {
  if (config.workers <= 1) {
    await serve(config);
    return 0;
  }
  if (cluster.isWorker) return runWorker(config);
  return new ClusterPrimary(config).run();
}

/**
 * A worker: the normal server, plus the drain the primary asks for before replacing it. Draining, the worker
 * refuses new connections (under round-robin scheduling the primary then hands each one to another worker) and
 * answers every HTTP/1.1 request with `Connection: close`, so keep-alive clients move to the other workers between
 * two requests; the SIGTERM that follows then finds (almost) no connection a request could still arrive on, which
 * the closing server would answer 503.
 */
async function runWorker(config: Readonly<Config>): Promise<number> {
  // Reloads are the primary's business; a SIGHUP reaching the whole process group (a closed terminal) must not
  // kill the workers.
  process.on("SIGHUP", () => {});
  // The listeners cluster shares with the other workers (HTTP, gRPC); exclusive ones (sandbox sockets) are not.
  const shared = new Set<Server>();
  subscribe("tracing:net.server.listen:asyncStart", (message) => {
    const { server, options } = message as { server: Server; options?: { exclusive?: boolean } };
    if (options?.exclusive === true) return;
    shared.add(server);
    server.once("close", () => shared.delete(server));
  });
  let draining = false;
  process.on("message", (message: unknown) => {
    const m = message as Partial<DrainMessage> | null;
    if (m?.type !== DRAIN || draining) return;
    draining = true;
    if (m.refuseConnections === true) for (const server of shared) server.maxConnections = 0;
    // Subscribed only now: requests pay nothing for it before.
    subscribe("http.server.request.start", (start) => {
      (start as { response: ServerResponse }).response.shouldKeepAlive = false;
    });
  });
  try {
    await serve(config);
  } catch (err) {
    // Should anything the failed start left open keep the worker alive, it exits anyway: the primary sees it.
    setTimeout(() => process.exit(1), 1_000).unref();
    throw err;
  } finally {
    // The IPC channel to the primary would keep this process alive.
    if (cluster.worker?.isConnected()) cluster.worker.disconnect();
  }
  return 0;
}

/** One of the WORKERS places: holds one worker at a time (a dead one is replaced in the same slot). */
interface Slot {
  readonly n: number;
  member: Member | null;
  /** Deaths in a row, for the restart backoff. */
  failures: number;
  /** A pending restart. */
  timer: NodeJS.Timeout | null;
}

interface Member {
  readonly worker: Worker;
  readonly pid: number;
  readonly slot: Slot;
  readonly startedAt: number;
  /** Ports it listens on (cluster 'listening' events): HTTP first, then gRPC. */
  readonly ports: number[];
  ready: boolean;
  /** Resolves once it listens on both ports; rejects if it exits before. */
  readonly listening: Promise<void>;
  readonly exited: Promise<void>;
  /** The primary stops it (replacement or shutdown): its exit is expected. */
  retiring: boolean;
  sigterm: boolean;
  onListening: () => void;
  onExitBeforeListening: (err: Error) => void;
  onExit: () => void;
}

const describeExit = (code: number | null, signal: string | null): string =>
  signal !== null ? `signal ${signal}` : `code ${code}`;

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The cluster primary: serves nothing itself. Starts the workers (the first alone, so that only it creates the
 * first API key, which a worker does right after it listens, well before the others have loaded; then the others
 * together), restarts a worker that dies with a bounded backoff, replaces them
 * one at a time on SIGHUP, and stops them all on SIGTERM/SIGINT.
 */
class ClusterPrimary {
  readonly #log: Logger;
  readonly #slots: Slot[];
  readonly #members = new Map<Worker, Member>();
  #started = false;
  #stopping = false;
  #unclean = false;
  #restarting = false;
  #restartAgain = false;
  #forceTimer: NodeJS.Timeout | null = null;
  #finish: (code: number) => void = () => {};
  readonly #done: Promise<number>;
  readonly #signals: [NodeJS.Signals, () => void][];

  constructor(config: Readonly<Config>) {
    this.#log = pino({ level: config.logLevel, name: "cluster-primary" });
    this.#slots = Array.from({ length: config.workers }, (_, i) => ({
      n: i + 1,
      member: null,
      failures: 0,
      timer: null,
    }));
    this.#done = new Promise((resolve) => {
      this.#finish = resolve;
    });
    this.#signals = [
      ["SIGTERM", () => this.#shutdown("SIGTERM")],
      ["SIGINT", () => this.#shutdown("SIGINT")],
      ["SIGHUP", () => void this.#rollingRestart()],
    ];
  }

  async run(): Promise<number> {
    for (const [signal, handler] of this.#signals) process.on(signal, handler);
    cluster.on("listening", (worker, address) => this.#onListening(worker, address.port));
    cluster.on("exit", (worker, code, signal) => this.#onExit(worker, code, signal));
    const n = this.#slots.length;
    this.#log.info(
      { workers: n, schedulingPolicy: cluster.schedulingPolicy === cluster.SCHED_RR ? "rr" : "none" },
      `cluster primary starting ${n} workers`,
    );
    try {
      const [first, ...rest] = this.#slots;
      if (first !== undefined) await this.#fork(first).listening;
      if (this.#stopping) return this.#done;
      await Promise.all(rest.map((slot) => this.#fork(slot).listening));
    } catch (err) {
      // A worker exited before it listened (the cause is in its output), or a signal stops the start.
      if (!this.#stopping) {
        this.#log.error({ error: (err as Error).message }, "cluster start failed: stopping the workers");
        this.#unclean = true;
        this.#shutdown(null);
      }
      return this.#done;
    }
    if (!this.#stopping) {
      this.#started = true;
      const members = this.#slots.map((s) => s.member).filter((m) => m !== null);
      this.#log.info(
        {
          workers: n,
          pids: members.map((m) => m.pid),
          http: members[0]?.ports[0],
          grpc: members[0]?.ports[1],
        },
        `cluster primary started ${n} workers`,
      );
    }
    return this.#done;
  }

  /** Forks a worker for `slot` (it becomes the slot's worker unless `replacing`, see the rolling restart). */
  #fork(slot: Slot, replacing = false): Member {
    const worker = cluster.fork();
    let onListening = (): void => {};
    let onExitBeforeListening = (_err: Error): void => {};
    let onExit = (): void => {};
    const listening = new Promise<void>((resolve, reject) => {
      onListening = resolve;
      onExitBeforeListening = reject;
    });
    listening.catch(() => {}); // observed by whoever waits for it; an unobserved one must not crash the primary
    const exited = new Promise<void>((resolve) => {
      onExit = resolve;
    });
    const member: Member = {
      worker,
      pid: worker.process.pid ?? 0,
      slot,
      startedAt: Date.now(),
      ports: [],
      ready: false,
      listening,
      exited,
      retiring: false,
      sigterm: false,
      onListening,
      onExitBeforeListening,
      onExit,
    };
    this.#members.set(worker, member);
    if (!replacing) slot.member = member;
    this.#log.debug({ worker: slot.n, pid: member.pid }, `worker ${slot.n} forked (pid ${member.pid})`);
    return member;
  }

  #onListening(worker: Worker, port: number): void {
    const m = this.#members.get(worker);
    if (m === undefined || m.ready) return;
    if (!m.ports.includes(port)) m.ports.push(port);
    // Ready once both listeners (HTTP, then gRPC) are up: serve() has started completely.
    if (m.ports.length < 2) return;
    m.ready = true;
    this.#log.info(
      { worker: m.slot.n, pid: m.pid, http: m.ports[0], grpc: m.ports[1] },
      `worker ${m.slot.n} (pid ${m.pid}) listening`,
    );
    m.onListening();
  }

  #onExit(worker: Worker, code: number | null, signal: string | null): void {
    const m = this.#members.get(worker);
    if (m === undefined) return;
    this.#members.delete(worker);
    const how = describeExit(code, signal);
    if (!m.ready) m.onExitBeforeListening(new Error(`worker ${m.slot.n} (pid ${m.pid}) exited (${how})`));
    m.onExit();
    if (this.#stopping) {
      // A worker stopped before it listened may die of the SIGTERM itself; any other end but 0 is a failure.
      const clean = code === 0 || (!m.ready && (signal === "SIGTERM" || signal === "SIGINT"));
      if (!clean) this.#unclean = true;
      this.#log.info(
        { worker: m.slot.n, pid: m.pid, code, signal },
        `worker ${m.slot.n} (pid ${m.pid}) stopped (${how})`,
      );
      if (this.#members.size === 0) this.#stopped();
      return;
    }
    if (m.retiring) {
      const level = code === 0 ? "info" : "warn";
      this.#log[level](
        { worker: m.slot.n, pid: m.pid, code, signal },
        `worker ${m.slot.n} (pid ${m.pid}) stopped (${how})`,
      );
      return;
    }
    // A new worker of a rolling restart that never listened: the restart reports it.
    if (m.slot.member !== m) return;
    const slot = m.slot;
    slot.member = null;
    // At start, the first failure stops the cluster (run() reports it).
    if (!this.#started) return;
    if (Date.now() - m.startedAt >= CLUSTER_TIMINGS.stableMs) slot.failures = 0;
    slot.failures++;
    const delay = Math.min(
      CLUSTER_TIMINGS.maxRestartDelayMs,
      CLUSTER_TIMINGS.restartDelayMs * 2 ** (slot.failures - 1),
    );
    this.#log.error(
      { worker: slot.n, pid: m.pid, code, signal, restartInMs: delay },
      `worker ${slot.n} (pid ${m.pid}) exited unexpectedly (${how}); restarting it in ${delay} ms`,
    );
    slot.timer = setTimeout(() => {
      slot.timer = null;
      if (this.#stopping || slot.member !== null) return;
      const fresh = this.#fork(slot);
      this.#log.info({ worker: slot.n, pid: fresh.pid }, `worker ${slot.n} restarted (pid ${fresh.pid})`);
    }, delay);
  }

  /** Sends SIGTERM once (a second one would kill the worker: serve() handles the first one only). */
  #term(m: Member): void {
    if (m.sigterm) return;
    m.sigterm = true;
    m.worker.process.kill("SIGTERM");
  }

  /** Stops one worker gracefully (after a drain, if asked), killing it after the grace period. */
  async #retire(m: Member, drain: boolean): Promise<void> {
    m.retiring = true;
    if (drain && m.worker.isConnected()) {
      const message: DrainMessage = {
        type: DRAIN,
        refuseConnections: cluster.schedulingPolicy === cluster.SCHED_RR,
      };
      m.worker.send(message, () => {});
      await Promise.race([sleep(CLUSTER_TIMINGS.drainMs), m.exited]);
    }
    this.#term(m);
    const killer = setTimeout(() => {
      this.#log.warn(
        { worker: m.slot.n, pid: m.pid },
        `worker ${m.slot.n} (pid ${m.pid}) still running ${CLUSTER_TIMINGS.stopGraceMs / 1000} s after SIGTERM: killing it`,
      );
      m.worker.process.kill("SIGKILL");
    }, CLUSTER_TIMINGS.stopGraceMs);
    await m.exited;
    clearTimeout(killer);
  }

  /** SIGHUP: replaces the workers one at a time, each once its replacement listens. */
  async #rollingRestart(): Promise<void> {
    if (this.#stopping) return;
    if (!this.#started) {
      this.#log.warn("SIGHUP ignored: the workers are still starting");
      return;
    }
    if (this.#restarting) {
      this.#restartAgain = true;
      this.#log.info("SIGHUP during a rolling restart: another one follows it");
      return;
    }
    this.#restarting = true;
    try {
      do {
        this.#restartAgain = false;
        if (!(await this.#replaceAll())) return;
      } while (this.#restartAgain && !this.#stopping);
    } finally {
      this.#restarting = false;
    }
  }

  /** One rolling restart; false when it stopped early. */
  async #replaceAll(): Promise<boolean> {
    const n = this.#slots.length;
    this.#log.info({ workers: n }, `rolling restart of ${n} workers, one at a time`);
    for (const slot of this.#slots) {
      if (this.#stopping) return false;
      // A restart pending after a death: the new worker takes its place.
      if (slot.timer !== null) {
        clearTimeout(slot.timer);
        slot.timer = null;
      }
      const fresh = this.#fork(slot, true);
      let timer: NodeJS.Timeout | undefined;
      try {
        await Promise.race([
          fresh.listening,
          new Promise((_, reject) => {
            timer = setTimeout(
              () => reject(new Error(`not listening after ${CLUSTER_TIMINGS.readyTimeoutMs / 1000} s`)),
              CLUSTER_TIMINGS.readyTimeoutMs,
            );
          }),
        ]);
      } catch (err) {
        if (this.#stopping) return false;
        this.#log.error(
          { worker: slot.n, pid: fresh.pid, error: (err as Error).message },
          `rolling restart stopped: the new worker ${slot.n} (pid ${fresh.pid}) did not start; the running workers keep serving`,
        );
        await this.#retire(fresh, false);
        return false;
      } finally {
        clearTimeout(timer);
      }
      if (this.#stopping) return false;
      const old = slot.member;
      slot.member = fresh;
      slot.failures = 0;
      if (old !== null) await this.#retire(old, true);
      this.#log.info(
        { worker: slot.n, pid: fresh.pid, replaced: old?.pid ?? null },
        `worker ${slot.n} replaced: pid ${old?.pid ?? "-"} → ${fresh.pid}`,
      );
    }
    this.#log.info(
      { pids: this.#slots.map((s) => s.member?.pid ?? null) },
      `rolling restart done: ${n} new workers`,
    );
    return true;
  }

  /** SIGTERM/SIGINT (or a failed start: null): stops every worker gracefully; a second signal kills them. */
  #shutdown(signal: NodeJS.Signals | null): void {
    if (this.#stopping) {
      if (signal === null) return;
      this.#log.warn({ signal }, `${signal} while stopping: killing the workers now`);
      this.#kill();
      return;
    }
    this.#stopping = true;
    this.#restartAgain = false;
    for (const slot of this.#slots) {
      if (slot.timer !== null) clearTimeout(slot.timer);
      slot.timer = null;
    }
    const pids = [...this.#members.values()].map((m) => m.pid);
    if (signal !== null)
      this.#log.info(
        { signal, pids },
        `${signal}: stopping ${pids.length} workers; they finish their in-flight requests`,
      );
    for (const m of this.#members.values()) {
      m.retiring = true;
      this.#term(m);
    }
    this.#forceTimer = setTimeout(() => {
      this.#log.warn(
        { pids: [...this.#members.values()].map((m) => m.pid) },
        `workers still running ${CLUSTER_TIMINGS.stopGraceMs / 1000} s after SIGTERM: killing them`,
      );
      this.#kill();
    }, CLUSTER_TIMINGS.stopGraceMs);
    if (this.#members.size === 0) this.#stopped();
  }

  #kill(): void {
    this.#unclean = true;
    for (const m of this.#members.values()) m.worker.process.kill("SIGKILL");
  }

  #stopped(): void {
    if (this.#forceTimer !== null) clearTimeout(this.#forceTimer);
    for (const [signal, handler] of this.#signals) process.off(signal, handler);
    const code = this.#unclean ? 1 : 0;
    this.#log.info({ code }, "cluster primary stopped");
    this.#finish(code);
  }
}
