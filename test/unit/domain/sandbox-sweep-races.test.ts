// The background sweep against users' actions, interleaved deterministically: the sweep's read, the user's action,
// then the sweep's write. A user's action landing between the sweep's read and its write wins.
import { describe, expect, it } from "vitest";
import { SandboxSpecService } from "../../../src/domain/sandboxes/sandbox-spec-service.ts";
import type { RuntimeHandle, RuntimeState } from "../../../src/ports/sandbox-runtime.ts";
import {
  FakeSandboxRuntime,
  InMemoryChangeLog,
  InMemorySandboxRepository,
  testChangeFeed,
  testCrypto,
} from "../../helpers/fakes/index.ts";
import { testSandboxService } from "../../helpers/sandbox-service.ts";

/** A gate a test opens: `reached` resolves when the code under test waits at it. */
class Gate {
  armed = false;
  #open: () => void = () => {};
  #reached: () => void = () => {};
  readonly reached = new Promise<void>((r) => {
    this.#reached = r;
  });
  readonly #opened = new Promise<void>((r) => {
    this.#open = r;
  });
  async pass(): Promise<void> {
    if (!this.armed) return;
    this.armed = false;
    this.#reached();
    await this.#opened;
  }
  open(): void {
    this.#open();
  }
}

/** The fake runtime with gates: after inspect has read the state (before answering), and before pause acts. */
class GatedRuntime extends FakeSandboxRuntime {
  inspectGate = new Gate();
  pauseGate = new Gate();
  override async inspect(handle: RuntimeHandle, options?: { probe?: boolean }): Promise<RuntimeState> {
    const state = await super.inspect(handle, options);
    await this.inspectGate.pass();
    return state;
  }
  override async pause(handle: RuntimeHandle): Promise<void> {
    await this.pauseGate.pass();
    return super.pause(handle);
  }
}

function setup() {
  const log = new InMemoryChangeLog();
  const repo = new InMemorySandboxRepository(log);
  const runtime = new GatedRuntime();
  const { box, tokens } = testCrypto();
  const specs = new SandboxSpecService(
    [{ id: "default", command: ["agent"], initialEnv: {}, workingDir: "/w", createdAt: new Date(0) }],
    tokens,
  );
  const service = testSandboxService({ repo, runtime, specs, box, tokens, changes: testChangeFeed(log) });
  return { repo, runtime, service };
}

const tick = () => new Promise((r) => setTimeout(r, 2));

describe("the sweep against a user's resume", () => {
  it("a resume landing between the sweep's read and its pause wins: nothing is paused", async () => {
    const { repo, runtime, service } = setup();
    const { record } = await service.start("alice", undefined);
    await service.pause("alice", record.id);
    // A crash between an eviction and its pause: the record says PAUSED, the sandbox runs.
    runtime.states.set(record.id, "running");
    await tick();
    runtime.inspectGate.armed = true;
    const sweep = service.reconcileAll();
    await runtime.inspectGate.reached; // the sweep has read PAUSED and seen it running
    const resumed = await service.resume("alice", record.id);
    expect(resumed.status).toBe("RUNNING");
    const callsBefore = runtime.calls.length;
    runtime.inspectGate.open();
    await sweep;
    expect(runtime.calls.slice(callsBefore)).toEqual([]);
    expect(runtime.states.get(record.id)).toBe("running");
    expect(repo.peek(record.id)?.status).toBe("RUNNING");
  });

  it("a resume landing between the sweep's decision and its pause: the sandbox is resumed again", async () => {
    const { repo, runtime, service } = setup();
    const { record } = await service.start("alice", undefined);
    await service.pause("alice", record.id);
    runtime.states.set(record.id, "running");
    await tick();
    runtime.pauseGate.armed = true;
    const sweep = service.reconcileAll();
    await runtime.pauseGate.reached; // the sweep's compare-and-set succeeded; its pause has not acted yet
    const resumed = await service.resume("alice", record.id);
    expect(resumed.status).toBe("RUNNING");
    const callsBefore = runtime.calls.length;
    runtime.pauseGate.open();
    await sweep;
    expect(runtime.calls.slice(callsBefore)).toEqual([`pause:${record.id}`, `resume:${record.id}`]);
    expect(runtime.states.get(record.id)).not.toBe("paused");
    expect(repo.peek(record.id)?.status).toBe("RUNNING");
  });

  it("without a user's action the sweep pauses a PAUSED record found running", async () => {
    const { repo, runtime, service } = setup();
    const { record } = await service.start("alice", undefined);
    await service.pause("alice", record.id);
    runtime.states.set(record.id, "running");
    await tick();
    await service.reconcileAll();
    expect(runtime.states.get(record.id)).toBe("paused");
    expect(repo.peek(record.id)?.status).toBe("PAUSED");
  });

  it("an end the sweep observed is not written over a pause and resume made since its read", async () => {
    const { repo, runtime, service } = setup();
    const { record } = await service.start("alice", undefined);
    // Paused behind our back: the sweep would record PAUSED.
    runtime.states.set(record.id, "paused");
    await tick();
    runtime.inspectGate.armed = true;
    const sweep = service.reconcileAll();
    await runtime.inspectGate.reached;
    await service.pause("alice", record.id);
    await tick();
    await service.resume("alice", record.id);
    expect(repo.peek(record.id)?.status).toBe("RUNNING");
    runtime.inspectGate.open();
    await sweep;
    expect(repo.peek(record.id)?.status).toBe("RUNNING");
    expect(runtime.states.get(record.id)).toBe("running");
  });
});

describe("the sweep finishes a delete cut short", () => {
  it("a record marked deleting (its server died) is removed with its runtime objects, after the grace", async () => {
    const { repo, runtime, service } = setup();
    const { record } = await service.start("alice", undefined);
    // What a delete did before its server died: the record MISSING and marked, nothing removed yet; the process
    // died with the machine (a dead handle).
    expect(
      await repo.transition(record.id, ["RUNNING"], "MISSING", new Date(Date.now() - 60_000), {
        deleting: true,
      }),
    ).toBe(true);
    runtime.states.delete(record.id);
    await service.reconcileAll();
    expect(repo.peek(record.id)).toBeUndefined();
    expect(runtime.calls).toContain(`remove:${record.id}`);
    expect(runtime.calls).toContain(`removeBySandboxId:${record.id}`);
  });

  it("a fresh mark (a delete in progress on another server) is left alone; an observed MISSING stays", async () => {
    const { repo, runtime, service } = setup();
    const a = await service.start("alice", undefined);
    const b = await service.start("alice", undefined);
    await repo.transition(a.record.id, ["RUNNING"], "MISSING", new Date(), { deleting: true });
    runtime.states.delete(b.record.id); // gone: observed MISSING, the record is kept for the user to see
    await service.reconcileAll();
    await service.reconcileAll();
    expect(repo.peek(a.record.id)?.deleting).toBe(true);
    expect(repo.peek(b.record.id)?.status).toBe("MISSING");
    expect(repo.peek(b.record.id)?.deleting).toBeUndefined();
  });
});
