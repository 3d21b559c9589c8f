import { createHash } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { requireCaller } from "../../core/context.ts";
import { type FieldViolation, ValidationError } from "../../core/errors.ts";
import { localRepositoryFolder } from "../../core/repository-names.ts";
import {
  type GetMicroagentContentRequest,
  type GetMicroagentContentResponse,
  GetMicroagentContentResponseSchema,
  type GetUserInfoResponse,
  GetUserInfoResponseSchema,
  GitBranchSchema,
  GitRepositorySchema,
  type GitService as GitServiceDesc,
  type ListBranchesRequest,
  type ListBranchesResponse,
  ListBranchesResponseSchema,
  type ListInstallationsRequest,
  type ListInstallationsResponse,
  ListInstallationsResponseSchema,
  type ListMicroagentsRequest,
  type ListMicroagentsResponse,
  ListMicroagentsResponseSchema,
  type ListRepositoriesRequest,
  type ListRepositoriesResponse,
  ListRepositoriesResponseSchema,
  type ListSuggestedTasksResponse,
  ListSuggestedTasksResponseSchema,
  MicroagentSchema,
  OwnerType,
  type SearchBranchesRequest,
  type SearchBranchesResponse,
  SearchBranchesResponseSchema,
  type SearchRepositoriesRequest,
  type SearchRepositoriesResponse,
  SearchRepositoriesResponseSchema,
  SuggestedTaskSchema,
  TaskType,
} from "../../gen/workspace/v1/git_pb.js";
import { ProviderType } from "../../gen/workspace/v1/provider_pb.js";
import {
  type BranchRecord,
  type GitProviderApi,
  type GitProviderClients,
  GitProviderError,
  type GitProviderName,
  type RepositoryRecord,
} from "../../ports/git-provider.ts";
import type { LocalRepositoryCatalog, LocalRepositoryRecord } from "../../ports/local-repositories.ts";
import { MicroagentParseError, parseMicroagent } from "./microagent-content.ts";

/** The caller's provider tokens in plaintext, keyed by lower-case provider name (see SettingsService). */
export interface ProviderTokenSource {
  openProviderTokens(userId: string): Promise<Record<string, { token: string; host: string | null }>>;
}

/** Providers served here, in the order they are tried. */
const PROVIDERS: readonly GitProviderName[] = ["github", "gitlab", "bitbucket"];
const NAMES: Partial<Record<ProviderType, string>> = {
  [ProviderType.GITHUB]: "github",
  [ProviderType.GITLAB]: "gitlab",
  [ProviderType.BITBUCKET]: "bitbucket",
  [ProviderType.AZURE_DEVOPS]: "azure_devops",
  [ProviderType.ENTERPRISE_SSO]: "enterprise_sso",
};
const TYPES: Record<GitProviderName, ProviderType> = {
  github: ProviderType.GITHUB,
  gitlab: ProviderType.GITLAB,
  bitbucket: ProviderType.BITBUCKET,
};
const REPO_SORTS = new Set(["pushed", "updated", "created", "full_name"]);
const SEARCH_SORTS = new Set(["stars", "forks", "updated", "help-wanted-issues"]);
/** owner/name, or group/subgroup/name on GitLab; no "." or ".." segments. */
const REPOSITORY = /^(?!.*(?:^|\/)\.{1,2}(?:\/|$))[A-Za-z0-9_.-]+(?:\/[A-Za-z0-9_.-]+){1,9}$/;
const MAX_ALL_REPOSITORIES = 1000;
const TOKEN_REQUIRED = "Git provider token required. (such as GitHub).";

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

type Tokens = [GitProviderName, { token: string; host: string | null }][];
/** A request's selected provider: a provider served here, the local repositories, or null for every one. */
type Selected = GitProviderName | "local" | null;

/** A provider failure as the API's one error model. Never carries the token. */
function toConnectError(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  if (!(err instanceof GitProviderError))
    return new ConnectError("The git provider answered something unexpected", Code.Unavailable);
  switch (err.kind) {
    case "unauthorized":
      return new ConnectError(err.message, Code.Unauthenticated);
    case "forbidden":
      return new ConnectError(err.message, Code.PermissionDenied);
    case "not_found":
      return new ConnectError(err.message, Code.NotFound);
    case "rate_limited":
      // Retry-After only when the provider (or the remembered limit) said when.
      return new ConnectError(
        err.message,
        Code.ResourceExhausted,
        err.retryAfterSeconds === null ? undefined : { "retry-after": String(err.retryAfterSeconds) },
      );
    case "cancelled":
      return new ConnectError(err.message, Code.Canceled);
    default:
      return new ConnectError(err.message, Code.Unavailable);
  }
}

