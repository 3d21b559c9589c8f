// The import rule of docs/architecture.md, checked over every source file: imports point down the picture only (a
// service never imports a transport, an adapter only ports, core and gen, no transport imports another, no two
// adapters import each other, no module is part of an import circle). An import
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

/**
 * The layers of docs/architecture.md, top to bottom, one row each: the folders of src that make it up and the layers
 * below it that it may import. A layer made of sub-folders (adapters, transports) keeps them apart: a sub-folder
 * imports only itself and the layers below, except a `shared` one (the transports' kit), which its siblings may
 * import. Every folder of src must be in the table.
 */
interface Layer {
  folders: readonly string[];
  imports: readonly string[];
  shared?: readonly string[];
}
const LAYERS: Record<string, Layer> = {
  composition: { folders: ["server", "cli"], imports: ["*"] },
  transports: {
    folders: [
      "transports/kit",
      "transports/rest",
      "transports/connect",
      "transports/grpc",
      "transports/agent-proxy",
    ],
    imports: ["domain", "codec", "ports", "core", "gen"],
    shared: ["transports/kit"],
  },
  adapters: {
    folders: [
      "adapters/storage",
      "adapters/runtimes",
      "adapters/git-providers",
      "adapters/local-repositories",
      "adapters/agent-client",
    ],
    imports: ["ports", "core", "gen"],
  },
  domain: { folders: ["domain"], imports: ["codec", "ports", "core", "gen"] },
  codec: { folders: ["codec"], imports: ["ports", "core", "gen"] },
  ports: { folders: ["ports"], imports: ["core", "gen"] },
  core: { folders: ["core"], imports: ["gen"] },
  gen: { folders: ["gen"], imports: [] },
};

/** The folder of the table a file (relative to src) is in, and its layer. */
function placeOf(file: string): { folder: string; layer: string } | undefined {
  for (const [layer, { folders }] of Object.entries(LAYERS))
    for (const folder of folders) if (file.startsWith(`${folder}/`)) return { folder, layer };
  return undefined;
}

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
  it("every source file is in a folder of the layers' table", () => {
    const homeless = sources(SRC)
      .map((f) => relative(SRC, f))
      .filter((f) => placeOf(f) === undefined);
    expect(homeless).toEqual([]);
  });

  it("no source file imports a layer above its own, nor a sibling folder of its layer", () => {
    const crossing: string[] = [];
    for (const file of sources(SRC)) {
      const from = relative(SRC, file);
      const place = placeOf(from);
      if (place === undefined) continue;
      const layer = LAYERS[place.layer] as Layer;
      if (layer.imports.includes("*")) continue;
      for (const imported of relativeImports(file)) {
        // The agent's shared leaf is open to every layer (the next test checks the rest of agent/).
        if (inside(AGENT_SHARED, imported)) continue;
        const to = relative(SRC, imported);
        const target = placeOf(to);
        const allowed =
          target !== undefined &&
          (target.folder === place.folder ||
            layer.imports.includes(target.layer) ||
            (target.layer === place.layer && (layer.shared ?? []).includes(target.folder)));
        if (allowed) continue;
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

  it.each([
    ["src", SRC],
    ["agent", AGENT],
  ])("the modules of %s import no circle (type imports included)", (_name, dir) => {
    const files = sources(dir);
    const edges = new Map(files.map((f) => [f, relativeImports(f).filter((i) => inside(dir, i))]));
    /** 1: on the current path; 2: done (no circle through it). */
    const state = new Map<string, 1 | 2>();
    const circles: string[] = [];
    const visit = (file: string, path: string[]): void => {
      if (state.get(file) === 2) return;
      if (state.get(file) === 1) {
        circles.push([...path.slice(path.indexOf(file)), file].map((f) => relative(dir, f)).join(" → "));
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
