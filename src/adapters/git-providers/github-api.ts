import { Octokit } from "@octokit/rest";
import {
  type BranchPage,
  type BranchRecord,
  type GitProviderApi,
  GitProviderError,
  type GitUserRecord,
  type RepositoryRecord,
  type SuggestedTaskRecord,
} from "../../ports/git-provider.ts";
import { nextLink, type ProviderHttp, providerErrorIn, sameOriginLinks } from "./provider-http.ts";

interface GitHubRepo {
  id: number;
  full_name: string;
  private: boolean;
  stargazers_count?: number;
  pushed_at?: string | null;
  default_branch?: string;
  owner?: { type?: string } | null;
}

const silent = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} };

function toRepository(r: GitHubRepo, linkHeader: string | null): RepositoryRecord {
  return {
    id: String(r.id),
    fullName: r.full_name,
    provider: "github",
    isPublic: !r.private,
    stargazersCount: r.stargazers_count ?? null,
    linkHeader,
    pushedAt: r.pushed_at ?? null,
    ownerType: r.owner?.type === "Organization" ? "organization" : "user",
    mainBranch: r.default_branch ?? null,
  };
}

function split(repository: string): { owner: string; repo: string } {
  const [owner = "", repo = ""] = repository.split("/");
  return { owner, repo };
}

/** An organisation name "close enough" to a query (case, dashes, underscores and spaces ignored). */
function orgMatches(query: string, org: string): boolean {
  const norm = (s: string) => s.toLowerCase().replace(/[-_ ]/g, "");
  const q = norm(query);
  const o = norm(org);
  return q !== "" && (o.includes(q) || q.includes(o));
}

/** The user's open pull requests with what the suggestion needs: mergeability, last commit's checks, reviews. */
const OPEN_PULL_REQUESTS = `
query OpenPullRequests($login: String!) {
  user(login: $login) {
    pullRequests(first: 50, states: [OPEN], orderBy: { field: UPDATED_AT, direction: DESC }) {
      nodes {
        number
        title
        mergeable
        repository { nameWithOwner }
        commits(last: 1) { nodes { commit { statusCheckRollup { state } } } }
        reviews(first: 50, states: [CHANGES_REQUESTED, COMMENTED]) { nodes { state } }
      }
    }
  }
}`;

/** Open issues assigned to the user. */
const ASSIGNED_ISSUES = `
query AssignedIssues($login: String!) {
  user(login: $login) {
    issues(first: 50, states: [OPEN], filterBy: { assignee: $login }, orderBy: { field: UPDATED_AT, direction: DESC }) {
      nodes { number title repository { nameWithOwner } }
    }
  }
}`;

/**
 * Branches whose name contains a text (GraphQL `refs(query:)` matches anywhere in the name), with the head
 * commit's id and date and whether a protection rule covers the branch (`refUpdateRule` is what non-admins may
 * see of branch protection; `branchProtectionRule` needs admin rights).
 */
const SEARCH_BRANCHES = `
query SearchBranches($owner: String!, $name: String!, $text: String!, $first: Int!) {
  repository(owner: $owner, name: $name) {
    refs(refPrefix: "refs/heads/", query: $text, first: $first, orderBy: { field: ALPHABETICAL, direction: ASC }) {
      nodes {
        name
        branchProtectionRule { id }
        refUpdateRule { pattern }
        target { __typename ... on Commit { oid committedDate } }
      }
    }
  }
}`;

interface PullRequestNode {
  number: number;
  title: string;
  mergeable?: string | null;
  repository: { nameWithOwner: string };
  commits?: { nodes?: ({ commit?: { statusCheckRollup?: { state?: string } | null } } | null)[] } | null;
  reviews?: { nodes?: ({ state?: string } | null)[] } | null;
}

/** The reference's classification of an open PR; null for a plain open PR (not a suggestion). */
export function classifyPullRequest(pr: PullRequestNode): SuggestedTaskRecord["taskType"] | null {
  if (pr.mergeable === "CONFLICTING") return "MERGE_CONFLICTS";
  if (pr.commits?.nodes?.[0]?.commit?.statusCheckRollup?.state === "FAILURE") return "FAILING_CHECKS";
  if ((pr.reviews?.nodes ?? []).some((r) => r?.state === "CHANGES_REQUESTED" || r?.state === "COMMENTED"))
    return "UNRESOLVED_COMMENTS";
  return null;
}

