import { randomBytes } from "node:crypto";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { dockerFromEnv, findDocker } from "../helpers/docker-env.ts";
import { call } from "../helpers/test-app.ts";
import { type Seen, warmPoolRun } from "../helpers/warm-pool-run.ts";

// A hostile user against the Docker warm pool, through the whole service on a real engine (the built-in agent's
// image): a warm container is nobody's until a start takes it, so no user may learn, use, waste or inherit one.
// Skips, saying why, where no Docker engine or test image exists.
const docker = dockerFromEnv();
const found = await findDocker(docker);
const skip = typeof found === "string" ? found : null;
if (skip) console.log(`hostile warm pool tests skipped: ${skip}`);
const image = typeof found === "string" ? "unused" : found.image;

describe.skipIf(skip !== null)("a hostile user against the Docker warm pool", () => {
  const { runtime, app, containers, unclaimed, until, filled, start, ...pool } = warmPoolRun(docker, image);
  const warmNow = (id: string, now: Seen[]): boolean => now.some((c) => c.id === id);
  const keyOf = async (containerId: string): Promise<string> =>
    ((await docker.getContainer(containerId).inspect()).Config.Env ?? [])
      .find((e) => e.startsWith("OH_SESSION_API_KEYS_0="))
      ?.slice("OH_SESSION_API_KEYS_0=".length) ?? "";

  afterEach(() => pool.afterEach());
  afterAll(() => pool.afterAll());

  it("a user at the sandbox cap cannot drain the pool: refused starts (sandbox and conversation) take no warm container", async () => {
    const rt = runtime();
    const t = await app(rt, { maxSandboxesPerUser: 1, llmModel: "openai/fake-model" });
    await filled(rt, 2);
    const mallory = await t.keyFor("mallory");
    // A burst of concurrent starts: one is hers, the others are refused and take no warm container.
    const warmBefore = (await unclaimed()).map((c) => c.id);
    const burst = await Promise.all(
      [0, 1, 2, 3].map(() => call(t.url, mallory, "POST", "/api/v1/sandboxes")),
    );
    expect(burst.map((r) => r.status).sort()).toEqual([200, 409, 409, 409]);
    const own = burst.find((r) => r.status === 200)?.body as { id: string };
    const warmAfter = await unclaimed();
    expect(warmBefore.filter((id) => !warmNow(id, warmAfter))).toHaveLength(1);
    await filled(rt, 2);
    const pool = (await unclaimed()).map((c) => c.id).sort();
    for (let i = 0; i < 5; i++) {
      const refused = await call(t.url, mallory, "POST", "/api/v1/sandboxes");
      expect(refused.status).toBe(409);
      expect(refused.text).toContain("Sandbox limit reached");
    }
    // A conversation start of hers that needs a new sandbox fails the same way, without taking one either.
    const conv = await call(t.url, mallory, "POST", "/api/v1/app-conversations", {});
    expect(conv.status).toBe(200);
    const taskId = (conv.body as { id: string }).id;
    const task = await until(
      "the start task to end",
      async () =>
        (
          (await call(t.url, mallory, "GET", `/api/v1/app-conversations/start-tasks?ids=${taskId}`)).body as {
            status: string;
            detail: string | null;
          }[]
        )[0],
      (s) => s?.status === "ERROR" || s?.status === "READY",
    );
    expect(task?.status).toBe("ERROR");
    expect(task?.detail).toContain("Sandbox limit reached");
    // The very same containers are still warm, and nothing claimed is left behind.
    expect((await unclaimed()).map((c) => c.id).sort()).toEqual(pool);
    const claimed = (await containers()).filter((c) => c.name.startsWith("oh-agent-server-"));
    expect(claimed.map((c) => c.sandboxId)).toEqual([own.id]);
    // Another user still gets a warm one at once.
    const bob = await start(t, await t.keyFor("bob"));
    expect(bob.status).toBe("RUNNING");
    expect((await containers()).find((c) => c.sandboxId === bob.id)?.id).toBeOneOf(pool);
  });

  it("a warm container's key posts nothing: webhooks of an unclaimed container are refused, nothing stored", async () => {
    const rt = runtime({ warmContainers: 1 });
    const t = await app(rt);
    await filled(rt, 1);
    const [warm] = await unclaimed();
    const key = await keyOf(warm?.id ?? "");
    expect(key).not.toBe("");
    const conversationId = randomBytes(16).toString("hex");
    const headers = { "x-session-api-key": key, "content-type": "application/json" };
    const events = await fetch(`${t.url}/api/v1/webhooks/${warm?.sandboxId}/events/${conversationId}`, {
      method: "POST",
      headers,
      body: JSON.stringify([
        { id: "e1", kind: "MessageEvent", source: "agent", timestamp: "2026-01-01T00:00:00" },
      ]),
    });
    expect(events.status).toBe(401);
    const info = await fetch(`${t.url}/api/v1/webhooks/${warm?.sandboxId}/conversations`, {
      method: "POST",
      headers,
      body: JSON.stringify({ id: conversationId, execution_status: "idle" }),
    });
    expect(info.status).toBe(401);
    // Once claimed by a user, nothing posted while it was warm is theirs; and the user's own key is no sandbox key.
    const alice = await t.keyFor("alice");
    const s = await start(t, alice);
    expect(s.id).toBe(warm?.sandboxId);
    expect(await t.storage.conversations.get(conversationId, "alice")).toBeNull();
    expect(await t.storage.events.count("alice", { conversationIdEq: conversationId })).toBe(0);
    const asUser = await fetch(`${t.url}/api/v1/webhooks/${s.id}/conversations`, {
      method: "POST",
      headers: { ...headers, "x-session-api-key": alice },
      body: JSON.stringify({ id: conversationId, execution_status: "idle" }),
    });
    expect(asUser.status).toBe(401);
  });

  it("a container claimed by one user and deleted never reaches another; a burst of start/delete leaves nothing behind", async () => {
    const rt = runtime({ warmContainers: 1 });
    const t = await app(rt, { maxRunningSandboxes: 20 });
    await filled(rt, 1);
    const alice = await t.keyFor("alice");
    const seen = new Map<string, string>(); // container id -> sandbox id
    const aliceIds: string[] = [];
    for (let i = 0; i < 4; i++) {
      const s = await start(t, alice);
      aliceIds.push(s.id);
      const c = (await containers()).find((x) => x.sandboxId === s.id);
      if (c) seen.set(c.id, s.id);
      expect((await call(t.url, alice, "DELETE", `/api/v1/sandboxes/${s.id}`)).status).toBe(200);
    }
    await filled(rt, 1);
    const bob = await t.keyFor("bob");
    const b = await start(t, bob);
    expect(aliceIds).not.toContain(b.id);
    const bc = (await containers()).find((x) => x.sandboxId === b.id);
    expect(seen.has(bc?.id ?? "")).toBe(false);
    // Bob cannot see, resume or delete any of alice's (deleted) sandboxes either.
    for (const id of aliceIds) {
      expect((await call(t.url, bob, "POST", `/api/v1/sandboxes/${id}/resume`)).status).toBe(404);
      expect((await call(t.url, bob, "DELETE", `/api/v1/sandboxes/${id}`)).status).toBe(404);
    }
    // Only bob's sandbox and the pool's container are left on the engine.
    await t.app.sweep();
    await t.app.sweep();
    const left = await containers();
    expect(left.filter((c) => c.name.startsWith("oh-agent-server-")).map((c) => c.sandboxId)).toEqual([b.id]);
    expect(left.filter((c) => c.name.startsWith("oh-warm-")).length).toBeLessThanOrEqual(1);
  });
});
