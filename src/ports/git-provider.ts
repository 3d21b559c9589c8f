/** Git providers the /api/user routes read from. */
export type GitProviderName = "github" | "gitlab" | "bitbucket";

export interface RepositoryRecord {
  id: string;
  fullName: string;
  provider: GitProviderName;
  isPublic: boolean;
  stargazersCount: number | null;
  linkHeader: string | null;
  pushedAt: string | null;
  ownerType: "user" | "organization";
  mainBranch: string | null;
}

export interface BranchRecord {
  name: string;
  commitSha: string;
  protected: boolean;
  lastPushDate: string | null;
}

export interface BranchPage {
  branches: BranchRecord[];
  hasNextPage: boolean;
  currentPage: number;
  perPage: number;
  totalCount: number | null;
}

export interface GitUserRecord {
  id: string;
  login: string;
  avatarUrl: string;
  company: string | null;
  name: string | null;
  email: string | null;
}

/**
 * A suggestion: an open PR/MR of the user's that needs work (conflicts, failing checks, unresolved review), or an
 * open issue assigned to them. A plain open PR is not a suggestion.
 */
export interface SuggestedTaskRecord {
  provider: GitProviderName;
  taskType: "OPEN_ISSUE" | "MERGE_CONFLICTS" | "FAILING_CHECKS" | "UNRESOLVED_COMMENTS";
  repo: string;
  issueNumber: number;
  title: string;
}

/** Why a provider call failed. Messages never contain the token, the URL's query or the provider's body. */
export type GitProviderFailure =
  | "unauthorized"
  | "forbidden"
  | "not_found"
  | "rate_limited"
  | "timeout"
  | "unavailable"
  | "cancelled";

export class GitProviderError extends Error {
  override name = "GitProviderError";
  readonly kind: GitProviderFailure;
  /** Lower-case provider name. */
  readonly provider: string;
  /** Seconds until the provider accepts calls again (rate_limited). */
  readonly retryAfterSeconds: number | null;
  constructor(provider: string, kind: GitProviderFailure, message: string, retryAfterSeconds?: number) {
    super(message);
    this.provider = provider;
    this.kind = kind;
    this.retryAfterSeconds = retryAfterSeconds ?? null;
  }
}

/**
 * One provider's API, as one user's token sees it. Every method throws GitProviderError for provider failures.
 */
export interface GitProviderApi {
  readonly provider: GitProviderName;
  getUser(): Promise<GitUserRecord>;
  /** GitHub: app installation ids; Bitbucket: workspace slugs. */
  listInstallations(): Promise<string[]>;
  /** One page; `linkHeader` of each record points at the next page when there is one. */
  listRepositories(q: {
    sort: string;
    page: number;
    perPage: number;
    installationId: string | null;
  }): Promise<RepositoryRecord[]>;
  /** Every repository, up to `max`, following the provider's paging. */
  listAllRepositories(sort: string, max: number): Promise<RepositoryRecord[]>;
  searchRepositories(q: {
    query: string;
    perPage: number;
    sort: string;
    order: string;
  }): Promise<RepositoryRecord[]>;
  listBranches(repository: string, page: number, perPage: number): Promise<BranchPage>;
  searchBranches(repository: string, query: string, perPage: number): Promise<BranchRecord[]>;
  listSuggestedTasks(): Promise<SuggestedTaskRecord[]>;
  /** Files (not folders) directly in a folder of the repository's default branch; not_found when absent. */
  listFiles(repository: string, folder: string): Promise<{ name: string; path: string }[]>;
  /** Whether a file exists on the default branch. */
  hasFile(repository: string, path: string): Promise<boolean>;
  /**
   * Whether pull request (merge request) `number` of the repository is still open, not closed or merged; true
   * when the provider's answer does not say.
   */
  pullRequestOpen(repository: string, number: number): Promise<boolean>;
  /** A file's text on the default branch; not_found when absent (or a folder). */
  readFile(repository: string, path: string): Promise<string>;
}

/**
 * Makes provider clients for a token (host: null for the public service). `signal` is the caller's cancellation:
 * once it aborts, the client's calls stop waiting and fail with `cancelled`.
 */
export interface GitProviderClients {
  client(provider: GitProviderName, token: string, host: string | null, signal?: AbortSignal): GitProviderApi;
}