/**
 * When every provider failed: 401 only if every one rejected its token, else the first failure that says more
 * (rate limit, unavailable, timeout, forbidden).
 */
function aggregateFailure(failures: unknown[], allRejected: string): ConnectError {
  const telling = failures.find((f) => !(f instanceof GitProviderError && f.kind === "unauthorized"));
  return telling === undefined
    ? new ConnectError(allRejected, Code.Unauthenticated)
    : toConnectError(telling);
}

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

/** A local repository as the UI's Repository; `linkHeader` points at the next page of a listing. */
function localRepositoryMessage(r: LocalRepositoryRecord, linkHeader: string | null = null) {
  return create(GitRepositorySchema, {
    id: r.name,
    fullName: r.name,
    gitProvider: ProviderType.ENTERPRISE_SSO,
    isPublic: false,
    ownerType: OwnerType.USER,
    ...(linkHeader === null ? {} : { linkHeader }),
    ...(r.mainBranch === null ? {} : { mainBranch: r.mainBranch }),
  });
}

/** Whether a local repository matches a search (its name or its path, ignoring case). */
function localMatch(r: LocalRepositoryRecord, query: string): boolean {
  const q = query.toLowerCase();
  return r.name.toLowerCase().includes(q) || r.path.toLowerCase().includes(q);
}

function branchMessage(b: BranchRecord) {
  return create(GitBranchSchema, {
    name: b.name,
    commitSha: b.commitSha,
    protected: b.protected,
    ...(b.lastPushDate === null ? {} : { lastPushDate: b.lastPushDate }),
  });
}

function intIn(
  value: number | undefined,
  fallback: number,
  min: number,
  max: number,
  field: string,
  issues: FieldViolation[],
): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < min || value > max) {
    issues.push({
      loc: [field],
      msg: `Input should be between ${min} and ${max}`,
      type: "value_error",
      input: value,
    });
  }
  return value;
}

function text(value: string, field: string, max: number, issues: FieldViolation[]): string {
  if (value.length === 0) issues.push({ loc: [field], msg: "Field required", type: "missing", input: value });
  else if (value.length > max)
    issues.push({
      loc: [field],
      msg: `String should have at most ${max} characters`,
      type: "string_too_long",
      input: value,
    });
  return value;
}

function repositoryName(value: string, issues: FieldViolation[]): string {
  if (!REPOSITORY.test(value) && localRepositoryFolder(value) === null)
    issues.push({
      loc: ["repository"],
      msg: "repository must be 'owner/name' (or '@local/<folder>', a local repository)",
      type: "value_error",
      input: value,
    });
  return value;
}

/** A path inside a repository: relative, "/"-separated, no empty, "." or ".." segments, no control characters. */
function filePath(value: string, issues: FieldViolation[]): string {
  const segments = value.split("/");
  if (
    value.length === 0 ||
    value.length > 1024 ||
    value.includes("\\") ||
    [...value].some((c) => c < " " || c === "\u007f") ||
    segments.some((s) => s === "" || s === "." || s === "..")
  )
    issues.push({
      loc: ["file_path"],
      msg: "file_path must be a relative path in the repository",
      type: value.length === 0 ? "missing" : "value_error",
      input: value,
    });
  return value;
}

/**
 * The UI's repository, branch and account routes (/api/user/*) over the caller's own provider tokens. Providers
 * without a stored token are skipped; listings across providers keep what the providers that answered returned.
 * Repository listings are answered from a short per-user cache (keyed by the tokens too, so a new token is never
 * answered with the old one's listing); concurrent identical calls share one provider round trip.
 */
export class GitService implements ServiceImpl<typeof GitServiceDesc> {
  readonly #tokens: ProviderTokenSource;
  readonly #clients: GitProviderClients;
  readonly #ttlMs: number;
  readonly #maxEntries: number;
  readonly #now: () => number;
  readonly #cache = new Map<string, { expires: number; value: Promise<RepositoryRecord[]> }>();
  readonly #local: LocalRepositoryCatalog | undefined;

  constructor(options: GitServiceOptions) {
    this.#tokens = options.tokens;
    this.#clients = options.clients;
    this.#local = options.local;
    this.#ttlMs = options.repositoryCacheSeconds * 1000;
    this.#maxEntries = options.repositoryCacheEntries ?? 5_000;
    this.#now = options.now ?? Date.now;
  }

