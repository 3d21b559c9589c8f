/**
 * The `file_editor` tool (the SDK's FileEditorTool): its spec for the model, its action, and the editor that runs
 * it on the real file system.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { dirname, isAbsolute, join, relative } from "node:path";
import type { Json } from "../json.ts";
import { stringArg, text } from "./tool.ts";

/** The tool spec sent to the model (OpenAI function-calling format), with the SDK's name and parameters. */
export const FILE_EDITOR_SPEC: Json = {
  type: "function",
  function: {
    name: "file_editor",
    description:
      "View, create and edit files. `view` shows a file with line numbers (or a directory two levels deep); " +
      "`create` writes a new file; `str_replace` replaces `old_str`, which must occur exactly once, with " +
      "`new_str`; `insert` adds `new_str` after line `insert_line` (0 = at the top); `undo_edit` reverts the " +
      "last edit of the file. Paths must be absolute.",
    parameters: {
      type: "object",
      properties: {
        command: { type: "string", enum: ["view", "create", "str_replace", "insert", "undo_edit"] },
        path: { type: "string", description: "Absolute path to a file or directory." },
        file_text: { type: "string", description: "Content of the file, for `create`." },
        old_str: { type: "string", description: "Text to replace, for `str_replace`." },
        new_str: { type: "string", description: "New text, for `str_replace` and `insert`." },
        insert_line: { type: "integer", description: "Line after which `new_str` goes, for `insert`." },
        view_range: {
          type: "array",
          items: { type: "integer" },
          description: "[start, end] lines to show (1-based; end -1 = to the end), for `view` of a file.",
        },
      },
      required: ["command", "path"],
    },
  },
};

/** The FileEditorAction of a tool call, or an error text for the model. */
export function fileEditorAction(args: Json): Json | string {
  const str = (k: string): string | null => stringArg(args, k);
  const command = str("command");
  if (command === null || !["view", "create", "str_replace", "insert", "undo_edit"].includes(command))
    return "`command` must be one of view, create, str_replace, insert, undo_edit.";
  if (str("path") === null) return "Missing required argument `path` (a string).";
  const range = args.view_range;
  const insertLine = args.insert_line;
  return {
    kind: "FileEditorAction",
    command,
    path: args.path,
    file_text: str("file_text"),
    old_str: str("old_str"),
    new_str: str("new_str"),
    insert_line: typeof insertLine === "number" && Number.isInteger(insertLine) ? insertLine : null,
    view_range:
      Array.isArray(range) && range.length === 2 && range.every((n) => Number.isInteger(n)) ? range : null,
  };
}

const SNIPPET_LINES = 4;
/** Contents larger than this are left out of a FileEditorObservation (null), so an event stays small. */
const MAX_EVENT_CONTENT_CHARS = 256 * 1024;
const small = (s: string | null): string | null =>
  s !== null && s.length > MAX_EVENT_CONTENT_CHARS ? null : s;
const MAX_VIEW_CHARS = 100_000;

/**
 * The SDK's file editor, on the real file system. Keeps each file's previous contents for undo_edit. `mapPath`
 * turns an absolute path as the model wrote it into the file to open (the agent maps the reference image's
 * `/workspace/...` layout into a workspace that lies elsewhere); the observation keeps the path as written.
 */
export class FileEditor {
  readonly #history = new Map<string, string[]>();
  readonly #mapPath: (path: string) => string;

  constructor(mapPath: (path: string) => string = (p) => p) {
    this.#mapPath = mapPath;
  }

  execute(action: Json): Json {
    const command = action.command as string;
    const given = action.path as string;
    const path = isAbsolute(given) ? this.#mapPath(given) : given;
    const base = { kind: "FileEditorObservation", command, path: given };
    const fail = (message: string): Json => ({
      ...base,
      content: text(message),
      is_error: true,
      prev_exist: existsSync(path),
      old_content: null,
      new_content: null,
    });
    if (!isAbsolute(path))
      return fail(`The path ${path} is not an absolute path, it should start with \`/\`.`);
    try {
      switch (command) {
        case "view":
          return this.#view(path, action.view_range as number[] | null, base, fail);
        case "create": {
          if (existsSync(path))
            return fail(
              `File already exists at: ${path}. Cannot overwrite files using command \`create\`; use str_replace.`,
            );
          if (typeof action.file_text !== "string")
            return fail("Parameter `file_text` is required for command: create.");
          mkdirSync(dirname(path), { recursive: true });
          writeFileSync(path, action.file_text);
          return {
            ...base,
            content: text(`File created successfully at: ${path}`),
            is_error: false,
            prev_exist: false,
            old_content: null,
            new_content: small(action.file_text),
          };
        }
        case "str_replace": {
          const old = this.#readFile(path);
          if (typeof old !== "string") return fail(old.error);
          const oldStr = action.old_str;
          if (typeof oldStr !== "string" || oldStr === "")
            return fail("Parameter `old_str` is required for command: str_replace.");
          const newStr = typeof action.new_str === "string" ? action.new_str : "";
          const first = old.indexOf(oldStr);
          if (first < 0)
            return fail(
              `No replacement was performed, old_str \`${oldStr}\` did not appear verbatim in ${path}.`,
            );
          const lines: number[] = [];
          for (let i = first; i >= 0; i = old.indexOf(oldStr, i + 1)) lines.push(lineOf(old, i));
          if (lines.length > 1)
            return fail(
              `No replacement was performed. Multiple occurrences of old_str \`${oldStr}\` in lines ${JSON.stringify(lines)}. Please ensure it is unique.`,
            );
          const updated = old.slice(0, first) + newStr + old.slice(first + oldStr.length);
          this.#write(path, old, updated);
          const start = lineOf(old, first);
          return this.#edited(base, path, old, updated, start, newStr.split("\n").length);
        }
        case "insert": {
          const old = this.#readFile(path);
          if (typeof old !== "string") return fail(old.error);
          const at = action.insert_line;
          if (typeof action.new_str !== "string")
            return fail("Parameter `new_str` is required for command: insert.");
          const lines = old.split("\n");
          const count = old.endsWith("\n") ? lines.length - 1 : lines.length;
          if (typeof at !== "number" || at < 0 || at > count)
            return fail(
              `Invalid \`insert_line\` parameter: ${String(at)}. It should be within the range of lines of the file: [0, ${count}].`,
            );
          const added = action.new_str.split("\n");
          lines.splice(at, 0, ...added);
          const updated = lines.join("\n");
          this.#write(path, old, updated);
          return this.#edited(base, path, old, updated, at + 1, added.length);
        }
        case "undo_edit": {
          const stack = this.#history.get(path);
          const previous = stack?.pop();
          if (previous === undefined) return fail(`No edit history found for ${path}.`);
          const current = existsSync(path) ? readFileSync(path, "utf8") : null;
          writeFileSync(path, previous);
          return {
            ...base,
            content: text(
              `Last edit to ${path} undone successfully.\n${numbered(previous.slice(0, MAX_VIEW_CHARS), 1)}`,
            ),
            is_error: false,
            prev_exist: true,
            old_content: small(current),
            new_content: small(previous),
          };
        }
        default:
          return fail(`Unknown command ${command}.`);
      }
    } catch (e: unknown) {
      return fail(`Error: ${e instanceof Error ? e.message : String(e)}`);
    }
  }

