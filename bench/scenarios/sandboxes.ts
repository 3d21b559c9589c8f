// Process sandboxes through the REST API: start→RUNNING with warm agents against cold starts, pause and resume, and
// the service's memory with many paused sandboxes.
import { DEFAULT_WARM_AGENTS } from "../../src/server/config.ts";
import { percentile } from "../lib/bench-util.ts";
import { type Bench, fmt, idleRss, latencyCell, log, type Row, request, sleep } from "../lib/harness.ts";

const PAUSED_SANDBOXES = 50;

interface SandboxJson {
  id: string;
  status: string;
}

/** Starts a sandbox through the REST API and polls until it is RUNNING; `created` tracks what is left to delete. */
async function startSandbox(
  base: string,
  key: string,
  created: string[],
): Promise<{ id: string; ms: number }> {
  const t0 = performance.now();
  const res = await request(base, key, "POST", "/api/v1/sandboxes");
  if (res.status !== 200) throw new Error(`start sandbox: ${res.status} ${res.text}`);
  const sandbox = res.json as SandboxJson;
  created.push(sandbox.id);
  let status = sandbox.status;
  const deadline = Date.now() + 30_000;
  while (status !== "RUNNING") {
    if (status === "ERROR" || status === "MISSING" || Date.now() > deadline)
      throw new Error(`sandbox ${sandbox.id} ended ${status}`);
    await sleep(2);
    const list = await request(base, key, "GET", `/api/v1/sandboxes?id=${sandbox.id}`);
    status = ((list.json as (SandboxJson | null)[])[0]?.status ?? "MISSING") as string;
  }
  return { id: sandbox.id, ms: performance.now() - t0 };
}

/** Start→RUNNING latencies of SANDBOX_SAMPLES starts, each deleted before the next (after 2 warm-up starts). */
async function sandboxStarts(
  base: string,
  key: string,
  created: string[],
  samples: number,
): Promise<number[]> {
  const remove = async (id: string): Promise<void> => {
    await request(base, key, "DELETE", `/api/v1/sandboxes/${id}`);
    created.splice(created.indexOf(id), 1);
  };
  for (let i = 0; i < 2; i++) await remove((await startSandbox(base, key, created)).id);
  const starts: number[] = [];
  for (let i = 0; i < samples; i++) {
    const { id, ms } = await startSandbox(base, key, created);
    starts.push(ms);
    await remove(id);
  }
  return starts;
}

