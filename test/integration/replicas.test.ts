/**
 * Two servers on one SQLite file, as replicas behind a load balancer: what a client sees through one server of the
 * work done through the other (sandbox watches with resumable revisions, event watches, stream-start), and
 * conversation starts handed from one server to the other.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AppConversationService } from "../../src/gen/workspace/v1/app_conversation_pb.js";
import { EventService } from "../../src/gen/workspace/v1/event_pb.js";
import { SandboxService, SandboxStatus } from "../../src/gen/workspace/v1/sandbox_pb.js";
import { connectClient, grpcClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

let dir: string;
let a: TestApp;
let b: TestApp;
let keyA: string;
let keyB: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "aws-replicas-"));
  const common = { dir, encryptionKey: randomBytes(32), sweepIntervalMs: 0, llmModel: "openai/test-model" };
  a = await startTestApp(common);
  b = await startTestApp(common);
  keyA = await a.keyFor("rita");
  keyB = (await b.app.keys.issue("rita")).key;
});

afterAll(async () => {
  await a?.close();
  await b?.close();
  rmSync(dir, { recursive: true, force: true });
});

interface Seen {
  id: string;
  status: SandboxStatus;
  revision: bigint;
  at: number;
}

/** Follows WatchSandboxes on `url` until aborted; collects what it sees. */
function watch(url: string, key: string, afterRevision?: bigint) {
  const seen: Seen[] = [];
  const abort = new AbortController();
  const client = connectClient(SandboxService, url, key);
  const done = (async () => {
    try {
      for await (const m of client.watchSandboxes(afterRevision === undefined ? {} : { afterRevision }, {
        signal: abort.signal,
      }))
        seen.push({
          id: m.sandbox?.id ?? "",
          status: m.sandbox?.status ?? SandboxStatus.UNSPECIFIED,
          revision: m.revision,
          at: performance.now(),
        });
    } catch (err) {
      if (!(err instanceof ConnectError && err.code === Code.Canceled)) throw err;
    }
  })();
  const stop = async () => {
    abort.abort();
    await done;
  };
  return { seen, stop, done };
}

const until = async (check: () => boolean, ms = 20_000) => {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error("timed out");
    await new Promise((r) => setTimeout(r, 10));
  }
};

