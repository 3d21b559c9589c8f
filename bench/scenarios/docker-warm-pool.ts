// The Docker runtime's warm pool (SANDBOX_WARM_CONTAINERS), measured against the same service without one in the
// same run, with two images on the engine of DOCKER_HOST (--network host):
// - the built-in agent's (WORKSPACE_TEST_DOCKER_IMAGE), which boots in a fraction of a second;
// - the agent-server stand-in (WORKSPACE_TEST_AGENT_SERVER_IMAGE), which takes seconds, like the real one.
// For each: sandbox start→RUNNING (REST POST, then polled) and conversation start→READY without repository, each
// sample with the pool full and its containers answering (waited for, not measured); then the memory and CPU of
// an idle warm container from the engine's stats.
import Docker from "dockerode";
import { median, percentile } from "../lib/bench-util.ts";
import { type Bench, log, type Row, request } from "../lib/harness.ts";

/** Warm containers of the pool under test: a start, and the next start while the first refill boots. */
const POOL = 2;
/** Starts before the measured ones, on each side. */
const WARM_UP = 2;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const cell = (values: number[]): string =>
  values.length === 0
    ? "—"
    : `${percentile(values, 50).toFixed(1)} / ${percentile(values, 99).toFixed(1)} ms (n=${values.length})`;

/** A REST call as the benchmark user (harness `request`); the body's text where it is not JSON. */
async function api(
  base: string,
  key: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; json: unknown }> {
  const r = await request(base, key, method, path, body === undefined ? undefined : JSON.stringify(body));
  return { status: r.status, json: r.json ?? r.text };
}

/** Resolves once `n` unclaimed warm containers run and answer their health check (not part of any figure). */
async function poolFull(docker: Docker, n: number, timeoutMs = 180_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const list = await docker.listContainers({
      filters: { label: ["workspace.bench=1", "workspace.warm=true"], status: ["running"] },
    });
    const warm = list.filter((c) => (c.Names[0] ?? "").startsWith("/oh-warm-"));
    const answers = await Promise.all(
      warm.map(async (c) => {
        try {
          const { agentUrl } = JSON.parse(c.Labels["workspace.handle"] ?? "{}") as { agentUrl?: string };
          const r = await fetch(`${agentUrl}/alive`, { signal: AbortSignal.timeout(1000) });
          return r.ok;
        } catch {
          return false;
        }
      }),
    );
    // The service's pool counts a container once its own health poll (every 25 ms) saw it answer: a margin.
    if (answers.filter(Boolean).length >= n) {
      await sleep(250);
      return;
    }
    if (Date.now() > deadline) throw new Error(`the warm pool did not fill to ${n} within ${timeoutMs} ms`);
    await sleep(100);
  }
}

/**
 * start→RUNNING of `n` sandboxes one after another, each deleted afterwards (with `pool`: refilled first), after
 * WARM_UP starts not counted (the service's first requests, as the process sandbox benchmark does).
 */
async function sandboxStarts(
  base: string,
  key: string,
  n: number,
  pool: (() => Promise<void>) | null,
): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < n + WARM_UP; i++) {
    await pool?.();
    const t0 = performance.now();
    const started = await api(base, key, "POST", "/api/v1/sandboxes");
    if (started.status !== 200) throw new Error(`sandbox start answered ${started.status}`);
    let s = started.json as { id: string; status: string };
    while (s.status !== "RUNNING") {
      if (s.status === "ERROR" || s.status === "MISSING")
        throw new Error(`sandbox ${s.id} ended ${s.status}`);
      if (performance.now() - t0 > 120_000) throw new Error(`sandbox ${s.id} stayed ${s.status}`);
      await sleep(2);
      s = ((await api(base, key, "GET", `/api/v1/sandboxes?id=${s.id}`)).json as (typeof s)[])[0] ?? s;
    }
    if (i >= WARM_UP) times.push(performance.now() - t0);
    await api(base, key, "DELETE", `/api/v1/sandboxes/${s.id}`);
  }
  return times;
}

