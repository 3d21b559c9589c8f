import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const MODULE = fileURLToPath(new URL("../../src/server/idle-memory.ts", import.meta.url));

/**
 * A child process makes a burst of garbage, then idles; it reports how long V8 took to give its heap back (the
 * committed heap falling under half of its size after the burst), or null if that did not happen in 45 s. With
 * `aid` it runs keepMemoryReducerWorking first, as the server does once it listens.
 */
function idleAfterBurst(aid: boolean): Promise<{ peakMiB: number; nowMiB: number; afterMs: number | null }> {
  const script = `
    import { getHeapStatistics } from "node:v8";
    if (${aid}) (await import(${JSON.stringify(MODULE)})).keepMemoryReducerWorking();
    let keep = [];
    const end = Date.now() + 1500;
    while (Date.now() < end) {
      keep.push(new Array(1000).fill({ at: Date.now() }));
      if (keep.length > 4000) keep = keep.slice(2000);
    }
    keep = null;
    const peak = getHeapStatistics().total_heap_size;
    const t0 = Date.now();
    const report = (afterMs) => {
      const now = getHeapStatistics().total_heap_size;
      console.log(JSON.stringify({ peakMiB: peak / 1048576, nowMiB: now / 1048576, afterMs }));
      process.exit(0);
    };
    setInterval(() => {
      if (getHeapStatistics().total_heap_size < peak / 2) report(Date.now() - t0);
      else if (Date.now() - t0 > 45000) report(null);
    }, 250);
  `;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
    });
    child.on("error", reject);
    child.on("exit", () => {
      try {
        resolve(JSON.parse(out));
      } catch {
        reject(new Error(`no report from the child: ${out}`));
      }
    });
  });
}

describe("idle memory (V8's memory reducer)", () => {
  it("an idle process gives its heap back within seconds of a burst once keepMemoryReducerWorking runs", async () => {
    const r = await idleAfterBurst(true);
    // The burst grows the heap well beyond what survives it.
    expect(r.peakMiB).toBeGreaterThan(40);
    // The reducer samples every 8 s and collects once the rates read low: its second or third sample.
    expect(r.afterMs).not.toBeNull();
    expect(r.afterMs).toBeLessThan(30_000);
    expect(r.nowMiB).toBeLessThan(r.peakMiB / 2);
  }, 60_000);

  it("after a load, the first idle interval gives the young generation's pages back (V8's reducer off)", async () => {
    // With --no-memory-reducer nothing but releaseMemoryAfterLoad makes a memory-reducing GC, as on a server
    // whose reducer has finished its runs (src/server/idle-memory.ts).
    const script = `
      const { releaseMemoryAfterLoad } = await import(${JSON.stringify(MODULE)});
      const reports = [];
      releaseMemoryAfterLoad({ intervalMs: 250, onRelease: (r) => reports.push(r) });
      // Load: allocation with survivors for 1.5 s, yielding so the sampler sees a busy loop.
      let keep = [];
      const end = Date.now() + 1500;
      while (Date.now() < end) {
        for (let i = 0; i < 2000; i++) keep.push({ i, s: "x" + i, a: [i, i] });
        if (keep.length > 100000) keep = keep.slice(50000);
        await new Promise((r) => setImmediate(r));
      }
      keep = null;
      const afterLoadMiB = process.memoryUsage.rss() / 1048576;
      setTimeout(() => {
        console.log(JSON.stringify({ afterLoadMiB, reports }));
        process.exit(0);
      }, 2500);
    `;
    const out = await new Promise<string>((resolve, reject) => {
      const child = spawn(
        process.execPath,
        ["--expose-gc", "--no-memory-reducer", "--input-type=module", "-e", script],
        { stdio: ["ignore", "pipe", "inherit"] },
      );
      let text = "";
      child.stdout.on("data", (d: Buffer) => {
        text += d.toString();
      });
      child.on("error", reject);
      child.on("exit", () => resolve(text));
    });
    const r = JSON.parse(out) as {
      afterLoadMiB: number;
      reports: { rssBeforeMiB: number; rssAfterMiB: number; ms: number }[];
    };
    // One release, in the idle time after the load, and it gave memory back.
    expect(r.reports).toHaveLength(1);
    const [release] = r.reports;
    expect(release?.rssBeforeMiB).toBeGreaterThan(80);
    expect((release?.rssBeforeMiB ?? 0) - (release?.rssAfterMiB ?? 0)).toBeGreaterThan(20);
  }, 30_000);
});
