// HTTP/1.1 load generator (autocannon), run as its own process so that it never shares an event loop with the
// server under test. Argument: a HttpLoadConfig as JSON. Prints one LoadResult as a JSON line.
import autocannon from "autocannon";
import type { HttpLoadConfig, LoadResult } from "../lib/bench-util.ts";

const config = JSON.parse(process.argv[2] ?? "{}") as HttpLoadConfig;

const result = await autocannon({
  url: config.url,
  method: config.method,
  headers: config.headers,
  ...(config.body === undefined ? {} : { body: config.body }),
  connections: config.connections,
  pipelining: 1,
  duration: config.durationS,
  timeout: 10,
});

const ok = result["2xx"];
const out: LoadResult = {
  rps: ok / result.duration,
  ok,
  failed: result.non2xx + result.errors,
  durationS: result.duration,
  p50Ms: result.latency.p50,
  p99Ms: result.latency.p99,
};
process.stdout.write(`${JSON.stringify(out)}\n`);
