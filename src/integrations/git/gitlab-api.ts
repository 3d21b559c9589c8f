import {
  type BranchPage,
  type BranchRecord,
  type GitProviderApi,
  GitProviderError,
  type GitUserRecord,
  type RepositoryRecord,
  type SuggestedTaskRecord,
} from "../../ports/git-provider.ts";
import { nextLink, type ProviderHttp } from "./provider-http.ts";

interface GitLabProject {
  id: number;
  path_with_namespace: string;
  visibility?: string;
  star_count?: number;
  last_activity_at?: string | null;
  default_branch?: string | null;
  namespace?: { kind?: string } | null;
}

interface GitLabBranch {
  name: string;
  protected?: boolean;
  commit?: { id?: string; committed_date?: string | null } | null;
}

const ORDER_BY: Record<string, string> = {
  pushed: "last_activity_at",
  updated: "updated_at",
  created: "created_at",
  full_name: "path",
  stars: "star_count",
};

function toRepository(p: GitLabProject, linkHeader: string | null): RepositoryRecord {
  return {
    id: String(p.id),
    fullName: p.path_with_namespace,
    provider: "gitlab",
    isPublic: p.visibility === "public",
    stargazersCount: p.star_count ?? null,
    linkHeader,
    pushedAt: p.last_activity_at ?? null,
    ownerType: p.namespace?.kind === "group" ? "organization" : "user",
    mainBranch: p.default_branch ?? null,
  };
}

function toBranch(b: GitLabBranch): BranchRecord {
  return {
    name: b.name,
    commitSha: b.commit?.id ?? "",
    protected: b.protected === true,
    lastPushDate: b.commit?.committed_date ?? null,
  };
}

/** GitLab REST v4 (gitlab.com or self-managed) over the shared provider HTTP client. */
export class GitLabApi implements GitProviderApi {
  readonly provider = "gitlab" as const;
  readonly #base: string;
  readonly #http: ProviderHttp;
  readonly #auth: Record<string, string>;

  /** base: https://HOST/api/v4. */
  constructor(token: string, base: string, http: ProviderHttp) {
    this.#base = base;
    this.#http = http;
    this.#auth = { authorization: `Bearer ${token}` };
  }

