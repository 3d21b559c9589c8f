// A/B comparison of two builds of the service under one REST load: `node bench/ab.ts <dirA> <dirB> [get|post]
// [rounds] [seconds]`, where each dir holds a compiled `dist/` (e.g. `git worktree add /tmp/a <commit> && (cd
// /tmp/a && npm ci && npm run build)`, or a copy of dist/ inside the checkout so node_modules resolve). Starts A
// and B one after the other for every round (a fresh server each time, 1 s warm-up), with npm start's Node flags and environment,
// and prints the req/s of each and the median of the per-round B/A ratios: on a shared machine whose speed moves,
// only ratios of runs close in time say anything.
import { join, resolve } from "node:path";
import { runLoad, startCommand, startServer } from "./lib/bench-util.ts";

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

async function measure(dir: string): Promise<number> {
  const service = await startServer<{ port: number; key: string }>({
    name: dir,
    command: process.execPath,
    args: [...start.flags, join(resolve(dir), "dist/bench/servers/service.js")],
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
    return (await load(Number(secondsArg))).rps;
  } finally {
    await service.stop();
  }
}

const median = (xs: number[]): number =>
  [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)] ?? Number.NaN;
const a: number[] = [];
const b: number[] = [];
for (let round = 1; round <= Number(roundsArg); round++) {
  a.push(await measure(dirA));
  b.push(await measure(dirB));
  const [ra, rb] = [a.at(-1) ?? 0, b.at(-1) ?? 0];
  console.log(
    `round ${round}: A ${Math.round(ra)} req/s · B ${Math.round(rb)} req/s · B/A ${(rb / ra).toFixed(3)}`,
  );
}
const ratios = b.map((x, i) => x / (a[i] ?? Number.NaN));
console.log(
  `median: A ${Math.round(median(a))} req/s · B ${Math.round(median(b))} req/s · B/A ${median(ratios).toFixed(3)}`,
);
