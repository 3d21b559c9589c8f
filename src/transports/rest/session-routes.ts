import { createHash } from "node:crypto";
import { fastifyCookie } from "@fastify/cookie";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Caller } from "../../core/context.ts";
import { unauthenticated } from "../../core/errors.ts";
import { object } from "../../core/model/containers.ts";
import { str } from "../../core/model/scalars.ts";
import { validate } from "../../core/model/validate.ts";
import type { Admit, Authenticate } from "../kit/admission.ts";
import {
  type BrowserSessions,
  endSessionCookies,
  forbiddenOrigin,
  nodeHeaders,
} from "../kit/browser-session.ts";
import { NO_CACHE, restError, sendRestError, writeRestError } from "./rest-errors.ts";

export interface SessionRoutesOptions {
  sessions: BrowserSessions;
  authenticate: Authenticate;
  admit: Admit;
}

/** The sign-in page's path. */
export const SIGN_IN_PATH = "/sign-in";
export const SIGN_IN_API_PATH = "/api/auth/sign-in";

const signInBody = object(
  { key: { schema: str({ minLength: 1, maxLength: 512 }), required: true } },
  {
    title: "SignIn",
  },
);

/**
 * Browser sign-in: the page at /sign-in, and /api/auth/session behind it. POST with {"key": ...} checks the key
 * and sets the session cookie (HttpOnly, SameSite=Strict, Secure behind a TLS proxy); GET answers who is signed
 * in (by header, cookie or single-user mode); DELETE (or POST /api/auth/sign-out) clears the cookie, from the
 * server's own origin (or an allowed one) only: without Origin or Referer it is refused too.
 */
export function sessionRoutes(options: SessionRoutesOptions) {
  const { sessions } = options;
  return async (app: FastifyInstance): Promise<void> => {
    // Cookies are read by the one session-key function of every transport (browser-session.ts); the plugin only
    // writes them here, so its parsing hook is off and it applies to these routes alone.
    await app.register(fastifyCookie, { hook: false });
    const page = signInPage();
    const showPage = async (_req: FastifyRequest, reply: FastifyReply) =>
      reply
        .headers({
          ...NO_CACHE,
          "content-type": "text/html; charset=utf-8",
          "content-security-policy": page.csp,
          "x-frame-options": "DENY",
          "referrer-policy": "same-origin",
        })
        .send(page.html);
    app.get(SIGN_IN_PATH, showPage);
    // Also under /api: reachable through a proxy that forwards only /api (the frontend's dev server).
    app.get(SIGN_IN_API_PATH, showPage);

    app.post("/api/auth/session", async (req, reply) => {
      const header = nodeHeaders(req.headers);
      // Login CSRF: a browser on a foreign origin cannot sign this browser in as someone else.
      if (!sessions.originAllowed(header, true)) throw forbiddenOrigin();
      const { key } = validate(signInBody, req.body, ["body"]);
      const caller = await admitted(options, key);
      if (caller === null) return unauthorized(reply);
      const cookie = sessions.cookie(header);
      return reply
        .headers(NO_CACHE)
        .setCookie(cookie.name, sessions.seal(key), cookie.options)
        .send({ user_id: caller.userId, expires_in: sessions.maxAgeSeconds });
    });

    app.get("/api/auth/session", async (req, reply) => {
      const header = nodeHeaders(req.headers);
      const key = sessions.keyOf("GET", header);
      const caller = await admitted(options, key);
      if (caller === null) return unauthorized(reply);
      const via =
        header("x-session-api-key") !== undefined ? "header" : key !== undefined ? "cookie" : "single-user";
      return reply.headers(NO_CACHE).send({ user_id: caller.userId, authenticated_by: via });
    });

    const signOut = async (req: FastifyRequest, reply: FastifyReply) => {
      const header = nodeHeaders(req.headers);
      // Only a page of this server (or an allowed origin) signs a browser out: a request must say where it comes
      // from (Origin, else Referer), as every browser's fetch and form POST does.
      if (!sessions.originAllowed(header, false)) throw forbiddenOrigin();
      return reply.code(204).headers(NO_CACHE).header("set-cookie", endSessionCookies()).send();
    };
    app.delete("/api/auth/session", signOut);
    app.post("/api/auth/sign-out", signOut);

    app.setErrorHandler((err, req, reply) => {
      const e = restError(err);
      if (e.status >= 500 && e.status !== 503) req.log.error({ err }, "request failed");
      return writeRestError(reply, { ...e, headers: {} });
    });
  };
}

async function admitted(options: SessionRoutesOptions, key: string | undefined): Promise<Caller | null> {
  const caller = await options.authenticate(key);
  if (caller !== null) options.admit(caller);
  return caller;
}

function unauthorized(reply: FastifyReply): FastifyReply {
  return sendRestError(reply, unauthenticated());
}

/** The sign-in page: plain HTML, one inline script allowed by its hash, nothing loaded from elsewhere. */
function signInPage(): { html: string; csp: string } {
  const script = `
const form = document.getElementById("sign-in");
const message = document.getElementById("message");
const who = document.getElementById("who");
function next() {
  const n = new URLSearchParams(location.search).get("next");
  return n && n.startsWith("/") && !n.startsWith("//") && !n.startsWith("/\\\\") ? n : "/";
}
fetch("/api/auth/session", { credentials: "same-origin" }).then(async (r) => {
  if (r.ok) {
    const body = await r.json();
    who.textContent = "Signed in as " + body.user_id + ". ";
    document.getElementById("signed-in").hidden = false;
  }
});
document.getElementById("sign-out").addEventListener("click", async () => {
  await fetch("/api/auth/sign-out", { method: "POST", credentials: "same-origin" });
  location.reload();
});
form.addEventListener("submit", async (event) => {
  event.preventDefault();
  message.textContent = "";
  const r = await fetch("/api/auth/session", {
    method: "POST",
    credentials: "same-origin",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ key: form.elements.key.value.trim() }),
  });
  if (r.ok) location.assign(next());
  else message.textContent = r.status === 401 ? "Unknown or revoked key." : "Sign-in failed (HTTP " + r.status + ").";
});
`;
  const hash = createHash("sha256").update(script).digest("base64");
  const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in · Agent Workspace Service</title>
<style>
body { font: 16px system-ui, sans-serif; background: #0d0f11; color: #e6e6e6; display: grid; place-items: center; min-height: 100vh; margin: 0; }
main { width: min(26rem, 90vw); }
input { width: 100%; box-sizing: border-box; padding: .6rem; margin: .4rem 0 1rem; border-radius: 6px; border: 1px solid #555; background: #17191c; color: inherit; }
button { padding: .6rem 1.2rem; border-radius: 6px; border: 0; background: #c9b974; color: #0d0f11; font-weight: 600; cursor: pointer; }
#message { color: #ff8080; min-height: 1.5em; }
</style>
</head>
<body>
<main>
<h1>Sign in</h1>
<p id="signed-in" hidden><span id="who"></span><button type="button" id="sign-out">Sign out</button></p>
<form id="sign-in">
<label for="key">API key (as sent in X-Session-API-Key)</label>
<input id="key" name="key" type="password" autocomplete="current-password" required maxlength="512" autofocus>
<button type="submit">Sign in</button>
<p id="message" role="alert"></p>
</form>
</main>
<script>${script}</script>
</body>
</html>
`;
  const csp = `default-src 'none'; script-src 'sha256-${hash}'; style-src 'unsafe-inline'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`;
  return { html, csp };
}
