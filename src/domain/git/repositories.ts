/**
 * The caller's repositories and branches: listed and searched across their providers and the local repositories.
 * Repository listings are answered from a short per-user cache (keyed by the tokens too, so a new token is never
 * answered with the old one's listing); concurrent identical calls share one provider round trip.
 */
import { createHash } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { requireCaller } from "../../core/context.ts";
import { type FieldViolation, ValidationError } from "../../core/errors.ts";
import { localRepositoryFolder } from "../../core/repository-names.ts";
import {
  GitBranchSchema,
  GitRepositorySchema,
  type ListBranchesRequest,
  type ListBranchesResponse,
  ListBranchesResponseSchema,
  type ListRepositoriesRequest,
  type ListRepositoriesResponse,
  ListRepositoriesResponseSchema,
  OwnerType,
  type SearchBranchesRequest,
  type SearchBranchesResponse,
  SearchBranchesResponseSchema,
  type SearchRepositoriesRequest,
  type SearchRepositoriesResponse,
  SearchRepositoriesResponseSchema,
} from "../../gen/workspace/v1/git_pb.js";
import type { BranchRecord, GitProviderName, RepositoryRecord } from "../../ports/git-provider.ts";
import { intIn, REPO_SORTS, repositoryName, SEARCH_SORTS, selectedProvider, text } from "./git-requests.ts";
import { type LocalRepositories, localMatch, localRepositoryMessage } from "./local-repositories.ts";
import { type ProviderAccess, TOKEN_REQUIRED, type Tokens } from "./provider-access.ts";
import { providerCall } from "./provider-failures.ts";
import { TYPES } from "./provider-names.ts";

const MAX_ALL_REPOSITORIES = 1000;

function repositoryMessage(r: RepositoryRecord) {
  return create(GitRepositorySchema, {
    id: r.id,
    fullName: r.fullName,
    gitProvider: TYPES[r.provider],
    isPublic: r.isPublic,
    ...(r.stargazersCount === null ? {} : { stargazersCount: BigInt(r.stargazersCount) }),
    ...(r.linkHeader === null ? {} : { linkHeader: r.linkHeader }),
    ...(r.pushedAt === null ? {} : { pushedAt: r.pushedAt }),
    ownerType: r.ownerType === "organization" ? OwnerType.ORGANIZATION : OwnerType.USER,
    ...(r.mainBranch === null ? {} : { mainBranch: r.mainBranch }),
  });
}

function branchMessage(b: BranchRecord) {
  return create(GitBranchSchema, {
    name: b.name,
    commitSha: b.commitSha,
    protected: b.protected,
    ...(b.lastPushDate === null ? {} : { lastPushDate: b.lastPushDate }),
  });
}

export interface RepositoriesOptions {
  providers: ProviderAccess;
  local: LocalRepositories;
  /** Seconds a user's repository listing is answered from memory (0: never). */
  cacheSeconds: number;
  /** Cached listings kept at most (oldest dropped first). */
  cacheEntries: number;
  now: () => number;
}

/** ListRepositories, SearchRepositories, ListBranches and SearchBranches of the git service. */
export class Repositories {
  readonly #providers: ProviderAccess;
  readonly #local: LocalRepositories;
  readonly #ttlMs: number;
  readonly #maxEntries: number;
  readonly #now: () => number;
  readonly #cache = new Map<string, { expires: number; value: Promise<RepositoryRecord[]> }>();

  constructor(options: RepositoriesOptions) {
    this.#providers = options.providers;
    this.#local = options.local;
    this.#ttlMs = options.cacheSeconds * 1000;
    this.#maxEntries = options.cacheEntries;
    this.#now = options.now;
  }

