// Webhook load generator (autocannon): POSTs batches of `batch` agent events with fresh ids to `url` (a webhook
// path of the service or of the baseline), so that every event is new and stored. Argument: an EventsLoadConfig
// as JSON. Prints one LoadResult (requests) as a JSON line.
import { randomUUID } from "node:crypto";
import autocannon from "autocannon";
import type { EventsLoadConfig, LoadResult } from "../lib/bench-util.ts";

const config = JSON.parse(process.argv[2] ?? "{}") as EventsLoadConfig;
const prefix = randomUUID();
let n = 0;

/** A MessageEvent of realistic size, as the agent SDK writes it. */
function body(): string {
  const events = [];
  for (let i = 0; i < config.batch; i++) {
    n++;
    events.push({
      kind: "MessageEvent",
      id: `${prefix}-${n}`,
      timestamp: new Date().toISOString().replace("Z", "000"),
      source: n % 2 === 0 ? "agent" : "user",
      llm_message: {
        role: "assistant",
        content: [{ type: "text", text: `Step ${n}: ran the test suite; 12 passed.` }],
      },
      llm_response_id: null,
      activated_skills: [],
      extended_content: [],
      sender: null,
    });
  }
  return JSON.stringify(events);
}

const result = await autocannon({
  url: config.url,
  method: "POST",
  headers: { ...config.headers, "content-type": "application/json" },
  connections: config.connections,
  pipelining: 1,
  duration: config.durationS,
  timeout: 10,
  requests: [{ setupRequest: (req) => ({ ...req, body: body() }) }],
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