/** What Octokit's GraphQL client throws when the answer holds `errors`. */
interface GraphqlFailure {
  name: "GraphqlResponseError";
  errors?: { type?: string }[];
  headers?: Record<string, string | undefined>;
}

/** GitHub (and GitHub Enterprise Server) through Octokit (REST and GraphQL), over the shared provider HTTP client. */
export class GitHubApi implements GitProviderApi {
  readonly provider = "github" as const;
  readonly #octokit: Octokit;

  /** baseUrl: https://api.github.com or https://HOST/api/v3 (GraphQL: api.github.com/graphql, HOST/api/graphql). */
  constructor(token: string, baseUrl: string, http: ProviderHttp) {
    this.#octokit = new Octokit({
      auth: token,
      baseUrl,
      userAgent: "agent-workspace-service",
      log: silent,
      request: { fetch: http.fetch },
    });
    // Paging links leave the API's host never: the UI and Octokit's paginator see only same-origin links.
    this.#octokit.hook.after("request", (response) => {
      const link = response.headers.link;
      if (link === undefined) return;
      const kept = sameOriginLinks(link, http.origin);
      if (kept === null) delete response.headers.link;
      else response.headers.link = kept;
    });
  }

  /** Runs an Octokit call, turning what it throws into GitProviderError. */
  async #call<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      const inner = providerErrorIn(err);
      if (inner !== null) throw inner;
      if ((err as { name?: unknown }).name === "GraphqlResponseError")
        throw graphqlError(err as GraphqlFailure);
      const status = (err as { status?: unknown }).status;
      if (typeof status === "number" && status >= 400 && status < 500)
        throw new GitProviderError("github", "not_found", `GitHub refused the request (HTTP ${status})`);
      throw new GitProviderError("github", "unavailable", "GitHub answered something unexpected");
    }
  }

  #graphql<T>(query: string, variables: Record<string, unknown>): Promise<T> {
    return this.#call(() => this.#octokit.graphql<T>(query, variables));
  }

  async getUser(): Promise<GitUserRecord> {
    const { data } = await this.#call(() => this.#octokit.rest.users.getAuthenticated());
    return {
      id: String(data.id),
      login: data.login,
      avatarUrl: data.avatar_url,
      company: data.company ?? null,
      name: data.name ?? null,
      email: data.email ?? null,
    };
  }

  async listInstallations(): Promise<string[]> {
    const { data } = await this.#call(() =>
      this.#octokit.rest.apps.listInstallationsForAuthenticatedUser({ per_page: 100 }),
    );
    return data.installations.map((i) => String(i.id));
  }

  async listRepositories(q: {
    sort: string;
    page: number;
    perPage: number;
    installationId: string | null;
  }): Promise<RepositoryRecord[]> {
    if (q.installationId !== null) {
      const installationId = Number(q.installationId);
      const res = await this.#call(() =>
        this.#octokit.rest.apps.listInstallationReposForAuthenticatedUser({
          installation_id: installationId,
          page: q.page,
          per_page: q.perPage,
        }),
      );
      const link = res.headers.link ?? null;
      return res.data.repositories.map((r) => toRepository(r, link));
    }
    const res = await this.#call(() =>
      this.#octokit.rest.repos.listForAuthenticatedUser({
        sort: q.sort as "pushed",
        page: q.page,
        per_page: q.perPage,
      }),
    );
    const link = res.headers.link ?? null;
    return res.data.map((r) => toRepository(r, link));
  }

  /** Octokit's paginator over the user's repositories (Link headers), up to `max`. */
  async listAllRepositories(sort: string, max: number): Promise<RepositoryRecord[]> {
    return this.#call(async () => {
      const out: RepositoryRecord[] = [];
      const pages = this.#octokit.paginate.iterator(this.#octokit.rest.repos.listForAuthenticatedUser, {
        sort: sort as "pushed",
        per_page: 100,
      });
      for await (const page of pages) {
        for (const r of page.data) if (out.length < max) out.push(toRepository(r, null));
        if (out.length >= max) break;
      }
      return out;
    });
  }

  async #searchRepos(q: string, perPage: number, sort: string, order: string): Promise<GitHubRepo[]> {
    const { data } = await this.#call(() =>
      this.#octokit.rest.search.repos({
        q,
        per_page: perPage,
        sort: sort as "stars",
        order: order as "desc",
      }),
    );
    return data.items as GitHubRepo[];
  }

  /** Organisations the user belongs to (none when GitHub refuses to list them). */
  async #organizations(): Promise<string[]> {
    try {
      const { data } = await this.#call(() =>
        this.#octokit.rest.orgs.listForAuthenticatedUser({ per_page: 100 }),
      );
      return data.map((o) => o.login);
    } catch (err) {
      if (err instanceof GitProviderError && (err.kind === "forbidden" || err.kind === "not_found"))
        return [];
      throw err;
    }
  }

  /**
   * A repository URL: that public repository. `org/name`: the organisation's repositories matching the name. A
   * plain name: the user's own repositories matching it, each organisation's repositories matching it, and the
   * two most starred repositories of every organisation whose name resembles the query. Searches that fail are
   * left out; when all fail, the first failure is answered.
   */
  async searchRepositories(q: {
    query: string;
    perPage: number;
    sort: string;
    order: string;
  }): Promise<RepositoryRecord[]> {
    const url = /^https?:\/\/[^/]+\/([^/]+)\/([^/?#]+)/.exec(q.query);
    if (url !== null) {
      const found = await this.#searchRepos(
        `in:name ${url[1]}/${url[2]} is:public`,
        q.perPage,
        q.sort,
        q.order,
      );
      return found.map((r) => toRepository(r, null));
    }
    if (q.query.includes("/")) {
      const [org, ...rest] = q.query.split("/");
      const found = await this.#searchRepos(
        `org:${org} in:name ${rest.join("/")}`,
        q.perPage,
        q.sort,
        q.order,
      );
      return found.map((r) => toRepository(r, null));
    }
    const [user, orgs] = await Promise.all([this.getUser(), this.#organizations()]);
    const searches: Promise<GitHubRepo[]>[] = [
      this.#searchRepos(`in:name ${q.query} user:${user.login}`, q.perPage, q.sort, q.order),
      ...orgs.map((org) => this.#searchRepos(`${q.query} org:${org}`, q.perPage, q.sort, q.order)),
      ...orgs
        .filter((org) => orgMatches(q.query, org))
        .map((org) => this.#searchRepos(`org:${org}`, 2, "stars", q.order)),
    ];
    const settled = await Promise.allSettled(searches);
    const found = settled.flatMap((s) => (s.status === "fulfilled" ? s.value : []));
    const first = settled.find((s) => s.status === "rejected");
    if (first !== undefined && settled.every((s) => s.status === "rejected")) throw first.reason;
    return found.map((r) => toRepository(r, null));
  }

  async listBranches(repository: string, page: number, perPage: number): Promise<BranchPage> {
    const res = await this.#call(() =>
      this.#octokit.rest.repos.listBranches({ ...split(repository), page, per_page: perPage }),
    );
    return {
      branches: res.data.map((b) => ({
        name: b.name,
        commitSha: b.commit.sha,
        protected: b.protected,
        lastPushDate: null,
      })),
      hasNextPage: nextLink(res.headers.link ?? null) !== null,
      currentPage: page,
      perPage,
      totalCount: null,
    };
  }

  /** Branches whose name contains the query (GraphQL), with protection and the head commit's date. */
  async searchBranches(repository: string, query: string, perPage: number): Promise<BranchRecord[]> {
    const { owner, repo } = split(repository);
    type Node = {
      name: string;
      branchProtectionRule?: unknown;
      refUpdateRule?: unknown;
      target?: { __typename?: string; oid?: string; committedDate?: string | null } | null;
    };
    const data = await this.#graphql<{ repository: { refs: { nodes: (Node | null)[] } | null } | null }>(
      SEARCH_BRANCHES,
      { owner, name: repo, text: query, first: perPage },
    );
    const nodes = data.repository?.refs?.nodes ?? [];
    return nodes
      .filter((n): n is Node => n !== null)
      .map((n) => {
        const commit = n.target?.__typename === "Commit" ? n.target : null;
        return {
          name: n.name,
          commitSha: commit?.oid ?? "",
          protected: (n.branchProtectionRule ?? null) !== null || (n.refUpdateRule ?? null) !== null,
          lastPushDate: commit?.committedDate ?? null,
        };
      });
  }

  /**
   * The reference's suggestions (GraphQL): the user's open PRs that have merge conflicts, failing checks or
   * reviews asking for changes or commenting (plain open PRs are left out), and the open issues assigned to them.
   * When one of the two queries fails the other's answer is kept; when both fail, the first failure is thrown.
   */
  async listSuggestedTasks(): Promise<SuggestedTaskRecord[]> {
    const { login } = await this.getUser();
    type Nodes<T> = { user: Record<string, { nodes: (T | null)[] } | undefined> | null };
    const [prs, issues] = await Promise.allSettled([
      this.#graphql<Nodes<PullRequestNode>>(OPEN_PULL_REQUESTS, { login }),
      this.#graphql<Nodes<{ number: number; title: string; repository: { nameWithOwner: string } }>>(
        ASSIGNED_ISSUES,
        { login },
      ),
    ]);
    if (prs.status === "rejected" && issues.status === "rejected") throw prs.reason;
    const tasks: SuggestedTaskRecord[] = [];
    if (prs.status === "fulfilled") {
      for (const pr of prs.value.user?.pullRequests?.nodes ?? []) {
        if (pr === null) continue;
        const taskType = classifyPullRequest(pr);
        if (taskType === null) continue;
        tasks.push({
          provider: "github",
          taskType,
          repo: pr.repository.nameWithOwner,
          issueNumber: pr.number,
          title: pr.title,
        });
      }
    }
    if (issues.status === "fulfilled") {
      for (const issue of issues.value.user?.issues?.nodes ?? []) {
        if (issue === null) continue;
        tasks.push({
          provider: "github",
          taskType: "OPEN_ISSUE",
          repo: issue.repository.nameWithOwner,
          issueNumber: issue.number,
          title: issue.title,
        });
      }
    }
    return tasks;
  }

  async listFiles(repository: string, folder: string): Promise<{ name: string; path: string }[]> {
    const { data } = await this.#call(() =>
      this.#octokit.rest.repos.getContent({ ...split(repository), path: folder }),
    );
    if (!Array.isArray(data)) return [];
    return data.filter((i) => i.type === "file").map((i) => ({ name: i.name, path: i.path }));
  }

  async pullRequestOpen(repository: string, number: number): Promise<boolean> {
    const { data } = await this.#call(() =>
      this.#octokit.rest.pulls.get({ ...split(repository), pull_number: number }),
    );
    const pr = data as { state?: unknown; merged?: unknown; closed_at?: unknown };
    if (typeof pr.state === "string") return pr.state === "open";
    if ("merged" in pr && "closed_at" in pr) return !(pr.merged === true || pr.closed_at);
    return true;
  }

  async hasFile(repository: string, path: string): Promise<boolean> {
    try {
      await this.#call(() => this.#octokit.rest.repos.getContent({ ...split(repository), path }));
      return true;
    } catch (err) {
      if (err instanceof GitProviderError && err.kind === "not_found") return false;
      throw err;
    }
  }

  /** The contents API's base64 file body, decoded as UTF-8. */
  async readFile(repository: string, path: string): Promise<string> {
    const { data } = await this.#call(() =>
      this.#octokit.rest.repos.getContent({ ...split(repository), path }),
    );
    if (Array.isArray(data) || data.type !== "file" || !("content" in data))
      throw new GitProviderError("github", "not_found", "GitHub found no such file for this token");
    return Buffer.from(data.content, "base64").toString("utf8");
  }
}

/** GraphQL `errors`: RATE_LIMITED is a rate limit (wait from the reset header), NOT_FOUND a missing object. */
function graphqlError(err: GraphqlFailure): GitProviderError {
  const types = (err.errors ?? []).map((e) => e.type);
  if (types.includes("RATE_LIMITED")) {
    const reset = err.headers?.["x-ratelimit-reset"];
    const seconds =
      reset !== undefined && /^\d+$/.test(reset)
        ? Math.min(3600, Math.max(1, Math.ceil(Number(reset) - Date.now() / 1000)))
        : undefined;
    return new GitProviderError(
      "github",
      "rate_limited",
      "GitHub rate limit reached for this token; try again later",
      seconds,
    );
  }
  if (types.length > 0 && types.every((t) => t === "NOT_FOUND"))
    return new GitProviderError("github", "not_found", "GitHub found no such resource for this token");
  return new GitProviderError("github", "unavailable", "GitHub answered the query with errors");
}
