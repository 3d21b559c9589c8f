import type { GitProviderVerifier, VerifyOutcome } from "../ports/git-provider-verifier.ts";

/** Public API hosts, used when a provider entry has no host. */
const PUBLIC: Record<string, string> = {
  github: "github.com",
  gitlab: "gitlab.com",
  bitbucket: "bitbucket.org",
  azure_devops: "dev.azure.com",
};

/**
 * `host` may be a bare domain (https is assumed) or a base URL with a scheme (e.g. a self-hosted instance on
 * http, or a fake provider in tests).
 */
function baseUrl(host: string): string {
  const h = host.replace(/\/+$/, "");
  return /^[a-z][a-z0-9+.-]*:\/\//i.test(h) ? h : `https://${h}`;
}

/** Where a token is checked, and how it is presented. */
function probe(
  provider: string,
  token: string,
  host: string | null,
): { url: string; headers: Record<string, string> } | null {
  const bearer = {
    Authorization: `Bearer ${token}`,
    Accept: "application/json",
    "User-Agent": "agent-workspace-service",
  };
  switch (provider) {
    case "github":
      return host === null || host === PUBLIC.github
        ? { url: "https://api.github.com/user", headers: bearer }
        : { url: `${baseUrl(host)}/api/v3/user`, headers: bearer };
    case "gitlab":
      return { url: `${baseUrl(host ?? (PUBLIC.gitlab as string))}/api/v4/user`, headers: bearer };
    case "bitbucket": {
      // Bitbucket tokens are "username:app_password" (basic auth) or a bearer access token.
      const headers = token.includes(":")
        ? { ...bearer, Authorization: `Basic ${Buffer.from(token).toString("base64")}` }
        : bearer;
      return host === null || host === PUBLIC.bitbucket
        ? { url: "https://api.bitbucket.org/2.0/user", headers }
        : { url: `${baseUrl(host)}/2.0/user`, headers };
    }
    case "azure_devops": {
      const basic = { ...bearer, Authorization: `Basic ${Buffer.from(`:${token}`).toString("base64")}` };
      return {
        url: `${baseUrl(host ?? (PUBLIC.azure_devops as string))}/_apis/connectionData`,
        headers: basic,
      };
    }
    default:
      return null; // enterprise_sso: nothing to check against
  }
}

/**
 * Checks tokens with one authenticated GET to the provider's "current user" endpoint. 2xx: valid; 401/403:
 * invalid; anything else (timeouts, DNS, 5xx, redirects to a login page): unreachable — so a network problem
 * is never reported as a bad token.
 */
export class HttpGitProviderVerifier implements GitProviderVerifier {
  readonly #timeoutMs: number;

  constructor(options: { timeoutMs?: number } = {}) {
    this.#timeoutMs = options.timeoutMs ?? 5_000;
  }

  async verify(provider: string, token: string, host: string | null): Promise<VerifyOutcome> {
    const p = probe(provider, token, host);
    if (p === null) return "valid";
    try {
      const res = await fetch(p.url, {
        headers: p.headers,
        redirect: "manual",
        signal: AbortSignal.timeout(this.#timeoutMs),
      });
      await res.body?.cancel();
      if (res.status >= 200 && res.status < 300) return "valid";
      if (res.status === 401 || res.status === 403) return "invalid";
      return "unreachable";
    } catch {
      return "unreachable";
    }
  }
}
