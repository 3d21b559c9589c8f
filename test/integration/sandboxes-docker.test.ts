import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createDockerRuntime,
  type DockerRuntime,
} from "../../src/adapters/runtimes/docker/docker-runtime.ts";
import { builtinImageSpec, dockerFromEnv, findDocker } from "../helpers/docker-env.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

// Sandboxes as Docker containers through the whole service (REST), with --network host. Skips, saying why,
// where no Docker engine or test image exists.
const docker = dockerFromEnv();
const found = await findDocker(docker);
const skip = typeof found === "string" ? found : null;
if (skip) console.log(`docker sandbox service tests skipped: ${skip}`);

describe.skipIf(skip !== null)("sandboxes on the Docker runtime, end to end", () => {
  let t: TestApp;
  let runtime: DockerRuntime;
  let key: string;
  const image = typeof found === "string" ? "unused" : found.image;

  beforeAll(async () => {
    runtime = createDockerRuntime({
      docker,
      network: "host",
      labels: { "workspace.test-run": randomBytes(4).toString("hex") },
      stopTimeoutSeconds: 2,
    });
    t = await startTestApp({
      runtime,
      specs: [builtinImageSpec(image)],
    });
    key = await t.keyFor("docker-user");
  });
  afterAll(async () => {
    await runtime?.removeAll();
    await t?.close();
  });

  async function status(id: string): Promise<{
    status: string;
    exposed_urls: { name: string; url: string; port: number }[] | null;
    session_api_key: string | null;
  }> {
    return ((await call(t.url, key, "GET", `/api/v1/sandboxes?id=${id}`)).body as never[])[0] as never;
  }
  async function waitFor(id: string, want: string) {
    const deadline = Date.now() + 20_000;
    for (;;) {
      const s = await status(id);
      if (s.status === want) return s;
      if (Date.now() > deadline) throw new Error(`${id} stayed ${s.status}, wanted ${want}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  it("start → RUNNING with a reachable agent, pause → PAUSED (docker pause), resume, delete removes the container", async () => {
    const started = (await call(t.url, key, "POST", "/api/v1/sandboxes")).body as { id: string };
    const running = await waitFor(started.id, "RUNNING");
    // The agent through this service's own origin ("/"), and the container's published loopback port beside it.
    const port = running.exposed_urls?.[1]?.port ?? 0;
    expect(running.exposed_urls?.slice(0, 2)).toEqual([
      { name: "AGENT_SERVER", url: "/", port: Number(new URL(t.url).port) },
      { name: "AGENT_SERVER_DIRECT", url: `http://127.0.0.1:${port}`, port },
    ]);
    // VS Code and the application ports stay direct (docs/agent-proxy.md).
    expect(running.exposed_urls?.slice(2).map((u) => [u.name, u.url.replace(/\/\?.*$/, "")])).toEqual([
      ["VSCODE", `http://127.0.0.1:${running.exposed_urls?.[2]?.port}`],
      ["WORKER_1", `http://127.0.0.1:${running.exposed_urls?.[3]?.port}`],
      ["WORKER_2", `http://127.0.0.1:${running.exposed_urls?.[4]?.port}`],
    ]);
    expect(running.session_api_key).toMatch(new RegExp(`^sbx_${started.id}_[0-9A-Za-z]{43}$`));
    const viaService = new URL(running.exposed_urls?.[0]?.url ?? "", t.url).origin;
    const direct = running.exposed_urls?.[1]?.url ?? "";
    const exec = (base: string) =>
      fetch(`${base}/api/bash/execute_bash_command`, {
        method: "POST",
        headers: { "x-session-api-key": running.session_api_key ?? "", "content-type": "application/json" },
        body: JSON.stringify({ command: "echo in-container" }),
      });
    for (const base of [viaService, direct]) {
      const r = await exec(base);
      expect(r.status, base).toBe(200);
      expect(((await r.json()) as { stdout: string }).stdout, base).toContain("in-container");
    }
    const record = await t.storage.sandboxes.get(started.id);
    const containerId =
      (record?.handle as { data?: { containerId?: string } } | undefined)?.data?.containerId ?? "";
    expect(containerId).not.toBe("");

    expect((await call(t.url, key, "POST", `/api/v1/sandboxes/${started.id}/pause`)).body).toEqual({
      success: true,
    });
    await waitFor(started.id, "PAUSED");
    expect((await docker.getContainer(containerId).inspect()).State.Paused).toBe(true);
    // Through the service, a paused sandbox's agent answers at once that it is paused (never a hung call).
    const paused = await exec(viaService);
    expect(paused.status).toBe(409);
    expect(((await paused.json()) as { detail: string }).detail).toContain("is paused");
    expect((await call(t.url, key, "POST", `/api/v1/sandboxes/${started.id}/resume`)).body).toEqual({
      success: true,
    });
    await waitFor(started.id, "RUNNING");
    expect((await exec(viaService)).status).toBe(200);

    expect((await call(t.url, key, "DELETE", `/api/v1/sandboxes/${started.id}`)).body).toEqual({
      success: true,
    });
    await expect(docker.getContainer(containerId).inspect()).rejects.toMatchObject({ statusCode: 404 });
  });

  it("a container removed behind our back is reported MISSING", async () => {
    const started = (await call(t.url, key, "POST", "/api/v1/sandboxes")).body as { id: string };
    await waitFor(started.id, "RUNNING");
    const record = await t.storage.sandboxes.get(started.id);
    const containerId =
      (record?.handle as { data?: { containerId?: string } } | undefined)?.data?.containerId ?? "";
    await docker.getContainer(containerId).remove({ force: true });
    await waitFor(started.id, "MISSING");
    expect((await call(t.url, key, "DELETE", `/api/v1/sandboxes/${started.id}`)).body).toEqual({
      success: true,
    });
  });
});