  #get<T>(path: string, params: Record<string, string | number> = {}) {
    const url = new URL(`${this.#base}${path}`);
    for (const [k, v] of Object.entries(params)) url.searchParams.set(k, String(v));
    return this.#http.getJson<T>(url.toString(), this.#auth);
  }

  /** The Link header GitLab sends, or one made from X-Next-Page (some instances omit Link). */
  #link(headers: Headers, path: string, params: Record<string, string | number>): string | null {
    const link = headers.get("link");
    if (link !== null && nextLink(link) !== null) return link;
    const next = headers.get("x-next-page");
    if (next === null || !/^\d+$/.test(next)) return link;
    const url = new URL(`${this.#base}${path}`);
    for (const [k, v] of Object.entries({ ...params, page: next })) url.searchParams.set(k, String(v));
    return `<${url.toString()}>; rel="next"`;
  }

  async getUser(): Promise<GitUserRecord> {
    const { data } = await this.#get<{
      id: number;
      username: string;
      avatar_url?: string | null;
      name?: string | null;
      email?: string | null;
      public_email?: string | null;
      organization?: string | null;
    }>("/user");
    return {
      id: String(data.id),
      login: data.username,
      avatarUrl: data.avatar_url ?? "",
      company: data.organization || null,
      name: data.name ?? null,
      email: data.email || data.public_email || null,
    };
  }

  async listInstallations(): Promise<string[]> {
    return [];
  }

  async listRepositories(q: { sort: string; page: number; perPage: number }): Promise<RepositoryRecord[]> {
    const params = {
      membership: "true",
      order_by: ORDER_BY[q.sort] ?? "last_activity_at",
      sort: q.sort === "full_name" ? "asc" : "desc",
      page: q.page,
      per_page: q.perPage,
    };
    const { data, headers } = await this.#get<GitLabProject[]>("/projects", params);
    const link = this.#link(headers, "/projects", params);
    return data.map((p) => toRepository(p, link));
  }

  async listAllRepositories(sort: string, max: number): Promise<RepositoryRecord[]> {
    const out: RepositoryRecord[] = [];
    for (let page = 1; out.length < max; page++) {
      const params = {
        membership: "true",
        order_by: ORDER_BY[sort] ?? "last_activity_at",
        sort: "desc",
        page,
        per_page: 100,
      };
      const { data, headers } = await this.#get<GitLabProject[]>("/projects", params);
      for (const p of data) if (out.length < max) out.push(toRepository(p, null));
      const next = headers.get("x-next-page");
      if (data.length === 0 || next === null || next === "") break;
    }
    return out;
  }

  async searchRepositories(q: {
    query: string;
    perPage: number;
    sort: string;
    order: string;
  }): Promise<RepositoryRecord[]> {
    const url = /^https?:\/\/[^/]+\/(.+?)\/?$/.exec(q.query);
    const search = url?.[1] ?? q.query;
    const { data } = await this.#get<GitLabProject[]>("/projects", {
      search,
      ...(search.includes("/") ? { search_namespaces: "true" } : {}),
      ...(url === null ? { membership: "true" } : {}),
      order_by: ORDER_BY[q.sort] ?? "star_count",
      sort: q.order === "asc" ? "asc" : "desc",
      per_page: q.perPage,
    });
    return data.map((p) => toRepository(p, null));
  }

  async listBranches(repository: string, page: number, perPage: number): Promise<BranchPage> {
    const { data, headers } = await this.#get<GitLabBranch[]>(
      `/projects/${encodeURIComponent(repository)}/repository/branches`,
      { page, per_page: perPage },
    );
    const total = headers.get("x-total");
    const next = headers.get("x-next-page");
    return {
      branches: data.map(toBranch),
      hasNextPage: next !== null && next !== "",
      currentPage: page,
      perPage,
      totalCount: total !== null && /^\d+$/.test(total) ? Number(total) : null,
    };
  }

  async searchBranches(repository: string, query: string, perPage: number): Promise<BranchRecord[]> {
    const { data } = await this.#get<GitLabBranch[]>(
      `/projects/${encodeURIComponent(repository)}/repository/branches`,
      { search: query, per_page: perPage },
    );
    return data.map(toBranch);
  }

  /** Open merge requests the user authored and open issues assigned to them. */
  async listSuggestedTasks(): Promise<SuggestedTaskRecord[]> {
    type Item = { iid: number; title: string; web_url: string; references?: { full?: string } };
    const repoOf = (i: Item): string => {
      const full = i.references?.full;
      if (full !== undefined) return full.replace(/[!#]\d+$/, "");
      return new URL(i.web_url).pathname.split("/-/")[0]?.replace(/^\//, "") ?? "";
    };
    const [mrs, issues] = await Promise.all([
      this.#get<Item[]>("/merge_requests", { state: "opened", scope: "created_by_me", per_page: 30 }),
      this.#get<Item[]>("/issues", { state: "opened", scope: "assigned_to_me", per_page: 30 }),
    ]);
    const map = (items: Item[], taskType: SuggestedTaskRecord["taskType"]) =>
      items.map((i) => ({
        provider: "gitlab" as const,
        taskType,
        repo: repoOf(i),
        issueNumber: i.iid,
        title: i.title,
      }));
    return [...map(mrs.data, "OPEN_PR"), ...map(issues.data, "OPEN_ISSUE")];
  }

  async listFiles(repository: string, folder: string): Promise<{ name: string; path: string }[]> {
    const { data } = await this.#get<{ type: string; name: string; path: string }[]>(
      `/projects/${encodeURIComponent(repository)}/repository/tree`,
      { path: folder, per_page: 100 },
    );
    return data.filter((i) => i.type === "blob").map((i) => ({ name: i.name, path: i.path }));
  }

  async pullRequestOpen(repository: string, number: number): Promise<boolean> {
    const { data } = await this.#get<{ state?: unknown; merged_at?: unknown; closed_at?: unknown }>(
      `/projects/${encodeURIComponent(repository)}/merge_requests/${number}`,
    );
    if (typeof data.state === "string") return data.state === "opened";
    if ("merged_at" in data && "closed_at" in data) return !(data.merged_at || data.closed_at);
    return true;
  }

  async hasFile(repository: string, path: string): Promise<boolean> {
    try {
      await this.#get(
        `/projects/${encodeURIComponent(repository)}/repository/files/${encodeURIComponent(path)}`,
        {
          ref: "HEAD",
        },
      );
      return true;
    } catch (err) {
      if (err instanceof GitProviderError && err.kind === "not_found") return false;
      throw err;
    }
  }
}
