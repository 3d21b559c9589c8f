/**
 * The git service's RPC face (GitService): the UI's repository, branch and account routes (/api/user/*) over the
 * caller's own provider tokens. It answers the account, installation and suggested-task calls itself and hands
 * the rest to its jobs: repositories and branches (repositories.ts), microagents (microagents.ts), the caller's
 * tokens and providers (provider-access.ts), the local repositories (local-repositories.ts).
 */
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { requireCaller } from "../../core/context.ts";
import { type FieldViolation, ValidationError } from "../../core/errors.ts";
import {
  type GetMicroagentContentRequest,
  type GetMicroagentContentResponse,
  type GetUserInfoResponse,
  GetUserInfoResponseSchema,
  type GitService as GitServiceDesc,
  type ListBranchesRequest,
  type ListBranchesResponse,
  type ListInstallationsRequest,
  type ListInstallationsResponse,
  ListInstallationsResponseSchema,
  type ListMicroagentsRequest,
  type ListMicroagentsResponse,
  type ListRepositoriesRequest,
  type ListRepositoriesResponse,
  type ListSuggestedTasksResponse,
  ListSuggestedTasksResponseSchema,
  type SearchBranchesRequest,
  type SearchBranchesResponse,
  type SearchRepositoriesRequest,
  type SearchRepositoriesResponse,
  SuggestedTaskSchema,
  TaskType,
} from "../../gen/workspace/v1/git_pb.js";
import type { GitProviderClients } from "../../ports/git-provider.ts";
import type { LocalRepositoryCatalog } from "../../ports/local-repositories.ts";
import { LocalRepositories } from "./local-repositories.ts";
import { Microagents } from "./microagents.ts";
import { ProviderAccess, type ProviderTokenSource, TOKEN_REQUIRED } from "./provider-access.ts";
import { aggregateFailure, providerCall } from "./provider-failures.ts";
import { NAMES, TYPES } from "./provider-names.ts";
import { Repositories } from "./repositories.ts";

export interface GitServiceOptions {
  tokens: ProviderTokenSource;
  clients: GitProviderClients;
  /**
   * The repositories of LOCAL_REPOSITORY_ROOTS (none: the server offers no local repositories). They are listed,
   * searched and have branches as provider `enterprise_sso` (core/repository-names), with or without a token.
   */
  local?: LocalRepositoryCatalog;
  /** Seconds a user's repository listing is answered from memory (0: never). */
  repositoryCacheSeconds: number;
  /** Cached listings kept at most (oldest dropped first). */
  repositoryCacheEntries?: number;
  now?: () => number;
}

/**
 * The UI's repository, branch and account routes (/api/user/*) over the caller's own provider tokens. Providers
 * without a stored token are skipped; listings across providers keep what the providers that answered returned.
 */
export class GitService implements ServiceImpl<typeof GitServiceDesc> {
  readonly #providers: ProviderAccess;
  readonly #local: LocalRepositories;
  readonly #repositories: Repositories;
  readonly #microagents: Microagents;

