/**
 * One test file's run against the Docker warm pool, on a real engine with the built-in agent's image: runtimes and
 * apps labelled with the run, the run's containers as the engine lists them, waits, a sandbox start over REST, and
 * the cleanup of what a test made (test/integration/docker-warm-pool.test.ts, hostile-warm-pool.test.ts).
 */
import { randomBytes } from "node:crypto";
import type Docker from "dockerode";
import { expect } from "vitest";
import {
  createDockerRuntime,
  type DockerRuntime,
  type DockerRuntimeOptions,
} from "../../src/adapters/runtimes/docker/docker-runtime.ts";
import { builtinImageSpec } from "./docker-env.ts";
import { call, startTestApp, type TestApp, type TestAppOptions } from "./test-app.ts";

/** The label that tells this run's containers from every other's on the engine. */
export const RUN_LABEL = "workspace.test-run";

/** A container of the run as the engine lists it. */
export interface Seen {
  id: string;
  name: string;
  state: string;
  sandboxId: string;
  warm: boolean;
}

export interface StartedSandbox {
  id: string;
  status: string;
  session_api_key: string | null;
  /** AGENT_SERVER ("/": this service's own origin), then AGENT_SERVER_DIRECT (the agent's loopback port). */
  exposed_urls: { name: string; url: string; port: number }[];
}

export function warmPoolRun(docker: Docker, image: string) {
  const run = randomBytes(4).toString("hex");
  const apps: TestApp[] = [];
  const cleanup = createDockerRuntime({ docker, labels: { [RUN_LABEL]: run }, stopTimeoutSeconds: 1 });

  /** A runtime of the run with a pool of two (host network). */
  const runtime = (options: Partial<DockerRuntimeOptions> = {}): DockerRuntime =>
    createDockerRuntime({
      docker,
      network: "host",
      labels: { [RUN_LABEL]: run },
      stopTimeoutSeconds: 1,
      warmContainers: 2,
      ...options,
    });

  /** The service on that runtime, with one spec: the built-in agent's image. */
  async function app(rt: DockerRuntime, options: TestAppOptions = {}): Promise<TestApp> {
    const t = await startTestApp({
      runtime: rt,
      sweepIntervalMs: 0,
      specs: [builtinImageSpec(image)],
      ...options,
    });
    apps.push(t);
    return t;
  }

  async function containers(): Promise<Seen[]> {
    const list = await docker.listContainers({ all: true, filters: { label: [`${RUN_LABEL}=${run}`] } });
    return list.map((c) => ({
      id: c.Id,
      name: (c.Names[0] ?? "").replace(/^\//, ""),
      state: c.State,
      sandboxId: c.Labels["workspace.sandbox.id"] ?? "",
      warm: c.Labels["workspace.warm"] === "true",
    }));
  }
  const unclaimed = async (): Promise<Seen[]> =>
    (await containers()).filter((c) => c.name.startsWith("oh-warm-"));

  async function until<T>(what: string, get: () => Promise<T> | T, ok: (v: T) => boolean, ms = 60_000) {
    const deadline = Date.now() + ms;
    for (;;) {
      const v = await get();
      if (ok(v)) return v;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(v)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const filled = (rt: DockerRuntime, n: number) =>
    until(
      `${n} warm containers`,
      () => rt.warmReady(),
      (r) => r >= n,
    );

  /** POST /api/v1/sandboxes, which must answer 200. */
  async function start(t: TestApp, key: string): Promise<StartedSandbox> {
    const r = await call(t.url, key, "POST", "/api/v1/sandboxes");
    expect(r.status, r.text).toBe(200);
    return r.body as StartedSandbox;
  }

  return {
    runtime,
    app,
    containers,
    unclaimed,
    until,
    filled,
    start,
    /** Closes an app before the test ends (its warm containers outlive it, as sandboxes do). */
    async closeApp(t: TestApp): Promise<void> {
      await t.close();
      apps.splice(apps.indexOf(t), 1);
    },
    /** After each test: its apps closed, every container of the run removed. */
    async afterEach(): Promise<void> {
      for (const t of apps.splice(0)) await t.close();
      await cleanup.removeAll();
    },
    /** After the file: nothing of the run is left on the engine. */
    async afterAll(): Promise<void> {
      await cleanup.removeAll();
      expect(await containers()).toEqual([]);
    },
  };
}
