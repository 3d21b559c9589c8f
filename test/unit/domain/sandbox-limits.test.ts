// The sandbox service's limits as one frozen object (sandboxLimits): each default as the settings always had it,
// the grace periods derived from the start timeout, and nothing changes them after construction.
import { describe, expect, it } from "vitest";
import { type SandboxLimitSettings, sandboxLimits } from "../../../src/domain/sandboxes/sandbox-limits.ts";

const options = (limits: SandboxLimitSettings = {}): SandboxLimitSettings => limits;

describe("sandboxLimits", () => {
  it("has the defaults: 5 running, 20 per user, no claim rate, 2 s inline, 120 s start, 30 s slot, 15 s grace", () => {
    expect(sandboxLimits(options())).toEqual({
      maxRunning: 5,
      maxPerUser: 20,
      warmClaimsPerMinute: 0,
      inlineWaitMs: 2_000,
      startTimeoutMs: 120_000,
      orphanGraceMs: 120_000,
      deleteGraceMs: 15_000,
      slotWaitMs: 30_000,
      unansweredGraceMs: 15_000,
    });
  });

  it("derives the orphan grace from the start timeout and the delete grace from both, at most 15 s", () => {
    expect(sandboxLimits(options({ startTimeoutMs: 4_000 }))).toMatchObject({
      startTimeoutMs: 4_000,
      orphanGraceMs: 4_000,
      deleteGraceMs: 4_000,
    });
    expect(sandboxLimits(options({ orphanGraceMs: 50 }))).toMatchObject({
      orphanGraceMs: 50,
      deleteGraceMs: 50,
    });
    expect(sandboxLimits(options({ deleteGraceMs: 7, warmClaimsPerMinute: 3 }))).toMatchObject({
      deleteGraceMs: 7,
      warmClaimsPerMinute: 3,
    });
  });

  it("is frozen", () => {
    const limits = sandboxLimits(options({ maxRunning: 2 }));
    expect(Object.isFrozen(limits)).toBe(true);
    expect(() => {
      (limits as { maxRunning: number }).maxRunning = 9;
    }).toThrow(TypeError);
    expect(limits.maxRunning).toBe(2);
  });
});
