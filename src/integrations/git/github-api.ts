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
import { nextLink, type ProviderHttp, providerErrorIn } from "./provider-http.ts";

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

/** GitHub (and GitHub Enterprise Server) through Octokit, over the shared provider HTTP client. */
export class GitHubApi implements GitProviderApi {
  readonly provider = "github" as const;
  readonly #octokit: Octokit;

  /** baseUrl: https://api.github.com or https://HOST/api/v3. */
  constructor(token: string, baseUrl: string, http: ProviderHttp) {
    this.#octokit = new Octokit({
      auth: token,
      baseUrl,
      userAgent: "agent-workspace-service",
      log: silent,
      request: { fetch: http.fetch },
    });
  }

  /** Runs an Octokit call, turning what it throws into GitProviderError. */
  async #call<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      const inner = providerErrorIn(err);
      if (inner !== null) throw inner;
      const status = (err as { status?: unknown }).status;
      if (typeof status === "number" && status >= 400 && status < 500)
        throw new GitProviderError("github", "not_found", `GitHub refused the request (HTTP ${status})`);
      throw new GitProviderError("github", "unavailable", "GitHub answered something unexpected");
    }
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

  async searchRepositories(q: {
    query: string;
    perPage: number;
    sort: string;
    order: string;
  }): Promise<RepositoryRecord[]> {
    let search: string;
    const url = /^https?:\/\/[^/]+\/([^/]+)\/([^/?#]+)/.exec(q.query);
    if (url !== null) search = `in:name ${url[1]}/${url[2]} is:public`;
    else if (q.query.includes("/")) {
      const [org, ...rest] = q.query.split("/");
      search = `org:${org} in:name ${rest.join("/")}`;
    } else {
      const user = await this.getUser();
      search = `in:name ${q.query} user:${user.login}`;
    }
    const { data } = await this.#call(() =>
      this.#octokit.rest.search.repos({
        q: search,
        per_page: q.perPage,
        sort: q.sort as "stars",
        order: q.order as "desc",
      }),
    );
    return data.items.map((r) => toRepository(r as GitHubRepo, null));
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

  /** Branches whose name starts with the query (GitHub's matching-refs). */
  async searchBranches(repository: string, query: string, perPage: number): Promise<BranchRecord[]> {
    const { data } = await this.#call(() =>
      this.#octokit.rest.git.listMatchingRefs({ ...split(repository), ref: `heads/${query}` }),
    );
    return data.slice(0, perPage).map((r) => ({
      name: r.ref.replace(/^refs\/heads\//, ""),
      commitSha: r.object.sha,
      protected: false,
      lastPushDate: null,
    }));
  }

  /** Open pull requests the user authored and open issues assigned to them. */
  async listSuggestedTasks(): Promise<SuggestedTaskRecord[]> {
    const user = await this.getUser();
    const search = async (q: string, taskType: SuggestedTaskRecord["taskType"]) => {
      const { data } = await this.#call(() =>
        this.#octokit.request("GET /search/issues", { q, per_page: 30, sort: "updated" }),
      );
      return data.items.map((i) => ({
        provider: "github" as const,
        taskType,
        repo: i.repository_url.split("/").slice(-2).join("/"),
        issueNumber: i.number,
        title: i.title,
      }));
    };
    const [prs, issues] = await Promise.all([
      search(`is:open is:pr author:${user.login}`, "OPEN_PR"),
      search(`is:open is:issue assignee:${user.login}`, "OPEN_ISSUE"),
    ]);
    return [...prs, ...issues];
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
}
