/**
 * Which requests on the service's own listener are calls to a sandbox's agent, and what of them crosses the proxy
 * (docs/agent-proxy.md). A call is an agent call when it carries a sandbox session key (the `sbx_<sandbox id>_…`
 * form of src/core/ids.ts) in `X-Session-API-Key` (or, on the events websocket, its `session_api_key` query
 * parameter) and its path is one of the agent's routes below; every other request is the service's own, whatever
 * its path. The target is only the agent address the service recorded for the sandbox the key names.
 */
import type { IncomingHttpHeaders, IncomingMessage } from "node:http";
import { sandboxIdOfSessionKey } from "../../core/ids.ts";

/** Path prefixes of the agent's HTTP routes the proxy forwards (the agent-server's routers the UI and SDK call). */
const AGENT_PREFIXES = [
  "/api/conversations",
  "/api/git/",
  "/api/file/",
  "/api/bash/",
  "/api/vscode/",
  "/api/skills",
  "/alive",
  "/health",
  "/server_info",
] as const;

/** The agent's events websocket. */
export const SOCKET_PREFIX = "/sockets/events/";

/** Whether `path` (no query) is one of the agent's HTTP routes. */
export function isAgentPath(path: string): boolean {
  for (const p of AGENT_PREFIXES) {
    if (path === p || (path.startsWith(p) && (p.endsWith("/") || path[p.length] === "/"))) return true;
  }
  return false;
}

/** The path of a request URL (before `?`). */
export function pathOf(url: string): string {
  const q = url.indexOf("?");
  return q < 0 ? url : url.slice(0, q);
}

/**
 * The sandbox session key of a request that is an agent call, else undefined: a cheap test on the header's form
 * and the path, made for every request before the service routes it.
 */
export function agentCallKey(req: IncomingMessage): string | undefined {
  const key = req.headers["x-session-api-key"];
  if (typeof key !== "string" || !key.startsWith("sbx_")) return undefined;
  if (sandboxIdOfSessionKey(key) === null) return undefined;
  return isAgentPath(pathOf(req.url ?? "")) ? key : undefined;
}

/** The session key of an events websocket upgrade: the `session_api_key` query parameter, else the header. */
export function socketKey(url: URL, headers: IncomingHttpHeaders): string | undefined {
  const q = url.searchParams.get("session_api_key");
  const h = headers["x-session-api-key"];
  const key = q ?? (typeof h === "string" ? h : undefined);
  return key !== undefined && sandboxIdOfSessionKey(key) !== null ? key : undefined;
}

/**
 * Request headers passed to the agent: only these (a list, not a deny-list, so that no credential of the user's —
 * the session cookie, `Authorization`, a proxy's forwarded identity — ever reaches code in a sandbox).
 */
const REQUEST_HEADERS: ReadonlySet<string> = new Set([
  "accept",
  "accept-language",
  "cache-control",
  "content-length",
  "content-type",
  "if-match",
  "if-modified-since",
  "if-none-match",
  "range",
  "user-agent",
  "x-request-id",
  "x-session-api-key",
]);

/** The headers of a request as the agent gets them (see REQUEST_HEADERS), with `host` the agent's. */
export function agentRequestHeaders(headers: IncomingHttpHeaders, host: string): Record<string, string> {
  const out: Record<string, string> = { host };
  for (const name of REQUEST_HEADERS) {
    const v = headers[name];
    if (typeof v === "string") out[name] = v;
  }
  return out;
}

/** Response headers passed back from the agent: only these (never Set-Cookie, never a CORS grant). */
const RESPONSE_HEADERS: ReadonlySet<string> = new Set([
  "cache-control",
  "content-disposition",
  "content-language",
  "content-length",
  "content-range",
  "accept-ranges",
  "content-type",
  "etag",
  "last-modified",
  "retry-after",
]);

/**
 * What a sandbox's answer may never do on the service's origin: set a cookie, be sniffed into something else, or
 * run script. Every answer gets nosniff and a CSP that sandboxes any document (no script, no same-origin access);
 * a file download, and any HTML, SVG or XML, is an attachment.
 */
export const ANSWER_HEADERS: Readonly<Record<string, string>> = {
  "x-content-type-options": "nosniff",
  "content-security-policy": "sandbox; default-src 'none'; frame-ancestors 'none'",
  "cross-origin-resource-policy": "same-origin",
  "referrer-policy": "no-referrer",
};

/**
 * The CORS grant of an agent call from a UI on another allowed origin (CORS_ORIGINS): the same grant the service's
 * own routes give that origin (its preflight is answered by the service, which cannot tell an agent call from its own
 * before the key comes); nothing for any other origin.
 */
export function corsGrant(origin: string | undefined, allowed: ReadonlySet<string>): Record<string, string> {
  if (origin === undefined || !allowed.has(origin)) return {};
  return {
    "access-control-allow-origin": origin,
    "access-control-allow-credentials": "true",
    "access-control-expose-headers": "x-request-id",
    vary: "Origin",
  };
}

const ACTIVE_TYPES = /^\s*(text\/html|application\/xhtml|image\/svg|text\/xml|application\/xml|[^;]*\+xml)/i;

/** The agent's response headers as the client gets them (see RESPONSE_HEADERS and ANSWER_HEADERS). */
export function clientResponseHeaders(
  headers: Record<string, string | string[] | undefined>,
  path: string,
): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const name of RESPONSE_HEADERS) {
    const v = headers[name];
    if (v !== undefined) out[name] = v;
  }
  Object.assign(out, ANSWER_HEADERS);
  const type = typeof out["content-type"] === "string" ? out["content-type"] : "";
  const disposition = typeof out["content-disposition"] === "string" ? out["content-disposition"] : "";
  if (path.startsWith("/api/file/download") || ACTIVE_TYPES.test(type)) {
    // The agent's filename, when it gave one, stays; the disposition is always attachment.
    const name = /filename\*?=[^;]+/i.exec(disposition)?.[0];
    out["content-disposition"] = name === undefined ? "attachment" : `attachment; ${name}`;
  }
  return out;
}