  /** The caller's usable tokens in provider order (possibly none). */
  async #storedTokens(ctx: HandlerContext): Promise<Tokens> {
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
  async #userTokens(ctx: HandlerContext, required = TOKEN_REQUIRED): Promise<Tokens> {
    const out = await this.#storedTokens(ctx);
    if (out.length === 0) throw new ConnectError(required, Code.Unauthenticated);
    return out;
  }

  /** A client for one of the caller's tokens; `signal` (the call's cancellation) stops its provider calls. */
  #client(tokens: Tokens, provider: GitProviderName, signal?: AbortSignal): GitProviderApi {
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

  /** The selected provider of a request, or null for "every provider". */
  #selected(
    value: ProviderType | undefined,
    issues: FieldViolation[],
    field = "selected_provider",
  ): Selected {
    // REST binders leave an absent provider undefined; messages hold UNSPECIFIED.
    if (value === undefined || value === ProviderType.UNSPECIFIED) return null;
    if (value === ProviderType.ENTERPRISE_SSO && this.#local !== undefined) return "local";
    const name = NAMES[value];
    if (name === undefined || !(PROVIDERS as readonly string[]).includes(name)) {
      issues.push({
        loc: [field],
        msg: `Provider ${name ?? value} is not supported here`,
        type: "value_error",
        input: name ?? value,
      });
      return null;
    }
    return name as GitProviderName;
  }

  /** The local repositories (none when the server offers none). */
  async #localRepositories(): Promise<LocalRepositoryRecord[]> {
    return (await this.#local?.list()) ?? [];
  }

  /** The listed local repository of a name (`@local/<folder>`), or null. */
  async #localRepository(name: string): Promise<LocalRepositoryRecord | null> {
    return (await this.#localRepositories()).find((r) => r.name === name) ?? null;
  }

  /** A local repository's branches; UNAVAILABLE when git cannot read them. */
  async #localBranches(repository: LocalRepositoryRecord): Promise<BranchRecord[]> {
    try {
      return (await this.#local?.branches(repository)) ?? [];
    } catch {
      throw new ConnectError(`The branches of ${repository.name} could not be read`, Code.Unavailable);
    }
  }

  /** Runs fn on every provider; the answers of those that answered, or the aggregate failure if none did. */
  async #everyProvider<T>(
    tokens: Tokens,
    fn: (client: GitProviderApi) => Promise<T[]>,
    allRejected: string,
    signal?: AbortSignal,
  ): Promise<T[]> {
    const results = await Promise.allSettled(tokens.map(async ([p]) => fn(this.#client(tokens, p, signal))));
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
  async #firstProvider<T>(
    tokens: Tokens,
    fn: (client: GitProviderApi) => Promise<T>,
    signal?: AbortSignal,
  ): Promise<T | null> {
    const failures: unknown[] = [];
    for (const [p] of tokens) {
      try {
        return await fn(this.#client(tokens, p, signal));
      } catch (err) {
        failures.push(err);
      }
    }
    const telling = failures.find((f) => !(f instanceof GitProviderError && f.kind === "not_found"));
    if (telling !== undefined) throw toConnectError(telling);
    return null;
  }

  async #call<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw toConnectError(err);
    }
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
    const tokens = await this.#userTokens(ctx);
    if (name !== "github" && name !== "bitbucket")
      throw new ConnectError(`Provider ${name} doesn't support installations`, Code.InvalidArgument);
    if (!tokens.some(([p]) => p === name)) return create(ListInstallationsResponseSchema, {});
    const ids = await this.#call(() => this.#client(tokens, name, ctx.signal).listInstallations());
    return create(ListInstallationsResponseSchema, { installationIds: ids });
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
    const selected = this.#selected(req.selectedProvider, issues);
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
    if (selected === "local") return this.#localListing(page, perPage);
    const tokens = await this.#storedTokens(ctx);
    // The local repositories come after the provider's first page (the UI reads the next page's link from the
    // first entry), and alone for a caller without a token or when the provider fails.
    const withLocal = selected === null || (page <= 1 && installationId === null);
    const local = withLocal ? (await this.#localRepositories()).map((r) => localRepositoryMessage(r)) : [];
    if (tokens.length === 0) {
      if (this.#local === undefined) throw new ConnectError(TOKEN_REQUIRED, Code.Unauthenticated);
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
          ? this.#everyProvider(
              tokens,
              (c) => c.listAllRepositories(sort, MAX_ALL_REPOSITORIES),
              TOKEN_REQUIRED,
            )
          : this.#call(() =>
              this.#client(tokens, selected).listRepositories({ sort, page, perPage, installationId }),
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

  /** One page of the local repositories, each entry with the next page's link (as GitHub's listing has it). */
  async #localListing(page: number, perPage: number): Promise<ListRepositoriesResponse> {
    const all = await this.#localRepositories();
    const from = (page - 1) * perPage;
    const next =
      from + perPage < all.length
        ? `</api/user/repositories?selected_provider=enterprise_sso&page=${page + 1}&per_page=${perPage}>; rel="next"`
        : null;
    return create(ListRepositoriesResponseSchema, {
      repositories: all.slice(from, from + perPage).map((r) => localRepositoryMessage(r, next)),
    });
  }

  /**
   * The account behind the first provider token that works; UNAUTHENTICATED when every one is rejected. A caller
   * without a token on a server offering local repositories is answered as itself (its user id as id and login).
   */
  async getUserInfo(_req: unknown, ctx: HandlerContext): Promise<GetUserInfoResponse> {
    const tokens = await this.#storedTokens(ctx);
    if (tokens.length === 0) {
      if (this.#local === undefined) throw new ConnectError(TOKEN_REQUIRED, Code.Unauthenticated);
      const { userId } = requireCaller(ctx);
      return create(GetUserInfoResponseSchema, { user: { id: userId, login: userId, avatarUrl: "" } });
    }
    const failures: unknown[] = [];
    for (const [p] of tokens) {
      try {
        const u = await this.#client(tokens, p, ctx.signal).getUser();
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
    const selected = this.#selected(req.selectedProvider, issues);
    if (issues.length > 0) throw new ValidationError(issues);
    // Local repositories whose name or path matches, after the provider's (or alone: for the local provider, for a
    // caller without a token, and when the provider fails).
    const local = (await this.#localRepositories())
      .filter((r) => localMatch(r, query))
      .slice(0, perPage)
      .map((r) => localRepositoryMessage(r));
    if (selected === "local") return create(SearchRepositoriesResponseSchema, { repositories: local });
    const tokens = await this.#storedTokens(ctx);
    if (tokens.length === 0) {
      if (this.#local === undefined)
        throw new ConnectError("Git provider token required.", Code.Unauthenticated);
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
      found = await this.#call(() => this.#client(tokens, selected, signal).searchRepositories(q));
      const seen = new Set<string>();
      found = found.filter((r) => !seen.has(r.fullName) && seen.add(r.fullName) !== undefined);
    } else {
      found = await this.#everyProvider(
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
    const selected = this.#selected(req.selectedProvider, issues);
    if (issues.length > 0) throw new ValidationError(issues);
    if (localRepositoryFolder(repository) !== null) {
      // A local repository, whichever provider the UI has selected.
      const local = await this.#localRepository(repository);
      const q = query.toLowerCase();
      const branches = local === null ? [] : await this.#localBranches(local);
      return create(SearchBranchesResponseSchema, {
        branches: branches
          .filter((b) => b.name.toLowerCase().includes(q))
          .slice(0, perPage)
          .map(branchMessage),
      });
    }
    if (selected === "local") return create(SearchBranchesResponseSchema, {});
    const tokens = await this.#userTokens(ctx, "Git provider token required.");
    // A repository the provider does not have is no branches, with or without a selected provider.
    const branches =
      selected !== null
        ? ((await this.#firstProvider(
            tokens.filter(([p]) => p === selected),
            (c) => c.searchBranches(repository, query, perPage),
            ctx.signal,
          )) ?? [])
        : ((await this.#firstProvider(
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
      const local = await this.#localRepository(repository);
      const all = local === null ? [] : await this.#localBranches(local);
      const from = (page - 1) * perPage;
      return create(ListBranchesResponseSchema, {
        branches: all.slice(from, from + perPage).map(branchMessage),
        hasNextPage: from + perPage < all.length,
        currentPage: page,
        perPage,
        totalCount: BigInt(all.length),
      });
    }
    const tokens = await this.#userTokens(ctx);
    const found = await this.#firstProvider(
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

  /**
   * The reference's microagent scan: `.cursorrules` plus the .md files (README.md excepted) of `microagents/` in
   * a repository named `.openhands` or `openhands-config`, else of `.openhands/microagents/`. The first provider
   * with files answers; empty when the caller has no token (as the reference) or no provider has files;
   * UNAUTHENTICATED "Unable to fetch microagents for R" when every provider failed (a rate limit or an
   * unreachable provider is answered as such).
   */
  async listMicroagents(req: ListMicroagentsRequest, ctx: HandlerContext): Promise<ListMicroagentsResponse> {
    const issues: FieldViolation[] = [];
    const repository = repositoryName(req.repository, issues);
    if (issues.length > 0) throw new ValidationError(issues);
    // A local repository's files are not read here: it has none to show.
    if (localRepositoryFolder(repository) !== null) return create(ListMicroagentsResponseSchema, {});
    const tokens = await this.#storedTokens(ctx);
    const name = repository.split("/").at(-1) ?? "";
    const folder =
      name === ".openhands" || name === "openhands-config" ? "microagents" : ".openhands/microagents";
    const createdAt = new Date(this.#now()).toISOString();
    const failures: unknown[] = [];
    for (const [p] of tokens) {
      try {
        const client = this.#client(tokens, p, ctx.signal);
        const [cursor, files] = await Promise.all([
          client.hasFile(repository, ".cursorrules"),
          client.listFiles(repository, folder).catch((err: unknown) => {
            if (err instanceof GitProviderError && err.kind === "not_found") return [];
            throw err;
          }),
        ]);
        const found = [
          ...(cursor ? [{ name: "cursorrules", path: ".cursorrules" }] : []),
          ...files
            .filter((f) => f.name.endsWith(".md") && f.name !== "README.md")
            .map((f) => ({ name: f.name.replace(/\.md$/, ""), path: `${folder}/${f.name}` })),
        ];
        if (found.length === 0) continue;
        return create(ListMicroagentsResponseSchema, {
          microagents: found.map((m) => create(MicroagentSchema, { ...m, createdAt })),
        });
      } catch (err) {
        failures.push(err);
      }
    }
    throwTellingFailure(failures);
    if (failures.length === 0) return create(ListMicroagentsResponseSchema, {});
    throw new ConnectError(`Unable to fetch microagents for ${repository}`, Code.Unauthenticated);
  }

  /**
   * One microagent file, from the first provider that has it (the reference's MicroagentContentResponse). A
   * provider that lacks the file, cannot parse it or rejects the token is passed over; when none answers:
   * UNAUTHENTICATED "Microagent file F not found in R" (also with no token at all), except that a rate limit or an
   * unreachable provider is answered as such.
   */
  async getMicroagentContent(
    req: GetMicroagentContentRequest,
    ctx: HandlerContext,
  ): Promise<GetMicroagentContentResponse> {
    const issues: FieldViolation[] = [];
    const repository = repositoryName(req.repository, issues);
    const path = filePath(req.filePath, issues);
    if (issues.length > 0) throw new ValidationError(issues);
    const tokens = localRepositoryFolder(repository) !== null ? [] : await this.#storedTokens(ctx);
    const failures: unknown[] = [];
    for (const [p] of tokens) {
      try {
        const text = await this.#client(tokens, p, ctx.signal).readFile(repository, path);
        const parsed = parseMicroagent(path, text);
        return create(GetMicroagentContentResponseSchema, {
          content: parsed.content,
          path,
          triggers: parsed.triggers,
          gitProvider: TYPES[p],
        });
      } catch (err) {
        if (!(err instanceof MicroagentParseError)) failures.push(err);
      }
    }
    throwTellingFailure(failures);
    throw new ConnectError(`Microagent file ${path} not found in ${repository}`, Code.Unauthenticated);
  }

  /** Tasks of every provider; none for a caller without a token on a server offering local repositories. */
  async listSuggestedTasks(_req: unknown, ctx: HandlerContext): Promise<ListSuggestedTasksResponse> {
    const tokens = await this.#storedTokens(ctx);
    if (tokens.length === 0) {
      if (this.#local === undefined) throw new ConnectError("No providers set.", Code.Unauthenticated);
      return create(ListSuggestedTasksResponseSchema, {});
    }
    const tasks = await this.#everyProvider(
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

/**
 * Of the failures of several providers, one that says more than "not found" (a rate limit, a provider that did
 * not answer in time or at all, a cancelled call) is answered as such.
 */
function throwTellingFailure(failures: readonly unknown[]): void {
  const telling = failures.find(
    (f) =>
      f instanceof GitProviderError &&
      (f.kind === "rate_limited" ||
        f.kind === "timeout" ||
        f.kind === "unavailable" ||
        f.kind === "cancelled"),
  );
  if (telling !== undefined) throw toConnectError(telling);
}
