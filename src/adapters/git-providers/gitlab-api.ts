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

/** The user's open merge requests with what the suggestion needs: conflicts, latest pipeline, notes. */
const AUTHORED_MERGE_REQUESTS = `
query AuthoredMergeRequests {
  currentUser {
    authoredMergeRequests(state: opened, sort: UPDATED_DESC, first: 100) {
      nodes {
        iid
        title
        conflicts
        project { fullPath }
        pipelines(first: 1) { nodes { status } }
        discussions(first: 100) { nodes { notes { nodes { resolvable resolved } } } }
      }
    }
  }
}`;

interface MergeRequestNode {
  iid: string;
  title?: string;
  conflicts?: boolean | null;
  project?: { fullPath?: string } | null;
  pipelines?: { nodes?: ({ status?: string } | null)[] } | null;
  discussions?: {
    nodes?: ({ notes?: { nodes?: ({ resolvable?: boolean; resolved?: boolean } | null)[] } } | null)[];
  } | null;
}

/** The reference's classification of an open MR; null for a plain open MR (not a suggestion). */
export function classifyMergeRequest(mr: MergeRequestNode): SuggestedTaskRecord["taskType"] | null {
  if (mr.conflicts === true) return "MERGE_CONFLICTS";
  if (mr.pipelines?.nodes?.[0]?.status === "FAILED") return "FAILING_CHECKS";
  const unresolved = (mr.discussions?.nodes ?? []).some((d) =>
    (d?.notes?.nodes ?? []).some((n) => n?.resolvable === true && n.resolved !== true),
  );
  return unresolved ? "UNRESOLVED_COMMENTS" : null;
}

/** GitLab REST v4 (gitlab.com or self-managed) over the shared provider HTTP client, GraphQL for suggestions. */
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

  /** A GitLab GraphQL query (HOST/api/graphql); an answer with `errors` is a failure. */
  async #graphql<T>(query: string, variables: Record<string, unknown> = {}): Promise<T> {
    const url = this.#base.replace(/\/api\/v4$/, "/api/graphql");
    const body = await this.#http.postJson<{ data?: T | null; errors?: unknown[] }>(
      url,
      { query, variables },
      this.#auth,
    );
    if ((body.errors?.length ?? 0) > 0 || body.data === undefined || body.data === null)
      throw new GitProviderError("gitlab", "unavailable", "GitLab answered the query with errors");
    return body.data;
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

  /**
   * The reference's suggestions: the user's open merge requests (GraphQL) that have conflicts, a failed latest
   * pipeline or an unresolved resolvable note (plain open MRs are left out), and the open issues assigned to them
   * (REST). When one of the two fails the other's answer is kept; when both fail, the first failure is thrown.
   */
  async listSuggestedTasks(): Promise<SuggestedTaskRecord[]> {
    const [mrs, issues] = await Promise.allSettled([
      this.#graphql<{
        currentUser: { authoredMergeRequests?: { nodes?: (MergeRequestNode | null)[] } } | null;
      }>(AUTHORED_MERGE_REQUESTS),
      this.getUser().then(({ login }) =>
        this.#get<{ iid: number; title: string; references?: { full?: string } }[]>("/issues", {
          assignee_username: login,
          state: "opened",
          scope: "assigned_to_me",
        }),
      ),
    ]);
    if (mrs.status === "rejected" && issues.status === "rejected") throw mrs.reason;
    const tasks: SuggestedTaskRecord[] = [];
    if (mrs.status === "fulfilled") {
      for (const mr of mrs.value.currentUser?.authoredMergeRequests?.nodes ?? []) {
        if (mr === null) continue;
        const taskType = classifyMergeRequest(mr);
        const number = Number(mr.iid);
        if (taskType === null || !Number.isSafeInteger(number)) continue;
        tasks.push({
          provider: "gitlab",
          taskType,
          repo: mr.project?.fullPath ?? "",
          issueNumber: number,
          title: mr.title ?? "",
        });
      }
    }
    if (issues.status === "fulfilled") {
      for (const issue of issues.value.data) {
        tasks.push({
          provider: "gitlab",
          taskType: "OPEN_ISSUE",
          repo: (issue.references?.full ?? "").split("#")[0]?.trim() ?? "",
          issueNumber: issue.iid,
          title: issue.title,
        });
      }
    }
    return tasks;
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

  /** The raw file (`repository/files/:path/raw`) on the default branch. */
  async readFile(repository: string, path: string): Promise<string> {
    const url = new URL(
      `${this.#base}/projects/${encodeURIComponent(repository)}/repository/files/${encodeURIComponent(path)}/raw`,
    );
    url.searchParams.set("ref", "HEAD");
    return this.#http.getText(url.toString(), this.#auth);
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
