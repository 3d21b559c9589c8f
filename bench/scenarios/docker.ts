// Docker runtime latencies on the engine of DOCKER_HOST: start→RUNNING, pause, resume→RUNNING.
import { percentile } from "../lib/bench-util.ts";
import { benchDockerRuntime } from "../lib/docker.ts";
import { type Bench, fmt, latencyCell, log, type Row } from "../lib/harness.ts";

/**
 * Docker runtime latencies (start→RUNNING, pause, resume→RUNNING) on the engine of DOCKER_HOST with the image of
 * WORKSPACE_TEST_DOCKER_IMAGE (what .ci/docker.sh builds offline: Node + the built-in agent), network host.
 * Reported as not available where there is no engine or image.
 */
export async function dockerBenchmarks(bench: Bench): Promise<Row[]> {
  const rows: Row[] = [];
  const SANDBOX_SAMPLES = bench.quick ? 10 : 30;
  const socket = process.env.DOCKER_HOST?.startsWith("unix://")
    ? process.env.DOCKER_HOST.slice(7)
    : "/var/run/docker.sock";
  const image = process.env.WORKSPACE_TEST_DOCKER_IMAGE;
  const { default: Docker } = await import("dockerode");
  const { createDockerRuntime } = await import("../../src/adapters/runtimes/docker/docker-runtime.ts");
  const docker = new Docker({ socketPath: socket });
  const unavailable = (why: string) =>
    rows.push({
      bench: "docker",
      what: "Docker sandbox start→RUNNING, p50",
      ours: `not available: ${why}`,
      baseline: "—",
      ratio: "—",
      target: "≤ 800 ms p50",
      pass: null,
    });
  try {
    await docker.ping();
  } catch {
    unavailable("no Docker engine (DOCKER_HOST)");
    return rows;
  }
  if (image === undefined) {
    unavailable("WORKSPACE_TEST_DOCKER_IMAGE not set (source .ci/docker.sh; docker_up)");
    return rows;
  }
  const runtime = benchDockerRuntime(createDockerRuntime, docker);
  const starts: number[] = [];
  const pauses: number[] = [];
  const resumes: number[] = [];
  try {
    for (let i = 0; i < SANDBOX_SAMPLES + 2; i++) {
      const t0 = performance.now();
      const handle = await runtime.start({
        sandboxId: `bench${i}${Date.now().toString(36)}`,
        spec: { id: image, command: [], initialEnv: {}, workingDir: "/workspace/project" },
        sessionApiKey: "bench-key",
      });
      if (!(await runtime.waitHealthy(handle, 30_000)))
        throw new Error("container agent never became healthy");
      const started = performance.now() - t0;
      let t = performance.now();
      await runtime.pause(handle);
      const paused = performance.now() - t;
      t = performance.now();
      const resumed = await runtime.resume(handle);
      if (!(await runtime.waitHealthy(resumed, 30_000)))
        throw new Error("container agent unhealthy after resume");
      const resumeMs = performance.now() - t;
      await runtime.remove(resumed);
      if (i < 2) continue; // warm-up
      starts.push(started);
      pauses.push(paused);
      resumes.push(resumeMs);
    }
  } finally {
    await runtime.removeAll();
  }
  log(
    `[docker] start→RUNNING ${latencyCell(starts)} · pause ${latencyCell(pauses)} · resume ${latencyCell(resumes)}`,
  );
  rows.push({
    bench: "docker",
    what: `Docker sandbox start→RUNNING, p50 / p99 (n=${starts.length})`,
    ours: latencyCell(starts),
    baseline: "—",
    ratio: "—",
    target: "≤ 800 ms p50",
    pass: percentile(starts, 50) <= 800,
    data: starts,
  });
  rows.push({
    bench: "docker",
    what: `Docker sandbox pause / resume→RUNNING, p50 (n=${pauses.length})`,
    ours: `${fmt(percentile(pauses, 50), 1)} / ${fmt(percentile(resumes, 50), 1)} ms`,
    baseline: "—",
    ratio: "—",
    target: "—",
    pass: null,
    data: { pauses, resumes },
  });
  return rows;
}
