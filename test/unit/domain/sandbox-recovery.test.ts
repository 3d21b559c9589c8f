// SandboxService over an in-memory registry and a fake runtime: a sandbox whose agent ended is started again by a
// resume (never twice), one that cannot be stays ERROR with the reason; a RUNNING sandbox whose live process misses
// a health probe (a loaded machine) still reads RUNNING, with its URL, within the grace, and ERROR past it.
import { create } from "@bufbuild/protobuf";
import { Code, type ConnectError } from "@connectrpc/connect";
import { beforeEach, describe, expect, it } from "vitest";
import { failedPrecondition } from "../../../src/core/errors.ts";
import type { SandboxService } from "../../../src/domain/sandboxes/sandbox-service.ts";
import { SandboxSpecService } from "../../../src/domain/sandboxes/sandbox-spec-service.ts";
import { ResumeSandboxRequestSchema, SandboxStatus } from "../../../src/gen/workspace/v1/sandbox_pb.js";
import type { RuntimeHandle, RuntimeStartRequest } from "../../../src/ports/sandbox-runtime.ts";
import {
  callAs,
  FakeSandboxRuntime,
  InMemoryChangeLog,
  InMemorySandboxRepository,
  testChangeFeed,
  testCrypto,
} from "../../helpers/fakes/index.ts";
import { testSandboxService } from "../../helpers/sandbox-service.ts";

/** The fake runtime with a restart: a new "process" on the same workspace (an ended one only). */
class RestartableRuntime extends FakeSandboxRuntime {
  readonly restarts: RuntimeStartRequest[] = [];
  refuse: string | null = null;

  async restart(handle: RuntimeHandle, request: RuntimeStartRequest): Promise<RuntimeHandle> {
    const id = FakeSandboxRuntime.idOf(handle);
    this.calls.push(`restart:${id}`);
    if (this.refuse !== null) throw failedPrecondition(this.refuse);
    const state = this.states.get(id);
    if (state !== "error" && state !== "missing")
      throw failedPrecondition("the sandbox process is still running");
    this.restarts.push(request);
    this.states.set(id, "starting");
    return { ...handle, data: { ...handle.data, generation: this.restarts.length } };
  }
}

let repo: InMemorySandboxRepository;
let runtime: RestartableRuntime;
const alice = callAs("alice");

function makeService(unansweredGraceMs?: number): SandboxService {
  const { box, tokens } = testCrypto();
  const specs = new SandboxSpecService(
    [{ id: "default", command: ["agent"], initialEnv: {}, workingDir: "/w", createdAt: new Date(0) }],
    tokens,
  );
  return testSandboxService({
    repo,
    runtime,
    specs,
    box,
    tokens,
    changes: testChangeFeed(new InMemoryChangeLog()),
    ...(unansweredGraceMs === undefined ? {} : { unansweredGraceMs }),
  });
}

beforeEach(() => {
  repo = new InMemorySandboxRepository(new InMemoryChangeLog());
  runtime = new RestartableRuntime();
});

describe("resume of a sandbox whose agent ended", () => {
  it("starts it again on the same workspace with its session key, and it is RUNNING", async () => {
    const service = makeService();
    const started = await service.start("alice", undefined);
    const id = started.record.id;
    runtime.states.set(id, "error"); // killed
    await service.reconcileAll();
    expect(repo.peek(id)?.status).toBe("ERROR");
    const answer = await service.resumeSandbox(create(ResumeSandboxRequestSchema, { sandboxId: id }), alice);
    expect(answer.success).toBe(true);
    expect(runtime.calls.filter((c) => c.startsWith("restart:") || c.startsWith("resume:"))).toEqual([
      `restart:${id}`,
    ]);
    expect(runtime.restarts[0]).toMatchObject({ sandboxId: id, ownerId: "alice" });
    expect(runtime.restarts[0]?.sessionApiKey).toBe(runtime.started[0]?.sessionApiKey);
    const live = await service.get("alice", id);
    expect(live?.status).toBe("RUNNING");
    expect(repo.peek(id)?.status).toBe("RUNNING");
    expect((repo.peek(id)?.handle as { data?: { generation?: number } } | undefined)?.data?.generation).toBe(
      1,
    );
  });

  it("also when it ended while RUNNING and no sweep recorded it yet; concurrent resumes restart it once", async () => {
    const service = makeService();
    const { record } = await service.start("alice", undefined);
    runtime.states.set(record.id, "error");
    expect(repo.peek(record.id)?.status).toBe("RUNNING");
    await Promise.all([service.resume("alice", record.id), service.resume("alice", record.id)]);
    expect(runtime.restarts).toHaveLength(1);
    expect((await service.get("alice", record.id))?.status).toBe("RUNNING");
  });

  it("a restart that cannot help leaves it ERROR and the resume says why", async () => {
    const service = makeService();
    const { record } = await service.start("alice", undefined);
    runtime.states.set(record.id, "error");
    runtime.refuse = "the sandbox's workspace is gone: it cannot be started again; delete it";
    const err = (await service
      .resumeSandbox(create(ResumeSandboxRequestSchema, { sandboxId: record.id }), alice)
      .then(
        () => null,
        (e: unknown) => e,
      )) as ConnectError | null;
    expect(err?.code).toBe(Code.FailedPrecondition);
    expect(err?.message).toContain("workspace is gone");
    expect(repo.peek(record.id)?.status).toBe("ERROR");
    expect((await service.get("alice", record.id))?.status).toBe("ERROR");
  });

  it("a paused sandbox is resumed, not restarted", async () => {
    const service = makeService();
    const { record } = await service.start("alice", undefined);
    await service.pause("alice", record.id);
    await service.resume("alice", record.id);
    expect(runtime.restarts).toHaveLength(0);
    expect(runtime.calls).toContain(`resume:${record.id}`);
  });
});

describe("a RUNNING sandbox whose health probe fails", () => {
  it("reads RUNNING with its URL within the grace, ERROR past it, RUNNING again once it answers", async () => {
    const service = makeService(300);
    const { record } = await service.start("alice", undefined);
    runtime.states.set(record.id, "starting"); // alive, but the probe timed out
    const slow = await service.get("alice", record.id);
    expect(slow?.status).toBe("RUNNING");
    const info = service.toInfo(slow as NonNullable<typeof slow>);
    expect(info.status).toBe(SandboxStatus.RUNNING);
    // With its URLs: the service's own origin, and the agent's loopback address.
    expect(info.exposedUrls.map((u) => [u.name, u.url])).toEqual([
      ["AGENT_SERVER", "/"],
      ["AGENT_SERVER_DIRECT", expect.stringMatching(/^http:\/\/127\.0\.0\.1:\d+$/)],
    ]);
    expect(info.sessionApiKey).not.toBe("");
    await new Promise((r) => setTimeout(r, 350));
    expect((await service.get("alice", record.id))?.status).toBe("ERROR"); // hangs: not hidden for long
    runtime.states.set(record.id, "running");
    expect((await service.get("alice", record.id))?.status).toBe("RUNNING");
    runtime.states.set(record.id, "starting"); // a new miss: a new grace
    expect((await service.get("alice", record.id))?.status).toBe("RUNNING");
    // Nothing of this was written: the record stayed RUNNING throughout.
    expect(repo.peek(record.id)?.status).toBe("RUNNING");
  });

  it("an ended process reads ERROR at once, whatever the grace", async () => {
    const service = makeService(60_000);
    const { record } = await service.start("alice", undefined);
    runtime.states.set(record.id, "error");
    expect((await service.get("alice", record.id))?.status).toBe("ERROR");
  });
});
