/**
 * The agent-server's configuration from the environment, read the way `agent_server/config.py` (`Config`,
 * `WebhookSpec`) and `env_parser.py` (`from_env(Config, "OH")`) read it in software-agent-sdk v1.3.0:
 *
 * - a list field `X` is the JSON list in `OH_X`, or else the items `OH_X_0`, `OH_X_1`, ... up to the first gap;
 * - a model item (a webhook) is the JSON object in `OH_WEBHOOKS_<n>` merged with its fields `OH_WEBHOOKS_<n>_<FIELD>`;
 * - booleans are true for "1"/"TRUE" (any case), false otherwise; a bad number is a start-up error.
 *
 * `SESSION_API_KEY` is the legacy fallback for the session keys and the secret key. Paths are relative to the
 * working directory (defaults `workspace/conversations`, `workspace/bash_events`: `/workspace/...` in the image,
 * whose WORKDIR is `/`). `STANDIN_BOOT_DELAY_MS` is the stand-in's own (not the real server's).
 */
import { resolve } from "node:path";

export interface WebhookSpec {
  baseUrl: string;
  headers: Record<string, string>;
  eventBufferSize: number;
  flushDelayS: number;
  numRetries: number;
  retryDelayS: number;
}

export interface StandinConfig {
  sessionApiKeys: string[];
  allowCorsOrigins: string[];
  conversationsPath: string;
  bashEventsDir: string;
  staticFilesPath: string | null;
  webhooks: WebhookSpec[];
  enableVscode: boolean;
  vscodePort: number;
  enableVnc: boolean;
  secretKey: string | null;
  /** Time between the start and the listening socket, like the Python server's imports and lifespan. */
  bootDelayMs: number;
}

type Env = Record<string, string | undefined>;

function readList(env: Env, key: string, item: (key: string) => unknown): unknown[] | undefined {
  const raw = env[key];
  if (raw !== undefined) {
    const parsed = JSON.parse(raw) as unknown;
    const base: unknown[] =
      typeof parsed === "number" ? new Array<unknown>(parsed).fill(undefined) : (parsed as unknown[]);
    if (!Array.isArray(base)) throw new Error(`${key} must be a JSON list or a count`);
    return base.map((value, i) => {
      const override = item(`${key}_${i}`);
      if (override === undefined) return value;
      return typeof value === "object" && value !== null && typeof override === "object"
        ? { ...value, ...override }
        : override;
    });
  }
  const out: unknown[] = [];
  for (let i = 0; ; i++) {
    const value = item(`${key}_${i}`);
    if (value === undefined) return out.length > 0 ? out : undefined;
    out.push(value);
  }
}

const readStr = (env: Env) => (key: string) => env[key];
const readBool = (env: Env, key: string): boolean | undefined =>
  env[key] === undefined ? undefined : ["1", "TRUE"].includes(env[key].toUpperCase());
function readNumber(env: Env, key: string, integer: boolean): number | undefined {
  const raw = env[key];
  if (raw === undefined) return undefined;
  const n = Number(raw.trim());
  if (raw.trim() === "" || !Number.isFinite(n) || (integer && !Number.isInteger(n)))
    throw new Error(`${key}: invalid ${integer ? "int" : "float"} value '${raw}'`);
  return n;
}

function readWebhook(env: Env, key: string): Record<string, unknown> | undefined {
  if (!Object.keys(env).some((k) => k.startsWith(key))) return undefined;
  let out: Record<string, unknown> | undefined;
  const base = env[key];
  if (base) {
    const parsed = JSON.parse(base) as unknown;
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
      throw new Error(`${key} must be a JSON object`);
    out = { ...(parsed as Record<string, unknown>) };
  }
  const set = (field: string, value: unknown): void => {
    if (value === undefined) return;
    out ??= {};
    out[field] = value;
  };
  set("base_url", env[`${key}_BASE_URL`]);
  const headers = env[`${key}_HEADERS`];
  if (headers) set("headers", JSON.parse(headers) as unknown);
  set("event_buffer_size", readNumber(env, `${key}_EVENT_BUFFER_SIZE`, true));
  set("flush_delay", readNumber(env, `${key}_FLUSH_DELAY`, false));
  set("num_retries", readNumber(env, `${key}_NUM_RETRIES`, true));
  set("retry_delay", readNumber(env, `${key}_RETRY_DELAY`, true));
  return out;
}

