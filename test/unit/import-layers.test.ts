// The import rule of docs/architecture.md, checked over every source file: imports point down the picture only (a
// service never imports a transport, an adapter only ports, core and gen, no transport imports another). An import
// that would cross it must be listed in KNOWN (empty: none does), so a new one fails here.
//
// The built-in agent (agent/) is a program of its own, run inside a sandbox that sees only its folder: it imports
// nothing outside agent/, the service reaches it only through its shared leaf (agent/shared/, which imports nothing
// of the agent), and its modules form no import circle.
import { readdirSync, readFileSync } from "node:fs";
import { dirname, isAbsolute, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "../..");
const SRC = join(ROOT, "src");
const AGENT = join(ROOT, "agent");
/** The part of the agent the service may import: the entry's path, the process-tree helpers, constants. */
const AGENT_SHARED = join(AGENT, "shared");

/** What each top-level folder of src may import (besides itself and node/npm modules). */
const ALLOWED: Record<string, readonly string[]> = {
  gen: [],
  core: ["gen"],
  ports: ["core", "gen"],
  services: ["ports", "core", "gen"],
  transport: ["core", "gen", "ports"],
  rest: ["transport", "services", "core", "gen", "ports"],
  rpc: ["transport", "services", "core", "gen", "ports"],
  proxy: ["transport", "services", "core", "gen", "ports"],
  storage: ["ports", "core", "gen"],
  sandbox: ["ports", "core", "gen"],
  integrations: ["ports", "core", "gen"],
  server: ["*"],
  cli: ["*"],
};

/** Imports that cross the rule today: importing file → imported file (both relative to src). */
const KNOWN: ReadonlySet<string> = new Set([]);

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory()
      ? sources(join(dir, e.name))
      : e.name.endsWith(".ts") || e.name.endsWith(".mjs")
        ? [join(dir, e.name)]
        : [],
  );
}

/** The relative imports of a file (static and dynamic, `import "./x"` for its effect too), as absolute paths. */
function relativeImports(file: string): string[] {
  const text = readFileSync(file, "utf8");
  const found = [
    ...text.matchAll(/\b(?:import|export)\b[^;]*?\bfrom\s+"(\.{1,2}\/[^"]+)"/g),
    ...text.matchAll(/^\s*import\s+"(\.{1,2}\/[^"]+)"/gm),
    ...text.matchAll(/\bimport\(\s*"(\.{1,2}\/[^"]+)"\s*\)/g),
  ];
  return [...new Set(found.map((m) => resolve(dirname(file), m[1] as string)))];
}

const inside = (dir: string, file: string): boolean => {
  const rel = relative(dir, file);
  return rel !== "" && !rel.startsWith("..") && !isAbsolute(rel);
};

describe("imports point down the layers", () => {
  it("no source file imports a layer above its own", () => {
    const crossing: string[] = [];
    for (const file of sources(SRC)) {
      const from = relative(SRC, file);
      const layer = from.split("/")[0] as string;
      const allowed = ALLOWED[layer];
      expect(allowed, `${layer}: a folder of src without a place in the layers`).toBeDefined();
      if (allowed?.includes("*")) continue;
      for (const imported of relativeImports(file)) {
        // The agent's shared leaf is open to every layer (the next test checks the rest of agent/).
        if (inside(AGENT_SHARED, imported)) continue;
        const to = relative(SRC, imported);
        const target = to.split("/")[0] as string;
        if (target === layer || allowed?.includes(target)) continue;
        const edge = `${from} → ${to}`;
        if (!KNOWN.has(edge)) crossing.push(edge);
      }
    }
    expect(crossing).toEqual([]);
  });

  it("src imports of the agent are of its shared leaf only, and that leaf imports nothing else of the agent", () => {
    const crossing: string[] = [];
    for (const file of sources(SRC))
      for (const imported of relativeImports(file))
        if (inside(AGENT, imported) && !inside(AGENT_SHARED, imported))
          crossing.push(`${relative(ROOT, file)} → ${relative(ROOT, imported)}`);
    for (const file of sources(AGENT_SHARED))
      for (const imported of relativeImports(file))
        if (!inside(AGENT_SHARED, imported))
          crossing.push(`${relative(ROOT, file)} → ${relative(ROOT, imported)}`);
    expect(crossing).toEqual([]);
  });

  it("the agent imports nothing outside agent/ (a sandbox sees only that folder)", () => {
    const outside: string[] = [];
    for (const file of sources(AGENT))
      for (const imported of relativeImports(file))
        if (!inside(AGENT, imported)) outside.push(`${relative(ROOT, file)} → ${relative(ROOT, imported)}`);
    expect(outside).toEqual([]);
  });

  it("the agent's modules import no circle", () => {
    const files = sources(AGENT);
    const edges = new Map(files.map((f) => [f, relativeImports(f).filter((i) => inside(AGENT, i))]));
    /** 1: on the current path; 2: done (no circle through it). */
    const state = new Map<string, 1 | 2>();
    const circles: string[] = [];
    const visit = (file: string, path: string[]): void => {
      if (state.get(file) === 2) return;
      if (state.get(file) === 1) {
        circles.push([...path.slice(path.indexOf(file)), file].map((f) => relative(AGENT, f)).join(" → "));
        return;
      }
      state.set(file, 1);
      for (const next of edges.get(file) ?? []) visit(next, [...path, file]);
      state.set(file, 2);
    };
    for (const file of files) visit(file, []);
    expect(circles).toEqual([]);
  });
});
