// The whole test suite: static checks (types, lint, protos, generated code), then vitest.
// Ends with the plain summary line "N passed, N failed, N skipped" that CI reads.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const bin = (name: string): string => join(import.meta.dirname, "..", "node_modules", ".bin", name);
const run = (label: string, cmd: string, args: string[], env: NodeJS.ProcessEnv = process.env): boolean => {
  process.stdout.write(`\n== ${label}: ${[cmd, ...args].join(" ")}\n`);
  const r = spawnSync(cmd, args, { stdio: "inherit", cwd: join(import.meta.dirname, ".."), env });
  return r.status === 0;
};

const checks: [string, string, string[]][] = [
  ["typecheck", bin("tsc"), ["-p", "tsconfig.json"]],
  ["lint", bin("biome"), ["check", "."]],
  ["proto lint", bin("buf"), ["lint"]],
  ["proto format", bin("buf"), ["format", "-d", "--exit-code"]],
  ["generated code up to date", process.execPath, [join(import.meta.dirname, "check-generated.ts")]],
];
// buf breaking (FILE rules) against the previous commit, when there is one: a wire change must be deliberate.
const previous = spawnSync("git", ["rev-parse", "--verify", "--quiet", "HEAD~1"], {
  cwd: join(import.meta.dirname, ".."),
});
if (previous.status === 0)
  checks.push(["proto breaking vs HEAD~1", bin("buf"), ["breaking", "--against", ".git#ref=HEAD~1"]]);
else process.stdout.write("\n== proto breaking: skipped (no previous commit to compare with)\n");
let failedChecks = 0;
for (const [label, cmd, args] of checks) if (!run(label, cmd, args)) failedChecks++;

const reportDir = mkdtempSync(join(tmpdir(), "aws-test-"));
const out = join(reportDir, "vitest.json");
const leftoverReport = join(reportDir, "leftovers.json");
const extra = process.argv.slice(2);
run(
  "vitest",
  bin("vitest"),
  ["run", "--reporter=default", "--reporter=json", `--outputFile.json=${out}`, ...extra],
  {
    ...process.env,
    WORKSPACE_LEFTOVER_REPORT: leftoverReport,
  },
);

let passed = 0;
let failed = failedChecks;
let skipped = 0;
try {
  const report = JSON.parse(readFileSync(out, "utf8")) as {
    numPassedTests: number;
    numFailedTests: number;
    numPendingTests: number;
    numTodoTests: number;
    testResults: { status: string; assertionResults: { status: string }[] }[];
  };
  passed = report.numPassedTests;
  // A file that failed without a failing test (an import or hook error) counts as one failure.
  const brokenFiles = report.testResults.filter(
    (f) => f.status === "failed" && !f.assertionResults.some((a) => a.status === "failed"),
  ).length;
  failed += report.numFailedTests + brokenFiles;
  skipped = report.numPendingTests + report.numTodoTests;
} catch {
  console.error("vitest produced no report");
  failed++;
}
try {
  const leftovers = JSON.parse(readFileSync(leftoverReport, "utf8")) as string[];
  if (leftovers.length > 0) {
    console.error(
      `sandbox processes or containers outlived the suite (counted as a failure): ${leftovers.join(", ")}`,
    );
    failed++;
  }
} catch {
  console.error("the leftover check did not run");
  failed++;
}
if (failedChecks > 0) console.error(`${failedChecks} static check(s) failed (counted as failures)`);
console.log(`${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed > 0 || passed === 0 ? 1 : 0);
