// SandboxReconciler alone, over in-memory fakes of its small interfaces (the store's list/get/transition, the
// runtime's removal/pause/warm sweep, the states' observe/transition, the lifecycle's in-progress work): what it
// persists of each observed sandbox, what it leaves to this server's own starts and deletes, and what it removes.
import { describe, expect, it } from "vitest";
import { sandboxLimits } from "../../../src/domain/sandboxes/sandbox-limits.ts";
import {
  type ReconcileLifecycle,
  SandboxReconciler,
} from "../../../src/domain/sandboxes/sandbox-reconciler.ts";
import type { Observed, SandboxStateAccess } from "../../../src/domain/sandboxes/sandbox-state.ts";
import type { SandboxRecord, SandboxStatus } from "../../../src/ports/sandbox-repository.ts";
import type { RuntimeHandle } from "../../../src/ports/sandbox-runtime.ts";

const HANDLE: RuntimeHandle = { data: { pid: 1 }, agentUrl: "http://127.0.0.1:1", port: 1 };
const LONG_AGO = new Date(Date.now() - 3_600_000);

function record(id: string, status: SandboxStatus, extra: Partial<SandboxRecord> = {}): SandboxRecord {
  return {
    id,
    ownerId: "alice",
    specId: "default",
    runtime: "fake",
    handle: { ...HANDLE },
    sessionApiKey: "sealed",
    status,
    createdAt: LONG_AGO,
    updatedAt: new Date(),
    ...extra,
  };
}

/** The records, what the runtime says of each (by id), and every call the reconciler made. */
function setup(records: SandboxRecord[], runtimeSays: Record<string, SandboxStatus | null>, grace = 60_000) {
  const byId = new Map(records.map((r) => [r.id, r]));
  const calls: string[] = [];
  const inFlight = new Set<string>();
  const deleting = new Set<string>();
  let lists = 0;
  const states: SandboxStateAccess = {
    async observe(r): Promise<Observed> {
      const runtime = r.handle.agentUrl === undefined ? null : (runtimeSays[r.id] ?? null);
      if (runtime === "ERROR" && runtimeSays[`${r.id}:throws`] !== undefined)
        throw new Error("inspect failed");
      const handle = r.handle.agentUrl === undefined ? null : HANDLE;
      return { record: r, status: runtime ?? r.status, handle, runtime };
    },
    async transition(r, from, to, options) {
      calls.push(`transition ${r.id} ${from.join("|")}→${to}${options?.ifUpdatedAt ? " as read" : ""}`);
      if (!from.includes(byId.get(r.id)?.status ?? "MISSING")) return false;
      r.status = to;
      return true;
    },
    forget() {},
  };
  const lifecycle: ReconcileLifecycle = {
    inFlight: (id) => inFlight.has(id),
    deleting: (id) => deleting.has(id),
    async awaitHealthy(r, _handle, inlineMs) {
      calls.push(`awaitHealthy ${r.id} ${inlineMs}`);
      return { record: r, status: "STARTING", handle: HANDLE };
    },
    async removeAll(r) {
      calls.push(`removeAll ${r.id}`);
    },
  };
  let swept: ((id: string) => Promise<boolean>) | null = null;
  const reconciler = new SandboxReconciler({
    repo: {
      async listAll() {
        lists++;
        await new Promise((r) => setTimeout(r, 5));
        return [...byId.values()];
      },
      async get(id) {
        return byId.get(id) ?? null;
      },
      async transition(id, from, to) {
        calls.push(`repo.transition ${id} ${from.join("|")}→${to}`);
        return true;
      },
    },
    runtime: {
      async remove() {
        calls.push("remove");
      },
      async removeBySandboxId(id) {
        calls.push(`removeBySandboxId ${id}`);
        return 1;
      },
      async pause() {
        calls.push("pause");
      },
      async resume(handle) {
        calls.push("resume");
        return handle;
      },
      async sweepWarm(hasRecord) {
        swept = hasRecord;
      },
    },
    states,
    lifecycle,
    limits: sandboxLimits({ orphanGraceMs: grace }),
    log: (msg) => calls.push(`log ${msg}`),
  });
  return { reconciler, calls, inFlight, deleting, lists: () => lists, swept: () => swept };
}

