import { Code, ConnectError } from "@connectrpc/connect";
import { parseCookie, stringifySetCookie } from "cookie";
import type { SecretBox } from "../../core/secret-box.ts";

/** Session cookie over plain HTTP, and its name when set over HTTPS (`__Host-`: Secure, Path=/, no Domain). */
export const SESSION_COOKIE = "aws_session";
export const SECURE_SESSION_COOKIE = `__Host-${SESSION_COOKIE}`;
/** Additional data the sealed cookie value is bound to. */
const SEAL_CONTEXT = "browser-session";
const SAFE_METHODS: ReadonlySet<string> = new Set(["GET", "HEAD", "OPTIONS"]);
const LOOPBACK_HOSTS: ReadonlySet<string> = new Set(["localhost", "127.0.0.1", "[::1]"]);

/** Attributes of the session cookie (as @fastify/cookie's setCookie takes them). */
export interface CookieOptions {
  httpOnly: true;
  sameSite: "strict";
  secure: boolean;
  path: "/";
  maxAge: number;
}

/** A request header by lower-case name (first value), undefined when absent. */
export type HeaderLookup = (name: string) => string | undefined;

export interface BrowserSessionOptions {
  /** Seals the cookie value (AES-256-GCM): the cookie never carries the key in the clear. */
  box: SecretBox;
  /** Origins besides the server's own whose cookie-authenticated mutations are accepted (CORS_ORIGINS). */
  allowedOrigins: readonly string[];
  /** X-Forwarded-Proto / X-Forwarded-Host describe the browser's view of the server (TRUST_PROXY). */
  trustProxy: boolean;
  /** The server serves TLS itself (TLS_CERT_FILE): every request came over HTTPS (default false). */
  tls?: boolean;
  /** Lifetime of a sign-in. */
  maxAgeSeconds: number;
  /** AUTH_MODE=single-user: a request with neither key nor cookie acts as user "default". */
  singleUser: boolean;
}

/**
 * Set-Cookie values that end a browser session: the session cookie under both its names, empty and expired, with
 * the attributes it was set with (a browser replaces a cookie only by name, path and, for `__Host-`, Secure).
 */
export function endSessionCookies(): string[] {
  const expired = { value: "", maxAge: 0, httpOnly: true, sameSite: "strict", path: "/" } as const;
  return [
    stringifySetCookie({ name: SESSION_COOKIE, ...expired }),
    stringifySetCookie({ name: SECURE_SESSION_COOKIE, ...expired, secure: true }),
  ];
}

/** PERMISSION_DENIED (REST 403) for a browser request that fails the origin checks. */
export const forbiddenOrigin = (): ConnectError =>
  new ConnectError("Cross-origin request refused", Code.PermissionDenied);

/**
 * Browser sign-in: the session cookie holds the API key sealed with the server's key and an expiry, so the cookie
 * authenticates exactly as the X-Session-API-Key header does (the key is checked on every request, so revoking it
 * ends the session within the key cache's lifetime) and nothing is kept per session on the server.
 */
export class BrowserSessions {
  readonly #box: SecretBox;
  readonly #allowed: ReadonlySet<string>;
  readonly #trustProxy: boolean;
  readonly #tls: boolean;
  readonly maxAgeSeconds: number;
  readonly singleUser: boolean;

  constructor(options: BrowserSessionOptions) {
    this.#box = options.box;
    this.#allowed = new Set(options.allowedOrigins);
    this.#trustProxy = options.trustProxy;
    this.#tls = options.tls ?? false;
    this.maxAgeSeconds = options.maxAgeSeconds;
    this.singleUser = options.singleUser;
  }

  /** The cookie value of a sign-in with `key`, valid for maxAgeSeconds from now. */
  seal(key: string, now = Date.now()): string {
    return this.#box.seal(`${now + this.maxAgeSeconds * 1000}.${key}`, SEAL_CONTEXT);
  }

  /** The key in a cookie value; undefined when the value is not ours, was tampered with, or has expired. */
  open(value: string, now = Date.now()): string | undefined {
    let plain: string;
    try {
      plain = this.#box.open(value, SEAL_CONTEXT);
    } catch {
      return undefined;
    }
    const dot = plain.indexOf(".");
    const until = Number(plain.slice(0, dot));
    if (dot <= 0 || !(until > now)) return undefined;
    return plain.slice(dot + 1);
  }

