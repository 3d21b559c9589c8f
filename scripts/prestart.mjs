// `npm start`'s first step (package.json "prestart"): the Node.js version check, then the build of dist/ only when
// something it is built from changed since the last build made here. A restart with nothing changed starts at once;
// after a change tsc rebuilds incrementally (its state in dist/.tsbuildinfo), which re-emits only what changed.
//
// Plain JavaScript (not TypeScript): the version check must run before anything an old Node.js cannot parse, and the
// import below runs it first (docs/getting-started-notes.md, "Node.js version").
import "../agent/shared/require-node.mjs";
import { spawnSync } from "node:child_process";
import {
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  rmSync,
  statSync,
  utimesSync,
} from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const dist = join(root, "dist");
/** Written when a build made here succeeded, with the time that build started as its modification time. */
const stamp = join(dist, ".build-stamp");
const buildInfo = join(dist, ".tsbuildinfo");
/** What tsconfig.build.json compiles (src, agent, bench), and the files that change how it compiles. */
const SOURCE_DIRS = ["src", "agent", "bench"];
const CONFIG_FILES = ["tsconfig.json", "tsconfig.build.json", "package.json", "package-lock.json"];
const SOURCE = /\.(ts|mts|cts|js|mjs|cjs)$/;

/** The files and folders (a folder's time changes when an entry is added, removed or renamed) newer than `since`. */
function changedSince(since) {
  const changed = [];
  const visit = (path) => {
    let st;
    try {
      st = statSync(path);
    } catch {
      return;
    }
    if (st.isDirectory()) {
      if (st.mtimeMs > since) changed.push(path);
      for (const name of readdirSync(path)) visit(join(path, name));
    } else if (SOURCE.test(path) && st.mtimeMs > since) changed.push(path);
  };
  for (const d of SOURCE_DIRS) visit(join(root, d));
  for (const f of CONFIG_FILES) {
    const p = join(root, f);
    if (existsSync(p) && statSync(p).mtimeMs > since) changed.push(p);
  }
  return changed;
}

const entry = join(dist, "src", "cli", "main.js");
const built = existsSync(stamp) && existsSync(entry) ? statSync(stamp).mtimeMs : null;
const changed = built === null ? [] : changedSince(built);
if (built !== null && changed.length === 0) process.exit(0);

if (built === null) {
  process.stderr.write("prestart: building dist/ (tsc)…\n");
  // Outputs gone but tsc's state kept would make an incremental build emit nothing.
  if (!existsSync(entry)) rmSync(buildInfo, { force: true });
} else {
  const names = changed.map((p) => relative(root, p) || ".");
  const shown = names.slice(0, 3).join(", ") + (names.length > 3 ? `, … (${names.length} in all)` : "");
  process.stderr.write(`prestart: rebuilding dist/, changed since the last build: ${shown}\n`);
}
const started = Date.now();
const tsc = spawnSync(
  process.execPath,
  [
    join(root, "node_modules", "typescript", "bin", "tsc"),
    "-p",
    join(root, "tsconfig.build.json"),
    "--incremental",
    "--tsBuildInfoFile",
    buildInfo,
  ],
  { cwd: root, stdio: "inherit" },
);
if (tsc.status !== 0) process.exit(tsc.status ?? 1);
mkdirSync(dist, { recursive: true });
closeSync(openSync(stamp, "w"));
// The build's start, not its end: a file saved while tsc ran counts as changed at the next start.
const t = new Date(started);
utimesSync(stamp, t, t);
