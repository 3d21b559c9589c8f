// `npm run bench`: runs the benchmarks (bench/scenarios/*.ts), prints progress to stderr and one markdown table to
// stdout, and writes bench/results/latest.{md,json} (partial.{md,json} for --quick or --only runs).
//
// Throughput benchmarks measure their own baseline in the same run, alternating ours/baseline round by round
// (ABAB…), and report the median of the per-round ratios (bench/lib/harness.ts). Servers under test and load
// generators are separate processes talking over loopback, so the load generator never shares an event loop with
// the server.
//
// Options and environment: `npm run bench -- --help` (bench/lib/options.ts).
//
// A scenario is one async function of the Bench returning its table rows; it runs when --only names one of its
// names (or without --only). Its rows appear in the table in the order of this list, memory rows ("rss") last.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { machine, machineLine } from "./lib/bench-util.ts";
import { Bench, log, type Row } from "./lib/harness.ts";
import { buildServers, parseRunOptions } from "./lib/options.ts";
import { writeResults } from "./lib/report.ts";
import { agentProxyBenchmarks } from "./scenarios/agent-proxy.ts";
import { agentServerBenchmarks } from "./scenarios/agent-server.ts";
import { builtinAgentBenchmarks } from "./scenarios/builtin-agent.ts";
import { conversationBenchmarks } from "./scenarios/conversations.ts";
import { dockerBenchmarks } from "./scenarios/docker.ts";
import { dockerWarmPool } from "./scenarios/docker-warm-pool.ts";
import { eventBenchmarks } from "./scenarios/events.ts";
import { replicaBenchmarks } from "./scenarios/replicas.ts";
import { sandboxBenchmarks } from "./scenarios/sandboxes.ts";
import { settingsThroughput } from "./scenarios/settings-throughput.ts";
import { teamBenchmarks } from "./scenarios/team.ts";
import { workerBenchmarks } from "./scenarios/workers.ts";

const SCENARIOS: { names: string[]; run: (bench: Bench) => Promise<Row[]> }[] = [
  { names: ["rest-get", "rest-post", "grpc", "connect", "reference"], run: settingsThroughput },
  { names: ["sandboxes"], run: sandboxBenchmarks },
  { names: ["docker"], run: dockerBenchmarks },
  { names: ["docker"], run: agentServerBenchmarks },
  { names: ["docker-warm"], run: dockerWarmPool },
  { names: ["conversations"], run: conversationBenchmarks },
  { names: ["events"], run: eventBenchmarks },
  { names: ["replicas"], run: replicaBenchmarks },
  { names: ["workers"], run: workerBenchmarks },
  { names: ["builtin-agent"], run: builtinAgentBenchmarks },
  { names: ["agent-proxy"], run: agentProxyBenchmarks },
  { names: ["team"], run: teamBenchmarks },
];

const names = [...new Set(SCENARIOS.flatMap((s) => s.names))];
const options = parseRunOptions(names);
buildServers();
const bench = new Bench({ ...options, work: mkdtempSync(join(tmpdir(), "aws-bench-run-")) });
let interrupted = false;
process.on("SIGINT", () => {
  if (interrupted) return;
  interrupted = true;
  log("interrupted: stopping servers");
  void bench.stopAll().then(() => process.exit(130));
});

const m = machine();
const startedAt = new Date();
log(`machine: ${machineLine(m)}`);
log(
  `rounds: ${bench.rounds} per side, ${bench.roundS} s each (warm-up ${bench.warmupS} s), ${bench.connections} connections${bench.quick ? " (--quick)" : ""}`,
);
const rows: Row[] = [];
let failure: unknown = null;
try {
  for (const scenario of SCENARIOS)
    if (scenario.names.some((n) => bench.selected(n))) rows.push(...(await scenario.run(bench)));
} catch (err) {
  failure = err;
  log(`benchmark failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
} finally {
  await bench.stopAll();
}
// Rows in the order of the list above, memory rows last.
const rank = (row: Row): number => (row.bench === "rss" ? names.length : names.indexOf(row.bench));
rows.sort((a, b) => rank(a) - rank(b));

writeResults({
  rows,
  machine: m,
  startedAt,
  settingsLine: bench.settingsLine,
  partial: options.quick || options.only !== null,
  settings: {
    quick: options.quick,
    only: options.only,
    rounds: bench.rounds,
    roundSeconds: bench.roundS,
    connections: bench.connections,
  },
  error: failure === null ? null : String(failure),
});
if (failure === null) rmSync(bench.work, { recursive: true, force: true });
else log(`server logs kept in ${bench.work}`);
process.exit(failure === null ? 0 : 1);
