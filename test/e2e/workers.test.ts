// WORKERS=2 as users run it: `serve` as a real process (a cluster primary and its workers) on free loopback ports,
// observed from outside: which worker answered comes from the worker's own access log line (its pino `pid`, found
// by the request id we sent), the process tree from /proc, gRPC connections per worker from /proc/net/tcp.
import { type ChildProcess, spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from "node:fs";
import { get as httpGet } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SettingsService } from "../../src/gen/workspace/v1/settings_pb.js";
import { loadConfig } from "../../src/server/config.ts";
import { ConfigError } from "../../src/server/config-types.ts";
import { grpcServiceDefinition } from "../../src/transports/grpc/grpc-server.ts";
import { CLI, serviceEnv, spawnServer } from "../helpers/server-process.ts";

const dir = mkdtempSync(join(tmpdir(), "aws-workers-"));
const spawned = new Set<number>();

type LogLine = Record<string, unknown> & { msg?: string; pid?: number };

interface Cluster {
  proc: ChildProcess;
  out: () => string;
  lines: () => LogLine[];
}

let cluster: Cluster;
let key = "";
let http = "";
let grpcAddress = "";
let workers: number[] = [];

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function startCluster(): Cluster {
  const server = spawnServer({
    env: serviceEnv(dir, {
      WORKERS: "2",
      // The request loops below go as fast as they can with one key: no rate limiter in the way.
      RATE_LIMIT_PER_SECOND: "0",
    }),
  });
  const proc = server.proc;
  if (proc.pid !== undefined) spawned.add(proc.pid);
  return {
    proc,
    out: server.output,
    lines: () =>
      server
        .output()
        .split("\n")
        .filter((l) => l.startsWith("{"))
        .map((l) => {
          try {
            return JSON.parse(l) as LogLine;
          } catch {
            return {};
          }
        }),
  };
}

/** The first log line after the first `skip` lines that passes `test`, waiting for it up to `ms`. */
async function waitForLine(test: (l: LogLine) => boolean, ms: number, skip = 0): Promise<LogLine> {
  const deadline = Date.now() + ms;
  for (;;) {
    const line = cluster.lines().slice(skip).find(test);
    if (line !== undefined) return line;
    if (Date.now() > deadline || cluster.proc.exitCode !== null)
      throw new Error(`no such log line within ${ms} ms:\n${cluster.out().slice(-4000)}`);
    await sleep(25);
  }
}

/** Child processes of `pid` (all its threads' children). */
function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    const text = readFileSync(`/proc/${pid}/task/${tid}/children`, "utf8").trim();
    if (text !== "") out.push(...text.split(/\s+/).map(Number));
  }
  return out.sort((a, b) => a - b);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  // A zombie (exited, not yet reaped) is not a running worker.
  try {
    return !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, "utf8"));
  } catch {
    return false;
  }
}

/** Established TCP connections whose local port is `port`, counted per process among `pids` (from /proc). */
function connectionsOn(port: number, pids: readonly number[]): Map<number, number> {
  const inodes = new Set<string>();
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text = "";
    try {
      text = readFileSync(table, "utf8");
    } catch {
      continue;
    }
    for (const row of text.trim().split("\n").slice(1)) {
      const f = row.trim().split(/\s+/);
      const local = f[1] ?? "";
      if (f[3] === "01" && Number.parseInt(local.slice(local.lastIndexOf(":") + 1), 16) === port)
        inodes.add(f[9] ?? "");
    }
  }
  const counts = new Map<number, number>();
  for (const pid of pids) {
    let n = 0;
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
        if (m?.[1] !== undefined && inodes.has(m[1])) n++;
      } catch {
        // closed meanwhile
      }
    }
    counts.set(pid, n);
  }
  return counts;
}

/** GET on a new connection (no keep-alive: the primary hands each connection to the next worker). */
function getOnNewConnection(
  path: string,
  headers: Record<string, string>,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpGet(`${http}${path}`, { headers, agent: false }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => {
        body += c;
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.setTimeout(10_000, () => req.destroy(new Error("timeout")));
  });
}

/** The pid that logged the access line of each request id (the worker that answered it). */
async function answeredBy(ids: readonly string[]): Promise<Map<string, number>> {
  const found = new Map<string, number>();
  const deadline = Date.now() + 5_000;
  while (found.size < ids.length && Date.now() < deadline) {
    for (const l of cluster.lines())
      if (l.msg === "request completed" && typeof l.reqId === "string" && ids.includes(l.reqId))
        found.set(l.reqId, Number(l.pid));
    if (found.size < ids.length) await sleep(25);
  }
  return found;
}

