/**
 * The MCP configuration model of the reference (`openhands/core/config/mcp_config.py`, see reference-behavior §4),
 * built with the schema library so that REST reports exactly the reference's 422 items:
 *
 * - `MCPConfig` forbids extra keys; its three lists default to `[]`. Items ignore extra keys.
 * - A string entry of `sse_servers` / `shttp_servers` stands for `{"url": <string>}`.
 * - URLs are validated like `_validate_mcp_url` on top of Python's `urllib.parse.urlparse`.
 * - stdio `name` / `command` are trimmed and checked; `args` may be a shell-like string (`shlex.split`), `env` a
 *   `"K1=v1,K2=v2"` string.
 *
 * Deliberate differences from the reference (which answers 500 or behaves oddly there): a non-string `name`,
 * `command` or `url` is a `string_type` 422; a server list that is not a JSON array is a `list_type` 422 (the
 * reference iterates strings character by character and crashes on null); keys of an `env` object are validated
 * with the same rule as keys in the string form; lists are capped (servers, args, env entries).
 */
import { dict, list, nullable, object } from "../core/model/containers.ts";
import { int } from "../core/model/numbers.ts";
import { pyFalsy, pyRepr, pyStrip } from "../core/model/py-text.ts";
import { str } from "../core/model/scalars.ts";
import { type Schema, ValueError } from "../core/model/schema.ts";
import { before, refine, transform } from "../core/model/validators.ts";

export const MAX_MCP_SERVERS = 100;
export const MAX_MCP_ARGS = 100;
export const MAX_MCP_ENV = 100;

export interface McpSseServerInput {
  url: string;
  api_key: string | null;
}
export interface McpStdioServerInput {
  name: string;
  command: string;
  args: string[];
  env: Record<string, string>;
}
export interface McpShttpServerInput {
  url: string;
  api_key: string | null;
  timeout: number | null;
}
export interface McpConfigInput {
  sse_servers: McpSseServerInput[];
  stdio_servers: McpStdioServerInput[];
  shttp_servers: McpShttpServerInput[];
}

// ---------------------------------------------------------------------------------------------------------------
// URLs: Python's urlsplit (3.12) as far as `scheme` and `netloc` go, including the ValueErrors it raises.

const SCHEME_RE = /^[A-Za-z0-9+\-.]+$/;

function isIPv4(s: string): boolean {
  const parts = s.split(".");
  if (parts.length !== 4) return false;
  for (const p of parts) {
    if (!/^[0-9]{1,3}$/.test(p)) return false;
    if (p.length > 1 && p.startsWith("0")) return false;
    if (Number(p) > 255) return false;
  }
  return true;
}

/** `ipaddress.IPv6Address` (with optional `%scope`). */
function isIPv6(s: string): boolean {
  const pct = s.indexOf("%");
  let addr = s;
  if (pct >= 0) {
    const scope = s.slice(pct + 1);
    if (scope === "" || scope.includes("%")) return false;
    addr = s.slice(0, pct);
  }
  if (addr === "") return false;
  const parts = addr.split(":");
  if (parts.length < 3) return false;
  const last = parts[parts.length - 1]!;
  if (last.includes(".")) {
    if (!isIPv4(last)) return false;
    parts.splice(parts.length - 1, 1, "0", "0");
  }
  if (parts.length > 9) return false;
  let skip = -1;
  for (let i = 1; i < parts.length - 1; i++) {
    if (parts[i] === "") {
      if (skip >= 0) return false;
      skip = i;
    }
  }
  if (skip >= 0) {
    let hi = skip;
    let lo = parts.length - skip - 1;
    if (parts[0] === "") {
      hi -= 1;
      if (hi !== 0) return false;
    }
    if (parts[parts.length - 1] === "") {
      lo -= 1;
      if (lo !== 0) return false;
    }
    if (8 - (hi + lo) < 1) return false;
  } else {
    if (parts.length !== 8 || parts[0] === "" || parts[parts.length - 1] === "") return false;
  }
  // the structure checks above leave empty parts only where "::" is allowed
  return parts.every((p) => p === "" || /^[0-9A-Fa-f]{1,4}$/.test(p));
}

function checkBracketedHost(host: string): void {
  if (host.startsWith("v")) {
    if (!/^v[a-fA-F0-9]+\..+$/s.test(host)) throw new ValueError("IPvFuture address is invalid");
    return;
  }
  if (isIPv4(host)) throw new ValueError("An IPv4 address cannot be in brackets");
  if (!isIPv6(host)) throw new ValueError(`${pyRepr(host)} does not appear to be an IPv4 or IPv6 address`);
}