describe("SandboxReconciler", () => {
  it("persists ended sandboxes and finished starts as compare-and-set on the record as read, and counts them", async () => {
    const { reconciler, calls } = setup(
      [record("a", "RUNNING"), record("b", "STARTING"), record("c", "RUNNING")],
      {
        a: "ERROR",
        b: "RUNNING",
        c: "RUNNING",
      },
    );
    expect(await reconciler.reconcileAll()).toEqual({
      STARTING: 0,
      RUNNING: 2,
      PAUSED: 0,
      ERROR: 1,
      MISSING: 0,
    });
    expect(calls).toEqual(["transition a RUNNING→ERROR as read", "transition b STARTING→RUNNING as read"]);
  });

  it("pauses a sandbox that runs without a slot (PAUSED record), deciding first by a write on the record", async () => {
    const { reconciler, calls } = setup([record("p", "PAUSED")], { p: "RUNNING" });
    await reconciler.reconcileAll();
    expect(calls).toEqual([
      "repo.transition p PAUSED→PAUSED",
      "log sandbox without a running slot found running: pausing it",
      "pause",
    ]);
  });

  it("waits again for the health of a start whose wait was lost, in the background (no inline wait)", async () => {
    const { reconciler, calls } = setup([record("s", "STARTING")], { s: "STARTING" });
    await reconciler.reconcileAll();
    expect(calls).toEqual(["awaitHealthy s 0"]);
  });

  it("leaves alone what this server is starting, and a delete of this server", async () => {
    const gone = record("d", "MISSING", { deleting: true, updatedAt: LONG_AGO });
    const { reconciler, calls, inFlight, deleting } = setup([record("a", "RUNNING"), gone], { a: "ERROR" });
    inFlight.add("a");
    deleting.add("d");
    await reconciler.reconcileAll();
    expect(calls).toEqual([]);
  });

  it("finishes a delete left past its grace, and sets ERROR a start left without a handle past the orphan grace", async () => {
    const gone = record("d", "MISSING", { deleting: true, updatedAt: LONG_AGO });
    const orphan = record("o", "STARTING", { handle: {}, updatedAt: LONG_AGO });
    const fresh = record("f", "STARTING", { handle: {} });
    const { reconciler, calls } = setup([gone, orphan, fresh], {});
    const counts = await reconciler.reconcileAll();
    expect(calls).toEqual([
      "log sandbox left by a delete that did not finish: removing it",
      "removeAll d",
      "transition o STARTING→ERROR as read",
      "removeBySandboxId o",
      "log sandbox left without a runtime handle (a crash while it started): set ERROR",
    ]);
    expect(counts).toMatchObject({ ERROR: 1, STARTING: 1 });
  });

  it("counts a sandbox it could not observe by its recorded status (logged), and goes on", async () => {
    const { reconciler, calls } = setup([record("x", "RUNNING"), record("y", "RUNNING")], {
      x: "ERROR",
      "x:throws": "ERROR",
      y: "RUNNING",
    });
    expect(await reconciler.reconcileAll()).toMatchObject({ RUNNING: 2, ERROR: 0 });
    expect(calls).toEqual(["log sandbox could not be reconciled"]);
  });

  it("shares one run between concurrent calls, and sweeps the warm pool against the records", async () => {
    const { reconciler, lists, swept } = setup([record("a", "RUNNING")], { a: "RUNNING" });
    const [one, two] = [reconciler.reconcileAll(), reconciler.reconcileAll()];
    expect(one).toBe(two);
    await one;
    expect(lists()).toBe(1);
    const hasRecord = swept();
    expect(await hasRecord?.("a")).toBe(true);
    expect(await hasRecord?.("w0")).toBe(false);
    await reconciler.reconcileAll();
    expect(lists()).toBe(2);
  });
});
