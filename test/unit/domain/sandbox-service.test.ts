// SandboxService over an in-memory registry and a fake runtime: lifecycle, reconciliation, ownership, the limit.
import { setTimeout as sleep } from "node:timers/promises";
import { create } from "@bufbuild/protobuf";
import { Code, type ConnectError } from "@connectrpc/connect";
import { beforeEach, describe, expect, it } from "vitest";
import type { SandboxService } from "../../../src/domain/sandboxes/sandbox-service.ts";
import { SandboxSpecService } from "../../../src/domain/sandboxes/sandbox-spec-service.ts";
import {
  BatchGetSandboxesRequestSchema,
  DeleteSandboxRequestSchema,
  PauseSandboxRequestSchema,
  SandboxStatus,
  SearchSandboxesRequestSchema,
  StartSandboxRequestSchema,
} from "../../../src/gen/workspace/v1/sandbox_pb.js";
import {
  callAs,
  FakeSandboxRuntime,
  InMemoryChangeLog,
  InMemorySandboxRepository,
  testChangeFeed,
  testCrypto,
} from "../../helpers/fakes/index.ts";
import { testSandboxService } from "../../helpers/sandbox-service.ts";

let repo: InMemorySandboxRepository;
let log: InMemoryChangeLog;
let runtime: FakeSandboxRuntime;
const alice = callAs("alice");
const bob = callAs("bob");

function makeService(
  options: {
    maxRunning?: number;
    inlineWaitMs?: number;
    orphanGraceMs?: number;
    slotWaitMs?: number;
    inUseByStarts?: (userId: string) => Promise<readonly string[]>;
    agentUrls?: { proxied: boolean; publicUrl?: string; servicePort?: () => number | undefined };
  } = {},
): SandboxService {
  const { box, tokens } = testCrypto();
  const specs = new SandboxSpecService(
    [{ id: "default", command: ["agent"], initialEnv: {}, workingDir: "/w", createdAt: new Date(0) }],
    tokens,
  );
  return testSandboxService({ repo, runtime, specs, box, tokens, changes: testChangeFeed(log), ...options });
}

const failure = (p: Promise<unknown>) =>
  p.then(
    () => {
      throw new Error("expected a failure");
    },
    (e: unknown) => e as ConnectError,
  );

beforeEach(() => {
  log = new InMemoryChangeLog();
  repo = new InMemorySandboxRepository(log);
  runtime = new FakeSandboxRuntime();
});

