import { createRequire } from "node:module";

/**
 * The yaml package, required on the first microagent file with front matter: it is ~70 modules that every server
 * would otherwise load (and keep) at start for a route few requests take (part of the idle RSS goal, "server RSS
 * idle" in `npm run bench`).
 */
let yaml: typeof import("yaml") | undefined;
const loadYaml = (): typeof import("yaml") =>
  (yaml ??= createRequire(import.meta.url)("yaml") as typeof import("yaml"));

/** What the content route answers of a microagent file. */
export interface MicroagentContent {
  content: string;
  triggers: string[];
  /** The front matter's `name`, when it gives one. */
  name?: string;
  /** The front matter's `inputs` (a task microagent), when it has the key. */
  inputs?: unknown[];
}

/** Other agents' instruction files, read whole (names compared in lower case, as the reference). */
const THIRD_PARTY = new Set([".cursorrules", "agents.md", "agent.md"]);

/** A `---` line opening or closing the front matter. */
const FENCE = /^-{3,}[ \t]*$/m;

/** Thrown for a file whose front matter is not valid YAML or has metadata of the wrong types. */
export class MicroagentParseError extends Error {
  override name = "MicroagentParseError";
}

/**
 * Reads a microagent file as the reference does: `.cursorrules`, `agents.md`, `agent.md` and
 * `.openhands_instructions` are whole instructions without triggers; any other file may start with YAML front
 * matter between `---` lines, whose `triggers` (strings) are answered, and whose body, trimmed, is the content. A
 * task microagent (non-empty `inputs`) also triggers on `/name` (`name` defaulting to "default"). Throws
 * MicroagentParseError when the front matter cannot be read.
 */
export function parseMicroagent(path: string, text: string): MicroagentContent {
  const name = path.split("/").at(-1) ?? path;
  if (THIRD_PARTY.has(name.toLowerCase()) || name === ".openhands_instructions")
    return { content: text, triggers: [] };
  const normalized = text.replace(/\r\n/g, "\n").trim();
  const open = FENCE.exec(normalized);
  if (open === null || open.index !== 0) return { content: normalized, triggers: [] };
  const rest = normalized.slice(open[0].length);
  const close = FENCE.exec(rest);
  if (close === null) return { content: normalized, triggers: [] };
  const { parse } = loadYaml();
  let meta: unknown;
  try {
    meta = parse(rest.slice(0, close.index)) ?? {};
  } catch {
    throw new MicroagentParseError(`Failed to parse microagent file ${path}: invalid front matter`);
  }
  const content = rest.slice(close.index + close[0].length).trim();
  if (typeof meta !== "object" || meta === null || Array.isArray(meta)) return { content, triggers: [] };
  const m = meta as { name?: unknown; triggers?: unknown; inputs?: unknown };
  const triggers = m.triggers ?? [];
  if (!Array.isArray(triggers) || !triggers.every((t) => typeof t === "string"))
    throw new MicroagentParseError(
      `Failed to parse microagent file ${path}: triggers must be a list of strings`,
    );
  const inputs = m.inputs ?? [];
  if (!Array.isArray(inputs))
    throw new MicroagentParseError(`Failed to parse microagent file ${path}: inputs must be a list`);
  const out = [...triggers];
  if (inputs.length > 0) {
    const agent = typeof m.name === "string" ? m.name : "default";
    if (!out.includes(`/${agent}`)) out.push(`/${agent}`);
  }
  return {
    content,
    triggers: out,
    ...(typeof m.name === "string" ? { name: m.name } : {}),
    ...(m.inputs !== undefined ? { inputs } : {}),
  };
}
