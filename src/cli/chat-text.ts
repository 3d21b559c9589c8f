/**
 * Text of the terminal chat (`npm run cli -- chat`): colours, text from the sandbox made safe to print, the text of
 * an SDK content list, and long output cut in the middle. Also the small readers of event JSON the chat shares.
 */

export type Json = Record<string, unknown>;

const CODES = {
  bold: [1, 22],
  dim: [2, 22],
  red: [31, 39],
  green: [32, 39],
  yellow: [33, 39],
  blue: [34, 39],
  magenta: [35, 39],
  cyan: [36, 39],
} as const;
export type Style = keyof typeof CODES;

/** `text` in a style, or as it is without colours. */
export function paint(color: boolean, style: Style, text: string): string {
  if (!color || text === "") return text;
  const [on, off] = CODES[style];
  return `\u001b[${on}m${text}\u001b[${off}m`;
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: terminal escape sequences are what is removed.
const ESCAPES = /\u001b\[[0-?]*[ -/]*[@-~]|\u001b\][^\u0007\u001b]*(?:\u0007|\u001b\\)?|\u001b[@-_]/g;
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is removed.
const CONTROLS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g;

/**
 * Text from the sandbox, safe to print: escape sequences and control characters (except line breaks and tabs)
 * removed; a carriage return inside a line (a progress bar) keeps what was written last.
 */
export function cleanText(s: string): string {
  return s
    .replace(ESCAPES, "")
    .split("\n")
    .map((line) => {
      const l = line.endsWith("\r") ? line.slice(0, -1) : line;
      return (l.includes("\r") ? (l.split("\r").findLast((p) => p !== "") ?? "") : l).replace(CONTROLS, "");
    })
    .join("\n")
    .replaceAll("\t", "  ");
}

/** The text of an SDK content list (text items; an image is `[image]`), or of a plain string. */
export function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .map((c: unknown) => {
      if (typeof c !== "object" || c === null) return "";
      const item = c as Json;
      if (typeof item.text === "string") return item.text;
      if (item.type === "image" || Array.isArray(item.image_urls)) return "[image]";
      return "";
    })
    .filter((t) => t !== "")
    .join("\n");
}

/** A string value of event JSON, or null. */
export const str = (v: unknown): string | null => (typeof v === "string" ? v : null);
/** An object value of event JSON (never an array), or null. */
export const obj = (v: unknown): Json | null =>
  typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Json) : null;

/**
 * The lines of `lines` that fit `max`: the first third and the rest from the end, and how many were left out
 * between them (0: all fit).
 */
export function cutMiddle(
  lines: readonly string[],
  max: number,
): { head: string[]; tail: string[]; hidden: number } {
  if (lines.length <= max) return { head: [...lines], tail: [], hidden: 0 };
  const headCount = Math.max(1, Math.floor(max / 3));
  const tailCount = Math.max(1, max - headCount - 1);
  return {
    head: lines.slice(0, headCount),
    tail: lines.slice(lines.length - tailCount),
    hidden: lines.length - headCount - tailCount,
  };
}
