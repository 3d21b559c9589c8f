// The command line of `npm run bench` (filters, rounds) and the build that precedes every run.
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { ROOT } from "./bench-util.ts";

const usage = (
  names: readonly string[],
): string => `usage: npm run bench -- [--quick] [--only a,b] [--rounds N]

Runs the benchmarks against their own baselines (measured in the same run) and prints one markdown table;
progress goes to stderr. Writes bench/results/latest.{md,json}, or partial.{md,json} for --quick and --only.

  --quick          short rounds (CI smoke)
  --only a,b       run only these benchmarks: ${names.join(", ")}
  --rounds N       rounds per side (at least 3; default 5, 3 with --quick)
  -h, --help       this text

Environment:
  BENCH_INSTALL_REFERENCE=1   apt-get install the reference Python stack when it is missing
  BENCH_SERVICE_LOG_LEVEL=L   log level of the service under test (default info, as in production)
  BENCH_SERVICE_NODE_FLAGS=…  Node flags of the service under test instead of \`npm start\`'s
  BENCH_TEAM_USERS=N          team: users holding a conversation at once (default 10; 3 with --quick)
  BENCH_TEAM_IDLE=N           team: idle conversations opened after the rounds, websockets open (default 50;
                              5 with --quick; 0: none)
  BENCH_TEAM_PAUSE_MS=N       team: a user's mean pause between turns in the paced rounds (default 2000)
`;

export interface RunOptions {
  quick: boolean;
  /** The benchmarks --only names, or null for all. */
  only: string[] | null;
  rounds: number;
}

/**
 * The command-line options, checked against the known benchmark names; a bad option stops here with the usage,
 * before anything is built or started.
 */
export function parseRunOptions(names: readonly string[]): RunOptions {
  let values: { quick?: boolean; only?: string; rounds?: string; help?: boolean };
  try {
    values = parseArgs({
      options: {
        quick: { type: "boolean", default: false },
        only: { type: "string" },
        rounds: { type: "string" },
        help: { type: "boolean", short: "h", default: false },
      },
    }).values;
  } catch (err) {
    console.error(`bench: ${err instanceof Error ? err.message : String(err)}\n\n${usage(names)}`);
    process.exit(2);
  }
  if (values.help === true) {
    process.stdout.write(usage(names));
    process.exit(0);
  }
  const quick = values.quick === true;
  const only = values.only?.split(",").map((s) => s.trim()) ?? null;
  for (const name of only ?? []) {
    if (!names.includes(name)) {
      console.error(`unknown benchmark ${name}; known: ${names.join(", ")}`);
      process.exit(2);
    }
  }
  const rounds = Math.max(3, Number(values.rounds ?? (quick ? 3 : 5)));
  if (!Number.isInteger(rounds)) {
    console.error(`bench: --rounds takes a whole number, not ${values.rounds}`);
    process.exit(2);
  }
  return { quick, only, rounds };
}

/** `npm run build`: the servers under test run compiled (dist/bench/servers), as `npm start` runs the service. */
export function buildServers(): void {
  const build = spawnSync(
    process.execPath,
    [join(ROOT, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.build.json"],
    { cwd: ROOT, stdio: "inherit" },
  );
  if (build.status !== 0) {
    console.error("bench: npm run build failed");
    process.exit(1);
  }
}
