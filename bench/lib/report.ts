// The results of a run: one markdown table on stdout and bench/results/{latest,partial}.{md,json}.
import { spawnSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type Machine, machineLine, ROOT } from "./bench-util.ts";
import { log, type Row } from "./harness.ts";

export function table(rows: readonly Row[]): string {
  const lines = [
    "| Benchmark | Ours | Baseline | Ratio | Target | Result |",
    "| --- | --- | --- | --- | --- | --- |",
  ];
  for (const r of rows) {
    const result = r.pass === null ? "n/a" : r.pass ? "pass" : "**FAIL**";
    lines.push(`| ${r.what} | ${r.ours} | ${r.baseline} | ${r.ratio} | ${r.target} | ${result} |`);
  }
  return lines.join("\n");
}

/** Prints the table and writes it with the rows' data; `partial` (--quick, --only) writes partial.* instead of latest.*. */
export function writeResults(run: {
  rows: readonly Row[];
  machine: Machine;
  startedAt: Date;
  settingsLine: string;
  partial: boolean;
  /** The run's settings, written before the rows. */
  settings: Record<string, unknown>;
  error: string | null;
}): void {
  const markdown = `${table(run.rows)}\n\nMachine: ${machineLine(run.machine)}. Run ${run.startedAt.toISOString().slice(0, 16).replace("T", " ")} UTC; ${run.settingsLine}.\n`;
  process.stdout.write(`\n${markdown}`);
  const resultsDir = join(ROOT, "bench", "results");
  mkdirSync(resultsDir, { recursive: true });
  const stem = join(resultsDir, run.partial ? "partial" : "latest");
  writeFileSync(`${stem}.md`, markdown);
  writeFileSync(
    `${stem}.json`,
    `${JSON.stringify({ startedAt: run.startedAt, machine: run.machine, ...run.settings, rows: run.rows, error: run.error }, null, 2)}\n`,
  );
  // Keep the committed JSON in the formatter's shape so `biome check` stays clean.
  spawnSync(join(ROOT, "node_modules", ".bin", "biome"), ["format", "--write", `${stem}.json`], {
    stdio: "ignore",
  });
  log(`wrote ${stem}.md and ${stem}.json`);
}
