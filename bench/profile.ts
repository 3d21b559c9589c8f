// Profiles the service under one benchmark's load: `node bench/profile.ts <rest-get|rest-post|grpc|connect> [s]
// [--baseline] [--dist] [service args...]`. Runs bench/servers/service.ts with `node --cpu-prof`, drives it from a separate
// load process, stops it, and prints the functions with the most self time and the project's functions with the
// most total time. With --baseline the same load then drives that benchmark's bare baseline (bench/servers/bare-*.ts,
// answering the service's own JSON) under the profiler too, so the two profiles can be compared side by side. The
// .cpuprofile files are kept (paths printed) for Chrome DevTools / speedscope.
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type LoadResult, ROOT, runLoad, startCommand, startServer } from "./lib/bench-util.ts";
import type { Fixture } from "./servers/fixture.ts";

const LOADS = ["rest-get", "rest-post", "grpc", "connect"];
const which = process.argv[2] ?? "rest-get";
if (!LOADS.includes(which)) {
  const help = which === "-h" || which === "--help";
  (help ? console.log : console.error)(
    `usage: node bench/profile.ts <${LOADS.join("|")}> [seconds] [--baseline] [--dist] [service args...]`,
  );
  process.exit(help ? 0 : 2);
}
const seconds = Number(process.argv[3] ?? "8");
const rest = process.argv.slice(4);
const withBaseline = rest.includes("--baseline");
/** --dist: profile the compiled servers (dist/, built by `npm run build`), as the benchmarks run them. */
const compiled = rest.includes("--dist");
const extra = rest.filter((a) => a !== "--baseline" && a !== "--dist");
const serverScript = (name: string): string =>
  compiled
    ? join(ROOT, "dist", "bench", "servers", `${name}.js`)
    : join(ROOT, "bench", "servers", `${name}.ts`);
const dir = mkdtempSync(join(tmpdir(), "aws-bench-prof-"));

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const body = JSON.stringify({
  language: "en",
  llm_model: "anthropic/claude-sonnet-4-5-20250929",
  max_iterations: 100,
  mcp_config: { sse_servers: [{ url: "https://mcp.example.com/sse" }], stdio_servers: [], shttp_servers: [] },
});

/** Drives `which`'s load at one server (HTTP port for REST/Connect, gRPC port for gRPC). */
function load(key: string, httpPort: number, grpcPort: number): Promise<LoadResult> {
  const base = `http://127.0.0.1:${httpPort}`;
  const headers = { "x-session-api-key": key, "content-type": "application/json" };
  const http = (method: "GET" | "POST", path: string, b?: string) =>
    runLoad("http-load.ts", {
      url: `${base}${path}`,
      method,
      headers,
      ...(b === undefined ? {} : { body: b }),
      connections: 50,
      durationS: seconds,
    });
  if (which === "rest-get") return http("GET", "/api/settings");
  if (which === "rest-post") return http("POST", "/api/settings", body);
  if (which === "connect") return http("POST", "/workspace.v1.SettingsService/GetSettings", "{}");
  if (which === "grpc")
    return runLoad("grpc-load.ts", {
      address: `127.0.0.1:${grpcPort}`,
      key,
      inFlight: 50,
      durationS: seconds,
    });
  throw new Error(`unknown load ${which}`);
}

// With npm start's Node flags and environment (memory settings), as the benchmarks run the service.
const start = startCommand();
const service = await startServer<{ port: number; grpcPort: number; key: string }>({
  name: "service",
  command: process.execPath,
  args: [
    ...start.flags,
    "--cpu-prof",
    `--cpu-prof-dir=${join(dir, "service")}`,
    serverScript("service"),
    ...extra,
  ],
  env: start.env,
  logPath: join(dir, "service.log"),
});
const { port, grpcPort, key } = service.info;
const base = `http://127.0.0.1:${port}`;
const headers = { "x-session-api-key": key, "content-type": "application/json" };
await fetch(`${base}/api/settings`, { method: "POST", headers, body });
const fixture: Fixture = {
  key,
  restSettings: (await (await fetch(`${base}/api/settings`, { headers })).json()) as Fixture["restSettings"],
  rpcSettings: (await (
    await fetch(`${base}/workspace.v1.SettingsService/GetSettings`, { method: "POST", headers, body: "{}" })
  ).json()) as Fixture["rpcSettings"],
};
// A failed load still stops the server (with its warm sandbox agents), so nothing is left running.
const ours = await load(key, port, grpcPort).finally(() => service.stop());
report("service", ours, join(dir, "service"));

