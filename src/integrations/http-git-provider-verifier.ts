import { GitProviderError } from "../ports/git-provider.ts";
import type { GitProviderVerifier, VerifyOutcome } from "../ports/git-provider-verifier.ts";
import { ProviderHostPolicy } from "../services/git/provider-host.ts";
import { providerApiBase } from "./git/provider-clients.ts";
import { ProviderHttp, RateLimitMemory } from "./git/provider-http.ts";

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

  constructor(
    options: {
      timeoutMs?: number;
      hosts?: ProviderHostPolicy;
      resolve?: (hostname: string) => Promise<string[]>;
    } = {},
  ) {
    this.#timeoutMs = options.timeoutMs ?? 5_000;
    this.#hosts = options.hosts ?? new ProviderHostPolicy();
    this.#resolve = options.resolve;
  }

  async verify(provider: string, token: string, host: string | null): Promise<VerifyOutcome> {
    const path = PROBE[provider];
    if (path === undefined) return "valid"; // enterprise_sso: nothing to check against
    let base: string;
    try {
      base = providerApiBase(provider, host, this.#hosts);
    } catch {
      return "unreachable";
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
      return "unreachable";
    }
  }
}
