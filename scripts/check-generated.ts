// Regenerates src/gen into a temporary folder and fails when it differs from the committed code.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";

const root = join(import.meta.dirname, "..");
const tmp = mkdtempSync(join(tmpdir(), "aws-gen-"));
const template = readFileSync(join(root, "buf.gen.yaml"), "utf8").replace(
  "out: src/gen",
  `out: ${join(tmp, "gen")}`,
);
writeFileSync(join(tmp, "buf.gen.yaml"), template);
const r = spawnSync(
  join(root, "node_modules", ".bin", "buf"),
  ["generate", "--template", join(tmp, "buf.gen.yaml")],
  {
    cwd: root,
    stdio: "inherit",
    env: { ...process.env, PATH: `${join(root, "node_modules", ".bin")}:${process.env.PATH ?? ""}` },
  },
);
if (r.status !== 0) process.exit(1);

const walk = (dir: string): string[] =>
  readdirSync(dir).flatMap((n) =>
    statSync(join(dir, n)).isDirectory() ? walk(join(dir, n)) : [join(dir, n)],
  );
const a = new Map(
  walk(join(root, "src/gen")).map((f) => [relative(join(root, "src/gen"), f), readFileSync(f, "utf8")]),
);
const b = new Map(
  walk(join(tmp, "gen")).map((f) => [relative(join(tmp, "gen"), f), readFileSync(f, "utf8")]),
);
const diffs = [...new Set([...a.keys(), ...b.keys()])].filter((k) => a.get(k) !== b.get(k));
rmSync(tmp, { recursive: true, force: true });

if (diffs.length > 0) {
  console.error(`generated code is stale (run npm run generate): ${diffs.join(", ")}`);
  process.exit(1);
}
console.log(`generated code up to date (${a.size} files)`);