/** A gRPC client with its own connection (no subchannel shared with other clients). */
function settingsClient(address: string) {
  const Ctor = grpc.makeGenericClientConstructor(grpcServiceDefinition(SettingsService), "SettingsService");
  const client = new Ctor(address, grpc.credentials.createInsecure(), {
    "grpc.use_local_subchannel_pool": 1,
  }) as unknown as grpc.Client & Record<string, (...args: unknown[]) => void>;
  return {
    getSettings: () =>
      new Promise<{ settings?: { agent?: string } }>((resolve, reject) => {
        const md = new grpc.Metadata();
        md.set("x-session-api-key", key);
        client.GetSettings?.({}, md, { deadline: Date.now() + 10_000 }, (err: unknown, res: unknown) =>
          err ? reject(err) : resolve(res as { settings?: { agent?: string } }),
        );
      }),
    close: () => client.close(),
  };
}

beforeAll(async () => {
  cluster = startCluster();
  const started = await waitForLine((l) => l.msg === "cluster primary started 2 workers", 40_000);
  workers = (started.pids as number[]).slice().sort((a, b) => a - b);
  for (const pid of workers) spawned.add(pid);
  http = `http://127.0.0.1:${started.http}`;
  grpcAddress = `127.0.0.1:${started.grpc}`;
  key = /X-Session-API-Key: (\S+)/.exec(cluster.out())?.[1] ?? "";
}, 60_000);

afterAll(() => {
  for (const pid of spawned) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone
    }
  }
  rmSync(dir, { recursive: true, force: true });
});

