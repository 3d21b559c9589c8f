import { afterEach, describe, expect, it, vi } from "vitest";
import { LoadThenIdle, lastResortGc, releaseMemoryAfterLoad } from "../../src/server/idle-memory.ts";

describe("LoadThenIdle (when the server gives pooled pages back)", () => {
  it("releases once, at the first idle interval after a loaded one", () => {
    const d = new LoadThenIdle(0.1, 0.02);
    expect([0.5, 0.3, 0.05, 0.01, 0.0, 0.01].map((u) => d.observe(u))).toEqual([
      false,
      false,
      false, // between the two thresholds: neither load nor idle
      true,
      false, // disarmed until the next load
      false,
    ]);
  });

  it("never releases on a server that never carries load", () => {
    const d = new LoadThenIdle(0.1, 0.02);
    expect([0, 0.05, 0.09, 0.01, 0].some((u) => d.observe(u))).toBe(false);
  });

  it("arms again with the next load", () => {
    const d = new LoadThenIdle(0.1, 0.02);
    expect([0.2, 0.0, 0.3, 0.0].map((u) => d.observe(u))).toEqual([false, true, false, true]);
  });
});

describe("lastResortGc / releaseMemoryAfterLoad without --expose-gc", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("is undefined without an exposed gc, and the sampler is then a no-op", () => {
    vi.stubGlobal("gc", undefined);
    expect(lastResortGc()).toBeUndefined();
    const stop = releaseMemoryAfterLoad({ intervalMs: 1 });
    expect(typeof stop).toBe("function");
    stop();
  });

  it("asks V8 for its memory-reducing (last-resort) major collection when gc is exposed", () => {
    const gc = vi.fn();
    vi.stubGlobal("gc", gc);
    lastResortGc()?.();
    expect(gc).toHaveBeenCalledWith({ type: "major", execution: "sync", flavor: "last-resort" });
  });
});
