// SandboxService's claims of warm sandboxes against a user's sandbox cap, over an in-memory registry and a fake
// runtime with a pool: a start the cap refuses takes no warm sandbox (a user at the cap cannot empty the pool for
// everyone), also when the user's starts come all at once or through a conversation start (newSandboxId).
import { beforeEach, describe, expect, it } from "vitest";
import type { SandboxService } from "../../../src/domain/sandboxes/sandbox-service.ts";
import { SandboxSpecService } from "../../../src/domain/sandboxes/sandbox-spec-service.ts";
import type { RuntimeSpec, WarmClaim } from "../../../src/ports/sandbox-runtime.ts";
import {
  FakeSandboxRuntime,
  InMemoryChangeLog,
  InMemorySandboxRepository,
  testChangeFeed,
  testCrypto,
} from "../../helpers/fakes/index.ts";
import { type TestSandboxServiceOptions, testSandboxService } from "../../helpers/sandbox-service.ts";

/** A fake runtime whose warm pool hands out w0, w1, … and records what was taken and removed. */
class PoolRuntime extends FakeSandboxRuntime {
  next = 0;
  /** When set, the pool has nothing ready. */
  empty = false;
  readonly taken: string[] = [];
  readonly removedIds: string[] = [];
  async claimWarm(_spec: RuntimeSpec): Promise<WarmClaim | null> {
    await new Promise((r) => setTimeout(r, 5)); // the engine's rename
    if (this.empty) return null;
    const sandboxId = `w${this.next++}`;
    this.taken.push(sandboxId);
    return { sandboxId, sessionApiKey: `key-${sandboxId}` };
  }
  override async removeBySandboxId(sandboxId: string): Promise<number> {
    this.removedIds.push(sandboxId);
    return super.removeBySandboxId(sandboxId);
  }
}

let runtime: PoolRuntime;
let service: SandboxService;

/** A service over a fresh registry and the current fake runtime: a cap of 2 sandboxes per user unless told. */
function makeService(options: Partial<TestSandboxServiceOptions> = {}): SandboxService {
  const log = new InMemoryChangeLog();
  const { box, tokens } = testCrypto();
  const specs = new SandboxSpecService(
    [{ id: "default", command: ["agent"], initialEnv: {}, workingDir: "/w", createdAt: new Date(0) }],
    tokens,
  );
  return testSandboxService({
    repo: new InMemorySandboxRepository(log),
    runtime,
    specs,
    box,
    tokens,
    changes: testChangeFeed(log),
    maxPerUser: 2,
    maxRunning: 5,
    ...options,
  });
}

beforeEach(() => {
  runtime = new PoolRuntime();
  service = makeService();
});

describe("warm claims and the per-user sandbox cap", () => {
  it("a user at the cap takes no warm sandbox, by start or by newSandboxId; another user still does", async () => {
    await service.start("alice", undefined);
    await service.start("alice", undefined);
    expect(runtime.taken).toEqual(["w0", "w1"]);
    for (let i = 0; i < 5; i++)
      await expect(service.start("alice", undefined)).rejects.toThrow(/Sandbox limit reached/);
    const planned = await service.newSandboxId("alice");
    expect(planned).not.toMatch(/^w\d+$/);
    await expect(service.start("alice", undefined, planned)).rejects.toThrow(/Sandbox limit reached/);
    expect(runtime.taken).toEqual(["w0", "w1"]);
    expect(runtime.removedIds).toEqual([]);
    const bob = await service.start("bob", undefined);
    expect(bob.record.id).toBe("w2");
  });

  it("of a burst of concurrent starts, only as many take a warm sandbox as the cap leaves room for", async () => {
    const results = await Promise.allSettled(
      Array.from({ length: 6 }, () => service.start("carol", undefined)),
    );
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(2);
    expect(runtime.taken).toHaveLength(2);
    expect(runtime.removedIds).toEqual([]);
  });

  it("a claim taken by newSandboxId counts until its start records it", async () => {
    const first = await service.newSandboxId("dave");
    const second = await service.newSandboxId("dave");
    const third = await service.newSandboxId("dave"); // the cap (2) is taken by the two planned starts
    expect([first, second]).toEqual(["w0", "w1"]);
    expect(third).not.toMatch(/^w\d+$/);
    expect(runtime.taken).toHaveLength(2);
  });
});

describe("warm claims and the per-user claim rate", () => {
  const serviceWithRate = (perMinute: number) =>
    makeService({ maxPerUser: 100, maxRunning: 100, warmClaimsPerMinute: perMinute });

  it("starts within the cap take warm sandboxes only up to the rate; other users still get one", async () => {
    const rated = serviceWithRate(3);
    const ids: string[] = [];
    for (let i = 0; i < 8; i++) ids.push((await rated.start("eve", undefined)).record.id);
    // Three warm (the burst), then cold starts: the pool is left for the others.
    expect(ids.slice(0, 3)).toEqual(["w0", "w1", "w2"]);
    for (const id of ids.slice(3)) expect(id).not.toMatch(/^w\d+$/);
    expect(runtime.taken).toHaveLength(3);
    expect((await rated.start("bob", undefined)).record.id).toBe("w3");
    // newSandboxId (a conversation start) counts against the same rate.
    expect(await rated.newSandboxId("eve")).not.toMatch(/^w\d+$/);
  });

  it("a start that finds the pool empty uses none of the rate", async () => {
    const rated = serviceWithRate(2);
    runtime.empty = true;
    for (let i = 0; i < 5; i++) expect((await rated.start("fay", undefined)).record.id).not.toMatch(/^w\d+$/);
    runtime.empty = false;
    expect((await rated.start("fay", undefined)).record.id).toBe("w0");
    expect((await rated.start("fay", undefined)).record.id).toBe("w1");
    expect((await rated.start("fay", undefined)).record.id).not.toMatch(/^w\d+$/);
  });

  it("0 means no limit", async () => {
    const unlimited = serviceWithRate(0);
    for (let i = 0; i < 8; i++) expect((await unlimited.start("eve", undefined)).record.id).toBe(`w${i}`);
  });
});