/** start→READY of `n` conversations without repository one after another (after WARM_UP), each sandbox deleted. */
async function conversationStarts(
  base: string,
  key: string,
  n: number,
  pool: (() => Promise<void>) | null,
): Promise<number[]> {
  const stored = await api(base, key, "POST", "/api/settings", { llm_model: "openai/bench" });
  if (stored.status !== 200) throw new Error(`storing the model failed: ${stored.status}`);
  const times: number[] = [];
  for (let i = 0; i < n + WARM_UP; i++) {
    await pool?.();
    const t0 = performance.now();
    type Task = { id: string; status: string; detail?: string | null; sandbox_id?: string | null };
    let task = (await api(base, key, "POST", "/api/v1/app-conversations", {})).json as Task;
    while (task.status !== "READY" && task.status !== "ERROR") {
      if (performance.now() - t0 > 120_000) throw new Error(`conversation start stayed ${task.status}`);
      await sleep(2);
      const got = await api(base, key, "GET", `/api/v1/app-conversations/start-tasks?ids=${task.id}`);
      task = (got.json as (Task | null)[])[0] ?? task;
    }
    if (task.status !== "READY") throw new Error(`conversation start ended ${task.status}: ${task.detail}`);
    if (i >= WARM_UP) times.push(performance.now() - t0);
    if (task.sandbox_id) await api(base, key, "DELETE", `/api/v1/sandboxes/${task.sandbox_id}`);
  }
  return times;
}

/** Memory (MiB, without the page cache) and CPU (% of one core) of each idle warm container, after `idleMs`. */
async function idleCost(
  docker: Docker,
  idleMs: number,
): Promise<{ memoryMiB: number[]; cpuPercent: number[] }> {
  await sleep(idleMs);
  const list = await docker.listContainers({
    filters: { label: ["workspace.bench=1", "workspace.warm=true"], status: ["running"] },
  });
  const memoryMiB: number[] = [];
  const cpuPercent: number[] = [];
  for (const c of list.filter((x) => (x.Names[0] ?? "").startsWith("/oh-warm-"))) {
    // Not streamed: the engine samples twice, a second apart, so precpu_stats is the earlier sample.
    const s = await docker.getContainer(c.Id).stats({ stream: false });
    const stats = s.memory_stats.stats as Record<string, number> | undefined;
    const cache = stats?.inactive_file ?? stats?.total_inactive_file ?? 0;
    memoryMiB.push((s.memory_stats.usage - cache) / 1024 / 1024);
    const cpu = s.cpu_stats.cpu_usage.total_usage - s.precpu_stats.cpu_usage.total_usage;
    const system = (s.cpu_stats.system_cpu_usage ?? 0) - (s.precpu_stats.system_cpu_usage ?? 0);
    const cpus = s.cpu_stats.online_cpus ?? 1;
    cpuPercent.push(system > 0 ? (cpu / system) * cpus * 100 : 0);
  }
  return { memoryMiB, cpuPercent };
}

