import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createDockerRuntime, type DockerRuntime } from "../../src/sandbox/docker/docker-runtime.ts";
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

  async function status(
    id: string,
  ): Promise<{ status: string; exposed_urls: { url: string }[] | null; session_api_key: string | null }> {
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
    const url = running.exposed_urls?.[0]?.url ?? "";
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const exec = await fetch(`${url}/api/bash/execute_bash_command`, {
      method: "POST",
      headers: { "x-session-api-key": running.session_api_key ?? "", "content-type": "application/json" },
      body: JSON.stringify({ command: "echo in-container" }),
    });
    expect(((await exec.json()) as { stdout: string }).stdout).toContain("in-container");
    const record = await t.storage.sandboxes.get(started.id);
    const containerId =
      (record?.handle as { data?: { containerId?: string } } | undefined)?.data?.containerId ?? "";
    expect(containerId).not.toBe("");

    expect((await call(t.url, key, "POST", `/api/v1/sandboxes/${started.id}/pause`)).body).toEqual({
      success: true,
    });
    await waitFor(started.id, "PAUSED");
    expect((await docker.getContainer(containerId).inspect()).State.Paused).toBe(true);
    expect((await call(t.url, key, "POST", `/api/v1/sandboxes/${started.id}/resume`)).body).toEqual({
      success: true,
    });
    await waitFor(started.id, "RUNNING");

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
