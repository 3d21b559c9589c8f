// The import rule of docs/architecture.md, checked over every source file: imports point down the picture only (a
// service never imports a transport, an adapter only ports, core and gen, no transport imports another). An import
// that would cross it must be listed in KNOWN (empty: none does), so a new one fails here.
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const SRC = resolve(import.meta.dirname, "../../src");

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
  sandbox: ["ports", "core", "gen", "sandbox-agent"],
  "sandbox-agent": ["core", "gen"],
  integrations: ["ports", "core", "gen"],
  server: ["*"],
  cli: ["*"],
};

/** Imports that cross the rule today: importing file → imported file (both relative to src). */
const KNOWN: ReadonlySet<string> = new Set([]);

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith(".ts") ? [join(dir, e.name)] : [],
  );
}

describe("imports point down the layers", () => {
  it("no source file imports a layer above its own", () => {
    const crossing: string[] = [];
    for (const file of sources(SRC)) {
      const from = relative(SRC, file);
      const layer = from.split("/")[0] as string;
      const allowed = ALLOWED[layer];
      expect(allowed, `${layer}: a folder of src without a place in the layers`).toBeDefined();
      if (allowed?.includes("*")) continue;
      const text = readFileSync(file, "utf8");
      for (const m of text.matchAll(/\b(?:import|export)\b[^;]*?\bfrom\s+"(\.{1,2}\/[^"]+)"/g)) {
        const to = relative(SRC, resolve(dirname(file), m[1] as string));
        const target = to.split("/")[0] as string;
        if (target === layer || allowed?.includes(target)) continue;
        const edge = `${from} → ${to}`;
        if (!KNOWN.has(edge)) crossing.push(edge);
      }
    }
    expect(crossing).toEqual([]);
  });
});
