// SandboxStates alone, over in-memory fakes of its small interfaces (the store's transition, the runtime's inspect
// and failure reason, the change signal): what a record reads as against the runtime, the grace of a RUNNING agent
// that stops answering, and compare-and-set transitions that update the record and wake watches only on success.
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { sandboxLimits } from "../../../src/domain/sandboxes/sandbox-limits.ts";
import { SandboxStates } from "../../../src/domain/sandboxes/sandbox-state.ts";
import type {
  SandboxRecord,
  SandboxStatus,
  TransitionOptions,
} from "../../../src/ports/sandbox-repository.ts";
import type { RuntimeHandle, RuntimeState } from "../../../src/ports/sandbox-runtime.ts";

const HANDLE: RuntimeHandle = { data: { pid: 1 }, agentUrl: "http://127.0.0.1:1", port: 1 };

function record(status: SandboxStatus, handle: RuntimeHandle | null = HANDLE): SandboxRecord {
  return {
    id: "s1",
    ownerId: "alice",
    specId: "default",
    runtime: "fake",
    handle: handle === null ? {} : { ...handle },
    sessionApiKey: "sealed",
    status,
    createdAt: new Date(0),
    updatedAt: new Date(1_000),
  };
}

function setup(unansweredGraceMs = 60_000) {
  const stored = new Map<string, SandboxStatus>();
  const writes: { id: string; to: SandboxStatus; updatedAt: Date; options?: TransitionOptions }[] = [];
  const runtime = { state: "running" as RuntimeState | Error, reason: null as string | null };
  const logs: [string, Record<string, unknown> | undefined][] = [];
  let pokes = 0;
  const states = new SandboxStates({
    repo: {
      async transition(id, from, to, updatedAt, options) {
        const current = stored.get(id);
        if (current === undefined || !from.includes(current)) return false;
        stored.set(id, to);
        writes.push({ id, to, updatedAt, ...(options ? { options } : {}) });
        return true;
      },
    },
    runtime: {
      async inspect() {
        if (runtime.state instanceof Error) throw runtime.state;
        return runtime.state;
      },
      failureReason: () => runtime.reason,
    },
    changes: { poke: () => pokes++ },
    limits: sandboxLimits({ unansweredGraceMs }),
    log: (msg, data) => logs.push([msg, data]),
  });
  return { states, stored, writes, runtime, logs, pokes: () => pokes };
}

describe("SandboxStates.observe", () => {
  it("reads a record without a handle from its recorded status: RUNNING has nothing left, PAUSED stays PAUSED", async () => {
    const { states } = setup();
    expect((await states.observe(record("RUNNING", null))).status).toBe("MISSING");
    expect((await states.observe(record("PAUSED", null))).status).toBe("PAUSED");
    expect((await states.observe(record("STARTING", null))).runtime).toBeNull();
  });

  it("follows the runtime for a slot holder, keeps a PAUSED record PAUSED while it still runs, ERROR → MISSING", async () => {
    const { states, runtime } = setup();
    runtime.state = "running";
    expect((await states.observe(record("STARTING"))).status).toBe("RUNNING");
    expect((await states.observe(record("PAUSED"))).status).toBe("PAUSED");
    runtime.state = "missing";
    expect((await states.observe(record("ERROR"))).status).toBe("MISSING");
    runtime.state = "paused";
    expect(await states.observe(record("RUNNING"))).toMatchObject({ status: "PAUSED", runtime: "PAUSED" });
  });

  it("reads ERROR with the runtime's reason when inspecting fails", async () => {
    const { states, runtime } = setup();
    runtime.state = new Error("gone");
    runtime.reason = "killed by its memory limit";
    expect(await states.observe(record("RUNNING"))).toMatchObject({
      status: "ERROR",
      runtime: "ERROR",
      reason: "killed by its memory limit",
    });
  });

  it("keeps a RUNNING agent that stops answering RUNNING for the grace, then ERROR; an answer resets the grace", async () => {
    const { states, runtime } = setup(40);
    runtime.state = "starting"; // alive, probe unanswered
    expect((await states.observe(record("RUNNING"))).status).toBe("RUNNING");
    await sleep(60);
    expect((await states.observe(record("RUNNING"))).status).toBe("ERROR");
    runtime.state = "running";
    expect((await states.observe(record("RUNNING"))).status).toBe("RUNNING");
    runtime.state = "starting";
    expect((await states.observe(record("RUNNING"))).status).toBe("RUNNING");
  });

  it("forgets the unanswered time of a deleted sandbox", async () => {
    const { states, runtime } = setup(40);
    runtime.state = "starting";
    await states.observe(record("RUNNING"));
    await sleep(60);
    states.forget("s1");
    expect((await states.observe(record("RUNNING"))).status).toBe("RUNNING");
  });
});

describe("SandboxStates.transition", () => {
  it("writes from an allowed status: the record takes the new status and a later version, watches are woken", async () => {
    const { states, stored, writes, pokes } = setup();
    stored.set("s1", "STARTING");
    const r = record("STARTING");
    const asRead = new Date(Date.now() + 5_000); // a version from a clock ahead of this one
    expect(await states.transition(r, ["STARTING"], "RUNNING", { ifUpdatedAt: asRead })).toBe(true);
    expect(stored.get("s1")).toBe("RUNNING");
    expect(r.status).toBe("RUNNING");
    expect(writes).toHaveLength(1);
    expect(writes[0]?.updatedAt.getTime()).toBeGreaterThan(asRead.getTime());
    expect(writes[0]?.options).toEqual({ ifUpdatedAt: asRead });
    expect(r.updatedAt).toBe(writes[0]?.updatedAt);
    expect(pokes()).toBe(1);
  });

  it("changes nothing and wakes no watch when the store refuses (another write won)", async () => {
    const { states, stored, pokes } = setup();
    stored.set("s1", "PAUSED");
    const r = record("RUNNING");
    expect(await states.transition(r, ["RUNNING"], "ERROR")).toBe(false);
    expect(r.status).toBe("RUNNING");
    expect(r.updatedAt).toEqual(new Date(1_000));
    expect(pokes()).toBe(0);
  });

  it("logs a sandbox that fails, with the runtime's reason or the default one", async () => {
    const { states, stored, runtime, logs } = setup();
    stored.set("s1", "RUNNING");
    runtime.reason = "killed by its memory limit";
    await states.transition(record("RUNNING"), ["RUNNING"], "ERROR");
    stored.set("s1", "RUNNING");
    runtime.reason = null;
    await states.transition(record("RUNNING"), ["RUNNING"], "ERROR");
    stored.set("s1", "RUNNING");
    await states.transition(record("RUNNING"), ["RUNNING"], "PAUSED");
    expect(logs).toEqual([
      ["sandbox failed", { sandboxId: "s1", reason: "killed by its memory limit" }],
      ["sandbox failed", { sandboxId: "s1", reason: "its process ended or stopped answering" }],
    ]);
  });
});
