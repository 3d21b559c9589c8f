// Throughput of the settings calls on every protocol against bare servers of the same libraries, on one service
// under test: REST GET and POST /api/settings (bare Fastify), the reference Python stack (./reference.ts), gRPC
// GetSettings (bare grpc-js), Connect JSON GetSettings (bare connect-node); and the service's memory idle and under
// these loads. Selected by the names rest-get, rest-post, reference, grpc and connect.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { type HttpLoadConfig, runLoad, type ServerChild } from "../lib/bench-util.ts";
import {
  type Bench,
  compiled,
  fmt,
  idleRss,
  log,
  type Row,
  ratioRow,
  request,
  SETTINGS_BODY,
  sleep,
  withRss,
} from "../lib/harness.ts";
import type { Fixture } from "../servers/fixture.ts";
import { referenceBenchmarks } from "./reference.ts";

/**
 * When the idle RSS is read: V8's memory reducer samples the allocation rate every 8 s and collects once it is low,
 * which on this service is its second or third sample (~17–26 s after start).
 */
const IDLE_AFTER_MS = 30_000;

export async function settingsThroughput(bench: Bench): Promise<Row[]> {
  const rows: Row[] = [];
  const service = await bench.startService("service");
  const s = service.info;
  const base = `http://127.0.0.1:${s.port}`;
  const auth = { "x-session-api-key": s.key };
  let bareFastify: ServerChild<{ port: number }> | null = null;
  let bareGrpc: ServerChild<{ grpcPort: number }> | null = null;
  let bareConnect: ServerChild<{ port: number }> | null = null;
  try {
    // Right after start the heap still holds the startup's garbage; V8's memory reducer gives it back once the
    // server has been idle for a while (src/server/idle-memory.ts). Both are reported; the target is the idle one.
    const started = performance.now();
    await sleep(1000);
    const afterStart = await idleRss(service.pid);
    await sleep(IDLE_AFTER_MS - (performance.now() - started));
    const idle = await idleRss(service.pid, 2000);
    log(`  service RSS ${fmt(afterStart, 1)} MiB 1 s after start, ${fmt(idle, 1)} MiB idle`);
    rows.push({
      bench: "rss",
      what: "server RSS 1 s after start",
      ours: `${fmt(afterStart, 1)} MiB`,
      baseline: "—",
      ratio: "—",
      target: "—",
      pass: null,
    });
    rows.push({
      bench: "rss",
      what: `server RSS idle (${IDLE_AFTER_MS / 1000} s after start, no requests)`,
      ours: `${fmt(idle, 1)} MiB`,
      baseline: "—",
      ratio: "—",
      target: "≤ 100 MB",
      pass: idle * 1.048576 <= 100,
    });

    const stored = await request(base, s.key, "POST", "/api/settings", SETTINGS_BODY);
    if (stored.status !== 200) throw new Error(`seeding settings failed: ${stored.status} ${stored.text}`);
    const got = await request(base, s.key, "GET", "/api/settings");
    const rpc = await request(base, s.key, "POST", "/workspace.v1.SettingsService/GetSettings", "{}");
    if (got.status !== 200 || rpc.status !== 200)
      throw new Error(`reading settings failed: ${got.text} ${rpc.text}`);
    const fixture: Fixture = { key: s.key, restSettings: got.json as never, rpcSettings: rpc.json as never };
    const fixturePath = join(bench.work, "fixture.json");
    writeFileSync(fixturePath, JSON.stringify(fixture));

    /** An HTTP load on the service that also records the service's RSS peak during it into `peaks`. */
    const loadOurs =
      (peaks: number[]) =>
      (config: Omit<HttpLoadConfig, "durationS" | "connections">) =>
      async (durationS: number) => {
        const { result, peakMiB } = await withRss(service.pid, () => bench.httpLoad(config)(durationS));
        peaks.push(peakMiB);
        return result;
      };
    const restPeaks: number[] = [];
    const oursRest = loadOurs(restPeaks);
    const getConfig = { url: `${base}/api/settings`, method: "GET" as const, headers: auth };
    const postConfig = {
      url: `${base}/api/settings`,
      method: "POST" as const,
      headers: { ...auth, "content-type": "application/json" },
      body: SETTINGS_BODY,
    };

    if (bench.selected("rest-get") || bench.selected("rest-post")) {
      bareFastify = await bench.start<{ port: number }>({
        name: "bare-fastify",
        command: process.execPath,
        args: [compiled("bare-fastify"), fixturePath],
        logPath: join(bench.work, "bare-fastify.log"),
      });
      const bare = `http://127.0.0.1:${bareFastify.info.port}`;
      if (bench.selected("rest-get")) {
        const alt = await bench.alternate(
          "rest-get",
          { pid: service.pid, load: oursRest(getConfig) },
          { pid: bareFastify.pid, load: bench.httpLoad({ ...getConfig, url: `${bare}/api/settings` }) },
          "req/s",
        );
        rows.push(ratioRow("rest-get", "REST GET /api/settings (SQLite)", alt, "bare Fastify", 0.5, "req/s"));
      }
      if (bench.selected("rest-post")) {
        const alt = await bench.alternate(
          "rest-post",
          { pid: service.pid, load: oursRest(postConfig) },
          { pid: bareFastify.pid, load: bench.httpLoad({ ...postConfig, url: `${bare}/api/settings` }) },
          "req/s",
        );
        rows.push(
          ratioRow(
            "rest-post",
            "REST POST /api/settings (SQLite, durable commit)",
            alt,
            "bare Fastify",
            0.3,
            "req/s",
          ),
        );
      }
      await bench.stop(bareFastify);
      bareFastify = null;
    }

    // Every REST load (ours against bare Fastify, then against the reference stack) runs before the RPC loads, so
    // the REST memory peak is that of a server that has served REST; the Connect load's own peak is reported on its
    // own row (a Connect call allocates several times what a REST call does).
    if (bench.selected("reference"))
      rows.push(...(await referenceBenchmarks(bench, service, oursRest, getConfig, postConfig)));

    if (restPeaks.length > 0) {
      const peak = Math.max(...restPeaks);
      rows.push({
        bench: "rss",
        what: "server RSS under the REST load (peak)",
        ours: `${fmt(peak, 1)} MiB`,
        baseline: "—",
        ratio: "—",
        target: "≤ 250 MB",
        pass: peak * 1.048576 <= 250,
      });
    }

    if (bench.selected("grpc")) {
      bareGrpc = await bench.start<{ grpcPort: number }>({
        name: "bare-grpc",
        command: process.execPath,
        args: [compiled("bare-grpc"), fixturePath],
        logPath: join(bench.work, "bare-grpc.log"),
      });
      const grpcLoad = (port: number) => (durationS: number) =>
        runLoad("grpc-load.ts", {
          address: `127.0.0.1:${port}`,
          key: s.key,
          inFlight: bench.connections,
          durationS,
        });
      const alt = await bench.alternate(
        "grpc",
        { pid: service.pid, load: grpcLoad(s.grpcPort) },
        { pid: bareGrpc.pid, load: grpcLoad(bareGrpc.info.grpcPort) },
        "calls/s",
      );
      rows.push(
        ratioRow("grpc", "gRPC GetSettings (grpc-js client, 1 channel)", alt, "bare grpc-js", 0.8, "calls/s"),
      );
      await bench.stop(bareGrpc);
      bareGrpc = null;
    }

    if (bench.selected("connect")) {
      bareConnect = await bench.start<{ port: number }>({
        name: "bare-connect",
        command: process.execPath,
        args: [compiled("bare-connect"), fixturePath],
        logPath: join(bench.work, "bare-connect.log"),
      });
      const connectConfig = (port: number) => ({
        url: `http://127.0.0.1:${port}/workspace.v1.SettingsService/GetSettings`,
        method: "POST" as const,
        headers: { ...auth, "content-type": "application/json" },
        body: "{}",
      });
      const connectPeaks: number[] = [];
      const oursConnect = loadOurs(connectPeaks)(connectConfig(s.port));
      const alt = await bench.alternate(
        "connect",
        { pid: service.pid, load: oursConnect },
        { pid: bareConnect.pid, load: bench.httpLoad(connectConfig(bareConnect.info.port)) },
        "req/s",
      );
      rows.push(ratioRow("connect", "Connect JSON GetSettings", alt, "bare connect-node", 0.9, "req/s"));
      // The same call with the hand-written path off (every call on connect-node's handler, src/transports/connect/connect-handler.ts),
      // on a second service, against the same baseline in the same run.
      const nodeService = await bench.startService("service-connect-node", ["--connect-fast-path", "off"]);
      try {
        const f = nodeService.info;
        const seeded = await request(
          `http://127.0.0.1:${f.port}`,
          f.key,
          "POST",
          "/api/settings",
          SETTINGS_BODY,
        );
        if (seeded.status !== 200)
          throw new Error(`seeding settings failed: ${seeded.status} ${seeded.text}`);
        const nodeAlt = await bench.alternate(
          "connect-node-only",
          {
            pid: nodeService.pid,
            load: bench.httpLoad({
              ...connectConfig(f.port),
              headers: { "x-session-api-key": f.key, "content-type": "application/json" },
            }),
          },
          { pid: bareConnect.pid, load: bench.httpLoad(connectConfig(bareConnect.info.port)) },
          "req/s",
        );
        rows.push(
          ratioRow(
            "connect",
            "Connect JSON GetSettings, hand-written unary path off (every call on connect-node)",
            nodeAlt,
            "bare connect-node",
            0.9,
            "req/s",
          ),
        );
      } finally {
        await bench.stop(nodeService);
      }
      rows.push({
        bench: "rss",
        what: "server RSS under the Connect load (peak; after the REST loads)",
        ours: `${fmt(Math.max(...connectPeaks), 1)} MiB`,
        baseline: "—",
        ratio: "—",
        target: "—",
        pass: null,
      });
      await bench.stop(bareConnect);
      bareConnect = null;
    }
  } finally {
    await bench.stop(bareFastify);
    await bench.stop(bareGrpc);
    await bench.stop(bareConnect);
    await bench.stop(service);
  }
  return rows;
}