  /** A cached repository listing, or the provider's answer (shared by concurrent identical calls). */
  #cached(key: string, load: () => Promise<RepositoryRecord[]>): Promise<RepositoryRecord[]> {
    if (this.#ttlMs <= 0) return load();
    const now = this.#now();
    const hit = this.#cache.get(key);
    if (hit !== undefined && hit.expires > now) return hit.value;
    if (hit !== undefined) this.#cache.delete(key);
    while (this.#cache.size >= this.#maxEntries) {
      const oldest = this.#cache.keys().next();
      if (oldest.done === true) break;
      this.#cache.delete(oldest.value);
    }
    const value = load();
    this.#cache.set(key, { expires: now + this.#ttlMs, value });
    value.catch(() => {
      if (this.#cache.get(key)?.value === value) this.#cache.delete(key);
    });
    return value;
  }

  async listRepositories(
    req: ListRepositoriesRequest,
    ctx: HandlerContext,
  ): Promise<ListRepositoriesResponse> {
    const issues: FieldViolation[] = [];
    const sort = req.sort ?? "pushed";
    if (!REPO_SORTS.has(sort))
      issues.push({
        loc: ["sort"],
        msg: "sort must be pushed, updated, created or full_name",
        type: "value_error",
        input: sort,
      });
    const selected = selectedProvider(req.selectedProvider, issues, this.#local.offered);
    const page = intIn(req.page, 0, 1, 100_000, "page", issues);
    const perPage = intIn(req.perPage, 0, 1, 100, "per_page", issues);
    const installationId = req.installationId ?? null;
    if (installationId !== null && !/^[A-Za-z0-9_.{}-]{1,100}$/.test(installationId))
      issues.push({
        loc: ["installation_id"],
        msg: "installation_id is not valid",
        type: "value_error",
        input: installationId,
      });
    if (selected !== null && (page === 0 || perPage === 0))
      issues.push({
        loc: ["page"],
        msg: "page and per_page are required with selected_provider",
        type: "missing",
        input: null,
      });
    if (selected === "github" && installationId !== null && !/^\d+$/.test(installationId))
      issues.push({
        loc: ["installation_id"],
        msg: "a GitHub installation id is a number",
        type: "value_error",
        input: installationId,
      });
    if (issues.length > 0) throw new ValidationError(issues);
    if (selected === "local") return this.#local.page(page, perPage);
    const tokens = await this.#providers.storedTokens(ctx);
    // The local repositories come after the provider's first page (the UI reads the next page's link from the
    // first entry), and alone for a caller without a token or when the provider fails.
    const withLocal = selected === null || (page <= 1 && installationId === null);
    const local = withLocal ? (await this.#local.list()).map((r) => localRepositoryMessage(r)) : [];
    if (tokens.length === 0) {
      if (!this.#local.offered) throw new ConnectError(TOKEN_REQUIRED, Code.Unauthenticated);
      return create(ListRepositoriesResponseSchema, { repositories: local });
    }
    const { userId } = requireCaller(ctx);
    const used = selected === null ? tokens : tokens.filter(([p]) => p === selected);
    const fingerprint = createHash("sha256");
    for (const [p, t] of used) fingerprint.update(`${p}\0${t.host ?? ""}\0${t.token}\0`);
    const key = `${userId}\0${fingerprint.digest("base64url")}\0${selected}\0${sort}\0${page}\0${perPage}\0${installationId}`;
    // A cached listing is shared by concurrent callers: one caller going away must not cancel it for the others
    // (the provider timeout still bounds it), so it gets no caller's signal.
    let repositories: RepositoryRecord[];
    try {
      repositories = await this.#cached(key, () =>
        selected === null
          ? this.#providers.everyProvider(
              tokens,
              (c) => c.listAllRepositories(sort, MAX_ALL_REPOSITORIES),
              TOKEN_REQUIRED,
            )
          : providerCall(() =>
              this.#providers
                .client(tokens, selected)
                .listRepositories({ sort, page, perPage, installationId }),
            ),
      );
    } catch (err) {
      // The provider failing: the local repositories still answer.
      if (local.length > 0) return create(ListRepositoriesResponseSchema, { repositories: local });
      throw err;
    }
    return create(ListRepositoriesResponseSchema, {
      repositories: [...repositories.map(repositoryMessage), ...local],
    });
  }

  async searchRepositories(
    req: SearchRepositoriesRequest,
    ctx: HandlerContext,
  ): Promise<SearchRepositoriesResponse> {
    const issues: FieldViolation[] = [];
    const query = text(req.query, "query", 512, issues);
    const perPage = intIn(req.perPage, 5, 1, 100, "per_page", issues);
    const sort = req.sort ?? "stars";
    if (!SEARCH_SORTS.has(sort))
      issues.push({
        loc: ["sort"],
        msg: "sort must be stars, forks, updated or help-wanted-issues",
        type: "value_error",
        input: sort,
      });
    const order = req.order ?? "desc";
    if (order !== "asc" && order !== "desc")
      issues.push({ loc: ["order"], msg: "order must be asc or desc", type: "value_error", input: order });
    const selected = selectedProvider(req.selectedProvider, issues, this.#local.offered);
    if (issues.length > 0) throw new ValidationError(issues);
    // Local repositories whose name or path matches, after the provider's (or alone: for the local provider, for a
    // caller without a token, and when the provider fails).
    const local = (await this.#local.list())
      .filter((r) => localMatch(r, query))
      .slice(0, perPage)
      .map((r) => localRepositoryMessage(r));
    if (selected === "local") return create(SearchRepositoriesResponseSchema, { repositories: local });
    const tokens = await this.#providers.storedTokens(ctx);
    if (tokens.length === 0) {
      if (!this.#local.offered) throw new ConnectError("Git provider token required.", Code.Unauthenticated);
      return create(SearchRepositoriesResponseSchema, { repositories: local });
    }
    const q = { query, perPage, sort, order };
    let found: RepositoryRecord[];
    try {
      found = await this.#searchProviders(tokens, selected, q, ctx.signal);
    } catch (err) {
      if (local.length > 0) return create(SearchRepositoriesResponseSchema, { repositories: local });
      throw err;
    }
    return create(SearchRepositoriesResponseSchema, {
      repositories: [...found.map(repositoryMessage), ...local],
    });
  }

  /** The providers' search: the selected one (each name once), or every one that answers. */
  async #searchProviders(
    tokens: Tokens,
    selected: GitProviderName | null,
    q: { query: string; perPage: number; sort: string; order: string },
    signal: AbortSignal,
  ): Promise<RepositoryRecord[]> {
    let found: RepositoryRecord[];
    if (selected !== null) {
      found = await providerCall(() =>
        this.#providers.client(tokens, selected, signal).searchRepositories(q),
      );
      const seen = new Set<string>();
      found = found.filter((r) => !seen.has(r.fullName) && seen.add(r.fullName) !== undefined);
    } else {
      found = await this.#providers.everyProvider(
        tokens,
        (c) => c.searchRepositories(q),
        "Git provider token required.",
        signal,
      );
    }
    return found;
  }

  async searchBranches(req: SearchBranchesRequest, ctx: HandlerContext): Promise<SearchBranchesResponse> {
    const issues: FieldViolation[] = [];
    const repository = repositoryName(req.repository, issues);
    const query = text(req.query, "query", 255, issues);
    const perPage = intIn(req.perPage, 30, 1, 100, "per_page", issues);
    const selected = selectedProvider(req.selectedProvider, issues, this.#local.offered);
    if (issues.length > 0) throw new ValidationError(issues);
    if (localRepositoryFolder(repository) !== null) {
      // A local repository, whichever provider the UI has selected.
      const local = await this.#local.find(repository);
      const q = query.toLowerCase();
      const branches = local === null ? [] : await this.#local.branches(local);
      return create(SearchBranchesResponseSchema, {
        branches: branches
          .filter((b) => b.name.toLowerCase().includes(q))
          .slice(0, perPage)
          .map(branchMessage),
      });
    }
    if (selected === "local") return create(SearchBranchesResponseSchema, {});
    const tokens = await this.#providers.userTokens(ctx, "Git provider token required.");
    // A repository the provider does not have is no branches, with or without a selected provider.
    const branches =
      selected !== null
        ? ((await this.#providers.firstProvider(
            tokens.filter(([p]) => p === selected),
            (c) => c.searchBranches(repository, query, perPage),
            ctx.signal,
          )) ?? [])
        : ((await this.#providers.firstProvider(
            tokens,
            (c) => c.searchBranches(repository, query, perPage),
            ctx.signal,
          )) ?? []);
    return create(SearchBranchesResponseSchema, { branches: branches.map(branchMessage) });
  }

  /** The first provider that has the repository answers; an empty page when none has it. */
  async listBranches(req: ListBranchesRequest, ctx: HandlerContext): Promise<ListBranchesResponse> {
    const issues: FieldViolation[] = [];
    const repository = repositoryName(req.repository, issues);
    const page = intIn(req.page, 1, 1, 100_000, "page", issues);
    const perPage = intIn(req.perPage, 30, 1, 100, "per_page", issues);
    if (issues.length > 0) throw new ValidationError(issues);
    if (localRepositoryFolder(repository) !== null) {
      const local = await this.#local.find(repository);
      const all = local === null ? [] : await this.#local.branches(local);
      const from = (page - 1) * perPage;
      return create(ListBranchesResponseSchema, {
        branches: all.slice(from, from + perPage).map(branchMessage),
        hasNextPage: from + perPage < all.length,
        currentPage: page,
        perPage,
        totalCount: BigInt(all.length),
      });
    }
    const tokens = await this.#providers.userTokens(ctx);
    const found = await this.#providers.firstProvider(
      tokens,
      (c) => c.listBranches(repository, page, perPage),
      ctx.signal,
    );
    if (found === null)
      return create(ListBranchesResponseSchema, {
        branches: [],
        hasNextPage: false,
        currentPage: page,
        perPage,
        totalCount: 0n,
      });
    return create(ListBranchesResponseSchema, {
      branches: found.branches.map(branchMessage),
      hasNextPage: found.hasNextPage,
      currentPage: found.currentPage,
      perPage: found.perPage,
      ...(found.totalCount === null ? {} : { totalCount: BigInt(found.totalCount) }),
    });
  }
}
