import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { basename, join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { readProcStat } from "../../agent/shared/proc-tree.ts";
import { probeAlive } from "../../src/adapters/runtimes/agent-health.ts";
import { createProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime.ts";
import type { ProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime-types.ts";
import {
  SandboxService,
  SandboxStatus,
  type WatchSandboxesResponse,
} from "../../src/gen/workspace/v1/sandbox_pb.js";
import type { SandboxRecord } from "../../src/ports/sandbox-repository.ts";
import type { RuntimeHandle } from "../../src/ports/sandbox-runtime.ts";
import { defaultSpecs } from "../../src/server/sandbox-specs.ts";
import { type WriteFaults, withWriteFaults } from "../helpers/faulty-storage.ts";
import { connectClient, grpcClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

interface Sandbox {
  id: string;
  status: string;
}
interface Task {
  id: string;
  status: string;
  detail: string | null;
}

const pidOf = (handle: RuntimeHandle): number => (handle.data as { pid: number }).pid;
/** True while the process behind the handle exists and is neither stopped nor dead. */
const processRuns = (handle: RuntimeHandle): boolean => {
  const state = readProcStat(pidOf(handle))?.state;
  return state !== undefined && !["T", "t", "Z", "X"].includes(state);
};
const processGone = (pid: number): boolean => ["Z", "X", undefined].includes(readProcStat(pid)?.state);
const handleOf = (r: SandboxRecord | null): RuntimeHandle | null =>
  r !== null && typeof r.handle.agentUrl === "string" ? (r.handle as unknown as RuntimeHandle) : null;

describe("the running limit under 15 parallel creates (process runtime, REST)", () => {
  let t: TestApp;
  let runtime: ProcessRuntime;
  /** runtime.pause calls per sandbox id (the workspace folder is the id). */
  const pauses = new Map<string, number>();

  beforeAll(async () => {
    const { mkdtempSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const dir = mkdtempSync(join(tmpdir(), "aws-concurrency-"));
    runtime = createProcessRuntime({ workspaceRoot: join(dir, "sandboxes") });
    const counting: ProcessRuntime = {
      ...runtime,
      pause: async (handle) => {
        const id = basename(String(handle.data.workspace));
        pauses.set(id, (pauses.get(id) ?? 0) + 1);
        return runtime.pause(handle);
      },
    };
    t = await startTestApp({ dir, runtime: counting, maxRunningSandboxes: 5, sweepIntervalMs: 0 });
  }, 30_000);
  afterAll(async () => {
    await runtime.killAll();
    await t.close();
    const { rmSync } = await import("node:fs");
    rmSync(t.dir, { recursive: true, force: true });
  });

  it("leaves at most 5 running (seen in the runtime) and pauses each of the other 10 exactly once", async () => {
    const key = await t.keyFor("racer");
    const events = new Map<string, number[]>();
    const watch = grpcClient(SandboxService, t.grpcAddress).stream("WatchSandboxes", {}, key);
    watch.on("data", (m: WatchSandboxesResponse) => {
      if (!m.sandbox) return;
      const seen = events.get(m.sandbox.id) ?? [];
      seen.push(m.sandbox.status);
      events.set(m.sandbox.id, seen);
    });
    watch.on("error", () => {});
    await new Promise((r) => setTimeout(r, 100));

    const created = await Promise.all(
      Array.from({ length: 15 }, () => call(t.url, key, "POST", "/api/v1/sandboxes")),
    );
    for (const r of created) expect(r.status, r.text).toBe(200);
    const ids = created.map((r) => (r.body as Sandbox).id);
    expect(new Set(ids).size).toBe(15);

    // Settled: every start is RUNNING or PAUSED.
    let statuses: string[] = [];
    await vi.waitFor(
      async () => {
        const r = await call(t.url, key, "GET", `/api/v1/sandboxes?${ids.map((i) => `id=${i}`).join("&")}`);
        statuses = (r.body as Sandbox[]).map((s) => s.status);
        expect(
          statuses.filter((s) => s === "RUNNING"),
          JSON.stringify(statuses),
        ).toHaveLength(5);
        expect(
          statuses.filter((s) => s === "PAUSED"),
          JSON.stringify(statuses),
        ).toHaveLength(10);
      },
      { timeout: 60_000, interval: 200 },
    );

    // The runtime agrees: five live, answering agents; ten stopped processes.
    const records = await Promise.all(ids.map((id) => t.storage.sandboxes.get(id)));
    const handles = records.map(handleOf);
    expect(handles.every((h) => h !== null)).toBe(true);
    const live = (handles as RuntimeHandle[]).filter(processRuns);
    expect(live).toHaveLength(5);
    for (const h of live) expect(await probeAlive(h.agentUrl, 2000)).toBe(true);
    const running = ids.filter((_, i) => statuses[i] === "RUNNING");
    const paused = ids.filter((_, i) => statuses[i] === "PAUSED");
    expect(new Set(live.map((h) => basename(String(h.data.workspace))))).toStrictEqual(new Set(running));

    // Exactly once: one runtime pause and one PAUSED event per evicted sandbox, none for the survivors.
    for (const id of paused) expect(pauses.get(id), id).toBe(1);
    for (const id of running) expect(pauses.get(id) ?? 0, id).toBe(0);
    await vi.waitFor(() => {
      for (const id of paused)
        expect(events.get(id)?.filter((s) => s === SandboxStatus.PAUSED)).toHaveLength(1);
    });
    // Which five survive depends on timing: the oldest RUNNING one is paused first, but a sandbox still STARTING is
    // never paused, so a slow start lets a newer one go before it (the counts and "exactly once" above hold always).
    watch.cancel();
    const byAge = [...(records as SandboxRecord[])].sort(
      (a, b) => a.createdAt.getTime() - b.createdAt.getTime() || (a.id < b.id ? -1 : 1),
    );

    // Resuming an old one pauses the oldest running one, once.
    const before = new Map(pauses);
    const oldest = byAge.find((r) => paused.includes(r.id)) as SandboxRecord;
    expect((await call(t.url, key, "POST", `/api/v1/sandboxes/${oldest.id}/resume`)).status).toBe(200);
    const nowRunning = await Promise.all(ids.map((id) => t.storage.sandboxes.get(id)));
    const evicted = byAge.find((r) => running.includes(r.id)) as SandboxRecord;
    await vi.waitFor(async () => {
      expect((await t.storage.sandboxes.get(oldest.id))?.status).toBe("RUNNING");
    });
    expect((await t.storage.sandboxes.get(evicted.id))?.status).toBe("PAUSED");
    expect(pauses.get(evicted.id)).toBe((before.get(evicted.id) ?? 0) + 1);
    expect(nowRunning.filter((r) => r?.status === "RUNNING" || r?.status === "STARTING")).toHaveLength(5);
    expect((handles as RuntimeHandle[]).filter(processRuns)).toHaveLength(5);
  }, 120_000);
});

describe("per-user cap, crash leftovers, storage faults", () => {
  let t: TestApp;
  let faults: WriteFaults;
  let key: string;
  const api = (method: string, path: string, body?: unknown) => call(t.url, key, method, path, body);
  /** A spec whose command never answers health checks: cheap sandboxes for counting. */
  const idle = {
    id: "idle",
    command: ["/bin/sh", "-c", "sleep 300"],
    initialEnv: {},
    workingDir: "",
    createdAt: new Date(),
  };

  beforeAll(async () => {
    t = await startTestApp({
      llmModel: "openai/test-model",
      maxSandboxesPerUser: 4,
      maxRunningSandboxes: 10,
      sweepIntervalMs: 0,
      specs: [...defaultSpecs({ kind: "process" }, new Date()), idle],
      wrapStorage: (storage) => {
        const wrapped = withWriteFaults(storage);
        faults = wrapped.faults;
        return wrapped.storage;
      },
    });
    key = await t.keyFor("capped");
  }, 30_000);
  afterAll(async () => {
    faults.fail = null;
    await t.close();
  });

  it("refuses the fifth sandbox with 409 on REST and FAILED_PRECONDITION on Connect and gRPC, even in parallel", async () => {
    const results = await Promise.all(
      Array.from({ length: 6 }, () => api("POST", "/api/v1/sandboxes?sandbox_spec_id=idle")),
    );
    expect(results.filter((r) => r.status === 200)).toHaveLength(4);
    const refused = results.filter((r) => r.status !== 200);
    expect(refused).toHaveLength(2);
    for (const r of refused) {
      expect(r.status).toBe(409);
      expect(r.headers.get("content-type")).toMatch(/application\/json/);
      expect(r.body).toStrictEqual({
        detail:
          "Sandbox limit reached: you have 4 sandboxes and a user may have at most 4; delete one to start another",
      });
    }
    expect((await t.storage.sandboxes.listAll("capped")).length).toBe(4);
    const connect = connectClient(SandboxService, t.url, key);
    const err = await connect
      .startSandbox({ sandboxSpecId: "idle" })
      .catch((e: unknown) => ConnectError.from(e));
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.FailedPrecondition);
    expect((err as ConnectError).rawMessage).toMatch(/at most 4/);
    const grpc = grpcClient(SandboxService, t.grpcAddress);
    await expect(grpc.unary("StartSandbox", { sandboxSpecId: "idle" }, key)).rejects.toMatchObject({
      code: 9, // FAILED_PRECONDITION
    });
    grpc.close();
    expect((await t.storage.sandboxes.listAll("capped")).length).toBe(4);
    // Deleting one makes room for one.
    const first = (results.find((r) => r.status === 200)?.body as Sandbox | undefined)?.id ?? "";
    expect((await api("DELETE", `/api/v1/sandboxes/${first}`)).status).toBe(200);
    expect((await api("POST", "/api/v1/sandboxes?sandbox_spec_id=idle")).status).toBe(200);
    for (const r of await t.storage.sandboxes.listAll("capped"))
      expect((await api("DELETE", `/api/v1/sandboxes/${r.id}`)).status).toBe(200);
  }, 60_000);

  /** Spawns an agent for a record whose handle was never saved (a kill -9 between insert and handle save). */
  const orphan = async (updatedAt: Date): Promise<{ id: string; pid: number; workspace: string }> => {
    const id = randomBytes(11).toString("hex");
    const spec = defaultSpecs({ kind: "process" }, new Date())[0];
    if (spec === undefined) throw new Error("no spec");
    const handle = await t.runtime.start({ sandboxId: id, spec, sessionApiKey: "orphan-key-123456" });
    expect(await t.runtime.waitHealthy(handle, 15_000)).toBe(true);
    await t.storage.sandboxes.insert({
      id,
      ownerId: "capped",
      specId: spec.id,
      runtime: "process",
      handle: {},
      sessionApiKey: "sealed-nothing",
      status: "STARTING",
      createdAt: updatedAt,
      updatedAt,
    });
    return { id, pid: pidOf(handle), workspace: String(handle.data.workspace) };
  };

  it("reconciles a record left STARTING without a handle: its process is stopped and it becomes ERROR", async () => {
    const o = await orphan(new Date(Date.now() - 10 * 60_000));
    const young = await orphan(new Date());
    expect(processGone(o.pid)).toBe(false);
    await t.app.sweep();
    expect((await t.storage.sandboxes.get(o.id))?.status).toBe("ERROR");
    await vi.waitFor(() => expect(processGone(o.pid)).toBe(true));
    expect(existsSync(o.workspace)).toBe(false);
    expect(((await api("GET", `/api/v1/sandboxes?id=${o.id}`)).body as Sandbox[])[0]?.status).toBe("ERROR");
    // A young one may still be starting on another server: left alone until the grace period has passed.
    expect((await t.storage.sandboxes.get(young.id))?.status).toBe("STARTING");
    expect(processGone(young.pid)).toBe(false);
    expect((await api("DELETE", `/api/v1/sandboxes/${o.id}`)).status).toBe(200);
    expect((await api("DELETE", `/api/v1/sandboxes/${young.id}`)).status).toBe(200);
    await vi.waitFor(() => expect(processGone(young.pid)).toBe(true));
  }, 60_000);

  it("DELETE of a record without a handle stops the runtime process carrying its id", async () => {
    const o = await orphan(new Date());
    const r = await api("DELETE", `/api/v1/sandboxes/${o.id}`);
    expect(r.status).toBe(200);
    expect(r.body).toStrictEqual({ success: true });
    await vi.waitFor(() => expect(processGone(o.pid)).toBe(true));
    expect(existsSync(o.workspace)).toBe(false);
    expect(await t.storage.sandboxes.get(o.id)).toBeNull();
  }, 60_000);

  it("a start task whose state cannot be saved ends in ERROR through the sweep once storage is back", async () => {
    faults.fail = (repo, method) => repo === "startTasks" && method === "update";
    const r = await api("POST", "/api/v1/app-conversations", {});
    expect(r.status, r.text).toBe(200);
    const task = r.body as Task;
    await vi.waitFor(() => expect(faults.failed).toBeGreaterThanOrEqual(2), { timeout: 20_000 }); // step + ERROR
    const stuck = (await t.storage.startTasks.get(task.id, "capped"))?.status;
    expect(stuck).toBe("WORKING");
    await t.app.sweep(); // storage still failing: nothing changes, nothing throws
    expect((await t.storage.startTasks.get(task.id, "capped"))?.status).toBe("WORKING");
    faults.fail = null;
    await t.app.sweep();
    const after = await api("GET", `/api/v1/app-conversations/start-tasks?ids=${task.id}`);
    expect((after.body as Task[])[0]).toMatchObject({
      status: "ERROR",
      detail: "Storage was unavailable; start the conversation again",
    });
  }, 60_000);

  it("a start task left by a server that died (its lease expired) is resumed by this one, to READY", async () => {
    const old = new Date(Date.now() - 10 * 60_000);
    const id = randomBytes(16).toString("hex");
    await t.keyFor("resumer"); // the user, with a model
    await t.storage.startTasks.insert(
      {
        id,
        ownerId: "resumer",
        status: "PREPARING_REPOSITORY",
        detail: null,
        appConversationId: null,
        sandboxId: null,
        agentServerUrl: null,
        request: {},
        createdAt: old,
        updatedAt: old,
      },
      { owner: "a-server-that-died", expiresAt: new Date(Date.now() - 1000) },
    );
    expect(await t.app.services.conversations.maintainLeases()).toBe(1);
    const deadline = Date.now() + 30_000;
    let task = await t.storage.startTasks.get(id, "resumer");
    while (task?.status !== "READY" && task?.status !== "ERROR" && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
      task = await t.storage.startTasks.get(id, "resumer");
    }
    expect(task).toMatchObject({ status: "READY", detail: null });
    expect(await t.storage.conversations.get(task?.appConversationId ?? "", "resumer")).not.toBeNull();
    // The task is this server's now: the dead server's name no longer writes it.
    expect(await t.storage.startTasks.update(id, { detail: "late" }, "a-server-that-died")).toBe(false);
  }, 40_000);

  it("/ready answers 503 while storage refuses writes, 200 once it accepts them", async () => {
    expect((await call(t.url, undefined, "GET", "/ready")).body).toMatchObject({
      status: "ready",
      storage: "ok",
    });
    faults.fail = (repo) => repo === "storage";
    const r = await call(t.url, undefined, "GET", "/ready");
    expect(r.status).toBe(503);
    expect(r.body).toMatchObject({ status: "not ready", storage: expect.stringMatching(/^unavailable/) });
    faults.fail = null;
    expect((await call(t.url, undefined, "GET", "/ready")).status).toBe(200);
  });

  it("search and get answer while every write fails, reporting a dead sandbox without persisting it", async () => {
    const created = await api("POST", "/api/v1/sandboxes");
    expect(created.status).toBe(200);
    const id = (created.body as Sandbox).id;
    await vi.waitFor(async () => expect((await t.storage.sandboxes.get(id))?.status).toBe("RUNNING"), {
      timeout: 20_000,
    });
    const handle = handleOf(await t.storage.sandboxes.get(id)) as RuntimeHandle;
    faults.fail = () => true;
    try {
      process.kill(-pidOf(handle), "SIGKILL");
      await vi.waitFor(() => expect(processGone(pidOf(handle))).toBe(true));
      const failedBefore = faults.log.length;
      const search = await api("GET", "/api/v1/sandboxes/search");
      expect(search.status, search.text).toBe(200);
      const item = (search.body as { items: Sandbox[] }).items.find((s) => s.id === id);
      expect(["ERROR", "MISSING"]).toContain(item?.status);
      const batch = await api("GET", `/api/v1/sandboxes?id=${id}`);
      expect(batch.status).toBe(200);
      expect(["ERROR", "MISSING"]).toContain((batch.body as Sandbox[])[0]?.status);
      const connect = connectClient(SandboxService, t.url, key);
      expect((await connect.searchSandboxes({})).items.length).toBeGreaterThan(0);
      // No read even tried to write. (The start-task runner's lease loop may meanwhile try to resume the start an
      // earlier test left unfinished, its end unsaved: a background write of its own, not the reads'.)
      expect(faults.log.slice(failedBefore).filter((w) => !w.startsWith("startTasks."))).toEqual([]);
      expect((await t.storage.sandboxes.get(id))?.status).toBe("RUNNING");
    } finally {
      faults.fail = null;
    }
    await t.app.sweep();
    expect(["ERROR", "MISSING"]).toContain((await t.storage.sandboxes.get(id))?.status);
  }, 60_000);
});

describe("the running limit across two servers on one SQLite file", () => {
  it("10 parallel creates spread over both leave 3 running in the runtime, each other one paused once", async () => {
    const { mkdtempSync, rmSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const dir = mkdtempSync(join(tmpdir(), "aws-two-servers-"));
    const pauses = new Map<string, number>();
    const runtimes: ProcessRuntime[] = [];
    const counted = (): ProcessRuntime => {
      const runtime = createProcessRuntime({ workspaceRoot: join(dir, "sandboxes") });
      runtimes.push(runtime);
      return {
        ...runtime,
        pause: async (handle) => {
          const id = basename(String(handle.data.workspace));
          pauses.set(id, (pauses.get(id) ?? 0) + 1);
          return runtime.pause(handle);
        },
      };
    };
    const key = randomBytes(32);
    const common = { dir, encryptionKey: key, maxRunningSandboxes: 3, sweepIntervalMs: 0 };
    const a = await startTestApp({ ...common, runtime: counted() });
    const b = await startTestApp({ ...common, runtime: counted() });
    try {
      const keyA = await a.keyFor("shared-user");
      const keyB = (await b.app.keys.issue("shared-user")).key;
      const created = await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          i % 2 === 0
            ? call(a.url, keyA, "POST", "/api/v1/sandboxes")
            : call(b.url, keyB, "POST", "/api/v1/sandboxes"),
        ),
      );
      for (const r of created) expect(r.status, r.text).toBe(200);
      const ids = created.map((r) => (r.body as Sandbox).id);
      await vi.waitFor(
        async () => {
          const records = await Promise.all(ids.map((id) => a.storage.sandboxes.get(id)));
          expect(records.filter((r) => r?.status === "RUNNING")).toHaveLength(3);
          expect(records.filter((r) => r?.status === "PAUSED")).toHaveLength(7);
        },
        { timeout: 60_000, interval: 200 },
      );
      const records = (await Promise.all(ids.map((id) => a.storage.sandboxes.get(id)))) as SandboxRecord[];
      const handles = records.map(handleOf);
      expect(handles.every((h) => h !== null)).toBe(true);
      expect((handles as RuntimeHandle[]).filter(processRuns)).toHaveLength(3);
      for (const r of records) expect(pauses.get(r.id) ?? 0, r.id).toBe(r.status === "PAUSED" ? 1 : 0);
    } finally {
      for (const r of runtimes) await r.killAll();
      await a.close();
      await b.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});

describe("a start that finds every running slot held by a starting sandbox", () => {
  it("waits until that one runs, then takes its slot: the first is never paused while it starts, then once", async () => {
    const { mkdtempSync, rmSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const dir = mkdtempSync(join(tmpdir(), "aws-early-evict-"));
    const runtime = createProcessRuntime({ workspaceRoot: join(dir, "sandboxes") });
    const pauses = new Map<string, number>();
    let slowStarts = 1;
    const released = Promise.withResolvers<void>();
    const t = await startTestApp({
      dir,
      maxRunningSandboxes: 1,
      sweepIntervalMs: 0,
      runtime: {
        ...runtime,
        // The first start is held after spawning, before its handle goes back to the service.
        start: async (request) => {
          const handle = await runtime.start(request);
          if (slowStarts-- > 0) await released.promise;
          return handle;
        },
        pause: async (handle) => {
          const id = basename(String(handle.data.workspace));
          pauses.set(id, (pauses.get(id) ?? 0) + 1);
          return runtime.pause(handle);
        },
      },
    });
    try {
      const key = await t.keyFor("early");
      const first = call(t.url, key, "POST", "/api/v1/sandboxes");
      let firstId = "";
      await vi.waitFor(async () => {
        const all = await t.storage.sandboxes.listAll("early");
        expect(all).toHaveLength(1);
        firstId = all[0]?.id ?? "";
      });
      const secondCall = call(t.url, key, "POST", "/api/v1/sandboxes");
      // The first is still starting (held before its handle is saved): the second waits instead of evicting it.
      await new Promise((r) => setTimeout(r, 600));
      expect((await t.storage.sandboxes.get(firstId))?.status).toBe("STARTING");
      expect(await t.storage.sandboxes.listAll("early")).toHaveLength(1);
      expect(pauses.get(firstId) ?? 0).toBe(0);
      released.resolve();
      expect((await first).status).toBe(200);
      const second = await secondCall;
      expect(second.status).toBe(200);
      const secondId = (second.body as Sandbox).id;
      const record = await t.storage.sandboxes.get(firstId);
      expect(record?.status).toBe("PAUSED");
      const handle = handleOf(record);
      expect(handle).not.toBeNull();
      expect(pauses.get(firstId)).toBe(1);
      await vi.waitFor(() => expect(processRuns(handle as RuntimeHandle)).toBe(false));
      await vi.waitFor(
        async () => expect((await t.storage.sandboxes.get(secondId))?.status).toBe("RUNNING"),
        {
          timeout: 20_000,
        },
      );
      expect(pauses.get(secondId) ?? 0).toBe(0);
    } finally {
      released.resolve();
      await runtime.killAll();
      await t.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
