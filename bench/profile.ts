// Profiles the service under one benchmark's load: `node bench/profile.ts <rest-get|rest-post|grpc|connect> [s]`.
// Runs bench/servers/service.ts with `node --cpu-prof`, drives it from a separate load process, stops it, and
// prints the functions with the most self time and the project's functions with the most total time. The
// .cpuprofile is kept (path printed) for Chrome DevTools / speedscope.
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type LoadResult, ROOT, runLoad, startServer } from "./lib/bench-util.ts";

const which = process.argv[2] ?? "rest-get";
const seconds = Number(process.argv[3] ?? "8");
const extra = process.argv.slice(4);
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

const service = await startServer<{ port: number; grpcPort: number; key: string }>({
  name: "service",
  command: process.execPath,
  args: ["--cpu-prof", `--cpu-prof-dir=${dir}`, join(ROOT, "bench", "servers", "service.ts"), ...extra],
  logPath: join(dir, "service.log"),
});
const { port, grpcPort, key } = service.info;
const base = `http://127.0.0.1:${port}`;
const body = JSON.stringify({
  language: "en",
  llm_model: "anthropic/claude-sonnet-4-5-20250929",
  max_iterations: 100,
  mcp_config: { sse_servers: [{ url: "https://mcp.example.com/sse" }], stdio_servers: [], shttp_servers: [] },
});
const headers = { "x-session-api-key": key, "content-type": "application/json" };
await fetch(`${base}/api/settings`, { method: "POST", headers, body });

let result: LoadResult;
const http = (method: "GET" | "POST", path: string, b?: string) =>
  runLoad("http-load.ts", {
    url: `${base}${path}`,
    method,
    headers,
    ...(b === undefined ? {} : { body: b }),
    connections: 50,
    durationS: seconds,
  });
if (which === "rest-get") result = await http("GET", "/api/settings");
else if (which === "rest-post") result = await http("POST", "/api/settings", body);
else if (which === "connect") result = await http("POST", "/workspace.v1.SettingsService/GetSettings", "{}");
else if (which === "grpc")
  result = await runLoad("grpc-load.ts", {
    address: `127.0.0.1:${grpcPort}`,
    key,
    inFlight: 50,
    durationS: seconds,
  });
else throw new Error(`unknown load ${which}`);
await service.stop();
console.log(`${which}: ${Math.round(result.rps)} req/s, p50 ${result.p50Ms} ms, ${result.failed} failed`);

const file = readdirSync(dir).find((f) => f.endsWith(".cpuprofile"));
if (file === undefined) throw new Error(`no profile written in ${dir}`);
const profile = JSON.parse(readFileSync(join(dir, file), "utf8")) as Profile;
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
const pct = (t: number): string => `${((100 * t) / total).toFixed(1).padStart(5)}%`;
console.log("\nself time:");
for (const [l, t] of [...selfByLabel].sort((a, b) => b[1] - a[1]).slice(0, 30))
  console.log(`${pct(t)}  ${l}`);
console.log("\ntotal time of project functions (src/):");
for (const [l, t] of [...totalByLabel]
  .filter(([l]) => l.includes(" src/"))
  .sort((a, b) => b[1] - a[1])
  .slice(0, 25))
  console.log(`${pct(t)}  ${l}`);
console.log(`\nprofile: ${join(dir, file)}`);
