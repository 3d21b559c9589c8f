import { ProviderHostPolicy } from "../../core/provider-host.ts";
import { GitProviderError } from "../../ports/git-provider.ts";
import type { GitProviderVerifier, VerifyOutcome } from "../../ports/git-provider-verifier.ts";
import { providerApiBase } from "./provider-clients.ts";
import { ProviderHttp, RateLimitMemory } from "./provider-http.ts";

/** The "current user" endpoint under each provider's API root. */
const PROBE: Record<string, string> = {
  github: "/user",
  gitlab: "/user",
  bitbucket: "/user",
  azure_devops: "/_apis/connectionData",
};

/**
 * Checks tokens with one authenticated GET to the provider's "current user" endpoint, through the shared
 * provider HTTP client (timeout, no redirects followed, host policy and internal-address check). 2xx: valid;
 * 401/403: invalid; anything else (timeouts, DNS, 5xx, redirects, rate limits): unreachable — so a network
 * problem is never reported as a bad token.
 */
export class HttpGitProviderVerifier implements GitProviderVerifier {
  readonly #timeoutMs: number;
  readonly #hosts: ProviderHostPolicy;
  readonly #rateLimits = new RateLimitMemory();
  readonly #resolve: ((hostname: string) => Promise<string[]>) | undefined;
  readonly #log: (msg: string, data: Record<string, unknown>) => void;

  constructor(
    options: {
      timeoutMs?: number;
      hosts?: ProviderHostPolicy;
      resolve?: (hostname: string) => Promise<string[]>;
      /**
       * Told why a check could not reach the provider (the caller only hears "unreachable"): the provider, the
       * host and the cause (timeout, DNS, refused connection, a host the policy does not allow…), never the token.
       */
      log?: (msg: string, data: Record<string, unknown>) => void;
    } = {},
  ) {
    this.#timeoutMs = options.timeoutMs ?? 5_000;
    this.#hosts = options.hosts ?? new ProviderHostPolicy();
    this.#resolve = options.resolve;
    this.#log = options.log ?? (() => {});
  }

  #unreachable(provider: string, host: string | null, token: string, err: unknown): "unreachable" {
    const cause = err instanceof Error ? describeCause(err) : String(err);
    this.#log("git provider token check could not reach the provider", {
      provider,
      host: host ?? "(public host)",
      cause: token.length >= 4 ? cause.replaceAll(token, "***") : cause,
    });
    return "unreachable";
  }

  async verify(provider: string, token: string, host: string | null): Promise<VerifyOutcome> {
    const path = PROBE[provider];
    if (path === undefined) return "valid"; // enterprise_sso: nothing to check against
    let base: string;
    try {
      base = providerApiBase(provider, host, this.#hosts);
    } catch (err) {
      return this.#unreachable(provider, host, token, err);
    }
    const authorization =
      provider === "azure_devops"
        ? `Basic ${Buffer.from(`:${token}`).toString("base64")}`
        : provider === "bitbucket" && token.includes(":")
          ? `Basic ${Buffer.from(token).toString("base64")}`
          : `Bearer ${token}`;
    const http = new ProviderHttp(provider, token, new URL(base).origin, {
      timeoutMs: this.#timeoutMs,
      hosts: this.#hosts,
      rateLimits: this.#rateLimits,
      ...(this.#resolve ? { resolve: this.#resolve } : {}),
    });
    try {
      const res = await http.fetch(`${base}${path}`, {
        headers: { authorization, accept: "application/json", "user-agent": "agent-workspace-service" },
      });
      await res.body?.cancel();
      return "valid";
    } catch (err) {
      if (err instanceof GitProviderError && (err.kind === "unauthorized" || err.kind === "forbidden"))
        return "invalid";
      return this.#unreachable(provider, host, token, err);
    }
  }
}

/** An error's message with its causes' (fetch's "fetch failed" says nothing; its cause says ECONNREFUSED …). */
function describeCause(err: Error): string {
  const parts = [err.message];
  let cause: unknown = err.cause;
  for (let depth = 0; cause instanceof Error && depth < 3; depth++) {
    parts.push(cause.message);
    cause = cause.cause;
  }
  return parts.join(": ");
}
