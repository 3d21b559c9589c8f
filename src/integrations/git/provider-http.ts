import { createHash } from "node:crypto";
import { lookup } from "node:dns/promises";
import { GitProviderError } from "../../ports/git-provider.ts";
import { type ParsedHost, type ProviderHostPolicy, parseHost } from "../../services/git/provider-host.ts";

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
  hosts: ProviderHostPolicy;
  rateLimits: RateLimitMemory;
  /** Host name → addresses (default: the system resolver). */
  resolve?: (hostname: string) => Promise<string[]>;
  now?: () => number;
}

const systemResolve = async (hostname: string): Promise<string[]> =>
  (await lookup(hostname, { all: true })).map((a) => a.address);

/** Seconds until a rate limit resets, from Retry-After or the provider's reset header (epoch seconds). */
function retryAfterSeconds(headers: Headers, now: number): number {
  const retry = headers.get("retry-after");
  if (retry !== null) {
    const s = Number(retry);
    if (Number.isFinite(s)) return clamp(Math.ceil(s));
    const at = Date.parse(retry);
    if (Number.isFinite(at)) return clamp(Math.ceil((at - now) / 1000));
  }
  const reset = headers.get("x-ratelimit-reset") ?? headers.get("ratelimit-reset");
  if (reset !== null && /^\d+$/.test(reset)) return clamp(Math.ceil(Number(reset) - now / 1000));
  return 60;
}
const clamp = (s: number) => Math.min(3600, Math.max(1, s));

/**
 * The one HTTP client every provider adapter uses (Octokit gets it as its `fetch`): a timeout on every call, no
 * redirects followed (a 3xx is a failure), the host checked against the operator's policy (names resolving to
 * internal addresses refused unless allowed), rate-limit headers remembered per token, and provider statuses
 * mapped to GitProviderError. Errors never carry the token, the request's query or the provider's body.
 */
export class ProviderHttp {
  readonly provider: string;
  readonly #options: ProviderHttpOptions;
  readonly #key: string;
  readonly #checked = new Map<string, Promise<void>>();

  constructor(provider: string, token: string, origin: string, options: ProviderHttpOptions) {
    this.provider = provider;
    this.#options = options;
    this.#key = createHash("sha256").update(`${provider}\0${origin}\0${token}`).digest("base64url");
  }

  #fail(kind: GitProviderError["kind"], message: string, retryAfter?: number): GitProviderError {
    return new GitProviderError(
      this.provider,
      kind,
      `${LABELS[this.provider] ?? this.provider} ${message}`,
      retryAfter,
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
    const now = (this.#options.now ?? Date.now)();
    const wait = this.#options.rateLimits.blockedFor(this.#key, now);
    if (wait > 0)
      throw this.#fail(
        "rate_limited",
        "rate limit reached for this token; try again later",
        Math.ceil(wait / 1000),
      );
    const url = new URL(input instanceof Request ? input.url : input.toString());
    // One deadline for the name check and the call.
    const timeout = AbortSignal.timeout(this.#options.timeoutMs);
    await new Promise<void>((resolve, reject) => {
      const onTimeout = () =>
        reject(this.#fail("timeout", `did not answer within ${this.#options.timeoutMs} ms`));
      timeout.addEventListener("abort", onTimeout, { once: true });
      this.#checkHost(url).then(
        () => {
          timeout.removeEventListener("abort", onTimeout);
          resolve();
        },
        (err: unknown) => {
          timeout.removeEventListener("abort", onTimeout);
          reject(err);
        },
      );
    });
    let res: Response;
    try {
      res = await fetch(input, {
        ...init,
        redirect: "manual",
        signal: init?.signal ? AbortSignal.any([init.signal, timeout]) : timeout,
      });
    } catch (err) {
      if (timeout.aborted) throw this.#fail("timeout", `did not answer within ${this.#options.timeoutMs} ms`);
      if ((err as { name?: unknown }).name === "AbortError") throw err;
      throw this.#fail("unavailable", "could not be reached");
    }
    const status = res.status;
    const remaining = res.headers.get("x-ratelimit-remaining") ?? res.headers.get("ratelimit-remaining");
    const limited =
      status === 429 || (status === 403 && (remaining === "0" || res.headers.has("retry-after")));
    if (limited || (remaining === "0" && status < 300)) {
      const seconds = retryAfterSeconds(res.headers, now);
      this.#options.rateLimits.block(this.#key, now + seconds * 1000);
      if (limited) {
        await res.body?.cancel();
        throw this.#fail("rate_limited", "rate limit reached for this token; try again later", seconds);
      }
    }
    if (status >= 200 && status < 300) return res;
    await res.body?.cancel();
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
    try {
      return { data: (await res.json()) as T, headers: res.headers };
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

/** The URL of the `rel="next"` link in a Link header, or null. */
export function nextLink(link: string | null): string | null {
  if (link === null) return null;
  const m = /<([^>]+)>;\s*rel="next"/.exec(link);
  return m?.[1] ?? null;
}
