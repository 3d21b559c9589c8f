import { Script } from "node:vm";

/**
 * Lets V8 give back the memory of an idle server.
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
 * positive and tiny, which is how an idle heap reads, and the reducer works as it did before V8 13.1. No GC is
 * forced and no V8 flag is set; whether and when to collect stays V8's decision.
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
