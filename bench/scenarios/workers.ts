// WORKERS=2 against WORKERS=1: REST GET throughput of the cluster against one server.
import { spawn } from "node:child_process";
import { closeSync, mkdirSync, openSync, readdirSync, readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { cpuSeconds, freePort, ROOT, rssMiB, type ServerChild } from "../lib/bench-util.ts";
import { type Bench, fmt, log, type Row, ratioRow, request, SETTINGS_BODY, sleep } from "../lib/harness.ts";

/** The process `pid` and its descendants. */
function processTree(pid: number): number[] {
  const out = [pid];
  for (let i = 0; i < out.length; i++) {
    try {
      for (const tid of readdirSync(`/proc/${out[i]}/task`)) {
        const text = readFileSync(`/proc/${out[i]}/task/${tid}/children`, "utf8").trim();
        if (text !== "") out.push(...text.split(/\s+/).map(Number));
      }
    } catch {
      // gone
    }
  }
  return out;
}

/**
 * WORKERS=2 against WORKERS=1: `npm start`'s compiled server (the real `serve` command, so the cluster primary and
 * its workers as users run them), each on its own DATA_DIR, its log (stdout, at the production level) in a file,
 * loaded alternately by the same autocannon load as the REST benchmarks. CPU is that of the whole process tree.
 */
export async function workerBenchmarks(bench: Bench): Promise<Row[]> {
  const rows: Row[] = [];
  const WORKERS = 2;
  const cli = join(ROOT, "dist", "src", "cli", "main.js");
  const key = "bench-workers-key";
  const server = async (workers: number): Promise<{ child: ServerChild<unknown>; base: string }> => {
    const name = `workers-${workers}`;
    const dataDir = join(bench.work, name);
    mkdirSync(dataDir, { recursive: true });
    const port = await freePort();
    const grpcPort = await freePort();
    const logPath = join(bench.work, `${name}.log`);
    const fd = openSync(logPath, "a");
    log(`  starting ${name} (WORKERS=${workers})`);
    const proc = spawn(process.execPath, [...bench.serviceNodeFlags, cli, "serve"], {
      cwd: ROOT,
      stdio: ["ignore", fd, fd],
      env: {
        ...process.env,
        ...bench.startCommand.env,
        WORKERS: String(workers),
        DATA_DIR: dataDir,
        PORT: String(port),
        GRPC_PORT: String(grpcPort),
        SESSION_API_KEY: key,
        LOG_LEVEL: bench.serviceLogLevel,
        GIT_PROVIDER_VERIFY: "false",
        // No sandbox is started here: warm agents would only add their processes to the tree's RSS and CPU.
        SANDBOX_WARM_AGENTS: "0",
        // As for the REST benchmarks' service: the limiter stays on the hot path without ever answering 429.
        RATE_LIMIT_PER_SECOND: "1000000",
        RATE_LIMIT_BURST: "10000000",
      },
    });
    closeSync(fd);
    const exited = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
    const child: ServerChild<unknown> = {
      proc,
      pid: proc.pid ?? 0,
      info: {},
      logPath,
      stop: async () => {
        if (proc.exitCode !== null || proc.signalCode !== null) return;
        proc.kill("SIGTERM");
        const killer = setTimeout(() => proc.kill("SIGKILL"), 45_000);
        await exited;
        clearTimeout(killer);
      },
    };
    bench.track(child);
    // Ready once every worker listens (the primary says so), or once the single server does.
    const readyLine =
      workers > 1 ? `"cluster primary started ${workers} workers"` : '"agent workspace service listening"';
    const deadline = Date.now() + 120_000;
    while (!readFileSync(logPath, "utf8").includes(readyLine)) {
      if (proc.exitCode !== null || Date.now() > deadline) {
        await bench.stop(child);
        throw new Error(`${name} did not start; log: ${logPath}`);
      }
      await sleep(100);
    }
    return { child, base: `http://127.0.0.1:${port}` };
  };
  const cores = availableParallelism();
  const one = await server(1);
  const two = await server(WORKERS);
  try {
    const tree = (pid: number) => () => processTree(pid).reduce((sum, p) => sum + (cpuSeconds(p) || 0), 0);
    const treeRss = (pid: number) => processTree(pid).reduce((sum, p) => sum + (rssMiB(p) || 0), 0);
    const config = (base: string) => ({
      url: `${base}/api/settings`,
      method: "GET" as const,
      headers: { "x-session-api-key": key },
    });
    for (const { base } of [one, two]) {
      const stored = await request(base, key, "POST", "/api/settings", SETTINGS_BODY);
      if (stored.status !== 200)
        throw new Error(`workers: seeding settings failed: ${stored.status} ${stored.text}`);
    }
    await sleep(1000);
    const idle = { one: treeRss(one.child.pid), two: treeRss(two.child.pid) };
    log(
      `[workers] idle RSS: WORKERS=1 ${fmt(idle.one, 1)} MiB, WORKERS=${WORKERS} ${fmt(idle.two, 1)} MiB (primary and workers)`,
    );
    const alt = await bench.alternate(
      "workers",
      { pid: two.child.pid, load: bench.httpLoad(config(two.base)), cpu: tree(two.child.pid) },
      { pid: one.child.pid, load: bench.httpLoad(config(one.base)), cpu: tree(one.child.pid) },
      "req/s",
    );
    const row = ratioRow(
      "workers",
      `REST GET /api/settings (SQLite), WORKERS=${WORKERS} against WORKERS=1 (npm start; CPU of all processes)`,
      alt,
      "WORKERS=1",
      1.6,
      "req/s",
    );
    const measurable = cores >= WORKERS + 1;
    if (!measurable) {
      const note = `not measurable here: ${cores} CPUs for ${WORKERS} workers and the load generator (needs ≥ ${WORKERS + 1})`;
      log(`[workers] ${note}`);
      row.ratio = `${row.ratio} — ${note}`;
      row.pass = null;
    }
    row.data = { ...alt, cores, measurable, idleRssMiB: idle };
    rows.push(row);
  } finally {
    await bench.stop(two.child);
    await bench.stop(one.child);
  }
  return rows;
}
