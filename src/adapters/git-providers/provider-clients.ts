import { isIP } from "node:net";
import { ProviderHostPolicy, parseHost } from "../../core/provider-host.ts";
import type { GitProviderApi, GitProviderClients, GitProviderName } from "../../ports/git-provider.ts";
import { BitbucketApi } from "./bitbucket-api.ts";
import { GitLabApi } from "./gitlab-api.ts";
import { ProviderHttp, RateLimitMemory } from "./provider-http.ts";

/** Public hosts used when a token has no host. */
export const PUBLIC_HOSTS: Record<string, string> = {
  github: "github.com",
  gitlab: "gitlab.com",
  bitbucket: "bitbucket.org",
  azure_devops: "dev.azure.com",
};

/**
 * The API root of a provider for a token's host (null/"": the public service): GitHub → api.github.com or
 * HOST/api/v3 (Enterprise Server), GitLab → HOST/api/v4, Bitbucket → api.bitbucket.org/2.0 or api.HOST/2.0 (the
 * reference's address for a custom Bitbucket domain; an IP literal, which only an operator can allow, has no
 * subdomain and is used as is), Azure DevOps → HOST. HTTPS unless the operator allowed the contacted host with an
 * http:// entry. Throws for a host the policy refuses (callers validate hosts before storing them; this is the
 * last line).
 */
export function providerApiBase(provider: string, host: string | null, hosts: ProviderHostPolicy): string {
  const written = host === null || host.trim() === "" ? (PUBLIC_HOSTS[provider] ?? "") : host;
  const parsed = hosts.check(written);
  if (typeof parsed === "string") throw new Error(`invalid ${provider} host: ${parsed}`);
  const origin = `${hosts.scheme(parsed)}://${parsed.authority}`;
  const isPublic = parsed.authority === PUBLIC_HOSTS[provider];
  switch (provider) {
    case "github":
      return isPublic ? "https://api.github.com" : `${origin}/api/v3`;
    case "gitlab":
      return `${origin}/api/v4`;
    case "bitbucket": {
      if (isPublic) return "https://api.bitbucket.org/2.0";
      if (isIP(parsed.hostname) !== 0) return `${origin}/2.0`;
      const api = parseHost(`api.${parsed.authority}`);
      if (typeof api === "string") throw new Error(`invalid ${provider} host: ${api}`);
      return `${hosts.scheme(api)}://${api.authority}/2.0`;
    }
    default:
      return origin;
  }
}

export interface HttpGitProviderClientsOptions {
  timeoutMs?: number;
  hosts?: ProviderHostPolicy;
  /** Host name → addresses (tests); default: the system resolver. */
  resolve?: (hostname: string) => Promise<string[]>;
}

/** Provider clients over HTTP: Octokit for GitHub, the shared fetch client for GitLab and Bitbucket. */
export class HttpGitProviderClients implements GitProviderClients {
  readonly #hosts: ProviderHostPolicy;
  readonly #timeoutMs: number;
  readonly #rateLimits = new RateLimitMemory();
  readonly #resolve: ((hostname: string) => Promise<string[]>) | undefined;

  constructor(options: HttpGitProviderClientsOptions = {}) {
    this.#hosts = options.hosts ?? new ProviderHostPolicy();
    this.#timeoutMs = options.timeoutMs ?? 5_000;
    this.#resolve = options.resolve;
  }

  client(
    provider: GitProviderName,
    token: string,
    host: string | null,
    signal?: AbortSignal,
  ): GitProviderApi {
    const base = providerApiBase(provider, host, this.#hosts);
    const http = new ProviderHttp(provider, token, new URL(base).origin, {
      timeoutMs: this.#timeoutMs,
      hosts: this.#hosts,
      rateLimits: this.#rateLimits,
      ...(this.#resolve ? { resolve: this.#resolve } : {}),
      ...(signal ? { signal } : {}),
    });
    switch (provider) {
      case "github":
        return lazyGitHub(token, base, http);
      case "gitlab":
        return new GitLabApi(token, base, http);
      case "bitbucket":
        return new BitbucketApi(token, base, http);
    }
  }
}

/**
 * The GitHub client, its module (and Octokit's ~8 MiB of endpoint tables) imported on its first call, so that a
 * server whose users never ask GitHub does not hold it. Every method of the port is async, so each call waits
 * for the import.
 */
function lazyGitHub(token: string, base: string, http: ProviderHttp): GitProviderApi {
  let api: Promise<GitProviderApi> | undefined;
  const load = (): Promise<GitProviderApi> =>
    (api ??= import("./github-api.ts").then((m) => new m.GitHubApi(token, base, http)));
  return new Proxy({} as GitProviderApi, {
    get: (_target, name) =>
      // Not a thenable: awaiting the client itself must not call into GitHub.
      name === "then"
        ? undefined
        : async (...args: unknown[]) => {
            const loaded = (await load()) as unknown as Record<PropertyKey, (...a: unknown[]) => unknown>;
            return loaded[name]?.(...args);
          },
  });
}
