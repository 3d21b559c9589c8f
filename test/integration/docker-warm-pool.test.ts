import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { createDockerRuntime } from "../../src/adapters/runtimes/docker/docker-runtime.ts";
import { defaultSpecs } from "../../src/server/sandbox-specs.ts";
import { settle } from "../helpers/app-conversations.ts";
import { dockerFromEnv, findAgentServerImage, findDocker } from "../helpers/docker-env.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";
import { RUN_LABEL as RUN, warmPoolRun } from "../helpers/warm-pool-run.ts";

// The Docker runtime's warm pool through the whole service, on a real engine with the built-in agent's image
// (fast to boot). Skips, saying why, where no Docker engine or test image exists.
const docker = dockerFromEnv();
const found = await findDocker(docker);
const skip = typeof found === "string" ? found : null;
if (skip) console.log(`docker warm pool tests skipped: ${skip}`);
const image = typeof found === "string" ? "unused" : found.image;

describe.skipIf(skip !== null)("warm pool of the Docker runtime", () => {
  const { runtime, app, containers, unclaimed, until, filled, start, closeApp, ...pool } = warmPoolRun(
    docker,
    image,
  );
  const dirs: string[] = [];
  const containerOf = async (t: TestApp, id: string): Promise<string> => {
    const record = await t.storage.sandboxes.get(id);
    return String(
      (record?.handle as { data?: { containerId?: string } } | undefined)?.data?.containerId ?? "",
    );
  };

  afterEach(async () => {
    await pool.afterEach();
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });
  afterAll(() => pool.afterAll());

  it("a start takes a warm container (RUNNING at once, its id and key the ones it was warmed with), the pool refills, and the container never returns to it", async () => {
    const rt = runtime();
    const t = await app(rt);
    await filled(rt, 2);
    const before = await unclaimed();
    expect(before.map((c) => c.name).sort()).toEqual(before.map((c) => `oh-warm-${c.sandboxId}`).sort());
    const key = await t.keyFor("alice");
    const s = await start(t, key);
    expect(s.status).toBe("RUNNING");
    const taken = before.find((c) => c.sandboxId === s.id);
    expect(taken).toBeDefined();
    expect(await containerOf(t, s.id)).toBe(taken?.id);
    const info = await docker.getContainer(taken?.id ?? "").inspect();
    expect(info.Name).toBe(`/oh-agent-server-${s.id}`);
    // Its agent requires the key the sandbox reports, and the webhook URL names the sandbox.
    expect(info.Config.Env).toContain(`OH_SESSION_API_KEYS_0=${s.session_api_key}`);
    expect(info.Config.Env.find((e) => e.startsWith("OH_WEBHOOKS_0_BASE_URL="))).toMatch(
      new RegExp(`/api/v1/webhooks/${s.id}$`),
    );
    // Its key names it (the warm container was made for this sandbox id), so it is reached through this service.
    expect(s.session_api_key).toMatch(new RegExp(`^sbx_${s.id}_[0-9A-Za-z]{43}$`));
    const port = s.exposed_urls[1]?.port ?? 0;
    expect(s.exposed_urls?.slice(0, 2)).toEqual([
      { name: "AGENT_SERVER", url: "/", port: Number(new URL(t.url).port) },
      { name: "AGENT_SERVER_DIRECT", url: `http://127.0.0.1:${port}`, port },
    ]);
    // VS Code and the application ports stay direct (docs/agent-proxy.md).
    expect(s.exposed_urls?.slice(2).map((u) => [u.name, u.url.replace(/\/\?.*$/, "")])).toEqual([
      ["VSCODE", `http://127.0.0.1:${s.exposed_urls?.[2]?.port}`],
      ["WORKER_1", `http://127.0.0.1:${s.exposed_urls?.[3]?.port}`],
      ["WORKER_2", `http://127.0.0.1:${s.exposed_urls?.[4]?.port}`],
    ]);
    const exec = (base: string, key: string) =>
      fetch(`${base}/api/bash/execute_bash_command`, {
        method: "POST",
        headers: { "x-session-api-key": key, "content-type": "application/json" },
        body: JSON.stringify({ command: "echo warm" }),
      });
    const viaService = new URL(s.exposed_urls[0]?.url ?? "", t.url).origin;
    const direct = s.exposed_urls[1]?.url ?? "";
    for (const base of [viaService, direct]) {
      const r = await exec(base, s.session_api_key ?? "");
      expect(r.status, base).toBe(200);
      expect(((await r.json()) as { stdout: string }).stdout, base).toContain("warm");
    }
    // The agent wants that key; through the service another secret for the sandbox opens nothing.
    expect((await exec(direct, "not-the-key")).status).toBe(401);
    expect((await exec(viaService, `sbx_${s.id}_${"x".repeat(43)}`)).status).toBe(404);

    await filled(rt, 2);
    const after = await unclaimed();
    expect(after).toHaveLength(2);
    expect(after.map((c) => c.id)).not.toContain(taken?.id);
    // Deleted: the container goes with it, and is not in the pool.
    expect((await call(t.url, key, "DELETE", `/api/v1/sandboxes/${s.id}`)).status).toBe(200);
    await expect(docker.getContainer(taken?.id ?? "").inspect()).rejects.toMatchObject({ statusCode: 404 });
    await t.app.sweep();
    expect((await unclaimed()).map((c) => c.id)).not.toContain(taken?.id);
  });

  it("many concurrent starts never share a container: each warm one goes to one start, the rest start cold", async () => {
    const rt = runtime({ warmContainers: 3 });
    const t = await app(rt, { maxRunningSandboxes: 20 });
    await filled(rt, 3);
    const warmIds = new Set((await unclaimed()).map((c) => c.sandboxId));
    const keys = await Promise.all([0, 1, 2, 3, 4, 5].map((i) => t.keyFor(`user-${i}`)));
    const started = await Promise.all(keys.map((k) => start(t, k)));
    const running = await Promise.all(
      started.map((s, i) =>
        until(
          `${s.id} RUNNING`,
          async () =>
            (
              (await call(t.url, keys[i], "GET", `/api/v1/sandboxes?id=${s.id}`)).body as { status: string }[]
            )[0]?.status,
          (st) => st === "RUNNING",
        ),
      ),
    );
    expect(running).toHaveLength(6);
    const containerIds = await Promise.all(started.map((s) => containerOf(t, s.id)));
    expect(new Set(containerIds).size).toBe(6);
    expect(started.filter((s) => warmIds.has(s.id))).toHaveLength(3);
    expect(new Set(started.map((s) => s.id)).size).toBe(6);
  });

  it("two servers sharing one store and one engine never hand out the same container", async () => {
    const dir = mkdtempSync(join(tmpdir(), "aws-warm-"));
    dirs.push(dir);
    const encryptionKey = randomBytes(32);
    const shared = { dir, encryptionKey, maxRunningSandboxes: 20, webhookBaseUrl: "http://127.0.0.1:9" };
    const rtA = runtime({ warmContainers: 3 });
    const a = await app(rtA, shared);
    await filled(rtA, 3);
    const rtB = runtime({ warmContainers: 3 });
    const b = await app(rtB, shared);
    // B adopted A's three (same configuration): it made none of its own.
    await filled(rtB, 3);
    expect(await unclaimed()).toHaveLength(3);
    const warmIds = new Set((await unclaimed()).map((c) => c.sandboxId));
    const users = [0, 1, 2, 3].map((i) => `shared-${i}`);
    const jobs = users.flatMap((u) => [
      a.keyFor(u).then((k) => start(a, k)),
      b.keyFor(`${u}-b`).then((k) => start(b, k)),
    ]);
    const started = await Promise.all(jobs);
    const ids = started.map((s) => s.id);
    expect(new Set(ids).size).toBe(8);
    const containerIds = await Promise.all(ids.map((id) => containerOf(a, id)));
    expect(containerIds.every((c) => c !== "")).toBe(true);
    expect(new Set(containerIds).size).toBe(8);
    // Every warm container went to exactly one start (a refill may have come in time for another).
    expect(ids.filter((id) => warmIds.has(id)).length).toBeGreaterThanOrEqual(3);
  });

  it("a new server adopts the warm containers of its configuration and removes the others; none leak", async () => {
    const hook = { webhookBaseUrl: "http://127.0.0.1:9" };
    const rtA = runtime();
    const a = await app(rtA, hook);
    await filled(rtA, 2);
    const first = (await unclaimed()).map((c) => c.id).sort();
    await closeApp(a); // the warm containers outlive it, as sandboxes do
    expect((await unclaimed()).map((c) => c.id).sort()).toEqual(first);

    const rtB = runtime();
    const b = await app(rtB, hook);
    await filled(rtB, 2);
    expect((await unclaimed()).map((c) => c.id).sort()).toEqual(first);
    await closeApp(b);

    // Another configuration (its webhook URL differs): the old ones go, its own come.
    const rtC = runtime({ warmContainers: 1 });
    await app(rtC, { webhookBaseUrl: "http://127.0.0.1:10" });
    await filled(rtC, 1);
    const now = await until(
      "the old warm containers removed",
      () => unclaimed(),
      (cs) => cs.length === 1,
    );
    expect(first).not.toContain(now[0]?.id);
    expect((await containers()).filter((c) => !c.name.startsWith("oh-warm-"))).toEqual([]);
  });

  it("a warm container that died is never handed out, and the sweep removes it", async () => {
    const rt = runtime();
    const t = await app(rt);
    await filled(rt, 2);
    const [dead, alive] = await unclaimed();
    await docker.getContainer(dead?.id ?? "").kill();
    await docker.getContainer(alive?.id ?? "").kill();
    const key = await t.keyFor("bob");
    const s = await start(t, key);
    expect([dead?.sandboxId, alive?.sandboxId]).not.toContain(s.id);
    await until(
      `${s.id} RUNNING`,
      async () =>
        ((await call(t.url, key, "GET", `/api/v1/sandboxes?id=${s.id}`)).body as { status: string }[])[0]
          ?.status,
      (st) => st === "RUNNING",
    );
    // Killed while unclaimed and not yet claimed by anyone: the sweep removes what the claim did not.
    await t.app.sweep();
    const ids = (await containers()).map((c) => c.id);
    expect(ids).not.toContain(dead?.id);
    expect(ids).not.toContain(alive?.id);
  });

  it("a warm container the sweep finds dead before any claim is removed and replaced", async () => {
    const rt = runtime({ warmContainers: 1 });
    const t = await app(rt);
    await filled(rt, 1);
    const [dead] = await unclaimed();
    await docker.getContainer(dead?.id ?? "").kill();
    await until(
      "the container exited",
      async () => (await unclaimed())[0]?.state,
      (s) => s === "exited",
    );
    await t.app.sweep();
    expect((await containers()).map((c) => c.id)).not.toContain(dead?.id);
    await filled(rt, 1);
    const key = await t.keyFor("carol");
    const s = await start(t, key);
    expect(s.status).toBe("RUNNING");
    expect(s.id).not.toBe(dead?.sandboxId);
  });

  it("a claim that no start took is removed by the second sweep, never given to anyone", async () => {
    const rt = runtime({ warmContainers: 1 });
    const t = await app(rt);
    await filled(rt, 1);
    const id = await t.app.services.sandboxes.newSandboxId("carol"); // taken for a conversation that never starts
    const taken = (await containers()).find((c) => c.sandboxId === id);
    expect(taken?.name).toBe(`oh-agent-server-${id}`);
    // Another server sharing the engine sees it claimed, with no record: gone on its second sweep.
    const other = runtime({ warmContainers: 1 });
    const o = await app(other);
    await filled(other, 1);
    await o.app.sweep();
    expect((await containers()).map((c) => c.id)).toContain(taken?.id);
    await o.app.sweep();
    expect((await containers()).map((c) => c.id)).not.toContain(taken?.id);
    const key = await o.keyFor("dave");
    const s = await start(o, key);
    expect(s.id).not.toBe(id);
  });

  it("limits count only users' sandboxes: warm containers neither take a running slot nor count toward the per-user cap", async () => {
    const rt = runtime();
    const t = await app(rt, { maxRunningSandboxes: 1, maxSandboxesPerUser: 2 });
    await filled(rt, 2);
    const key = await t.keyFor("erin");
    const first = await start(t, key);
    expect(first.status).toBe("RUNNING");
    const second = await start(t, key);
    expect(second.status).toBe("RUNNING");
    const list = (await call(t.url, key, "GET", `/api/v1/sandboxes?id=${first.id}&id=${second.id}`)).body as {
      status: string;
    }[];
    expect(list.map((s) => s.status)).toEqual(["PAUSED", "RUNNING"]);
    const third = await call(t.url, key, "POST", "/api/v1/sandboxes");
    expect(third.status).not.toBe(200);
    expect(third.text).toContain("Sandbox limit reached");
    // The refused start took no warm container for good: the pool is whole again, none claimed without a record.
    await filled(rt, 2);
    const claimed = (await containers()).filter((c) => c.name.startsWith("oh-agent-server-"));
    expect(claimed.map((c) => c.sandboxId).sort()).toEqual([first.id, second.id].sort());
  });
});