function checkNetloc(netloc: string): void {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: ASCII test
  if (netloc === "" || /^[\x00-\x7f]*$/.test(netloc)) return;
  const n = netloc.replace(/[@:#?]/g, "");
  const normalized = n.normalize("NFKC");
  if (n === normalized) return;
  for (const c of "/?#@:") {
    if (normalized.includes(c)) {
      throw new ValueError(`netloc '${netloc}' contains invalid characters under NFKC normalization`);
    }
  }
}

/** The `scheme` (lower-cased) and `netloc` Python's `urlsplit` finds, or a `ValueError` it would raise. */
export function urlSplit(input: string): { scheme: string; netloc: string } {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: WHATWG C0 control-or-space, as Python strips
  let url = input.replace(/^[\x00-\x20]+/, "").replace(/[\t\r\n]/g, "");
  let scheme = "";
  const colon = url.indexOf(":");
  if (colon > 0 && /^[A-Za-z]/.test(url) && SCHEME_RE.test(url.slice(0, colon))) {
    scheme = url.slice(0, colon).toLowerCase();
    url = url.slice(colon + 1);
  }
  let netloc = "";
  if (url.startsWith("//")) {
    let end = url.length;
    for (const c of "/?#") {
      const at = url.indexOf(c, 2);
      if (at >= 0 && at < end) end = at;
    }
    netloc = url.slice(2, end);
    const open = netloc.includes("[");
    const close = netloc.includes("]");
    if (open !== close) throw new ValueError("Invalid IPv6 URL");
    if (open && close) {
      const after = netloc.slice(netloc.indexOf("[") + 1);
      const endBracket = after.indexOf("]");
      checkBracketedHost(endBracket >= 0 ? after.slice(0, endBracket) : after);
    }
  }
  checkNetloc(netloc);
  return { scheme, netloc };
}

/** `_validate_mcp_url`: returns the trimmed URL or throws `ValueError` with the reference's message. */
export function validateMcpUrl(url: string): string {
  const trimmed = pyStrip(url);
  if (trimmed === "") throw new ValueError("URL cannot be empty");
  const parsed = urlSplit(trimmed);
  if (parsed.scheme === "") throw new ValueError("URL must include a scheme (http:// or https://)");
  if (parsed.netloc === "") throw new ValueError("URL must include a valid domain/host");
  if (!["http", "https", "ws", "wss"].includes(parsed.scheme)) {
    throw new ValueError("URL scheme must be http, https, ws, or wss");
  }
  return trimmed;
}

// ---------------------------------------------------------------------------------------------------------------
// shlex.split (POSIX mode, no comments)

export class ShlexError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ShlexError";
  }
}

const SH_WHITESPACE = " \t\r\n";

/**
 * Python's `shlex.split(s)`: whitespace-separated words; `'...'` literal; `"..."` where a backslash escapes only
 * `"` and `\`; outside quotes a backslash escapes any character; `''` yields an empty word.
 * Throws `ShlexError("No closing quotation" | "No escaped character")`.
 */
export function shlexSplit(s: string): string[] {
  const words: string[] = [];
  let state: "ws" | "word" | "'" | '"' | "esc" = "ws";
  let escaped: "word" | '"' = "word";
  let token = "";
  let quoted = false;
  const emit = (): void => {
    if (token !== "" || quoted) words.push(token);
    token = "";
    quoted = false;
  };
  for (const c of s) {
    switch (state) {
      case "ws":
      case "word":
        if (SH_WHITESPACE.includes(c)) {
          if (state === "word") emit();
          state = "ws";
        } else if (c === "\\") {
          escaped = "word";
          state = "esc";
        } else if (c === "'" || c === '"') {
          state = c;
        } else {
          token += c;
          state = "word";
        }
        break;
      case "'":
        quoted = true;
        if (c === "'") state = "word";
        else token += c;
        break;
      case '"':
        quoted = true;
        if (c === '"') state = "word";
        else if (c === "\\") {
          escaped = '"';
          state = "esc";
        } else token += c;
        break;
      case "esc":
        if (escaped === '"' && c !== "\\" && c !== '"') token += "\\";
        token += c;
        state = escaped;
        break;
    }
  }
  if (state === "'" || state === '"') throw new ShlexError("No closing quotation");
  if (state === "esc") throw new ShlexError("No escaped character");
  if (state === "word") emit();
  return words;
}

// ---------------------------------------------------------------------------------------------------------------
// stdio field validators (pydantic mode="before")

const NAME_RE = /^[a-zA-Z0-9_-]+$/;
const ENV_KEY_RE = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

function checkServerName(v: unknown): unknown {
  if (typeof v !== "string") return v;
  const name = pyStrip(v);
  if (name === "") throw new ValueError("Server name cannot be empty");
  if (!NAME_RE.test(name)) {
    throw new ValueError("Server name can only contain letters, numbers, hyphens, and underscores");
  }
  return name;
}

function checkCommand(v: unknown): unknown {
  if (typeof v !== "string") return v;
  const command = pyStrip(v);
  if (command === "") throw new ValueError("Command cannot be empty");
  if (command.includes(" ")) {
    throw new ValueError(
      "Command should be a single executable without spaces (use arguments field for parameters)",
    );
  }
  return command;
}

function parseArgs(v: unknown): unknown {
  if (typeof v === "string") {
    const s = pyStrip(v);
    if (s === "") return [];
    try {
      return shlexSplit(s);
    } catch (e) {
      if (!(e instanceof ShlexError)) throw e;
      throw new ValueError(
        `Invalid argument format: ${e.message}. Use shell-like format, e.g., "arg1 arg2" or '--config "value with spaces"'`,
      );
    }
  }
  return pyFalsy(v) ? [] : v;
}