  constructor(options: GitServiceOptions) {
    const now = options.now ?? Date.now;
    this.#providers = new ProviderAccess(options.tokens, options.clients);
    this.#local = new LocalRepositories(options.local);
    this.#repositories = new Repositories({
      providers: this.#providers,
      local: this.#local,
      cacheSeconds: options.repositoryCacheSeconds,
      cacheEntries: options.repositoryCacheEntries ?? 5_000,
      now,
    });
    this.#microagents = new Microagents(this.#providers, now);
  }

  /** INVALID_ARGUMENT "Provider X doesn't support installations" for providers other than GitHub and Bitbucket. */
  async listInstallations(
    req: ListInstallationsRequest,
    ctx: HandlerContext,
  ): Promise<ListInstallationsResponse> {
    const issues: FieldViolation[] = [];
    const name = NAMES[req.provider];
    if (name === undefined)
      issues.push({ loc: ["provider"], msg: "Field required", type: "missing", input: null });
    if (issues.length > 0) throw new ValidationError(issues);
    const tokens = await this.#providers.userTokens(ctx);
    if (name !== "github" && name !== "bitbucket")
      throw new ConnectError(`Provider ${name} doesn't support installations`, Code.InvalidArgument);
    if (!tokens.some(([p]) => p === name)) return create(ListInstallationsResponseSchema, {});
    const ids = await providerCall(() =>
      this.#providers.client(tokens, name, ctx.signal).listInstallations(),
    );
    return create(ListInstallationsResponseSchema, { installationIds: ids });
  }

  listRepositories(req: ListRepositoriesRequest, ctx: HandlerContext): Promise<ListRepositoriesResponse> {
    return this.#repositories.listRepositories(req, ctx);
  }

  /**
   * The account behind the first provider token that works; UNAUTHENTICATED when every one is rejected. A caller
   * without a token on a server offering local repositories is answered as itself (its user id as id and login).
   */
  async getUserInfo(_req: unknown, ctx: HandlerContext): Promise<GetUserInfoResponse> {
    const tokens = await this.#providers.storedTokens(ctx);
    if (tokens.length === 0) {
      if (!this.#local.offered) throw new ConnectError(TOKEN_REQUIRED, Code.Unauthenticated);
      const { userId } = requireCaller(ctx);
      return create(GetUserInfoResponseSchema, { user: { id: userId, login: userId, avatarUrl: "" } });
    }
    const failures: unknown[] = [];
    for (const [p] of tokens) {
      try {
        const u = await this.#providers.client(tokens, p, ctx.signal).getUser();
        return create(GetUserInfoResponseSchema, {
          user: {
            id: u.id,
            login: u.login,
            avatarUrl: u.avatarUrl,
            ...(u.company === null ? {} : { company: u.company }),
            ...(u.name === null ? {} : { name: u.name }),
            ...(u.email === null ? {} : { email: u.email }),
          },
        });
      } catch (err) {
        failures.push(err);
      }
    }
    throw aggregateFailure(failures, "Need valid provider token");
  }

  searchRepositories(
    req: SearchRepositoriesRequest,
    ctx: HandlerContext,
  ): Promise<SearchRepositoriesResponse> {
    return this.#repositories.searchRepositories(req, ctx);
  }

  searchBranches(req: SearchBranchesRequest, ctx: HandlerContext): Promise<SearchBranchesResponse> {
    return this.#repositories.searchBranches(req, ctx);
  }

  listBranches(req: ListBranchesRequest, ctx: HandlerContext): Promise<ListBranchesResponse> {
    return this.#repositories.listBranches(req, ctx);
  }

  listMicroagents(req: ListMicroagentsRequest, ctx: HandlerContext): Promise<ListMicroagentsResponse> {
    return this.#microagents.listMicroagents(req, ctx);
  }

  getMicroagentContent(
    req: GetMicroagentContentRequest,
    ctx: HandlerContext,
  ): Promise<GetMicroagentContentResponse> {
    return this.#microagents.getMicroagentContent(req, ctx);
  }

  /** Tasks of every provider; none for a caller without a token on a server offering local repositories. */
  async listSuggestedTasks(_req: unknown, ctx: HandlerContext): Promise<ListSuggestedTasksResponse> {
    const tokens = await this.#providers.storedTokens(ctx);
    if (tokens.length === 0) {
      if (!this.#local.offered) throw new ConnectError("No providers set.", Code.Unauthenticated);
      return create(ListSuggestedTasksResponseSchema, {});
    }
    const tasks = await this.#providers.everyProvider(
      tokens,
      (c) => c.listSuggestedTasks(),
      "No providers set.",
      ctx.signal,
    );
    return create(ListSuggestedTasksResponseSchema, {
      tasks: tasks.map((t) =>
        create(SuggestedTaskSchema, {
          gitProvider: TYPES[t.provider],
          taskType: TaskType[t.taskType],
          repo: t.repo,
          issueNumber: BigInt(t.issueNumber),
          title: t.title,
        }),
      ),
    });
  }

  // ---- used by the conversation service ----

  /** Whether each pull request is still open, as the user's own tokens see it (see ProviderAccess). */
  pullRequestsOpen(
    userId: string,
    prs: readonly { provider: string; repository: string; number: number }[],
  ): Promise<boolean[]> {
    return this.#providers.pullRequestsOpen(userId, prs);
  }
}