export async function sandboxBenchmarks(bench: Bench): Promise<Row[]> {
  const rows: Row[] = [];
  const SANDBOX_SAMPLES = bench.quick ? 10 : 30;
  // The baseline: the same starts without warm agents (every start boots the agent's Node process).
  log(`[sandboxes] start→RUNNING × ${SANDBOX_SAMPLES} without warm agents (baseline)`);
  const cold = await bench.startService("service-sandboxes-cold", ["--warm-agents", "0"]);
  let coldStarts: number[];
  const coldCreated: string[] = [];
  try {
    coldStarts = await sandboxStarts(
      `http://127.0.0.1:${cold.info.port}`,
      cold.info.key,
      coldCreated,
      SANDBOX_SAMPLES,
    );
  } finally {
    await bench.stop(cold);
  }
  log(`[sandboxes] cold start→RUNNING p50/p99 ${latencyCell(coldStarts)}`);

  const service = await bench.startService("service-sandboxes");
  const { key } = service.info;
  const base = `http://127.0.0.1:${service.info.port}`;
  const created: string[] = [];
  const startOne = () => startSandbox(base, key, created);
  const remove = async (id: string): Promise<void> => {
    await request(base, key, "DELETE", `/api/v1/sandboxes/${id}`);
    created.splice(created.indexOf(id), 1);
  };
  try {
    await sleep(1000);
    const idleBefore = await idleRss(service.pid);

    log(
      `[sandboxes] start→RUNNING × ${SANDBOX_SAMPLES} (2 warm-up starts; ${DEFAULT_WARM_AGENTS} warm agents)`,
    );
    const starts = await sandboxStarts(base, key, created, SANDBOX_SAMPLES);
    log(`[sandboxes] start→RUNNING p50/p99 ${latencyCell(starts)}`);
    rows.push({
      bench: "sandboxes",
      what: `process sandbox start→RUNNING, p50 / p99 (n=${SANDBOX_SAMPLES}; ${DEFAULT_WARM_AGENTS} warm agents, the default)`,
      ours: latencyCell(starts),
      baseline: `${latencyCell(coldStarts)} (no warm agents: the agent's Node process boots in every start)`,
      ratio: `p50 ${fmt(percentile(starts, 50) / percentile(coldStarts, 50), 2)}×`,
      target: "≤ 100 / 300 ms",
      pass: percentile(starts, 50) <= 100 && percentile(starts, 99) <= 300,
      data: { warm: starts, cold: coldStarts },
    });

    log(`[sandboxes] pause and resume × ${SANDBOX_SAMPLES}`);
    const { id } = await startOne();
    const pauses: number[] = [];
    const resumes: number[] = [];
    for (let i = 0; i < SANDBOX_SAMPLES + 2; i++) {
      let t0 = performance.now();
      const p = await request(base, key, "POST", `/api/v1/sandboxes/${id}/pause`);
      const pauseMs = performance.now() - t0;
      t0 = performance.now();
      const r = await request(base, key, "POST", `/api/v1/sandboxes/${id}/resume`);
      const resumeMs = performance.now() - t0;
      if (p.status !== 200 || r.status !== 200) throw new Error(`pause/resume: ${p.text} ${r.text}`);
      if (i < 2) continue; // warm-up
      pauses.push(pauseMs);
      resumes.push(resumeMs);
    }
    const after = await request(base, key, "GET", `/api/v1/sandboxes?id=${id}`);
    const finalStatus = (after.json as (SandboxJson | null)[])[0]?.status;
    await remove(id);
    log(
      `[sandboxes] pause ${latencyCell(pauses)} · resume ${latencyCell(resumes)} (final status ${finalStatus})`,
    );
    for (const [what, values] of [
      ["pause", pauses],
      ["resume (answers once the agent is healthy again)", resumes],
    ] as const) {
      rows.push({
        bench: "sandboxes",
        what: `sandbox ${what} via REST, p50 / p99 (n=${SANDBOX_SAMPLES})`,
        ours: latencyCell(values),
        baseline: "—",
        ratio: "—",
        target: "≤ 50 ms p50",
        pass: percentile(values, 50) <= 50 && finalStatus === "RUNNING",
        data: values,
      });
    }

    log(`[sandboxes] ${PAUSED_SANDBOXES} paused sandboxes: starting`);
    const ids: string[] = [];
    for (let i = 0; i < PAUSED_SANDBOXES; i++) ids.push((await startOne()).id);
    for (const sid of ids) await request(base, key, "POST", `/api/v1/sandboxes/${sid}/pause`);
    const search = await request(base, key, "GET", "/api/v1/sandboxes/search?limit=100");
    const paused = ((search.json as { items: SandboxJson[] }).items ?? []).filter(
      (x) => x.status === "PAUSED",
    ).length;
    await sleep(2000);
    const withPaused = await idleRss(service.pid, 2000);
    log(
      `[sandboxes] RSS idle ${fmt(idleBefore, 1)} MiB before, ${fmt(withPaused, 1)} MiB with ${paused} paused`,
    );
    rows.push({
      bench: "sandboxes",
      what: `server RSS idle with ${paused} paused sandboxes`,
      ours: `${fmt(withPaused, 1)} MiB`,
      baseline: `${fmt(idleBefore, 1)} MiB before any sandbox`,
      ratio: "—",
      target: "≤ 150 MB",
      pass: paused === PAUSED_SANDBOXES && withPaused * 1.048576 <= 150,
    });
  } finally {
    log(`[sandboxes] removing ${created.length} sandboxes`);
    for (const id of [...created]) await remove(id).catch(() => undefined);
    await bench.stop(service);
  }
  return rows;
}