/** The warm pool against no pool, for each image found; rows saying why where Docker or an image is missing. */
export async function dockerWarmPool(bench: Bench): Promise<Row[]> {
  const rows: Row[] = [];
  const socket = process.env.DOCKER_HOST?.startsWith("unix://")
    ? process.env.DOCKER_HOST.slice(7)
    : undefined;
  const docker = new Docker(socket === undefined ? {} : { socketPath: socket });
  const engine = await docker.ping().then(
    () => true,
    () => false,
  );
  const images = [
    {
      label: "built-in agent",
      variable: "WORKSPACE_TEST_DOCKER_IMAGE",
      args: ["--docker-builtin"],
      samples: bench.quick ? 5 : 20,
    },
    {
      label: "agent-server (stand-in, seconds of boot)",
      variable: "WORKSPACE_TEST_AGENT_SERVER_IMAGE",
      args: [],
      samples: bench.quick ? 3 : 8,
    },
  ];
  for (const image of images) {
    const name = process.env[image.variable];
    if (!engine || name === undefined) {
      rows.push({
        bench: "docker-warm",
        what: `${image.label}: Docker warm pool`,
        ours: `not available: ${engine ? `${image.variable} not set` : "no Docker engine"}`,
        baseline: "—",
        ratio: "—",
        target: "—",
        pass: null,
      });
      continue;
    }
    const measure = async (warm: number) => {
      const service = await bench.startService(`service-docker-warm${warm}-${image.variable.toLowerCase()}`, [
        "--docker-image",
        name,
        "--warm-containers",
        String(warm),
        ...image.args,
      ]);
      try {
        const base = `http://127.0.0.1:${service.info.port}`;
        const pool = warm > 0 ? () => poolFull(docker, warm) : null;
        const starts = await sandboxStarts(base, service.info.key, image.samples, pool);
        log(`[docker-warm] ${image.label}, pool ${warm}: start→RUNNING ${cell(starts)}`);
        // An image that cannot hold a conversation (the built-in agent's test image has no git, which a start
        // without repository needs to initialise the workspace) gets its reason in the row instead.
        let conversations: number[] | string;
        try {
          conversations = await conversationStarts(base, service.info.key, image.samples, pool);
          log(`[docker-warm] ${image.label}, pool ${warm}: conversation start→READY ${cell(conversations)}`);
        } catch (err) {
          conversations = err instanceof Error ? err.message : String(err);
          log(`[docker-warm] ${image.label}, pool ${warm}: conversation start failed: ${conversations}`);
        }
        if (warm > 0) await poolFull(docker, warm);
        const cost = warm > 0 ? await idleCost(docker, 5000) : null;
        return { starts, conversations, cost };
      } finally {
        await bench.stop(service);
      }
    };
    const cold = await measure(0);
    const warm = await measure(POOL);
    const ratio = (a: number[], b: number[]) => `${(median(b) / median(a)).toFixed(1)}× faster`;
    rows.push({
      bench: "docker-warm",
      what: `${image.label}: Docker sandbox start→RUNNING with a warm container (pool ${POOL}), p50 / p99; baseline: no pool`,
      ours: cell(warm.starts),
      baseline: cell(cold.starts),
      ratio: ratio(warm.starts, cold.starts),
      target: "p50 ≤ 50 ms, p99 ≤ 150 ms",
      pass: percentile(warm.starts, 50) <= 50 && percentile(warm.starts, 99) <= 150,
      data: { warm: warm.starts, cold: cold.starts },
    });
    const what = `${image.label}: conversation start→READY without repository on Docker with a warm container, p50 / p99; baseline: no pool`;
    if (typeof warm.conversations === "string" || typeof cold.conversations === "string")
      rows.push({
        bench: "docker-warm",
        what,
        ours: `not available: ${typeof warm.conversations === "string" ? warm.conversations : cold.conversations}`,
        baseline: "—",
        ratio: "—",
        target: "p50 ≤ 300 ms",
        pass: null,
      });
    else
      rows.push({
        bench: "docker-warm",
        what,
        ours: cell(warm.conversations),
        baseline: cell(cold.conversations),
        ratio: ratio(warm.conversations, cold.conversations),
        target: "p50 ≤ 300 ms",
        pass: percentile(warm.conversations, 50) <= 300,
        data: { warm: warm.conversations, cold: cold.conversations },
      });
    const cost = warm.cost;
    if (cost !== null)
      rows.push({
        bench: "docker-warm",
        what: `${image.label}: one idle warm container (docker stats, after 5 s idle), memory / CPU`,
        ours: `${median(cost.memoryMiB).toFixed(1)} MiB / ${median(cost.cpuPercent).toFixed(2)} % of a core`,
        baseline: "—",
        ratio: "—",
        target: "reported",
        pass: null,
        data: cost,
      });
  }
  return rows;
}
