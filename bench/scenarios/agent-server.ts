// The OpenHands agent-server (its stand-in image) on Docker: sandbox start→RUNNING and conversation start→READY.
import { timeConversationStarts } from "../lib/conversation-starts.ts";
import { benchDockerRuntime } from "../lib/docker.ts";
import { type Bench, latencyCell, log, type Row } from "../lib/harness.ts";

/**
 * The OpenHands agent-server on Docker, through its stand-in image (WORKSPACE_TEST_AGENT_SERVER_IMAGE, made by
 * .ci/docker.sh), which takes seconds to boot like the Python server: a sandbox of the default spec start→RUNNING
 * (the runtime alone), and a conversation start→READY through a service on the Docker runtime. The figures a user
 * of the real image meets; no baseline.
 */
export async function agentServerBenchmarks(bench: Bench): Promise<Row[]> {
  const rows: Row[] = [];
  /** Starts with a stand-in boot delay of several seconds, as the Python agent-server's: few samples. */
  const AGENT_SERVER_SAMPLES = bench.quick ? 3 : 8;
  const image = process.env.WORKSPACE_TEST_AGENT_SERVER_IMAGE;
  const row = (what: string, ours: string, data?: unknown): void => {
    rows.push({ bench: "docker", what, ours, baseline: "—", ratio: "—", target: "—", pass: null, data });
  };
  const socket = process.env.DOCKER_HOST?.startsWith("unix://")
    ? process.env.DOCKER_HOST.slice(7)
    : undefined;
  const { default: Docker } = await import("dockerode");
  const docker = new Docker(socket === undefined ? {} : { socketPath: socket });
  const absent = image === undefined ? "WORKSPACE_TEST_AGENT_SERVER_IMAGE not set" : null;
  if (
    absent !== null ||
    !(await docker.ping().then(
      () => true,
      () => false,
    ))
  ) {
    row(
      "agent-server (stand-in) Docker sandbox start→RUNNING",
      `not available: ${absent ?? "no Docker engine"}`,
    );
    return rows;
  }
  const { createDockerRuntime } = await import("../../src/adapters/runtimes/docker/docker-runtime.ts");
  const { defaultSpecs } = await import("../../src/server/sandbox-specs.ts");
  const [spec] = defaultSpecs({ kind: "docker", image: image as string }, new Date());
  const runtime = benchDockerRuntime(createDockerRuntime, docker);
  const starts: number[] = [];
  try {
    for (let i = 0; i < AGENT_SERVER_SAMPLES && spec !== undefined; i++) {
      const t0 = performance.now();
      const handle = await runtime.start({
        sandboxId: `benchas${i}${Date.now().toString(36)}`,
        spec: { ...spec, initialEnv: { ...spec.initialEnv } },
        sessionApiKey: "bench-key-0123",
      });
      if (!(await runtime.waitHealthy(handle, 60_000)))
        throw new Error("the agent-server never became healthy");
      starts.push(performance.now() - t0);
      await runtime.remove(handle);
    }
  } finally {
    await runtime.removeAll();
  }
  log(`[docker] agent-server start→RUNNING ${latencyCell(starts)}`);
  row(
    `agent-server (stand-in, seconds of boot) Docker sandbox start→RUNNING, p50 / p99 (n=${starts.length})`,
    latencyCell(starts),
    starts,
  );
  const service = await bench.startService("service-agent-server", ["--docker-image", image as string]);
  try {
    const base = `http://127.0.0.1:${service.info.port}`;
    const timings = await timeConversationStarts(base, service.info.key, AGENT_SERVER_SAMPLES, 120_000);
    log(`[docker] agent-server conversation start→READY ${latencyCell(timings)}`);
    row(
      `agent-server (stand-in) on Docker: conversation start→READY without repository, p50 / p99 (n=${timings.length})`,
      latencyCell(timings),
      timings,
    );
  } finally {
    await bench.stop(service);
  }
  return rows;
}
