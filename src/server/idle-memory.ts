import { performance } from "node:perf_hooks";
import { Script } from "node:vm";

/**
 * Lets V8 give back the memory of an idle server: keepMemoryReducerWorking (here) and releaseMemoryAfterLoad (below).
 *
 * V8 returns what a burst of work left behind (the startup's garbage, a load's grown young generation) through its
 * memory reducer: every 8 s it samples the allocation rates and, once they are low, runs a memory-reducing full GC.
 * Since V8 13.1 (Node 24) the test also takes the embedder (cppgc) heap's allocation rate, and a rate of exactly
 * zero counts as the highest possible. A Node process that never allocates there (no `node:vm`, no cppgc addon)
 * never looks idle to the reducer; its memory comes back only through the reducer's watchdog, 100 s after the last
 * full GC, which every full GC puts off again (nodejs/node#66564).
 *
 * Compiling an empty `vm.Script` allocates one small cppgc object. The rate V8 derives from it decays to exactly
 * zero after ~100 s without such an allocation, so one is made at start and one every 30 s: the embedder rate stays
 * positive and tiny, which is how an idle heap reads, and the reducer works as it did before V8 13.1. This part
 * forces no GC and sets no V8 flag; whether and when to collect stays V8's decision.
 *
 * What it earns, on the benchmark service: idle RSS ~88–89 MiB from ~17 s after start, instead of ~106 MiB until
 * the watchdog's GC ~106 s after start (README table; docs/performance.md, "Memory at idle").
 */
export const EMBEDDER_ALLOCATION_INTERVAL_MS = 30_000;

/** Starts the periodic allocation (the timer does not keep the process alive); returns how to stop it. */
export function keepMemoryReducerWorking(intervalMs = EMBEDDER_ALLOCATION_INTERVAL_MS): () => void {
  const allocate = (): void => {
    new Script("");
  };
  allocate();
  const timer = setInterval(allocate, intervalMs).unref();
  return () => clearInterval(timer);
}

/**
 * Gives back the young generation's pages once a load is over.
 *
 * Under load V8 grows its young generation (by tens of MiB); when the allocation rate falls, a scavenge shrinks
 * it and puts the freed 256 KiB pages in V8's page pool, which keeps them mapped "until a memory-reducing GC"
 * (deps/v8 memory-allocator.cc). Such a GC comes from the memory reducer, and the reducer, once it has run after
 * startup, starts again only after a full GC that finds the old generation's committed memory 10 MiB above its
 * last run (memory-reducer.cc, kCommittedMemoryDelta). A load that grows the young generation but not the old one
 * therefore leaves its pages pooled for good: measured with the soak, 31 MiB pooled after the second round's
 * cleanup (`--trace-gc`: "pooled: 31 MB"), the RSS step docs/reliability.md describes. Node has no API for V8's
 * memory-pressure notification; the one way from JavaScript to a memory-reducing GC is `gc({ flavor:
 * "last-resort" })` (V8's `CollectAllAvailableGarbage`), available when Node runs with `--expose-gc`, which
 * `npm start` passes. Without that flag this does nothing.
 *
 * When: the event loop's utilization is sampled every `intervalMs`; one interval at or above `busy` arms it, and
 * the first interval after that at or below `idle` runs one such GC (tens of milliseconds on an idle heap of
 * ~35 MiB) and disarms it until the next load. A server that never carries load never collects this way.
 */
export interface IdleReleaseOptions {
  /** Sampling interval (default 10 s). */
  intervalMs?: number;
  /** Utilization (0–1) of an interval that counts as load (default 0.1). */
  busy?: number;
  /** Utilization of an interval that counts as idle (default 0.02). */
  idle?: number;
  /** The collection to run (default: V8's last-resort GC when `gc` is exposed). */
  collect?: () => void;
  /** Called after each release with the process's RSS before and after it and how long it took. */
  onRelease?: (info: { rssBeforeMiB: number; rssAfterMiB: number; ms: number }) => void;
}

/** The decision alone: fed one utilization figure per interval, says when to release. */
export class LoadThenIdle {
  #armed = false;
  readonly #busy: number;
  readonly #idle: number;
  constructor(busy = 0.1, idle = 0.02) {
    this.#busy = busy;
    this.#idle = idle;
  }
  /** True when this interval is the first idle one after a load. */
  observe(utilization: number): boolean {
    if (utilization >= this.#busy) {
      this.#armed = true;
      return false;
    }
    if (this.#armed && utilization <= this.#idle) {
      this.#armed = false;
      return true;
    }
    return false;
  }
}

/** V8's memory-reducing collection, or undefined when Node runs without `--expose-gc`. */
export function lastResortGc(): (() => void) | undefined {
  const gc = globalThis.gc;
  if (typeof gc !== "function") return undefined;
  return () => gc({ type: "major", execution: "sync", flavor: "last-resort" });
}

/** Starts the sampling (the timer does not keep the process alive); returns how to stop it. */
export function releaseMemoryAfterLoad(options: IdleReleaseOptions = {}): () => void {
  const collect = options.collect ?? lastResortGc();
  if (collect === undefined) return () => {};
  const decision = new LoadThenIdle(options.busy, options.idle);
  let last = performance.eventLoopUtilization();
  const timer = setInterval(() => {
    const now = performance.eventLoopUtilization();
    const interval = performance.eventLoopUtilization(now, last);
    last = now;
    if (!decision.observe(interval.utilization)) return;
    const rssBefore = process.memoryUsage.rss();
    const t0 = performance.now();
    collect();
    const ms = performance.now() - t0;
    // The collection itself is work of this interval, not load: start the next interval after it.
    last = performance.eventLoopUtilization();
    options.onRelease?.({
      rssBeforeMiB: rssBefore / 1048576,
      rssAfterMiB: process.memoryUsage.rss() / 1048576,
      ms,
    });
  }, options.intervalMs ?? 10_000).unref();
  return () => clearInterval(timer);
}
