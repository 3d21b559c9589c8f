import { createHash } from "node:crypto";
import { realpathSync } from "node:fs";
import { join, sep } from "node:path";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { NO_CACHE } from "../transports/rest/rest-errors.ts";

/** Hashed build assets: the name changes with the content, so they may be cached for good. */
const IMMUTABLE = "public, max-age=31536000, immutable";
/** The SPA entry: always revalidated, so a new build is picked up at once. */
const REVALIDATE = "no-cache";
/** Other files of the build (favicon, locales, ...). */
const SHORT = "public, max-age=3600";

/** Paths that are never the web UI: a miss there is the API's JSON 404, not the SPA. */
const SERVICE_PREFIXES = ["/api/", "/docs", "/socket.io", "/openapi.json", "/metrics", "/server_info"];
const SERVICE_PATHS: ReadonlySet<string> = new Set(["/api", "/alive", "/health", "/ready"]);

export interface UiOptions {
  /** The built frontend: the folder holding index.html and assets/ (frontend/build). */
  root: string;
  /** Whether the request is signed in (a key, a session cookie, or single-user mode). */
  signedIn: (req: FastifyRequest) => Promise<boolean>;
  /** Where a browser that is not signed in is sent, with ?next=<path>. */
  signInPath: string;
}

/** The route @fastify/static serves files on. */
const STATIC_ROUTE = "/*";

/**
 * Whether `path` (under `root`, itself a real path) resolves inside `root` once symbolic links are followed. A
 * path that does not exist is let through: nothing is served for it.
 */
function insideRoot(root: string, path: string): boolean {
  let real: string;
  try {
    real = realpathSync(join(root, path));
  } catch {
    return true;
  }
  return real === root || real.startsWith(`${root}${sep}`);
}

/** Whether a GET of this path falls back to the SPA's index.html (a client-side route, not a file or the API). */
export function isSpaRoute(path: string): boolean {
  if (SERVICE_PATHS.has(path) || SERVICE_PREFIXES.some((p) => path.startsWith(p))) return false;
  if (path.startsWith("/assets/")) return false;
  const last = path.slice(path.lastIndexOf("/") + 1);
  return !last.includes(".");
}

/**
 * Serves a built OpenHands frontend at "/" with @fastify/static (loaded only when UI_DIR is set): files with
 * their content types, hashed /assets/* cached for a year, index.html never cached. Client-side routes
 * (/settings, /conversations/abc, ...) get index.html (see notFound); a browser that is not signed in is sent to
 * the sign-in page first.
 */
export async function registerUi(
  http: FastifyInstance,
  options: UiOptions,
): Promise<(req: FastifyRequest, reply: FastifyReply) => Promise<FastifyReply> | undefined> {
  const { default: fastifyStatic } = await import("@fastify/static");
  const root = realpathSync(options.root);
  await http.register(fastifyStatic, {
    root,
    prefix: "/",
    index: false,
    dotfiles: "ignore",
    cacheControl: false,
    // HTML pages are the app's entries, served by `app` below behind sign-in, never by the static route; and no
    // file is served from outside UI_DIR through a symbolic link in it.
    allowedPath: (path, _root, req) =>
      !(req.routeOptions.url === STATIC_ROUTE && path.toLowerCase().endsWith(".html")) &&
      insideRoot(root, path),
    setHeaders: (reply, path) => {
      if (path.includes(`${sep}assets${sep}`)) void reply.header("cache-control", IMMUTABLE);
      else if (path.endsWith(`${sep}index.html`)) void reply.header("cache-control", REVALIDATE);
      else void reply.header("cache-control", SHORT);
    },
  });
  const app = async (req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> => {
    if (!(await options.signedIn(req))) {
      const next = encodeURIComponent(req.url);
      return reply.headers(NO_CACHE).redirect(`${options.signInPath}?next=${next}`, 302);
    }
    return reply.header("cache-control", REVALIDATE).sendFile("index.html");
  };
  http.get("/", app);
  http.get("/index.html", app);
  /** The not-found handler's SPA part: undefined when the request is not a client-side route. */
  return (req, reply) => {
    if (req.method !== "GET" && req.method !== "HEAD") return undefined;
    const q = req.url.indexOf("?");
    const path = q === -1 ? req.url : req.url.slice(0, q);
    return isSpaRoute(path) ? app(req, reply) : undefined;
  };
}

/** The command that builds the OpenHands web UI (scripts/build-ui.ts), as the page without a UI names it. */
export const UI_BUILD_COMMAND = "npm run ui -- <OpenHands checkout or git URL>";

const NO_UI_STYLE =
  "body{font:16px/1.5 system-ui,sans-serif;max-width:44rem;margin:3rem auto;padding:0 1rem;color:#222}" +
  "code{background:#f2f2f2;padding:.1rem .3rem;border-radius:3px}li{margin:.5rem 0}";

const escapeHtml = (s: string): string =>
  s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");

/**
 * The page `/` shows when the server serves no web UI (UI_DIR unset): where to sign in, where the API's documents
 * are, and how to add the UI. No script; its one inline style is allowed by its hash.
 */
export function noUiPage(options: { signInPath: string; docsHere: boolean }): { html: string; csp: string } {
  const docs = options.docsHere
    ? '<a href="/docs">/docs</a> (Swagger UI) and <a href="/openapi.json">/openapi.json</a>'
    : "<code>/docs</code> and <code>/openapi.json</code> on the admin listener (<code>ADMIN_PORT</code>)";
  const html = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Agent Workspace Service</title><style>${NO_UI_STYLE}</style></head>
<body><main>
<h1>Agent Workspace Service</h1>
<p>This server answers the OpenHands app server API. It serves no web UI (<code>UI_DIR</code> is not set).</p>
<ul>
<li><a href="${options.signInPath}">Sign in</a> with an API key (the server printed one at its first start).</li>
<li>The API's documents: ${docs}.</li>
<li>A conversation in the terminal: <code>npm run cli -- chat</code>.</li>
<li>The OpenHands web UI: build it once with <code>${escapeHtml(UI_BUILD_COMMAND)}</code> in the service's checkout,
then start the server with the <code>UI_DIR=&hellip; npm start</code> line it prints.</li>
</ul>
</main></body></html>
`;
  const hash = createHash("sha256").update(NO_UI_STYLE).digest("base64");
  return { html, csp: `default-src 'none'; style-src 'sha256-${hash}'; base-uri 'none'; form-action 'none'` };
}

/** Serves {@link noUiPage} at `/` and `/index.html` (GET and HEAD); every other path keeps the JSON 404. */
export function registerNoUiPage(
  http: FastifyInstance,
  options: { signInPath: string; docsHere: boolean },
): void {
  const page = noUiPage(options);
  const show = async (_req: FastifyRequest, reply: FastifyReply) =>
    reply
      .headers({
        ...NO_CACHE,
        "content-type": "text/html; charset=utf-8",
        "content-security-policy": page.csp,
        "x-frame-options": "DENY",
        "referrer-policy": "same-origin",
      })
      .send(page.html);
  http.get("/", show);
  http.get("/index.html", show);
}