function envKeyProblem(key: string): string | null {
  if (key === "") return "Environment variable key cannot be empty";
  if (!ENV_KEY_RE.test(key)) {
    return `Invalid environment variable name '${key}'. Must start with letter or underscore, contain only alphanumeric characters and underscores`;
  }
  return null;
}

/** `"K1=v1, K2=v2"` → `{K1:"v1", K2:"v2"}` (pairs and keys trimmed, values kept as written, last key wins). */
export function parseEnvString(v: string): Record<string, string> {
  const env: Record<string, string> = Object.create(null) as Record<string, string>;
  if (pyStrip(v) === "") return env;
  for (const raw of v.split(",")) {
    const pair = pyStrip(raw);
    if (pair === "") continue;
    const eq = pair.indexOf("=");
    if (eq < 0) throw new ValueError(`Environment variable '${pair}' must be in KEY=VALUE format`);
    const key = pyStrip(pair.slice(0, eq));
    const problem = envKeyProblem(key);
    if (problem !== null) throw new ValueError(problem);
    env[key] = pair.slice(eq + 1);
  }
  return env;
}

function parseEnv(v: unknown): unknown {
  if (typeof v === "string") return parseEnvString(v);
  return pyFalsy(v) ? {} : v;
}

// ---------------------------------------------------------------------------------------------------------------
// Schemas

const urlSchema: Schema<string> = transform(str(), validateMcpUrl);
const apiKey = { schema: nullable(str()), default: null, fillDefaults: true } as const;

/** A bare string entry stands for `{"url": <string>}` (`MCPConfig.convert_string_urls`). */
function urlShorthand<T>(item: Schema<T>): Schema<T> {
  return before((v) => (typeof v === "string" ? { url: v } : v), item, {
    jsonSchema: () => ({ anyOf: [{ type: "string" }, item.jsonSchema()] }),
  });
}

export const mcpSseServerSchema: Schema<McpSseServerInput> = object(
  { url: { schema: urlSchema, required: true }, api_key: apiKey },
  { title: "MCPSSEServerConfig" },
);

export const mcpShttpServerSchema: Schema<McpShttpServerInput> = object(
  {
    url: { schema: urlSchema, required: true },
    api_key: apiKey,
    timeout: {
      schema: refine(nullable(int()), (v) =>
        v === null
          ? null
          : v <= 0
            ? "Timeout must be positive"
            : v > 3600
              ? "Timeout cannot exceed 3600 seconds"
              : null,
      ),
      default: 60,
      fillDefaults: true,
    },
  },
  { title: "MCPSHTTPServerConfig" },
);

export const mcpStdioServerSchema: Schema<McpStdioServerInput> = object(
  {
    name: {
      schema: before(checkServerName, str(), {
        jsonSchema: () => ({ type: "string", pattern: NAME_RE.source }),
      }),
      required: true,
    },
    command: {
      schema: before(checkCommand, str(), { jsonSchema: () => ({ type: "string", minLength: 1 }) }),
      required: true,
    },
    args: {
      schema: before(parseArgs, list(str(), { maxItems: MAX_MCP_ARGS }), {
        jsonSchema: () => ({
          anyOf: [{ type: "array", items: { type: "string" }, maxItems: MAX_MCP_ARGS }, { type: "string" }],
        }),
      }),
      defaultFactory: (): string[] => [],
      fillDefaults: true,
    },
    env: {
      schema: before(
        parseEnv,
        dict(str(), { key: refine(str(), envKeyProblem), maxProperties: MAX_MCP_ENV }),
        {
          jsonSchema: () => ({
            anyOf: [
              {
                type: "object",
                additionalProperties: { type: "string" },
                propertyNames: { pattern: ENV_KEY_RE.source },
                maxProperties: MAX_MCP_ENV,
              },
              { type: "string" },
            ],
          }),
        },
      ),
      defaultFactory: (): Record<string, string> => ({}),
      fillDefaults: true,
    },
  },
  { title: "MCPStdioServerConfig" },
);

const serverList = { maxItems: MAX_MCP_SERVERS };

/** `MCPConfig`: validated output has all three lists; items are complete (defaults filled). */
export const mcpConfigSchema: Schema<McpConfigInput> = object(
  {
    sse_servers: {
      schema: list(urlShorthand(mcpSseServerSchema), serverList),
      defaultFactory: (): McpSseServerInput[] => [],
      fillDefaults: true,
    },
    stdio_servers: {
      schema: list(mcpStdioServerSchema, serverList),
      defaultFactory: (): McpStdioServerInput[] => [],
      fillDefaults: true,
    },
    shttp_servers: {
      schema: list(urlShorthand(mcpShttpServerSchema), serverList),
      defaultFactory: (): McpShttpServerInput[] => [],
      fillDefaults: true,
    },
  },
  { title: "MCPConfig", extra: "forbid" },
);
