import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

/** V8's `gc()` as `--expose-gc` defines it. */
type Gc = (options?: {
  type?: "major" | "minor";
  execution?: "sync" | "async";
  flavor?: "regular" | "last-resort";
}) => void;

/** What {@link releaseStartupMemory} did. */
export interface StartupMemoryRelease {
  /** Resident set size before and after, in bytes. */
  rssBefore: number;
  rssAfter: number;
  /** How long the collection held the event loop. */
  ms: number;
}

/**
 * Returns the memory start-up used and no longer needs to the OS, once, after the server listens.
 *
 * Loading and compiling the modules leaves ~10 MiB of garbage in the old generation and grows the young
 * generation to its maximum (`--max-semi-space-size`), and an idle server keeps all of it: nothing allocates
 * enough to trigger the collections that would give it back. V8's most thorough collection ("last resort":
 * full collections until nothing more is freed, then the young generation shrunk to its initial size and free
 * pages released) takes ~20–60 ms here and lowers the idle RSS by ~10 MiB. Under load the young generation grows
 * back as it needs to. `gc` is taken from a fresh context with `--expose-gc` set just for that, so nothing else in
 * the process ever sees it.
 */
export function releaseStartupMemory(): StartupMemoryRelease {
  setFlagsFromString("--expose-gc");
  let gc: Gc;
  try {
    gc = runInNewContext("gc") as Gc;
  } finally {
    setFlagsFromString("--no-expose-gc");
  }
  const rssBefore = process.memoryUsage.rss();
  const started = performance.now();
  gc({ type: "major", execution: "sync", flavor: "last-resort" });
  const ms = performance.now() - started;
  return { rssBefore, rssAfter: process.memoryUsage.rss(), ms };
}
