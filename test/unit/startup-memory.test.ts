// The one memory-reducing collection after start-up: it runs, reports what it did, shrinks V8's young generation,
// and leaves no `gc` behind for the rest of the process.

import { getHeapSpaceStatistics } from "node:v8";
import { runInNewContext } from "node:vm";
import { describe, expect, it } from "vitest";
import { releaseStartupMemory } from "../../src/server/startup-memory.ts";

const newSpace = () => getHeapSpaceStatistics().find((s) => s.space_name === "new_space")?.space_size ?? 0;

describe("releaseStartupMemory", () => {
  it("collects, shrinks the young generation and keeps gc hidden", () => {
    // Grow the young generation the way start-up does: many objects that survive a few scavenges.
    const keep: unknown[] = [];
    for (let i = 0; i < 200_000; i++) keep.push({ i, s: `item ${i}` });
    const before = newSpace();
    const r = releaseStartupMemory();
    expect(keep).toHaveLength(200_000);
    expect(r.rssBefore).toBeGreaterThan(0);
    expect(r.rssAfter).toBeGreaterThan(0);
    expect(r.ms).toBeGreaterThanOrEqual(0);
    expect(before).toBeGreaterThan(2 ** 21); // grown past its initial 1 MiB by the allocations above
    expect(newSpace()).toBeLessThan(before); // shrunk back
    expect(typeof (globalThis as { gc?: unknown }).gc).toBe("undefined");
    expect(runInNewContext("typeof gc")).toBe("undefined");
  });
});
