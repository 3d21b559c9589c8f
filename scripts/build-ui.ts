/**
 * The OpenHands web UI in one command: builds the frontend (`frontend/` of All-Hands-AI/OpenHands) at the commit
 * this service is checked against, and prints the `UI_DIR=… npm start` line that serves it.
 *
 *   npm run ui -- ../OpenHands                                  # a local clone (any branch checked out)
 *   npm run ui -- https://github.com/All-Hands-AI/OpenHands.git  # cloned first (that one commit)
 *
 * From a local clone it extracts that commit's `frontend/` folder (`git archive`, the clone's working tree is not
 * touched) into a cache folder; from a git URL it fetches the commit into the cache first. Then `npm ci
 * --ignore-scripts` (the frontend's `prepare` runs husky, which needs the whole repository) and `npm run build`,
 * each logged to a file of the cache folder, whose end is shown when a step fails. A build that finished is kept:
 * the next run prints its line at once (`--force` builds again).
 *
 * Options: --commit SHA (default OPENHANDS_UI_COMMIT), --cache DIR (default UI_CACHE_DIR, else
 * ~/.cache/agent-workspace-service/openhands-ui), --force. Progress goes to stderr, the UI_DIR line to stdout.
 * Exit codes: 0 built (or built already), 1 a step failed (the message says which and why), 2 usage.
 * docs/ui-web.md, "Building the UI"; the manual real-browser check (docs/testing.md) uses the same commit.
 */
import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { delimiter, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

/** The OpenHands commit whose frontend this service is checked against (README, docs/testing.md). */
export const OPENHANDS_UI_COMMIT = "156d0686c46aafb0fa9d291da6421fb6f64dddc0";
const OPENHANDS_URL = "https://github.com/All-Hands-AI/OpenHands.git";
const USAGE = `Usage: npm run ui -- <OpenHands checkout or git URL> [--commit SHA] [--cache DIR] [--force]

Builds the OpenHands web UI (its frontend/ folder at commit ${OPENHANDS_UI_COMMIT.slice(0, 8)}) and prints the line
that starts the service with it. Examples:
  npm run ui -- ../OpenHands
  npm run ui -- ${OPENHANDS_URL}
`;

class Failure extends Error {}
class UsageError extends Error {}

const say = (line: string) => process.stderr.write(`ui: ${line}\n`);

/** A git URL (scheme://… or scp-like user@host:path), as opposed to a folder. */
function isGitUrl(s: string): boolean {
  return /^[a-z][a-z0-9+.-]*:\/\//i.test(s) || /^[\w.-]+@[\w.-]+:/.test(s);
}

function git(args: string[], options: { quiet?: boolean } = {}) {
  const r = spawnSync("git", args, {
    encoding: "utf8",
    stdio: ["ignore", "pipe", options.quiet === false ? "inherit" : "pipe"],
    maxBuffer: 64 * 1024 * 1024,
  });
  return {
    ok: r.status === 0,
    stdout: (r.stdout ?? "").trim(),
    stderr: (r.stderr ?? "").trim(),
    error: r.error,
  };
}

function requireGit(): void {
  const r = spawnSync("git", ["--version"], { encoding: "utf8" });
  if (r.error !== undefined || r.status !== 0)
    throw new Failure(
      "git is not installed (or not on PATH): install it (Debian/Ubuntu: apt-get install git) and run this again",
    );
}

/** The last `n` lines of a log file. */
function tail(file: string, n: number): string {
  try {
    const lines = readFileSync(file, "utf8").trimEnd().split("\n");
    return lines.slice(-n).join("\n");
  } catch {
    return "(no log)";
  }
}

/** The environment of the frontend's npm: this Node first on PATH, none of this project's npm settings. */
function childEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env))
    if (!/^npm_/i.test(k) && k !== "INIT_CWD" && k !== "NODE_OPTIONS") env[k] = v;
  env.PATH = [dirname(process.execPath), process.env.PATH ?? ""].join(delimiter);
  env.CI = env.CI ?? "true";
  return env;
}

/** Runs `command` in `cwd` with its output in `log`; on failure, says which step failed with the log's end. */
async function step(what: string, command: string, args: string[], cwd: string, log: string): Promise<void> {
  const fd = openSync(log, "w");
  const started = Date.now();
  const code = await new Promise<number | string>((done) => {
    const p = spawn(command, args, { cwd, env: childEnv(), stdio: ["ignore", fd, fd] });
    p.once("error", (e: NodeJS.ErrnoException) =>
      done(e.code === "ENOENT" ? `${command} was not found` : e.message),
    );
    p.once("close", (c, signal) => done(c ?? `killed by ${signal}`));
  });
  closeSync(fd);
  if (code !== 0)
    throw new Failure(
      `${what} failed (${typeof code === "number" ? `exit code ${code}` : code}). The end of ${log}:\n${tail(log, 25)}`,
    );
  say(`  done in ${Math.round((Date.now() - started) / 1000)} s`);
}