  #readFile(path: string): string | { error: string } {
    if (!existsSync(path)) return { error: `The path ${path} does not exist. Please provide a valid path.` };
    if (statSync(path).isDirectory())
      return { error: `The path ${path} is a directory; only \`view\` works on directories.` };
    return readFileSync(path, "utf8");
  }

  #write(path: string, old: string, updated: string): void {
    let stack = this.#history.get(path);
    if (stack === undefined) {
      stack = [];
      this.#history.set(path, stack);
    }
    stack.push(old);
    writeFileSync(path, updated);
  }

  #edited(base: Json, path: string, old: string, updated: string, firstLine: number, count: number): Json {
    const lines = updated.split("\n");
    const from = Math.max(1, firstLine - SNIPPET_LINES);
    const to = Math.min(lines.length, firstLine + count - 1 + SNIPPET_LINES);
    const snippet = numbered(lines.slice(from - 1, to).join("\n"), from);
    return {
      ...base,
      content: text(
        `The file ${path} has been edited. Here's the result of running \`cat -n\` on a snippet of ${path}:\n${snippet}\nReview the changes and make sure they are as expected. Edit the file again if necessary.`,
      ),
      is_error: false,
      prev_exist: true,
      old_content: small(old),
      new_content: small(updated),
    };
  }

  #view(path: string, range: number[] | null, base: Json, fail: (m: string) => Json): Json {
    if (!existsSync(path)) return fail(`The path ${path} does not exist. Please provide a valid path.`);
    const ok = (output: string): Json => ({
      ...base,
      content: text(output),
      is_error: false,
      prev_exist: true,
      old_content: null,
      new_content: null,
    });
    if (statSync(path).isDirectory()) {
      if (range !== null)
        return fail("The `view_range` parameter is not allowed when `path` points to a directory.");
      const entries: string[] = [];
      const walk = (dir: string, depth: number): void => {
        for (const name of readdirSync(dir).sort()) {
          if (name.startsWith(".")) continue;
          const full = join(dir, name);
          const isDir = statSync(full, { throwIfNoEntry: false })?.isDirectory() ?? false;
          entries.push(`${relative(path, full)}${isDir ? "/" : ""}`);
          if (isDir && depth < 2 && entries.length < 1000) walk(full, depth + 1);
        }
      };
      walk(path, 1);
      return ok(
        `Here's the files and directories up to 2 levels deep in ${path}, excluding hidden items:\n${entries.join("\n")}`,
      );
    }
    let content = readFileSync(path, "utf8");
    let start = 1;
    if (range !== null) {
      const lines = content.split("\n");
      const [from = 1, to = -1] = range;
      if (from < 1 || from > lines.length)
        return fail(
          `Invalid \`view_range\`: ${JSON.stringify(range)}. Its first element should be within [1, ${lines.length}].`,
        );
      const end = to === -1 ? lines.length : to;
      if (end < from || end > lines.length)
        return fail(
          `Invalid \`view_range\`: ${JSON.stringify(range)}. Its second element should be -1 or within [${from}, ${lines.length}].`,
        );
      content = lines.slice(from - 1, end).join("\n");
      start = from;
    }
    if (content.length > MAX_VIEW_CHARS)
      content = `${content.slice(0, MAX_VIEW_CHARS)}\n[... file cut: view a smaller range with view_range ...]`;
    return ok(`Here's the result of running \`cat -n\` on ${path}:\n${numbered(content, start)}`);
  }
}

function lineOf(s: string, index: number): number {
  let n = 1;
  for (let i = s.indexOf("\n"); i >= 0 && i < index; i = s.indexOf("\n", i + 1)) n++;
  return n;
}

function numbered(content: string, start: number): string {
  return content
    .split("\n")
    .map((line, i) => `${String(i + start).padStart(6)}\t${line}`)
    .join("\n");
}
