import { realpathSync } from "node:fs";
import { join, sep } from "node:path";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { NO_CACHE } from "../rest/rest-errors.ts";

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