describe("SandboxService", () => {
  it("starts a sandbox: RUNNING once healthy, agent URL and session key shown, the key sealed at rest", async () => {
    const service = makeService();
    const { sandbox } = await service.startSandbox(create(StartSandboxRequestSchema), alice);
    expect(sandbox?.status).toBe(SandboxStatus.RUNNING);
    expect(sandbox?.createdByUserId).toBe("alice");
    // Reached through the service's own origin ("/"), with the agent's loopback address beside it. The proxied
    // entry's port is the service's listening port: none here (the service objects alone, no listener).
    const port = sandbox?.exposedUrls[1]?.port ?? 0;
    expect(port).toBeGreaterThan(0);
    expect(sandbox?.exposedUrls.map(({ name, url, port }) => ({ name, url, port }))).toEqual([
      { name: "AGENT_SERVER", url: "/", port: 0 },
      { name: "AGENT_SERVER_DIRECT", url: `http://127.0.0.1:${port}`, port },
    ]);
    const key = sandbox?.sessionApiKey ?? "";
    expect(key).toBe(runtime.started[0]?.sessionApiKey);
    // The key names its sandbox, and opens it (the agent proxy's look-up); another secret does not.
    expect(key).toMatch(new RegExp(`^sbx_${sandbox?.id}_[0-9A-Za-z]{43}$`));
    expect(await service.agentTarget(key)).toEqual({
      sandboxId: sandbox?.id,
      ownerId: "alice",
      status: "RUNNING",
      agentUrl: `http://127.0.0.1:${port}`,
    });
    expect(await service.agentTarget(`sbx_${sandbox?.id}_${"A".repeat(43)}`)).toBeNull();
    const stored = repo.peek(sandbox?.id ?? "");
    expect(stored?.status).toBe("RUNNING");
    expect(stored?.sessionApiKey).not.toContain(key);
  });

  it("names the agent by its direct URL without the proxy, and by PUBLIC_URL when one is set", async () => {
    const direct = await makeService({ agentUrls: { proxied: false } }).startSandbox(
      create(StartSandboxRequestSchema),
      alice,
    );
    const port = direct.sandbox?.exposedUrls[0]?.port ?? 0;
    expect(port).toBeGreaterThan(0);
    expect(direct.sandbox?.exposedUrls.map(({ name, url }) => ({ name, url }))).toEqual([
      { name: "AGENT_SERVER", url: `http://127.0.0.1:${port}` },
    ]);
    const pub = await makeService({
      agentUrls: { proxied: true, publicUrl: "https://agents.example.com", servicePort: () => 3000 },
    }).startSandbox(create(StartSandboxRequestSchema), alice);
    const pubPort = pub.sandbox?.exposedUrls[1]?.port ?? 0;
    // Each entry's port is the one its URL reaches: PUBLIC_URL's (https: 443), and the agent's own.
    expect(pub.sandbox?.exposedUrls.map(({ name, url, port }) => ({ name, url, port }))).toEqual([
      { name: "AGENT_SERVER", url: "https://agents.example.com", port: 443 },
      { name: "AGENT_SERVER_DIRECT", url: `http://127.0.0.1:${pubPort}`, port: pubPort },
    ]);
    const explicit = await makeService({
      agentUrls: { proxied: true, publicUrl: "http://agents.example.com:8080", servicePort: () => 3000 },
    }).startSandbox(create(StartSandboxRequestSchema), alice);
    expect(explicit.sandbox?.exposedUrls[0]?.port).toBe(8080);
    // Without PUBLIC_URL, the service's own listening port (the "/" URL resolves against its origin).
    const own = await makeService({ agentUrls: { proxied: true, servicePort: () => 3000 } }).startSandbox(
      create(StartSandboxRequestSchema),
      alice,
    );
    expect(own.sandbox?.exposedUrls.map(({ name, port }) => [name, port])).toEqual([
      ["AGENT_SERVER", 3000],
      ["AGENT_SERVER_DIRECT", own.sandbox?.exposedUrls[1]?.port],
    ]);
  });

  it("a runtime that cannot start, or an agent that never gets healthy, leaves the sandbox in ERROR", async () => {
    const service = makeService();
    runtime.failStart = new Error("no room");
    const failed = await service.start("alice", undefined);
    expect(failed.status).toBe("ERROR");
    expect(repo.peek(failed.record.id)?.status).toBe("ERROR");
    runtime.failStart = null;
    runtime.healthy = false;
    const unhealthy = await service.start("alice", undefined);
    expect(unhealthy.status).toBe("ERROR");
    const info = service.toInfo(unhealthy);
    expect(info.sessionApiKey).toBeUndefined(); // only a RUNNING sandbox shows its key and URL
    expect(info.exposedUrls).toEqual([]);
  });

  it("answers STARTING when health takes longer than the inline wait, then settles to RUNNING", async () => {
    const service = makeService({ inlineWaitMs: 10 });
    let release: (ok: boolean) => void = () => {};
    runtime.healthy = () => new Promise<boolean>((r) => (release = r));
    const live = await service.start("alice", undefined);
    expect(live.status).toBe("STARTING");
    setTimeout(() => release(true), 20);
    const settled = await service.waitUntilSettled("alice", live.record.id, 5_000);
    expect(settled?.status).toBe("RUNNING");
  });

  it("an ERROR sandbox carries the runtime's reason (a memory limit kill)", async () => {
    const service = makeService();
    Object.assign(runtime, { failureReason: () => "killed by its memory limit (268435456 bytes)" });
    runtime.healthy = false;
    const failed = await service.start("alice", undefined);
    expect(failed.status).toBe("ERROR");
    expect((await service.get("alice", failed.record.id))?.reason).toBe(
      "killed by its memory limit (268435456 bytes)",
    );
    runtime.healthy = true;
    const ok = await service.start("alice", undefined);
    expect((await service.get("alice", ok.record.id))?.reason).toBeUndefined();
  });

  it("never pauses a starting sandbox: a start waits for a slot, says why once, and takes it when one runs", async () => {
    const service = makeService({ maxRunning: 1, inlineWaitMs: 10, slotWaitMs: 5_000 });
    let release: (ok: boolean) => void = () => {};
    runtime.healthy = () => new Promise<boolean>((r) => (release = r));
    const first = await service.start("alice", undefined);
    expect(first.status).toBe("STARTING");
    runtime.healthy = true;
    const waits: string[] = [];
    const second = service.start("alice", undefined, undefined, { onWait: (d) => void waits.push(d) });
    await sleep(300);
    expect(waits).toEqual([
      "Waiting for a running slot: all 1 of your running sandboxes are starting or in use by a conversation start, and at most 1 run at once",
    ]);
    expect(repo.peek(first.record.id)?.status).toBe("STARTING");
    release(true);
    expect((await second).status).toBe("RUNNING");
    expect(repo.peek(first.record.id)?.status).toBe("PAUSED");
  });

  it("gives up waiting for a slot with FAILED_PRECONDITION; sandboxes in use by conversation starts are not paused", async () => {
    const service = makeService({ maxRunning: 1, slotWaitMs: 300, inUseByStarts: async () => inUse });
    let inUse: string[] = [];
    const first = await service.start("alice", undefined);
    expect(first.status).toBe("RUNNING");
    inUse = [first.record.id];
    const refused = await failure(service.start("alice", undefined));
    expect(refused.code).toBe(Code.FailedPrecondition);
    expect(refused.rawMessage).toMatch(
      /^Waiting for a running slot: .*; try again once one of them is running$/,
    );
    expect(repo.peek(first.record.id)?.status).toBe("RUNNING");
    expect(await repo.listAll("alice")).toHaveLength(1);
    inUse = [];
    expect((await service.start("alice", undefined)).status).toBe("RUNNING");
    expect(repo.peek(first.record.id)?.status).toBe("PAUSED");
  });

  it("reports the runtime's state on read (a vanished sandbox is MISSING, a crashed one ERROR) and reconciles the registry", async () => {
    const service = makeService();
    const a = await service.start("alice", undefined);
    const b = await service.start("alice", undefined);
    runtime.states.delete(a.record.id);
    runtime.states.set(b.record.id, "error");
    const got = await service.batchGetSandboxes(
      create(BatchGetSandboxesRequestSchema, { id: [a.record.id, b.record.id] }),
      alice,
    );
    expect(got.items.map((s) => s.sandbox?.status)).toEqual([SandboxStatus.MISSING, SandboxStatus.ERROR]);
    // Reconciliation brings the registry up to date.
    expect(await service.reconcileAll()).toMatchObject({ MISSING: 1, ERROR: 1, RUNNING: 0 });
    expect(repo.peek(a.record.id)?.status).toBe("MISSING");
    expect(repo.peek(b.record.id)?.status).toBe("ERROR");
  });

  it("reconciliation removes what still runs under a record a delete set MISSING and never finished", async () => {
    const service = makeService({ orphanGraceMs: 0 });
    const a = await service.start("alice", undefined);
    // The delete's first step (MISSING) was written, then its server died before removing anything.
    await repo.transition(a.record.id, ["RUNNING", "STARTING"], "MISSING", new Date(Date.now() - 1000));
    expect(runtime.states.get(a.record.id)).toBe("running");
    await service.reconcileAll();
    expect(runtime.calls).toContain(`remove:${a.record.id}`);
    expect(runtime.states.has(a.record.id)).toBe(false);
    expect(repo.peek(a.record.id)?.status).toBe("MISSING");
  });

  it("pauses the user's oldest running sandbox when a start would pass the running limit", async () => {
    const service = makeService({ maxRunning: 2 });
    const first = await service.start("alice", undefined);
    await sleep(3);
    const second = await service.start("alice", undefined);
    await sleep(3);
    await service.start("bob", undefined); // another user's sandboxes do not count
    await sleep(3);
    const third = await service.start("alice", undefined);
    expect(runtime.calls.filter((c) => c.startsWith("pause:"))).toEqual([`pause:${first.record.id}`]);
    expect((await service.get("alice", first.record.id))?.status).toBe("PAUSED");
    expect((await service.get("alice", second.record.id))?.status).toBe("RUNNING");
    expect(third.status).toBe("RUNNING");
    // Resuming the paused one pauses the now-oldest running one (second), not itself.
    await service.resume("alice", first.record.id);
    expect(runtime.calls.filter((c) => c.startsWith("pause:")).at(-1)).toBe(`pause:${second.record.id}`);
    expect((await service.get("alice", first.record.id))?.status).toBe("RUNNING");
  });

  it("another user's sandbox behaves as absent: NOT_FOUND for pause and delete, an empty slot in batch get", async () => {
    const service = makeService();
    const a = await service.start("alice", undefined);
    const id = a.record.id;
    expect(
      (await failure(service.pauseSandbox(create(PauseSandboxRequestSchema, { sandboxId: id }), bob))).code,
    ).toBe(Code.NotFound);
    expect(
      (await failure(service.deleteSandbox(create(DeleteSandboxRequestSchema, { sandboxId: id }), bob))).code,
    ).toBe(Code.NotFound);
    const got = await service.batchGetSandboxes(create(BatchGetSandboxesRequestSchema, { id: [id] }), bob);
    expect(got.items[0]?.sandbox).toBeUndefined();
    expect((await service.searchSandboxes(create(SearchSandboxesRequestSchema), bob)).items).toEqual([]);
    expect(runtime.calls).toEqual([`start:${id}`]); // nothing was paused or removed
    expect(repo.peek(id)?.status).toBe("RUNNING");
  });

  it("pause and delete: the runtime is told, the registry follows; pause is idempotent", async () => {
    const service = makeService();
    const { record } = await service.start("alice", undefined);
    await service.pauseSandbox(create(PauseSandboxRequestSchema, { sandboxId: record.id }), alice);
    await service.pauseSandbox(create(PauseSandboxRequestSchema, { sandboxId: record.id }), alice);
    expect(runtime.calls.filter((c) => c === `pause:${record.id}`)).toHaveLength(1);
    expect(repo.peek(record.id)?.status).toBe("PAUSED");
    await service.deleteSandbox(create(DeleteSandboxRequestSchema, { sandboxId: record.id }), alice);
    expect(runtime.calls).toContain(`remove:${record.id}`);
    expect(repo.peek(record.id)).toBeUndefined();
    expect(
      (
        await failure(
          service.deleteSandbox(create(DeleteSandboxRequestSchema, { sandboxId: record.id }), alice),
        )
      ).code,
    ).toBe(Code.NotFound);
  });

  it("searches newest first in pages, with page ids scoped to the caller", async () => {
    const service = makeService({ maxRunning: 10 });
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      ids.push((await service.start("alice", undefined)).record.id);
      await sleep(2);
    }
    const seen: string[] = [];
    let pageId: string | undefined;
    do {
      const page = await service.searchSandboxes(
        create(SearchSandboxesRequestSchema, { limit: 2, ...(pageId ? { pageId } : {}) }),
        alice,
      );
      seen.push(...page.items.map((s) => s.id));
      pageId = page.nextPageId;
    } while (pageId !== undefined);
    expect(seen).toEqual([...ids].reverse());
    const first = await service.searchSandboxes(create(SearchSandboxesRequestSchema, { limit: 2 }), alice);
    const err = await failure(
      service.searchSandboxes(create(SearchSandboxesRequestSchema, { pageId: first.nextPageId ?? "" }), bob),
    );
    expect(err.code).toBe(Code.InvalidArgument);
  });

  it("watch yields the current state, then each change of the caller's sandboxes only", async () => {
    const service = makeService();
    const { record } = await service.start("alice", undefined);
    const abort = new AbortController();
    const stream = service.watchSandboxes(
      { $typeName: "workspace.v1.WatchSandboxesRequest", id: [] },
      callAs("alice", abort.signal),
    );
    const first = await stream.next();
    expect(first.value?.sandbox?.status).toBe(SandboxStatus.RUNNING);
    const next = stream.next();
    await service.start("bob", undefined); // not alice's: not reported
    await service.pause("alice", record.id);
    expect((await next).value?.sandbox).toMatchObject({ id: record.id, status: SandboxStatus.PAUSED });
    abort.abort();
    expect((await stream.next()).done).toBe(true);
  });
});
