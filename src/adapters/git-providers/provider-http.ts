import { createHash } from "node:crypto";
import { lookup } from "node:dns/promises";
import { type ParsedHost, type ProviderHostPolicy, parseHost } from "../../core/provider-host.ts";
import { GitProviderError } from "../../ports/git-provider.ts";

export const LABELS: Record<string, string> = {
  github: "GitHub",
  gitlab: "GitLab",
  bitbucket: "Bitbucket",
  azure_devops: "Azure DevOps",
};

/**
 * Until when each token is rate-limited, learnt from the providers' answers (429, or a 403 with the limit
 * exhausted, or `x-ratelimit-remaining: 0` / `ratelimit-remaining: 0` on any answer): further calls with that
 * token fail at once without reaching the provider until the reset time. Keyed by a hash of provider, origin
 * and token; bounded.
 */
export class RateLimitMemory {
  readonly #until = new Map<string, number>();
  readonly #max: number;
  constructor(max = 10_000) {
    this.#max = max;
  }
  blockedFor(key: string, now: number): number {
    const until = this.#until.get(key);
    if (until === undefined) return 0;
    if (until <= now) {
      this.#until.delete(key);
      return 0;
    }
    return until - now;
  }
  block(key: string, until: number): void {
    this.#until.delete(key);
    if (this.#until.size >= this.#max) {
      const oldest = this.#until.keys().next();
      if (oldest.done !== true) this.#until.delete(oldest.value);
    }
    this.#until.set(key, until);
  }
}

export interface ProviderHttpOptions {
  timeoutMs: number;
  /** The caller's cancellation: an aborted call stops waiting for the provider at once. */
  signal?: AbortSignal;
  hosts: ProviderHostPolicy;
  rateLimits: RateLimitMemory;
  /** Host name → addresses (default: the system resolver). */
  resolve?: (hostname: string) => Promise<string[]>;
  now?: () => number;
}

const systemResolve = async (hostname: string): Promise<string[]> =>
  (await lookup(hostname, { all: true })).map((a) => a.address);

/**
 * Seconds until a rate limit resets, from Retry-After or the provider's reset header (epoch seconds); null when
 * the answer says neither.
 */
function retryAfterSeconds(headers: Headers, now: number): number | null {
  const retry = headers.get("retry-after");
  if (retry !== null) {
    const s = Number(retry);
    if (Number.isFinite(s)) return clamp(Math.ceil(s));
    const at = Date.parse(retry);
    if (Number.isFinite(at)) return clamp(Math.ceil((at - now) / 1000));
  }
  const reset = headers.get("x-ratelimit-reset") ?? headers.get("ratelimit-reset");
  if (reset !== null && /^\d+$/.test(reset)) return clamp(Math.ceil(Number(reset) - now / 1000));
  return null;
}
const clamp = (s: number) => Math.min(3600, Math.max(1, s));

/**
 * How long a token stays blocked when a limit says no time: GitHub's guidance for secondary rate limits without
 * headers is to wait at least one minute.
 */
const UNKNOWN_WAIT_SECONDS = 60;

/** Bytes of a refusal's body read to tell a rate limit from a permission problem. */
const REFUSAL_BODY_BYTES = 16 * 1024;

/** A 403 whose message says rate limit or abuse detection (GitHub's secondary limits may send no headers). */
const RATE_LIMIT_MESSAGE = /rate[ -]?limit|abuse/i;

/** The provider's message in a refusal body (JSON `message` / `error.message`, else the text), bounded. */
async function refusalMessage(res: Response): Promise<string> {
  let text = "";
  try {
    const reader = res.body?.getReader();
    if (reader !== undefined) {
      const decoder = new TextDecoder();
      let read = 0;
      while (read < REFUSAL_BODY_BYTES) {
        const { done, value } = await reader.read();
        if (done) break;
        read += value.byteLength;
        text += decoder.decode(value, { stream: true });
      }
      await reader.cancel().catch(() => {});
    }
  } catch {
    return "";
  }
  try {
    const body = JSON.parse(text) as { message?: unknown; error?: { message?: unknown } };
    const message = body.message ?? body.error?.message;
    return typeof message === "string" ? message : "";
  } catch {
    return text.slice(0, 1000);
  }
}