  /**
   * The session key a request presents: the X-Session-API-Key header when sent, else the key of a valid session
   * cookie. A cookie-authenticated mutation (any method but GET/HEAD/OPTIONS) must come from the server's own
   * origin or an allowed one (Origin, else Referer), else PERMISSION_DENIED. In single-user mode a request with
   * neither is let through (undefined) only when addressed to a loopback host name and, for a mutation, not from
   * a foreign origin: no other web page (DNS rebinding included) acts as user "default".
   */
  keyOf(method: string, header: HeaderLookup): string | undefined {
    const key = header("x-session-api-key");
    if (key !== undefined) return key;
    const cookieHeader = header("cookie");
    if (cookieHeader?.includes(SESSION_COOKIE) === true) {
      const cookies = parseCookie(cookieHeader);
      const value = cookies[SECURE_SESSION_COOKIE] ?? cookies[SESSION_COOKIE];
      const sessionKey = value === undefined ? undefined : this.open(value);
      if (sessionKey !== undefined) {
        if (!SAFE_METHODS.has(method) && !this.originAllowed(header, false)) throw forbiddenOrigin();
        return sessionKey;
      }
    }
    if (this.singleUser) {
      const host = hostName(this.#forwarded(header, "host") ?? header("host"));
      if (!LOOPBACK_HOSTS.has(host) && !this.#allowedHost(host)) throw forbiddenOrigin();
      if (!SAFE_METHODS.has(method) && !this.originAllowed(header, true)) throw forbiddenOrigin();
    }
    return undefined;
  }

  /**
   * The key of a valid session cookie alone, whatever else the request carries (the agent proxy asks whose a
   * request is besides the sandbox key in its header); undefined without one.
   */
  cookieKeyOf(header: HeaderLookup): string | undefined {
    const cookieHeader = header("cookie");
    if (cookieHeader?.includes(SESSION_COOKIE) !== true) return undefined;
    const cookies = parseCookie(cookieHeader);
    const value = cookies[SECURE_SESSION_COOKIE] ?? cookies[SESSION_COOKIE];
    return value === undefined ? undefined : this.open(value);
  }

  /**
   * True when the request's Origin (else its Referer's origin) is the server's own or an allowed one. A request
   * with neither passes only when `absentOk` (clients that are not browsers send neither).
   */
  originAllowed(header: HeaderLookup, absentOk: boolean): boolean {
    let origin = header("origin") || undefined;
    if (origin === undefined || origin === "null") {
      const referer = header("referer") || undefined;
      if (referer === undefined) return absentOk && origin === undefined;
      try {
        origin = new URL(referer).origin;
      } catch {
        return false;
      }
    }
    return origin === this.ownOrigin(header) || this.#allowed.has(origin);
  }

  /**
   * The origin the browser sees this server at: https when the server serves TLS itself, else the scheme of
   * X-Forwarded-Proto when the proxy is trusted.
   */
  ownOrigin(header: HeaderLookup): string {
    const host = this.#forwarded(header, "host") ?? header("host") ?? "";
    return `${this.secure(header) ? "https" : "http"}://${host}`;
  }

  /**
   * The request came over TLS: to this server itself when it serves TLS, else to a trusted proxy in front of it
   * (X-Forwarded-Proto). The cookie is Secure then.
   */
  secure(header: HeaderLookup): boolean {
    return this.#tls || this.#forwarded(header, "proto") === "https";
  }

  /** Set-Cookie options of a sign-in (name by secureness: `__Host-` prefix over HTTPS). */
  cookie(header: HeaderLookup): { name: string; options: CookieOptions } {
    const secure = this.secure(header);
    return {
      name: secure ? SECURE_SESSION_COOKIE : SESSION_COOKIE,
      options: { httpOnly: true, sameSite: "strict", secure, path: "/", maxAge: this.maxAgeSeconds },
    };
  }

  #forwarded(header: HeaderLookup, what: "proto" | "host"): string | undefined {
    if (!this.#trustProxy) return undefined;
    const v = header(`x-forwarded-${what}`);
    return v?.split(",")[0]?.trim().toLowerCase() || undefined;
  }

  #allowedHost(host: string): boolean {
    for (const origin of this.#allowed) {
      try {
        if (new URL(origin).hostname === host) return true;
      } catch {
        // not a URL: never matches
      }
    }
    return false;
  }
}

/** The host name of a Host header value, without the port ("[::1]" kept bracketed). */
function hostName(host: string | undefined): string {
  if (host === undefined) return "";
  const h = host.trim().toLowerCase();
  if (h.startsWith("[")) return h.slice(0, h.indexOf("]") + 1);
  const colon = h.indexOf(":");
  return colon === -1 ? h : h.slice(0, colon);
}

/** HeaderLookup over Node's header object (IncomingHttpHeaders). */
export function nodeHeaders(headers: Record<string, string | string[] | undefined>): HeaderLookup {
  return (name) => {
    const v = headers[name];
    return typeof v === "string" ? v : v?.[0];
  };
}

/** Reads the session key of a request (see BrowserSessions.keyOf); throws PERMISSION_DENIED on an origin check. */
export type KeyOf = (method: string, header: HeaderLookup) => string | undefined;

/** The key of the X-Session-API-Key header only (no browser sessions). */
export const headerKeyOf: KeyOf = (_method, header) => header("x-session-api-key");