describe("WORKERS=2: one primary, two server processes sharing the HTTP and gRPC ports", () => {
  it("the primary's children are the two workers; the generated API key is printed once", async () => {
    const primary = cluster.proc.pid ?? 0;
    expect(workers).toHaveLength(2);
    expect(childrenOf(primary)).toEqual(workers);
    expect(key).toMatch(/^ws_/);
    expect(cluster.out().match(/X-Session-API-Key:/g)).toHaveLength(1);
    // Both workers report the same ports. A worker's own log line may reach the shared stdout after the primary's
    // "started" line (the primary learns of the listen over IPC): wait for both, briefly.
    const isListening = (l: LogLine) => l.msg === "agent workspace service listening";
    const deadline = Date.now() + 10_000;
    while (
      new Set(
        cluster
          .lines()
          .filter(isListening)
          .map((l) => l.pid),
      ).size < 2 &&
      Date.now() < deadline
    )
      await sleep(25);
    const listening = cluster.lines().filter(isListening);
    expect(new Set(listening.map((l) => l.pid))).toEqual(new Set(workers));
    expect(new Set(listening.map((l) => `${l.http} ${l.grpc}`)).size).toBe(1);
  });

  it("REST requests are answered by both workers", async () => {
    const headers = { "x-session-api-key": key, "content-type": "application/json" };
    const post = await fetch(`${http}/api/settings`, {
      method: "POST",
      headers,
      body: JSON.stringify({ agent: "clustered" }),
    });
    expect(post.status).toBe(200);
    const ids = Array.from({ length: 12 }, (_, i) => `workers-rest-${i}`);
    for (const id of ids) {
      const r = await getOnNewConnection("/api/settings", { "x-session-api-key": key, "x-request-id": id });
      expect(r.status).toBe(200);
      // Every worker reads what another one stored (one data store).
      expect((JSON.parse(r.body) as { agent: string }).agent).toBe("clustered");
    }
    const by = await answeredBy(ids);
    expect(by.size).toBe(ids.length);
    expect(new Set(by.values())).toEqual(new Set(workers));
  });

  it("gRPC works on the shared gRPC port, connections served by both workers", async () => {
    const port = Number(grpcAddress.split(":")[1]);
    const clients = Array.from({ length: 4 }, () => settingsClient(grpcAddress));
    try {
      for (const c of clients) expect((await c.getSettings()).settings?.agent).toBe("clustered");
      const perWorker = connectionsOn(port, workers);
      expect([...perWorker.values()].reduce((a, b) => a + b, 0)).toBe(clients.length);
      for (const pid of workers) expect(perWorker.get(pid)).toBeGreaterThan(0);
    } finally {
      for (const c of clients) c.close();
    }
  });

  it("a worker killed with SIGKILL is replaced; the other one keeps answering meanwhile", async () => {
    const skip = cluster.lines().length;
    const [victim, survivor] = workers as [number, number];
    process.kill(victim, "SIGKILL");
    const died = await waitForLine((l) => l.msg?.includes("exited unexpectedly") === true, 10_000, skip);
    expect(died).toMatchObject({ pid: victim, signal: "SIGKILL", level: 50 });
    expect(died.msg).toContain(`pid ${victim}`);
    expect(died.msg).toContain("signal SIGKILL");
    expect((await getOnNewConnection("/api/settings", { "x-session-api-key": key })).status).toBe(200);
    const back = await waitForLine(
      (l) => typeof l.msg === "string" && /^worker \d \(pid \d+\) listening$/.test(l.msg),
      30_000,
      skip,
    );
    const replacement = Number(back.pid);
    spawned.add(replacement);
    expect(replacement).not.toBe(victim);
    workers = [survivor, replacement].sort((a, b) => a - b);
    expect(childrenOf(cluster.proc.pid ?? 0)).toEqual(workers);
    expect(alive(victim)).toBe(false);
  }, 45_000);

  it("SIGHUP: rolling restart under a continuous request loop, no failed request, new worker pids", async () => {
    const skip = cluster.lines().length;
    const old = workers;
    let stop = false;
    let ok = 0;
    const failures: string[] = [];
    const count = (r: { status: number }) => {
      if (r.status === 200) ok++;
      else failures.push(`HTTP ${r.status}`);
    };
    const keepAlive = async () => {
      while (!stop) {
        try {
          const r = await fetch(`${http}/api/settings`, { headers: { "x-session-api-key": key } });
          await r.arrayBuffer();
          count(r);
        } catch (err) {
          failures.push(`keep-alive: ${String((err as Error).cause ?? err)}`);
        }
      }
    };
    const newConnections = async () => {
      while (!stop) {
        try {
          count(await getOnNewConnection("/api/settings", { "x-session-api-key": key }));
        } catch (err) {
          failures.push(`new connection: ${String(err)}`);
        }
      }
    };
    const grpcLoop = async () => {
      const c = settingsClient(grpcAddress);
      try {
        while (!stop) {
          try {
            if ((await c.getSettings()).settings?.agent === "clustered") ok++;
            else failures.push("gRPC: wrong answer");
          } catch (err) {
            failures.push(`gRPC: ${String(err)}`);
          }
        }
      } finally {
        c.close();
      }
    };
    const loops = [keepAlive(), keepAlive(), newConnections(), grpcLoop()];
    await sleep(300);
    const before = ok;
    process.kill(cluster.proc.pid ?? 0, "SIGHUP");
    const done = await waitForLine((l) => l.msg?.startsWith("rolling restart done") === true, 45_000, skip);
    await sleep(300);
    stop = true;
    await Promise.all(loops);
    expect(failures).toEqual([]);
    expect(ok - before).toBeGreaterThan(50);
    const fresh = (done.pids as number[]).slice().sort((a, b) => a - b);
    for (const pid of fresh) spawned.add(pid);
    expect(fresh).toHaveLength(2);
    for (const pid of fresh) expect(old).not.toContain(pid);
    expect(childrenOf(cluster.proc.pid ?? 0)).toEqual(fresh);
    for (const pid of old) expect(alive(pid)).toBe(false);
    // One at a time: the second old worker was stopped only after the first one had been replaced.
    const replaced = cluster
      .lines()
      .slice(skip)
      .filter((l) => l.msg?.startsWith("worker ") && l.msg.includes(" replaced: "));
    expect(replaced.map((l) => Number(l.replaced)).sort((a, b) => a - b)).toEqual(old);
    workers = fresh;
    const ids = ["workers-after-0", "workers-after-1", "workers-after-2", "workers-after-3"];
    for (const id of ids)
      expect(
        (await getOnNewConnection("/api/settings", { "x-session-api-key": key, "x-request-id": id })).status,
      ).toBe(200);
    expect(new Set((await answeredBy(ids)).values())).toEqual(new Set(fresh));
  }, 55_000);

  it("SIGTERM stops every worker gracefully; the primary exits 0 and no worker is left", async () => {
    const skip = cluster.lines().length;
    // "close": the primary exited and every process holding its stdout (the workers) too.
    const exited = new Promise<number | null>((resolve) =>
      cluster.proc.once("close", (code) => resolve(code)),
    );
    cluster.proc.kill("SIGTERM");
    expect(await exited).toBe(0);
    const after = cluster.lines().slice(skip);
    expect(after.filter((l) => l.msg === "stopped").map((l) => l.pid)).toHaveLength(2);
    expect(after.at(-1)?.msg).toBe("cluster primary stopped");
    for (const pid of workers) expect(alive(pid)).toBe(false);
  }, 40_000);
});

describe("WORKERS configuration", () => {
  it("1 by default; 1-64; anything else is a configuration error", () => {
    expect(loadConfig({}, "/srv").workers).toBe(1);
    expect(loadConfig({ WORKERS: "8" }, "/srv").workers).toBe(8);
    for (const bad of ["0", "65", "two", "1.5"])
      expect(() => loadConfig({ WORKERS: bad }, "/srv")).toThrow(ConfigError);
    const help = spawnSync(process.execPath, [CLI, "--help"], { encoding: "utf8" });
    expect(help.stdout).toMatch(/WORKERS\s+server processes sharing PORT and GRPC_PORT/);
  });
});