/**
 * The one HTTP client every provider adapter uses (Octokit gets it as its `fetch`): a timeout on every call, the
 * caller's cancellation, calls only to the API's own origin (a paging link to another host is not followed), no
 * redirects followed (a 3xx is a failure), the host checked against the operator's policy (names resolving to
 * internal addresses refused unless allowed), rate limits remembered per token, and provider statuses mapped to
 * GitProviderError. Errors never carry the token, the request's query or the provider's body.
 */
export class ProviderHttp {
  readonly provider: string;
  /** The API's origin: the only one calls go to. */
  readonly origin: string;
  readonly #options: ProviderHttpOptions;
  readonly #key: string;
  readonly #checked = new Map<string, Promise<void>>();

  constructor(provider: string, token: string, origin: string, options: ProviderHttpOptions) {
    this.provider = provider;
    this.origin = origin;
    this.#options = options;
    this.#key = createHash("sha256").update(`${provider}\0${origin}\0${token}`).digest("base64url");
  }

  #fail(kind: GitProviderError["kind"], message: string, retryAfter?: number | null): GitProviderError {
    return new GitProviderError(
      this.provider,
      kind,
      `${LABELS[this.provider] ?? this.provider} ${message}`,
      retryAfter ?? undefined,
    );
  }

  /** Refuses hosts that resolve to internal addresses unless the operator allowed the host. */
  async #checkHost(url: URL): Promise<void> {
    const authority = url.host;
    let check = this.#checked.get(authority);
    if (check === undefined) {
      check = (async () => {
        const parsed: ParsedHost | string = parseHost(authority);
        if (typeof parsed === "string") throw this.#fail("unavailable", "host is not valid");
        if (this.#options.hosts.allows(parsed)) return;
        let addresses: string[];
        try {
          addresses = await (this.#options.resolve ?? systemResolve)(parsed.hostname);
        } catch {
          throw this.#fail("unavailable", "host could not be resolved");
        }
        if (addresses.some((a) => !this.#options.hosts.addressAllowed(parsed, a)))
          throw this.#fail(
            "unavailable",
            "host resolves to an internal address (see GIT_PROVIDER_ALLOWED_HOSTS)",
          );
      })();
      this.#checked.set(authority, check);
    }
    return check;
  }

  /** `fetch` with the rules above; answers only 2xx responses. */
  readonly fetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const cancelled = this.#options.signal;
    if (cancelled?.aborted === true) throw this.#fail("cancelled", "call was cancelled by the client");
    const now = (this.#options.now ?? Date.now)();
    const wait = this.#options.rateLimits.blockedFor(this.#key, now);
    if (wait > 0)
      throw this.#fail(
        "rate_limited",
        "rate limit reached for this token; try again later",
        Math.ceil(wait / 1000),
      );
    const url = new URL(input instanceof Request ? input.url : input.toString());
    if (url.origin !== this.origin)
      throw this.#fail("unavailable", "pointed the call at another host, which is not followed");
    // One deadline for the name check and the call; the caller's cancellation ends both too.
    const timeout = AbortSignal.timeout(this.#options.timeoutMs);
    const stop = cancelled === undefined ? timeout : AbortSignal.any([cancelled, timeout]);
    const stopped = (): GitProviderError =>
      cancelled?.aborted === true
        ? this.#fail("cancelled", "call was cancelled by the client")
        : this.#fail("timeout", `did not answer within ${this.#options.timeoutMs} ms`);
    await new Promise<void>((resolve, reject) => {
      const onStop = () => reject(stopped());
      stop.addEventListener("abort", onStop, { once: true });
      this.#checkHost(url).then(
        () => {
          stop.removeEventListener("abort", onStop);
          resolve();
        },
        (err: unknown) => {
          stop.removeEventListener("abort", onStop);
          reject(err);
        },
      );
    });
    let res: Response;
    try {
      res = await fetch(input, {
        ...init,
        redirect: "manual",
        signal: init?.signal ? AbortSignal.any([init.signal, stop]) : stop,
      });
    } catch (err) {
      if (stop.aborted) throw stopped();
      if ((err as { name?: unknown }).name === "AbortError") throw err;
      // The network cause (DNS, refused, reset…) kept for the log; the message stays the same for the client.
      throw Object.assign(this.#fail("unavailable", "could not be reached"), { cause: err });
    }
    const status = res.status;
    const remaining = res.headers.get("x-ratelimit-remaining") ?? res.headers.get("ratelimit-remaining");
    let limited = status === 429 || (status === 403 && (remaining === "0" || res.headers.has("retry-after")));
    // GitHub's secondary limits (and older abuse detection) can be a bare 403 whose message says so.
    let refusal: string | null = null;
    if (status === 403 && !limited) {
      refusal = await refusalMessage(res);
      limited = RATE_LIMIT_MESSAGE.test(refusal);
    }
    if (limited || (remaining === "0" && status < 300)) {
      const seconds = retryAfterSeconds(res.headers, now);
      this.#options.rateLimits.block(this.#key, now + (seconds ?? UNKNOWN_WAIT_SECONDS) * 1000);
      if (limited) {
        if (refusal === null) await res.body?.cancel();
        throw this.#fail("rate_limited", "rate limit reached for this token; try again later", seconds);
      }
    }
    if (status >= 200 && status < 300) return res;
    if (refusal === null) await res.body?.cancel();
    if (status === 401) throw this.#fail("unauthorized", "rejected the token (invalid, expired or revoked)");
    if (status === 403) throw this.#fail("forbidden", "denied access with this token");
    if (status === 404) throw this.#fail("not_found", "found no such resource for this token");
    if (status >= 300 && status < 400)
      throw this.#fail("unavailable", "answered with a redirect, which is not followed");
    if (status >= 400 && status < 500) throw this.#fail("not_found", `refused the request (HTTP ${status})`);
    throw this.#fail("unavailable", `is unavailable (HTTP ${status})`);
  };

  /** GET a JSON document. */
  async getJson<T>(url: string, headers: Record<string, string>): Promise<{ data: T; headers: Headers }> {
    const res = await this.fetch(url, { headers: { accept: "application/json", ...headers } });
    return { data: await this.#json<T>(res), headers: res.headers };
  }

  /** POST a JSON body, answer the JSON document (GraphQL). */
  async postJson<T>(url: string, body: unknown, headers: Record<string, string>): Promise<T> {
    const res = await this.fetch(url, {
      method: "POST",
      headers: { accept: "application/json", "content-type": "application/json", ...headers },
      body: JSON.stringify(body),
    });
    return this.#json<T>(res);
  }

  /** GET a file's raw text. */
  async getText(url: string, headers: Record<string, string>): Promise<string> {
    const res = await this.fetch(url, { headers });
    try {
      return await res.text();
    } catch {
      throw this.#fail("unavailable", "broke off the answer");
    }
  }

  async #json<T>(res: Response): Promise<T> {
    try {
      return (await res.json()) as T;
    } catch {
      throw this.#fail("unavailable", "answered with a body that is not JSON");
    }
  }
}

/** The GitProviderError inside an error a library wrapped (Octokit wraps what its fetch throws). */
export function providerErrorIn(err: unknown): GitProviderError | null {
  let e: unknown = err;
  for (let i = 0; i < 5 && typeof e === "object" && e !== null; i++) {
    if (e instanceof GitProviderError) return e;
    e = (e as { cause?: unknown }).cause;
  }
  return null;
}

/** A Link header keeping only the links on `origin` (null when none is left). */
export function sameOriginLinks(link: string | null, origin: string): string | null {
  if (link === null) return null;
  const kept = [...link.matchAll(/<([^>]*)>((?:\s*;\s*[^,;<]+)*)/g)]
    .filter((m) => {
      try {
        return new URL(m[1] ?? "").origin === origin;
      } catch {
        return false;
      }
    })
    .map((m) => `<${m[1]}>${m[2] ?? ""}`);
  return kept.length === 0 ? null : kept.join(", ");
}

/** The URL of the `rel="next"` link in a Link header, or null. */
export function nextLink(link: string | null): string | null {
  if (link === null) return null;
  const m = /<([^>]+)>;\s*rel="next"/.exec(link);
  return m?.[1] ?? null;
}