const standin = await findAgentServerImage(docker);
const standinSkip = typeof standin === "string" ? standin : null;
if (standinSkip) console.log(`warm pool tests on the agent-server stand-in skipped: ${standinSkip}`);

describe.skipIf(standinSkip !== null)("warm pool with the agent-server image (stand-in)", () => {
  const run = randomBytes(4).toString("hex");
  const rt = createDockerRuntime({
    docker,
    network: "host",
    labels: { [RUN]: run },
    stopTimeoutSeconds: 1,
    warmContainers: 1,
  });
  let t: TestApp | undefined;
  afterAll(async () => {
    await t?.close();
    await rt.removeAll();
  });

  it("a conversation start takes the warm agent-server: READY without waiting for its boot, the user's secrets only in the start request", async () => {
    const image = typeof standin === "string" ? "unused" : standin.image;
    t = await startTestApp({
      runtime: rt,
      specs: defaultSpecs({ kind: "docker", image }, new Date()),
      sweepIntervalMs: 0,
      llmModel: "anthropic/claude-sonnet-4-5",
    });
    const key = await t.keyFor("frank");
    expect(
      (await call(t.url, key, "POST", "/api/secrets", { name: "DEPLOY_TOKEN", value: "deploy-0123456789" }))
        .status,
    ).toBe(201);
    const deadline = Date.now() + 90_000;
    while (rt.warmReady() < 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(rt.warmReady()).toBe(1);
    const [warm] = await docker.listContainers({
      filters: { label: [`${RUN}=${run}`, "workspace.warm=true"] },
    });
    const warmId = warm?.Labels["workspace.sandbox.id"];
    const t0 = Date.now();
    const task = (await call(t.url, key, "POST", "/api/v1/app-conversations", {})).body as { id: string };
    const done = await settle(key, task.id, 90_000, t);
    const took = Date.now() - t0;
    expect(done.status, done.detail ?? "").toBe("READY");
    expect((done as { sandbox_id?: string }).sandbox_id).toBe(warmId);
    // The stand-in boots in seconds: a READY well under that came from the warm container.
    expect(took).toBeLessThan(2000);
    const info = await docker.getContainer(warm?.Id ?? "").inspect();
    expect(info.Config.Env.join("\n")).not.toContain("deploy-0123456789");
    const s = (
      (await call(t.url, key, "GET", `/api/v1/sandboxes?id=${warmId}`)).body as {
        session_api_key: string;
        exposed_urls: { name: string; url: string }[];
      }[]
    )[0];
    expect(s?.session_api_key).toMatch(new RegExp(`^sbx_${warmId}_[0-9A-Za-z]{43}$`));
    // The stand-in's own record of what it was sent (a test-only route, not one the service forwards): asked of
    // the agent's own port.
    const agent = s?.exposed_urls.find((u) => u.name === "AGENT_SERVER_DIRECT")?.url ?? "";
    expect(agent).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const recorded = (await (
      await fetch(`${agent}/__standin/requests`, {
        headers: { "x-session-api-key": s?.session_api_key ?? "" },
      })
    ).json()) as { requests: { method: string; path: string; body: unknown }[] };
    const start = recorded.requests.find((r) => r.method === "POST" && r.path === "/api/conversations");
    expect(JSON.stringify(start?.body)).toContain("deploy-0123456789");
  });
});
