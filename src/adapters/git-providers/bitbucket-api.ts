import {
  type BranchPage,
  type BranchRecord,
  type GitProviderApi,
  GitProviderError,
  type GitUserRecord,
  type RepositoryRecord,
  type SuggestedTaskRecord,
} from "../../ports/git-provider.ts";
import type { ProviderHttp } from "./provider-http.ts";

interface BitbucketRepo {
  uuid: string;
  full_name: string;
  is_private?: boolean;
  updated_on?: string | null;
  mainbranch?: { name?: string } | null;
  owner?: { type?: string } | null;
}

interface BitbucketPage<T> {
  values: T[];
  next?: string;
  size?: number;
  page?: number;
}

interface BitbucketBranch {
  name: string;
  target?: { hash?: string; date?: string | null } | null;
}

function toRepository(r: BitbucketRepo, linkHeader: string | null): RepositoryRecord {
  return {
    id: r.uuid,
    fullName: r.full_name,
    provider: "bitbucket",
    isPublic: r.is_private === false,
    stargazersCount: null,
    linkHeader,
    pushedAt: r.updated_on ?? null,
    ownerType: r.owner?.type === "team" ? "organization" : "user",
    mainBranch: r.mainbranch?.name ?? null,
  };
}

function toBranch(b: BitbucketBranch): BranchRecord {
  return {
    name: b.name,
    commitSha: b.target?.hash ?? "",
    protected: false,
    lastPushDate: b.target?.date ?? null,
  };
}

const SORT: Record<string, string> = {
  pushed: "-updated_on",
  updated: "-updated_on",
  created: "-created_on",
  full_name: "full_name",
};