if (withBaseline) {
  const fixturePath = join(dir, "fixture.json");
  writeFileSync(fixturePath, JSON.stringify(fixture));
  const bareName = which.startsWith("rest")
    ? "bare-fastify"
    : which === "grpc"
      ? "bare-grpc"
      : "bare-connect";
  const bare = await startServer<{ port?: number; grpcPort?: number }>({
    name: bareName,
    command: process.execPath,
    args: ["--cpu-prof", `--cpu-prof-dir=${join(dir, "baseline")}`, serverScript(bareName), fixturePath],
    logPath: join(dir, "baseline.log"),
  });
  const result = await load(key, bare.info.port ?? 0, bare.info.grpcPort ?? 0).finally(() => bare.stop());
  report(bareName, result, join(dir, "baseline"));
}

function report(name: string, result: LoadResult, profileDir: string): void {
  console.log(
    `\n== ${name} ${which}: ${Math.round(result.rps)} req/s, p50 ${result.p50Ms} ms, ${result.failed} failed`,
  );
  const file = readdirSync(profileDir).find((f) => f.endsWith(".cpuprofile"));
  if (file === undefined) throw new Error(`no profile written in ${profileDir}`);
  const profile = JSON.parse(readFileSync(join(profileDir, file), "utf8")) as Profile;
  const self = new Map<number, number>();
  profile.samples.forEach((id, i) => {
    self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
  });
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  const label = (n: ProfileNode): string => {
    const url = n.callFrame.url.replace(`file://${ROOT}/`, "").replace(/^.*node_modules\//, "");
    return `${n.callFrame.functionName || "(anonymous)"} ${url}:${n.callFrame.lineNumber + 1}`;
  };
  const selfByLabel = new Map<string, number>();
  const totalByLabel = new Map<string, number>();
  for (const [id, t] of self) {
    const n = byId.get(id);
    if (n === undefined) continue;
    selfByLabel.set(label(n), (selfByLabel.get(label(n)) ?? 0) + t);
    const seen = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const node = byId.get(cur);
      if (node === undefined) break;
      const l = label(node);
      if (seen.has(l)) continue;
      seen.add(l);
      totalByLabel.set(l, (totalByLabel.get(l) ?? 0) + t);
    }
  }
  // Microseconds of CPU per answered request: profiled time that is not idle, over the requests answered.
  const idle = [...selfByLabel].filter(([l]) => l.startsWith("(idle)")).reduce((a, [, t]) => a + t, 0);
  const answered = result.ok + result.failed;
  const us = (t: number): string => `${(t / Math.max(1, answered)).toFixed(1).padStart(6)} µs`;
  const pct = (t: number): string => `${((100 * t) / total).toFixed(1).padStart(5)}%`;
  console.log(`busy: ${us(total - idle)} per request`);
  console.log("self time:");
  for (const [l, t] of [...selfByLabel].sort((a, b) => b[1] - a[1]).slice(0, 30))
    console.log(`${pct(t)} ${us(t)}  ${l}`);
  console.log("total time of project functions (src/):");
  for (const [l, t] of [...totalByLabel]
    .filter(([l]) => / (dist\/)?src\//.test(l))
    .sort((a, b) => b[1] - a[1])
    .slice(0, 25))
    console.log(`${pct(t)} ${us(t)}  ${l}`);
  console.log(`profile: ${join(profileDir, file)}`);
}
