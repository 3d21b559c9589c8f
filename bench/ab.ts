// A/B comparison of two builds of the service under one REST load: `node bench/ab.ts <dirA> <dirB> [get|post]
// [rounds] [seconds]`, where each dir holds a compiled `dist/` (e.g. `git worktree add /tmp/a <commit> && (cd
// /tmp/a && npm ci && npm run build)`, or a copy of dist/ inside the checkout so node_modules resolve). Starts A
// and B one after the other for every round (a fresh server each time, 1 s warm-up), with npm start's Node flags and environment (plus AB_FLAGS_A / AB_FLAGS_B),
// and prints the req/s and server CPU time per request of each and the medians of the per-round B/A ratios: on a
// shared machine whose speed moves, only ratios of runs close in time say anything, and CPU per request moves less
// than req/s when other tenants take the cores.
import { join, resolve } from "node:path";
import { cpuSeconds, runLoad, startCommand, startServer } from "./lib/bench-util.ts";

const [dirA, dirB, which = "post", roundsArg = "6", secondsArg = "4"] = process.argv.slice(2);
if (dirA === undefined || dirB === undefined || (which !== "get" && which !== "post")) {
  console.error("usage: node bench/ab.ts <dirA> <dirB> [get|post] [rounds] [seconds]");
  process.exit(2);
}
const body = JSON.stringify({
  language: "en",
  llm_model: "anthropic/claude-sonnet-4-5-20250929",
  max_iterations: 100,
  mcp_config: { sse_servers: [{ url: "https://mcp.example.com/sse" }], stdio_servers: [], shttp_servers: [] },
});

const start = startCommand();

/** One build's run: req/s and the server's CPU time (user + system, all threads) per answered request. */
interface Run {
  rps: number;
  cpuUs: number;
}

/** Extra Node flags for one side (`AB_FLAGS_A`, `AB_FLAGS_B`, space-separated), e.g. to compare V8 settings. */
const extraFlags = (name: string): string[] => (process.env[name] ?? "").split(" ").filter(Boolean);

async function measure(dir: string, flags: string[]): Promise<Run> {
  const service = await startServer<{ port: number; key: string }>({
    name: dir,
    command: process.execPath,
    args: [...start.flags, ...flags, join(resolve(dir), "dist/bench/servers/service.js")],
    env: start.env,
    logPath: "/dev/null",
  });
  try {
    const headers = { "x-session-api-key": service.info.key, "content-type": "application/json" };
    const url = `http://127.0.0.1:${service.info.port}/api/settings`;
    await fetch(url, { method: "POST", headers, body });
    const load = (durationS: number) =>
      runLoad("http-load.ts", {
        url,
        method: which === "post" ? "POST" : "GET",
        headers,
        ...(which === "post" ? { body } : {}),
        connections: 50,
        durationS,
      });
    await load(1);
    const before = cpuSeconds(service.pid);
    const r = await load(Number(secondsArg));
    const cpuUs = ((cpuSeconds(service.pid) - before) * 1e6) / Math.max(1, r.ok + r.failed);
    return { rps: r.rps, cpuUs };
  } finally {
    await service.stop();
  }
}

const median = (xs: number[]): number =>
  [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)] ?? Number.NaN;
const a: Run[] = [];
const b: Run[] = [];
for (let round = 1; round <= Number(roundsArg); round++) {
  const ra = await measure(dirA, extraFlags("AB_FLAGS_A"));
  const rb = await measure(dirB, extraFlags("AB_FLAGS_B"));
  a.push(ra);
  b.push(rb);
  console.log(
    `round ${round}: A ${Math.round(ra.rps)} req/s ${ra.cpuUs.toFixed(0)} µs CPU/req · ` +
      `B ${Math.round(rb.rps)} req/s ${rb.cpuUs.toFixed(0)} µs CPU/req · ` +
      `B/A ${(rb.rps / ra.rps).toFixed(3)} req/s, ${(rb.cpuUs / ra.cpuUs).toFixed(3)} CPU`,
  );
}
const ratio = (f: (r: Run) => number): number => median(b.map((x, i) => f(x) / f(a[i] ?? x)));
console.log(
  `median: A ${Math.round(median(a.map((r) => r.rps)))} req/s ${median(a.map((r) => r.cpuUs)).toFixed(0)} µs CPU/req · ` +
    `B ${Math.round(median(b.map((r) => r.rps)))} req/s ${median(b.map((r) => r.cpuUs)).toFixed(0)} µs CPU/req · ` +
    `B/A ${ratio((r) => r.rps).toFixed(3)} req/s, ${ratio((r) => r.cpuUs).toFixed(3)} CPU`,
);