/** A BBQL string literal. */
const literal = (s: string) => `"${s.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;

/**
 * Bitbucket Cloud REST 2.0 over the shared provider HTTP client. Tokens holding a ':' are `username:app_password`
 * (basic auth), others are access tokens (bearer). Paging follows the `next` URLs of the answers, only on the
 * API's own origin.
 */
export class BitbucketApi implements GitProviderApi {
  readonly provider = "bitbucket" as const;
  readonly #base: string;
  readonly #http: ProviderHttp;
  readonly #auth: Record<string, string>;
  readonly #mainBranches = new Map<string, Promise<string>>();

  /** base: https://api.bitbucket.org/2.0 or https://api.HOST/2.0 (see providerApiBase). */
  constructor(token: string, base: string, http: ProviderHttp) {
    this.#base = base;
    this.#http = http;
    this.#auth = {
      authorization: token.includes(":")
        ? `Basic ${Buffer.from(token).toString("base64")}`
        : `Bearer ${token}`,
    };
  }

  #url(path: string, params: Record<string, string | number> = {}): string {
    const url = new URL(`${this.#base}${path}`);
    for (const [k, v] of Object.entries(params)) url.searchParams.set(k, String(v));
    return url.toString();
  }

  #get<T>(url: string) {
    return this.#http.getJson<T>(url, this.#auth);
  }

  /** A `next` URL the server may follow: same origin as the API base, else none. */
  #next(next: string | undefined): string | null {
    if (next === undefined) return null;
    try {
      return new URL(next).origin === new URL(this.#base).origin ? next : null;
    } catch {
      return null;
    }
  }

  async #collect<T>(first: string, max: number): Promise<T[]> {
    const out: T[] = [];
    let url: string | null = first;
    for (let pages = 0; url !== null && out.length < max && pages < 50; pages++) {
      const { data }: { data: BitbucketPage<T> } = await this.#get<BitbucketPage<T>>(url);
      out.push(...data.values.slice(0, max - out.length));
      url = this.#next(data.next);
    }
    return out;
  }

  async getUser(): Promise<GitUserRecord> {
    const { data } = await this.#get<{
      account_id?: string;
      uuid?: string;
      username?: string;
      nickname?: string;
      display_name?: string;
      links?: { avatar?: { href?: string } };
    }>(this.#url("/user"));
    return {
      id: data.account_id ?? data.uuid ?? "",
      login: data.username ?? data.nickname ?? "",
      avatarUrl: data.links?.avatar?.href ?? "",
      company: null,
      name: data.display_name ?? null,
      email: null,
    };
  }

  /** Workspace slugs the user belongs to. */
  async listInstallations(): Promise<string[]> {
    const values = await this.#collect<{ slug: string }>(this.#url("/workspaces", { pagelen: 100 }), 1000);
    return values.map((w) => w.slug);
  }

  async listRepositories(q: {
    sort: string;
    page: number;
    perPage: number;
    installationId: string | null;
  }): Promise<RepositoryRecord[]> {
    const path =
      q.installationId === null ? "/repositories" : `/repositories/${encodeURIComponent(q.installationId)}`;
    const { data } = await this.#get<BitbucketPage<BitbucketRepo>>(
      this.#url(path, {
        ...(q.installationId === null ? { role: "member" } : {}),
        sort: SORT[q.sort] ?? "-updated_on",
        page: q.page,
        pagelen: q.perPage,
      }),
    );
    const next = this.#next(data.next);
    const link = next === null ? null : `<${next}>; rel="next"`;
    return data.values.map((r) => toRepository(r, link));
  }

  async listAllRepositories(sort: string, max: number): Promise<RepositoryRecord[]> {
    const values = await this.#collect<BitbucketRepo>(
      this.#url("/repositories", { role: "member", sort: SORT[sort] ?? "-updated_on", pagelen: 100 }),
      max,
    );
    return values.map((r) => toRepository(r, null));
  }

  async searchRepositories(q: { query: string; perPage: number }): Promise<RepositoryRecord[]> {
    const url = /^https?:\/\/[^/]+\/([^/]+)\/([^/?#]+)/.exec(q.query);
    if (url !== null) {
      const { data } = await this.#get<BitbucketRepo>(
        this.#url(`/repositories/${encodeURIComponent(url[1] ?? "")}/${encodeURIComponent(url[2] ?? "")}`),
      );
      return [toRepository(data, null)];
    }
    const [workspace, name] = q.query.includes("/") ? q.query.split("/", 2) : [null, q.query];
    const path =
      workspace === null ? "/repositories" : `/repositories/${encodeURIComponent(workspace ?? "")}`;
    const { data } = await this.#get<BitbucketPage<BitbucketRepo>>(
      this.#url(path, {
        ...(workspace === null ? { role: "member" } : {}),
        q: `name ~ ${literal(name ?? "")}`,
        pagelen: q.perPage,
      }),
    );
    return data.values.map((r) => toRepository(r, null));
  }

  async listBranches(repository: string, page: number, perPage: number): Promise<BranchPage> {
    const { data } = await this.#get<BitbucketPage<BitbucketBranch>>(
      this.#url(`/repositories/${repoPath(repository)}/refs/branches`, { page, pagelen: perPage }),
    );
    return {
      branches: data.values.map(toBranch),
      hasNextPage: data.next !== undefined,
      currentPage: page,
      perPage,
      totalCount: data.size ?? null,
    };
  }

  async searchBranches(repository: string, query: string, perPage: number): Promise<BranchRecord[]> {
    const { data } = await this.#get<BitbucketPage<BitbucketBranch>>(
      this.#url(`/repositories/${repoPath(repository)}/refs/branches`, {
        q: `name ~ ${literal(query)}`,
        pagelen: perPage,
      }),
    );
    return data.values.map(toBranch);
  }

  /** The repository's main branch, as the reference reads files from it; not_found when it has none. */
  #mainBranch(repository: string): Promise<string> {
    let branch = this.#mainBranches.get(repository);
    if (branch === undefined) {
      branch = this.#get<BitbucketRepo>(this.#url(`/repositories/${repoPath(repository)}`)).then(
        ({ data }) => {
          const name = data.mainbranch?.name;
          if (name === undefined || name === "")
            throw new GitProviderError("bitbucket", "not_found", "Bitbucket repository has no main branch");
          return name;
        },
      );
      this.#mainBranches.set(repository, branch);
    }
    return branch;
  }

  /** `src/{main branch}/{path}` of a repository. */
  async #src(repository: string, path: string): Promise<string> {
    const branch = await this.#mainBranch(repository);
    return this.#url(
      `/repositories/${repoPath(repository)}/src/${encodeURIComponent(branch)}/${repoPath(path)}`,
    );
  }

  async listFiles(repository: string, folder: string): Promise<{ name: string; path: string }[]> {
    const values = await this.#collect<{ type: string; path: string }>(
      `${await this.#src(repository, folder)}/?pagelen=100`,
      1000,
    );
    return values
      .filter((i) => i.type === "commit_file")
      .map((i) => ({ name: i.path.split("/").at(-1) ?? i.path, path: i.path }));
  }

  /** Bitbucket's states: OPEN, MERGED, DECLINED, SUPERSEDED. */
  async pullRequestOpen(repository: string, number: number): Promise<boolean> {
    const { data } = await this.#get<{ state?: unknown }>(
      this.#url(`/repositories/${repoPath(repository)}/pullrequests/${number}`),
    );
    return typeof data.state === "string" ? data.state === "OPEN" : true;
  }

  async hasFile(repository: string, path: string): Promise<boolean> {
    try {
      const res = await this.#http.fetch(await this.#src(repository, path), { headers: this.#auth });
      await res.body?.cancel();
      return true;
    } catch (err) {
      if (err instanceof GitProviderError && err.kind === "not_found") return false;
      throw err;
    }
  }

  /** The raw file on the main branch (`src/{branch}/{path}`). */
  async readFile(repository: string, path: string): Promise<string> {
    return this.#http.getText(await this.#src(repository, path), this.#auth);
  }

  /** No suggestions from Bitbucket, as the reference (its suggested tasks are not implemented there). */
  async listSuggestedTasks(): Promise<SuggestedTaskRecord[]> {
    return [];
  }
}

const repoPath = (repository: string) => repository.split("/").map(encodeURIComponent).join("/");
