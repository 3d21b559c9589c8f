// Two servers on one DATA_DIR: how long a change made on one takes to reach a WatchSandboxes stream on the other.
import { spawnSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { freePort, percentile, ROOT } from "../lib/bench-util.ts";
import { type Bench, fmt, log, type Row, request } from "../lib/harness.ts";

/**
 * Two servers (`npm start`'s compiled server) on one DATA_DIR, as replicas behind a load balancer: the time from a
 * write request on one to the WatchSandboxes answer on the other, for pauses and resumes of one sandbox.
 */
export async function replicaBenchmarks(bench: Bench): Promise<Row[]> {
  const rows: Row[] = [];
  const dataDir = join(bench.work, "replicas");
  mkdirSync(dataDir, { recursive: true });
  const cli = join(ROOT, "dist", "src", "cli", "main.js");
  const env = {
    ...bench.startCommand.env,
    DATA_DIR: dataDir,
    LOG_LEVEL: bench.serviceLogLevel,
    RATE_LIMIT_PER_SECOND: "0",
  };
  const made = spawnSync(process.execPath, [cli, "keys", "create", "--init", "--user", "bench-user"], {
    env: { ...process.env, ...env },
    encoding: "utf8",
  });
  if (made.status !== 0) throw new Error(`replicas: keys create failed: ${made.stderr}`);
  const key = made.stdout.trim().split("\n").at(-1) ?? "";
  const replica = async (name: string) => {
    const port = await freePort();
    const grpcPort = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const child = await bench.start<unknown>({
      name,
      command: process.execPath,
      args: [...bench.serviceNodeFlags, cli, "serve"],
      env: { ...env, PORT: String(port), GRPC_PORT: String(grpcPort) },
      logPath: join(bench.work, `${name}.log`),
      ready: async () => (await fetch(`${base}/alive`)).ok,
    });
    return { child, base };
  };
  log("[replicas] starting two servers on one DATA_DIR");
  const a = await replica("replica-a");
  const b = await replica("replica-b");
  try {
    const created = await request(a.base, key, "POST", "/api/v1/sandboxes");
    if (created.status !== 200) throw new Error(`replicas: sandbox start ${created.status} ${created.text}`);
    const id = (created.json as { id: string }).id;
    const { createClient } = await import("@connectrpc/connect");
    const { createConnectTransport } = await import("@connectrpc/connect-node");
    const { SandboxService, SandboxStatus } = await import("../../src/gen/workspace/v1/sandbox_pb.js");
    const abort = new AbortController();
    /** A WatchSandboxes client on `base`; `seen(status)` resolves with the time that status next arrives. */
    const watcher = (base: string) => {
      const client = createClient(
        SandboxService,
        createConnectTransport({
          baseUrl: base,
          httpVersion: "1.1",
          interceptors: [
            (next) => async (req) => {
              req.header.set("x-session-api-key", key);
              return next(req);
            },
          ],
        }),
      );
      const waiters: { status: number; resolve: (t: number) => void }[] = [];
      const running = (async () => {
        try {
          for await (const m of client.watchSandboxes({ id: [id] }, { signal: abort.signal })) {
            const now = performance.now();
            const status = m.sandbox?.status ?? 0;
            for (const w of waiters.splice(0)) {
              if (w.status === status) w.resolve(now);
              else waiters.push(w);
            }
          }
        } catch {
          // cancelled at the end
        }
      })();
      const seen = (status: number) => new Promise<number>((resolve) => waiters.push({ status, resolve }));
      return { running, seen };
    };
    // The baseline: the same watch on the server that makes the change (woken at once, no log poll between).
    const same = watcher(a.base);
    const other = watcher(b.base);
    await new Promise((r) => setTimeout(r, 500));
    const across: number[] = [];
    const local: number[] = [];
    const n = bench.quick ? 20 : 100;
    log(`[replicas] ${n} pauses and resumes through server A, watched on A and on B`);
    for (let i = 0; i < n; i++) {
      for (const [action, status] of [
        ["pause", SandboxStatus.PAUSED],
        ["resume", SandboxStatus.STARTING],
      ] as const) {
        const onA = same.seen(status);
        const onB = other.seen(status);
        const t0 = performance.now();
        const r = await request(a.base, key, "POST", `/api/v1/sandboxes/${id}/${action}`);
        if (r.status !== 200) throw new Error(`replicas: ${action} ${r.status} ${r.text}`);
        local.push((await onA) - t0);
        across.push((await onB) - t0);
      }
    }
    abort.abort();
    await Promise.all([same.running, other.running]);
    const p50 = percentile(across, 50);
    const p99 = percentile(across, 99);
    const base50 = percentile(local, 50);
    const base99 = percentile(local, 99);
    const signed = (ms: number): string => `${ms < 0 ? "−" : "+"}${fmt(Math.abs(ms), 1)}`;
    log(
      `[replicas] write on A → watch answer on B: p50 ${fmt(p50, 1)} ms, p99 ${fmt(p99, 1)} ms (on A itself: p50 ${fmt(base50, 1)} ms, p99 ${fmt(base99, 1)} ms)`,
    );
    rows.push({
      bench: "replicas",
      what: `watch latency across servers: a pause or resume sent to server A until the WatchSandboxes answer on server B (same SQLite file); baseline: the same watch on A itself; ${across.length} changes, p50 / p99`,
      ours: `${fmt(p50, 1)} / ${fmt(p99, 1)} ms`,
      baseline: `${fmt(base50, 1)} / ${fmt(base99, 1)} ms`,
      ratio: `${signed(p50 - base50)} / ${signed(p99 - base99)} ms`,
      target: "p99 ≤ 50 ms",
      pass: p99 <= 50,
      data: { changes: across.length, p50, p99, sameServerP50: base50, sameServerP99: base99 },
    });
    await request(a.base, key, "DELETE", `/api/v1/sandboxes/${id}`);
  } finally {
    await bench.stop(a.child);
    await bench.stop(b.child);
  }
  return rows;
}