function toWebhookSpec(raw: unknown, i: number): WebhookSpec {
  const w = (raw ?? {}) as Record<string, unknown>;
  const where = `webhooks.${i}`;
  if (typeof w.base_url !== "string") throw new Error(`${where}.base_url: Field required`);
  const num = (field: string, fallback: number, check: (n: number) => boolean, rule: string): number => {
    const v = w[field] ?? fallback;
    if (typeof v !== "number" || !check(v)) throw new Error(`${where}.${field}: Input should be ${rule}`);
    return v;
  };
  const headers = (w.headers ?? {}) as Record<string, unknown>;
  if (
    typeof headers !== "object" ||
    headers === null ||
    Object.values(headers).some((h) => typeof h !== "string")
  )
    throw new Error(`${where}.headers: Input should be a dictionary of strings`);
  return {
    baseUrl: w.base_url,
    headers: headers as Record<string, string>,
    eventBufferSize: num("event_buffer_size", 5, (n) => Number.isInteger(n) && n >= 1, "an integer >= 1"),
    flushDelayS: num("flush_delay", 30, (n) => n > 0, "greater than 0"),
    numRetries: num("num_retries", 3, (n) => Number.isInteger(n) && n >= 0, "an integer >= 0"),
    retryDelayS: num("retry_delay", 5, (n) => Number.isInteger(n) && n >= 0, "an integer >= 0"),
  };
}

/** Reads the configuration; throws an Error naming the variable when a value is invalid. */
export function readConfig(env: Env, cwd: string = process.cwd()): StandinConfig {
  const strings = (key: string): string[] | undefined => {
    const l = readList(env, key, readStr(env));
    if (l?.some((s) => typeof s !== "string")) throw new Error(`${key}: every item must be a string`);
    return l as string[] | undefined;
  };
  const legacyKey = env.SESSION_API_KEY;
  const vscodePort = readNumber(env, "OH_VSCODE_PORT", true) ?? 8001;
  if (vscodePort < 1 || vscodePort > 65535) throw new Error("OH_VSCODE_PORT: must be 1..65535");
  const bootDelay = readNumber(env, "STANDIN_BOOT_DELAY_MS", true) ?? 3000;
  if (bootDelay < 0) throw new Error("STANDIN_BOOT_DELAY_MS: must be >= 0");
  return {
    sessionApiKeys: strings("OH_SESSION_API_KEYS") ?? (legacyKey ? [legacyKey] : []),
    allowCorsOrigins: strings("OH_ALLOW_CORS_ORIGINS") ?? [],
    conversationsPath: resolve(cwd, env.OH_CONVERSATIONS_PATH ?? "workspace/conversations"),
    bashEventsDir: resolve(cwd, env.OH_BASH_EVENTS_DIR ?? "workspace/bash_events"),
    staticFilesPath: env.OH_STATIC_FILES_PATH ? resolve(cwd, env.OH_STATIC_FILES_PATH) : null,
    webhooks: (readList(env, "OH_WEBHOOKS", (key) => readWebhook(env, key)) ?? []).map(toWebhookSpec),
    enableVscode: readBool(env, "OH_ENABLE_VSCODE") ?? true,
    vscodePort,
    enableVnc: readBool(env, "OH_ENABLE_VNC") ?? false,
    secretKey: env.OH_SECRET_KEY ?? (legacyKey || null),
    bootDelayMs: bootDelay,
  };
}