describe("two servers on one store", () => {
  it("a sandbox watch on one server sees every change made through the other, and resumes from a revision", async () => {
    const w = watch(a.url, keyA);
    await new Promise((r) => setTimeout(r, 200));
    const t0 = performance.now();
    const started = await call(b.url, keyB, "POST", "/api/v1/sandboxes");
    expect(started.status, started.text).toBe(200);
    const id = (started.body as { id: string }).id;
    await until(() => w.seen.some((s) => s.id === id && s.status === SandboxStatus.RUNNING));
    const firstSeen = w.seen.find((s) => s.id === id)?.at ?? 0;
    expect(firstSeen - t0).toBeLessThan(2_000);
    const mid = w.seen.at(-1)?.revision ?? 0n;
    expect((await call(b.url, keyB, "POST", `/api/v1/sandboxes/${id}/pause`)).status).toBe(200);
    await until(() => w.seen.at(-1)?.status === SandboxStatus.PAUSED);
    expect((await call(b.url, keyB, "DELETE", `/api/v1/sandboxes/${id}`)).status).toBe(200);
    await until(() => w.seen.at(-1)?.status === SandboxStatus.MISSING);
    await w.stop();
    const mine = w.seen.filter((s) => s.id === id);
    expect(mine.map((s) => s.status)).toEqual([
      SandboxStatus.STARTING,
      SandboxStatus.RUNNING,
      SandboxStatus.PAUSED,
      SandboxStatus.MISSING,
    ]);
    const revisions = mine.map((s) => s.revision);
    expect(revisions.every((r, i) => i === 0 || r > (revisions[i - 1] ?? 0n))).toBe(true);

    // A client that lost its stream after `mid` resumes on the other server and misses nothing after it.
    const resumed = watch(b.url, keyB, mid);
    await until(() => resumed.seen.some((s) => s.id === id && s.status === SandboxStatus.MISSING));
    await resumed.stop();
    expect(resumed.seen.filter((s) => s.id === id).map((s) => s.status)).toEqual([
      SandboxStatus.PAUSED,
      SandboxStatus.MISSING,
    ]);
    expect(resumed.seen.every((s) => s.revision > mid)).toBe(true);
  }, 60_000);

  it("a revision older than the log keeps is refused with OUT_OF_RANGE; a negative one with INVALID_ARGUMENT", async () => {
    await call(b.url, keyB, "POST", "/api/v1/sandboxes").then(async (r) => {
      const id = (r.body as { id: string }).id;
      await call(b.url, keyB, "DELETE", `/api/v1/sandboxes/${id}`);
    });
    await new Promise((r) => setTimeout(r, 5));
    expect(await a.storage.changes.prune(new Date())).toBeGreaterThan(0);
    const client = grpcClient(SandboxService, a.grpcAddress);
    try {
      const code = (afterRevision: string) =>
        new Promise<number>((resolve) => {
          const s = client.stream("WatchSandboxes", { afterRevision }, keyA);
          s.on("data", () => resolve(-1));
          s.on("error", (e: { code: number }) => resolve(e.code));
        });
      expect(await code("1")).toBe(Code.OutOfRange);
      expect(await code("-5")).toBe(Code.InvalidArgument);
    } finally {
      client.close();
    }
  }, 30_000);

  it("a legacy create on one server is found by id on the other while it starts", async () => {
    const created = await call(a.url, keyA, "POST", "/api/conversations", {});
    expect(created.status, created.text).toBe(200);
    const id = (created.body as { conversation_id: string }).conversation_id;
    const got = await call(b.url, keyB, "GET", `/api/conversations/${id}`);
    expect(got.status).toBe(200);
    expect(got.body).toMatchObject({ conversation_id: id });
    const info = got.body as { status: string };
    expect(["STARTING", "RUNNING"]).toContain(info.status);
    // Another user asking the other server for that id gets nothing.
    const stranger = (await b.app.keys.issue("someone-else")).key;
    expect((await call(b.url, stranger, "GET", `/api/conversations/${id}`)).body).toBeNull();
  }, 30_000);

  it("stream-start on one server and an event watch on the other see the same conversation", async () => {
    const client = connectClient(AppConversationService, a.url, keyA);
    const statuses: string[] = [];
    let conversationId = "";
    let sandboxId = "";
    for await (const m of client.streamStartAppConversation({ request: {} })) {
      statuses.push(String(m.task?.status));
      conversationId = m.task?.appConversationId ?? "";
      sandboxId = m.task?.sandboxId ?? sandboxId;
    }
    expect(conversationId).toMatch(/^[0-9a-f]{32}$/);
    const [sbx] = (await call(b.url, keyB, "GET", `/api/v1/sandboxes?id=${sandboxId}`)).body as {
      session_api_key: string;
    }[];
    const events = connectClient(EventService, b.url, keyB);
    const abort = new AbortController();
    const seen: string[] = [];
    const done = (async () => {
      try {
        for await (const m of events.watchConversationEvents({ conversationId }, { signal: abort.signal }))
          seen.push(m.event?.id ?? "");
      } catch (err) {
        if (!(err instanceof ConnectError && err.code === Code.Canceled)) throw err;
      }
    })();
    await new Promise((r) => setTimeout(r, 200));
    // Posted to server A's webhook; watched on server B.
    const posted = await call(
      a.url,
      sbx?.session_api_key ?? "",
      "POST",
      `/api/v1/webhooks/${sandboxId}/events/${conversationId}`,
      [{ kind: "MessageEvent", id: "cross-1", timestamp: "2030-01-01T00:00:00.000001", source: "agent" }],
    );
    expect(posted.status, posted.text).toBe(200);
    await until(() => seen.includes("cross-1"));
    abort.abort();
    await done;
    expect(seen.filter((id) => id === "cross-1")).toHaveLength(1);
  }, 60_000);
});
