import { existsSync, statSync } from "node:fs";
import { resolve } from "node:path";

/** The browser-facing settings: web UI folder, CORS, sign-in cookies, single-user mode, /api/options lists. */
export interface WebConfig {
  /** A built OpenHands frontend (the folder holding its index.html, e.g. frontend/build) served at "/". */
  readonly uiDir: string | undefined;
  /** Other origins allowed to call the API with credentials (CORS) and to send cookie-authenticated mutations. */
  readonly corsOrigins: readonly string[];
  /** X-Forwarded-Proto/-Host come from a trusted proxy (TLS termination): Secure cookies, own origin. */
  readonly trustProxy: boolean;
  /** AUTH_MODE=single-user: requests without a key act as user "default" (loopback HOST only). */
  readonly singleUser: boolean;
  readonly sessionMaxAgeSeconds: number;
  /** Lists of /api/options/*; undefined: the built-in list. */
  readonly options: {
    readonly models: readonly string[] | undefined;
    readonly agents: readonly string[] | undefined;
    readonly securityAnalyzers: readonly string[] | undefined;
  };
}

export const WEB_ENV_DOC: readonly [string, string][] = [
  ["UI_DIR", "serve the built OpenHands frontend in this folder (holding index.html: frontend/build) at /"],
  ["CORS_ORIGINS", "comma list of other origins allowed to call the API with credentials (default none)"],
  ["TRUST_PROXY", "trust X-Forwarded-Proto/-Host of a TLS-terminating proxy: Secure cookie (default false)"],
  [
    "AUTH_MODE",
    "api-key (default) or single-user: requests without a key act as 'default' (loopback HOST only)",
  ],
  ["SESSION_MAX_AGE_HOURS", "lifetime of a browser sign-in (default 24)"],
  ["OPTIONS_MODELS", "comma list answered by /api/options/models (default: a built-in list)"],
  ["OPTIONS_AGENTS", "comma list answered by /api/options/agents (default CodeActAgent)"],
  [
    "OPTIONS_SECURITY_ANALYZERS",
    "comma list answered by /api/options/security-analyzers (default llm, invariant)",
  ],
];

type Env = Record<string, string | undefined>;

/** Host names that only this machine can reach. */
export function isLoopbackHost(host: string): boolean {
  const h = host.trim().toLowerCase();
  return h === "localhost" || h === "::1" || h === "[::1]" || /^127(\.\d{1,3}){3}$/.test(h);
}

function commaList(env: Env, name: string): string[] | undefined {
  const raw = env[name];
  if (raw === undefined || raw.trim() === "") return undefined;
  const items = raw
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "");
  return [...new Set(items)];
}

function holdsIndexHtml(dir: string): boolean {
  return existsSync(resolve(dir, "index.html")) && statSync(dir).isDirectory();
}

/**
 * Why UI_DIR is refused, with the folder that would do where one is near: the frontend checkout itself (its build
 * is in build/) or a build/client folder that the frontend's build moved up into build/.
 */
function uiDirProblem(dir: string): string {
  const near = [resolve(dir, "build"), resolve(dir, "..")].find(holdsIndexHtml);
  return (
    `UI_DIR must be the folder holding the built frontend's index.html (frontend/build after \`npm run build\` ` +
    `in the OpenHands frontend), got ${dir}${near === undefined ? "" : `; did you mean ${near}?`}`
  );
}

/** Parses the web settings; `error` builds the ConfigError of config.ts. */
export function loadWebConfig(env: Env, host: string, cwd: string, error: (msg: string) => Error): WebConfig {
  let uiDir: string | undefined;
  if (env.UI_DIR !== undefined && env.UI_DIR.trim() !== "") {
    uiDir = resolve(cwd, env.UI_DIR.trim());
    if (!holdsIndexHtml(uiDir)) throw error(uiDirProblem(uiDir));
  }
  const corsOrigins = commaList(env, "CORS_ORIGINS") ?? [];
  for (const origin of corsOrigins) {
    let parsed: URL | undefined;
    try {
      parsed = new URL(origin);
    } catch {
      parsed = undefined;
    }
    if (parsed === undefined || !/^https?:$/.test(parsed.protocol) || parsed.origin !== origin)
      throw error(
        `CORS_ORIGINS entries must be origins like https://ui.example.com:8443, got ${JSON.stringify(origin)}`,
      );
  }
  const trust = env.TRUST_PROXY?.trim().toLowerCase() ?? "";
  if (!["", "0", "1", "true", "false", "yes", "no", "on", "off"].includes(trust))
    throw error(`TRUST_PROXY must be true or false, got ${JSON.stringify(env.TRUST_PROXY)}`);
  const mode = (env.AUTH_MODE ?? "").trim() || "api-key";
  if (mode !== "api-key" && mode !== "single-user")
    throw error(`AUTH_MODE must be api-key or single-user, got ${JSON.stringify(mode)}`);
  if (mode === "single-user" && !isLoopbackHost(host))
    throw error(`AUTH_MODE=single-user is only allowed when HOST is a loopback address, not ${host}`);
  const hoursRaw = env.SESSION_MAX_AGE_HOURS?.trim() ?? "";
  const hours = hoursRaw === "" ? 24 : Number(hoursRaw);
  if (!Number.isInteger(hours) || hours < 1 || hours > 24 * 366)
    throw error(`SESSION_MAX_AGE_HOURS must be an integer 1-8784, got ${JSON.stringify(hoursRaw)}`);
  return {
    uiDir,
    corsOrigins,
    trustProxy: ["1", "true", "yes", "on"].includes(trust),
    singleUser: mode === "single-user",
    sessionMaxAgeSeconds: hours * 3600,
    options: {
      models: commaList(env, "OPTIONS_MODELS"),
      agents: commaList(env, "OPTIONS_AGENTS"),
      securityAnalyzers: commaList(env, "OPTIONS_SECURITY_ANALYZERS"),
    },
  };
}
