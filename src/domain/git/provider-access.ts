/**
 * The caller's git providers: their stored tokens (read through the settings service's ProviderTokenSource, never
 * the user-data store), a client per token, and the two ways the git service asks several providers (every one,
 * or the first that has the thing).
 */
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { requireCaller } from "../../core/context.ts";
import {
  type GitProviderApi,
  type GitProviderClients,
  GitProviderError,
  type GitProviderName,
} from "../../ports/git-provider.ts";
import { REPOSITORY } from "./git-requests.ts";
import { aggregateFailure, toConnectError } from "./provider-failures.ts";
import { PROVIDERS } from "./provider-names.ts";

/** The caller's provider tokens in plaintext, keyed by lower-case provider name (see SettingsService). */
export interface ProviderTokenSource {
  openProviderTokens(userId: string): Promise<Record<string, { token: string; host: string | null }>>;
}

/** A caller's usable tokens in provider order. */
export type Tokens = [GitProviderName, { token: string; host: string | null }][];

export const TOKEN_REQUIRED = "Git provider token required. (such as GitHub).";

export class ProviderAccess {
  readonly #tokens: ProviderTokenSource;
  readonly #clients: GitProviderClients;

  constructor(tokens: ProviderTokenSource, clients: GitProviderClients) {
    this.#tokens = tokens;
    this.#clients = clients;
  }

  /** The caller's usable tokens in provider order (possibly none). */
  async storedTokens(ctx: HandlerContext): Promise<Tokens> {
    const { userId } = requireCaller(ctx);
    const stored = await this.#tokens.openProviderTokens(userId);
    const out: Tokens = [];
    for (const p of PROVIDERS) {
      const t = stored[p];
      if (t !== undefined && t.token !== "") out.push([p, t]);
    }
    return out;
  }

  /** The caller's tokens; UNAUTHENTICATED `required` when there are none. */
  async userTokens(ctx: HandlerContext, required = TOKEN_REQUIRED): Promise<Tokens> {
    const out = await this.storedTokens(ctx);
    if (out.length === 0) throw new ConnectError(required, Code.Unauthenticated);
    return out;
  }

  /** A client for one of the caller's tokens; `signal` (the call's cancellation) stops its provider calls. */
  client(tokens: Tokens, provider: GitProviderName, signal?: AbortSignal): GitProviderApi {
    const t = tokens.find(([p]) => p === provider)?.[1];
    if (t === undefined) throw new ConnectError(`No ${provider} token is stored`, Code.Unauthenticated);
    try {
      return this.#clients.client(provider, t.token, t.host, signal);
    } catch {
      throw new ConnectError(
        `The stored ${provider} host is not allowed; store the token again`,
        Code.FailedPrecondition,
      );
    }
  }

  /** Runs fn on every provider; the answers of those that answered, or the aggregate failure if none did. */
  async everyProvider<T>(
    tokens: Tokens,
    fn: (client: GitProviderApi) => Promise<T[]>,
    allRejected: string,
    signal?: AbortSignal,
  ): Promise<T[]> {
    const results = await Promise.allSettled(tokens.map(async ([p]) => fn(this.client(tokens, p, signal))));
    const out: T[] = [];
    const failures: unknown[] = [];
    for (const r of results) {
      if (r.status === "fulfilled") out.push(...r.value);
      else failures.push(r.reason);
    }
    if (failures.length === results.length) throw aggregateFailure(failures, allRejected);
    return out;
  }

  /** Tries providers in order; the first answer wins, "not found" moves on. null when none has it. */
  async firstProvider<T>(
    tokens: Tokens,
    fn: (client: GitProviderApi) => Promise<T>,
    signal?: AbortSignal,
  ): Promise<T | null> {
    const failures: unknown[] = [];
    for (const [p] of tokens) {
      try {
        return await fn(this.client(tokens, p, signal));
      } catch (err) {
        failures.push(err);
      }
    }
    const telling = failures.find((f) => !(f instanceof GitProviderError && f.kind === "not_found"));
    if (telling !== undefined) throw toConnectError(telling);
    return null;
  }

  /**
   * Whether each pull request (its provider's lower-case name, "owner/name", number) is still open, as the user's
   * own tokens see it; aligned with `prs`. True where that cannot be told (no token for the provider, a provider
   * not served here, a repository name that is not one, the provider failing or not answering): the reference
   * keeps such conversations in its listings "to be safe". Never rejects.
   */
  async pullRequestsOpen(
    userId: string,
    prs: readonly { provider: string; repository: string; number: number }[],
  ): Promise<boolean[]> {
    if (prs.length === 0) return [];
    let stored: Record<string, { token: string; host: string | null }>;
    try {
      stored = await this.#tokens.openProviderTokens(userId);
    } catch {
      return prs.map(() => true);
    }
    return Promise.all(
      prs.map(async ({ provider, repository, number }) => {
        const t = stored[provider];
        if (!(PROVIDERS as readonly string[]).includes(provider) || t === undefined || t.token === "")
          return true;
        if (!REPOSITORY.test(repository) || !Number.isSafeInteger(number) || number < 1) return true;
        try {
          return await this.#clients
            .client(provider as GitProviderName, t.token, t.host)
            .pullRequestOpen(repository, number);
        } catch {
          return true;
        }
      }),
    );
  }
}
