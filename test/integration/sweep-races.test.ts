// The background sweep of one server against a user's resume on another, over one SQLite file and real sandbox
// processes: the sweep reads, the user resumes, then the sweep decides. The user's resume wins.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { createProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime.ts";
import type { RuntimeHandle, RuntimeState, SandboxRuntime } from "../../src/ports/sandbox-runtime.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

const dir = mkdtempSync(join(tmpdir(), "aws-sweep-race-"));
afterAll(async () => {
  await createProcessRuntime({ workspaceRoot: join(dir, "sandboxes"), isolation: "none" }).killAll();
  rmSync(dir, { recursive: true, force: true });
});

/** A gate: `reached` resolves when the code under test waits at it; it goes on once opened. */
function gate() {
  let open = (): void => {};
  let reach = (): void => {};
  const reached = new Promise<void>((r) => {
    reach = r;
  });
  const opened = new Promise<void>((r) => {
    open = r;
  });
  return { armed: false, reached, opened, open, reach };
}

/** The process runtime of the sweeping server, with a gate after inspect (the sweep has read and observed). */
function gatedRuntime(real: SandboxRuntime) {
  const inspectGate = gate();
  const runtime: SandboxRuntime = Object.assign(Object.create(real) as SandboxRuntime, {
    async inspect(handle: RuntimeHandle, options?: { probe?: boolean }): Promise<RuntimeState> {
      const state = await real.inspect(handle, options);
      if (inspectGate.armed) {
        inspectGate.armed = false;
        inspectGate.reach();
        await inspectGate.opened;
      }
      return state;
    },
  });
  return { runtime, inspectGate };
}

async function waitStatus(app: TestApp, key: string, id: string, status: string): Promise<void> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const r = await call(app.url, key, "GET", `/api/v1/sandboxes?id=${id}`);
    const [s] = r.body as ({ status: string } | null)[];
    if (s?.status === status) return;
    if (Date.now() > deadline) throw new Error(`sandbox ${id}: ${JSON.stringify(r.body)}, not ${status}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("the sweep against a resume, two servers over one file, real processes", () => {
  it("a resume landing between the sweep's read and its decision is not undone", async () => {
    const user = await startTestApp({ dir, sweepIntervalMs: 0 });
    const real = createProcessRuntime({ workspaceRoot: join(dir, "sandboxes"), isolation: "none" });
    const { runtime, inspectGate } = gatedRuntime(real);
    const sweeper = await startTestApp({ dir, sweepIntervalMs: 0, runtime });
    try {
      const key = await user.keyFor("race-user");
      const started = await call(user.url, key, "POST", "/api/v1/sandboxes");
      const id = (started.body as { id: string }).id;
      await waitStatus(user, key, id, "RUNNING");
      // A crash between an eviction and its pause: the record says PAUSED, the process runs.
      const before = await user.storage.sandboxes.get(id);
      expect(await user.storage.sandboxes.transition(id, ["RUNNING"], "PAUSED", new Date())).toBe(true);
      const handle = before?.handle as unknown as RuntimeHandle;
      expect(await real.inspect(handle)).toBe("running");

      inspectGate.armed = true;
      const sweep = sweeper.app.sweep();
      await inspectGate.reached; // the sweeping server read PAUSED and saw the process running
      expect((await call(user.url, key, "POST", `/api/v1/sandboxes/${id}/resume`)).status).toBe(200);
      await waitStatus(user, key, id, "RUNNING");
      inspectGate.open();
      await sweep;

      expect((await user.storage.sandboxes.get(id))?.status).toBe("RUNNING");
      expect(await real.inspect(handle)).toBe("running");
      await waitStatus(user, key, id, "RUNNING");
      // Without a user's action, the sweep does pause a PAUSED record's running process.
      expect(await user.storage.sandboxes.transition(id, ["RUNNING"], "PAUSED", new Date())).toBe(true);
      await new Promise((r) => setTimeout(r, 5));
      await sweeper.app.sweep();
      expect(await real.inspect(handle)).toBe("paused");
      expect((await call(user.url, key, "DELETE", `/api/v1/sandboxes/${id}`)).status).toBe(200);
    } finally {
      await sweeper.close();
      await user.close();
    }
  }, 60_000);
});
