/**
 * A browser as the web UI's requests look to the server: one cookie jar, the page's Origin on every request
 * (fetch sends it on every non-GET request), JSON bodies. Cookies are kept as the server sets them.
 */
export class Browser {
  readonly base: string;
  readonly origin: string;
  readonly cookies = new Map<string, string>();
  /** Every Set-Cookie header seen, in order (for attribute checks). */
  readonly setCookies: string[] = [];
  /** Requests sent, as "METHOD path" (the replay order). */
  readonly log: string[] = [];

  constructor(base: string, origin = base) {
    this.base = base;
    this.origin = origin;
  }

  cookieHeader(): string | undefined {
    if (this.cookies.size === 0) return undefined;
    return [...this.cookies].map(([k, v]) => `${k}=${v}`).join("; ");
  }

  async request(
    method: string,
    path: string,
    body?: unknown,
    extra: Record<string, string> = {},
  ): Promise<{ status: number; body: unknown; headers: Headers; text: string }> {
    const headers: Record<string, string> = { accept: "application/json, text/plain, */*" };
    if (method !== "GET" && method !== "HEAD") headers.origin = this.origin;
    const cookie = this.cookieHeader();
    if (cookie !== undefined) headers.cookie = cookie;
    if (body !== undefined) headers["content-type"] = "application/json";
    Object.assign(headers, extra);
    this.log.push(`${method} ${path}`);
    const res = await fetch(`${this.base}${path}`, {
      method,
      headers,
      redirect: "manual",
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    for (const sc of res.headers.getSetCookie()) {
      this.setCookies.push(sc);
      const [pair = "", ...attrs] = sc.split(";");
      const eq = pair.indexOf("=");
      const name = pair.slice(0, eq).trim();
      const value = pair.slice(eq + 1).trim();
      const expired = attrs.some((a) => /^\s*max-age=0\s*$/i.test(a));
      if (expired || value === "") this.cookies.delete(name);
      else this.cookies.set(name, value);
    }
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // not JSON
    }
    return { status: res.status, body: parsed, headers: res.headers, text };
  }

  /** Signs in through the sign-in endpoint, as the sign-in page does. */
  async signIn(key: string): Promise<void> {
    const r = await this.request("POST", "/api/auth/session", { key });
    if (r.status !== 200) throw new Error(`sign-in failed: ${r.status} ${r.text}`);
  }
}