/** The repository to read the commit from: the local clone as given, or the cache's fetch of the URL. */
function sourceRepository(source: string, commit: string, cacheRoot: string): string {
  if (!isGitUrl(source)) {
    const path = resolve(process.env.INIT_CWD ?? process.cwd(), source);
    if (!existsSync(path)) throw new Failure(`there is no folder ${path}`);
    if (!git(["-C", path, "rev-parse", "--git-dir"]).ok)
      throw new Failure(
        `${path} is not a git checkout: pass a clone of OpenHands, or its URL (${OPENHANDS_URL})`,
      );
    return path;
  }
  const dir = join(cacheRoot, `source-${createHash("sha256").update(source).digest("hex").slice(0, 12)}`);
  if (!existsSync(join(dir, ".git"))) {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    if (!git(["init", "-q", dir]).ok || !git(["-C", dir, "remote", "add", "origin", source]).ok)
      throw new Failure(`could not make a git repository in ${dir}`);
  }
  if (git(["-C", dir, "rev-parse", "--verify", "--quiet", `${commit}^{commit}`]).ok) return dir;
  say(`fetching ${commit.slice(0, 8)} from ${source} into ${dir} (git fetch)…`);
  // The one commit (servers allow a full commit id); else every branch, in which the commit is looked for.
  const one =
    /^[0-9a-f]{40}$/i.test(commit) &&
    git(["-C", dir, "fetch", "--depth", "1", "origin", commit], { quiet: false }).ok;
  if (!one) {
    const all = git(["-C", dir, "fetch", "origin"], { quiet: false });
    if (!all.ok)
      throw new Failure(`could not fetch from ${source}: is the URL right, and reachable from here?`);
  }
  return dir;
}

export async function buildUi(argv: string[]): Promise<string> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      commit: { type: "string" },
      cache: { type: "string" },
      force: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (values.help) {
    process.stdout.write(USAGE);
    process.exit(0);
  }
  const [source] = positionals;
  if (source === undefined || positionals.length > 1)
    throw new UsageError("give one OpenHands checkout or git URL");
  const commit = values.commit ?? OPENHANDS_UI_COMMIT;
  const cacheRoot = resolve(
    process.env.INIT_CWD ?? process.cwd(),
    values.cache ??
      process.env.UI_CACHE_DIR ??
      join(
        process.env.XDG_CACHE_HOME || join(homedir(), ".cache"),
        "agent-workspace-service",
        "openhands-ui",
      ),
  );
  requireGit();
  mkdirSync(cacheRoot, { recursive: true });
  const repo = sourceRepository(source, commit, cacheRoot);
  const full = git(["-C", repo, "rev-parse", "--verify", "--quiet", `${commit}^{commit}`]);
  if (!full.ok)
    throw new Failure(
      isGitUrl(source)
        ? `commit ${commit} is not in ${source} (fetched into ${repo}): is it the OpenHands repository?`
        : `commit ${commit} is not in ${repo}: update that clone (git -C ${repo} fetch origin) and run this again, or pass the URL ${OPENHANDS_URL}`,
    );
  const sha = full.stdout;
  if (!git(["-C", repo, "cat-file", "-e", `${sha}:frontend/package.json`]).ok)
    throw new Failure(
      `commit ${sha.slice(0, 8)} of ${repo} has no frontend/package.json: is it an OpenHands repository?`,
    );

  const dir = join(cacheRoot, sha.slice(0, 12));
  const build = join(dir, "frontend", "build");
  const stamp = join(dir, "built.json");
  if (!values.force && existsSync(stamp) && existsSync(join(build, "index.html"))) {
    say(`the frontend of ${sha.slice(0, 8)} is built already, in ${dir} (--force builds it again)`);
    return build;
  }
  const started = Date.now();
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  say(`extracting frontend/ at ${sha.slice(0, 8)} from ${repo} into ${dir} (git archive)…`);
  await new Promise<void>((done, fail) => {
    const archive = spawn("git", ["-C", repo, "archive", "--format=tar", sha, "frontend"], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    const untar = spawn("tar", ["-x", "-C", dir], { stdio: ["pipe", "ignore", "pipe"] });
    let errors = "";
    archive.stderr.on("data", (d: Buffer) => {
      errors += d.toString();
    });
    untar.stderr.on("data", (d: Buffer) => {
      errors += d.toString();
    });
    archive.stdout.pipe(untar.stdin);
    untar.once("error", (e) => fail(new Failure(`tar could not run: ${e.message}`)));
    const closed = (p: ReturnType<typeof spawn>) =>
      new Promise<number | null>((resolve) => p.once("close", (c) => resolve(c)));
    void Promise.all([closed(archive), closed(untar)]).then(([a, t]) => {
      if (a === 0 && t === 0) done();
      else fail(new Failure(`git archive | tar failed: ${errors.trim() || `exit codes ${a}, ${t}`}`));
    });
  });
  const frontend = join(dir, "frontend");
  say("installing the frontend's packages (npm ci --ignore-scripts; a minute or two the first time)…");
  await step(
    "npm ci",
    "npm",
    ["ci", "--ignore-scripts", "--no-audit", "--no-fund"],
    frontend,
    join(dir, "npm-ci.log"),
  );
  say("building it (npm run build; about 30 s)…");
  await step("npm run build", "npm", ["run", "build"], frontend, join(dir, "build.log"));
  if (!existsSync(join(build, "index.html")))
    throw new Failure(
      `the build left no ${join(build, "index.html")}. The end of ${join(dir, "build.log")}:\n${tail(join(dir, "build.log"), 25)}`,
    );
  writeFileSync(stamp, `${JSON.stringify({ commit: sha, source, built_at: new Date().toISOString() })}\n`);
  say(`built in ${Math.round((Date.now() - started) / 1000)} s`);
  return build;
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    const build = await buildUi(process.argv.slice(2));
    process.stderr.write(
      "\nStart the service with the web UI (then open http://127.0.0.1:3000 and sign in):\n\n",
    );
    process.stdout.write(`UI_DIR=${build} npm start\n`);
  } catch (e: unknown) {
    if (e instanceof UsageError || (e instanceof Error && e.name === "TypeError" && "code" in e)) {
      process.stderr.write(`error: ${e.message}\n\n${USAGE}`);
      process.exit(2);
    }
    if (e instanceof Failure) {
      process.stderr.write(`error: ${e.message}\n`);
      process.exit(1);
    }
    throw e;
  }
}
