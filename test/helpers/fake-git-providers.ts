import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";

/**
 * Fake GitHub, GitLab and Bitbucket Cloud APIs on loopback, answering with the shapes of the providers' public
 * REST and GraphQL documentation (GitHub REST v3 under /api/v3 and GraphQL at /api/graphql as on Enterprise
 * Server, GitLab v4 under /api/v4 and GraphQL at /api/graphql, Bitbucket 2.0 under /2.0): the current user,
 * repositories with the providers' own paging (GitHub Link headers, GitLab X-Next-Page/X-Total and Link,
 * Bitbucket `next` URLs), installations/workspaces, organisations, branches, branch and repository search, file
 * contents, and the queries behind suggested tasks. Switches: an account's token expired (401), rate limiting
 * (GitHub 403 + x-ratelimit-remaining: 0, GitLab and Bitbucket 429 + Retry-After), GitHub's secondary limit (a
 * bare 403 whose message says so), a 403 that is not a limit, a GraphQL RATE_LIMITED error, 5xx answers,
 * hanging (never answers), a redirect, and paging links pointing at another host. Every request is recorded with
 * its Authorization header and body.
 */
export type FakeKind = "github" | "gitlab" | "bitbucket";

export interface FakeRepo {
  /** owner/name */
  name: string;
  private?: boolean;
  org?: boolean;
  branches?: string[];
  /** File paths on the default branch. */
  files?: string[];
  /** Text of some of those files (others read "rules for PATH"). */
  contents?: Record<string, string>;
}

/** Files directly in a folder, and whether the folder exists. */
function folderOf(r: FakeRepo, folder: string): { files: string[]; exists: boolean } {
  const prefix = `${folder.replace(/\/+$/, "")}/`;
  const inside = (r.files ?? []).filter((f) => f.startsWith(prefix));
  return { files: inside.filter((f) => !f.slice(prefix.length).includes("/")), exists: inside.length > 0 };
}

/** An open pull/merge request the account authored, with what the suggestion classification reads. */
export interface FakePr {
  repo: string;
  number: number;
  title: string;
  /** GitHub mergeable CONFLICTING / GitLab conflicts: true. */
  conflicts?: boolean;
  /** State of the last commit's checks (GitHub statusCheckRollup) / latest pipeline (GitLab: FAILURE → FAILED). */
  checks?: "SUCCESS" | "FAILURE" | "PENDING";
  /** GitHub review states (CHANGES_REQUESTED, COMMENTED, APPROVED). */
  reviews?: string[];
  /** GitLab: a resolvable note left unresolved. */
  unresolved?: boolean;
}

export interface FakeAccount {
  token: string;
  login: string;
  id: number;
  repos: FakeRepo[];
  expired?: boolean;
  /** Open PRs/MRs authored. */
  prs?: FakePr[];
  /** Open issues assigned: [repo, number, title]. */
  issues?: [string, number, string][];
  workspaces?: string[];
  installations?: { id: number; repos: string[] }[];
  /**
   * Pull (merge) requests by "owner/name#number", in the provider's own state words (GitHub open/closed, GitLab
   * opened/closed/merged, Bitbucket OPEN/MERGED/DECLINED); a GitHub entry "merged" answers closed with merged true.
   */
  pullRequests?: Record<string, string>;
  /** GitHub organisations the user belongs to (their repositories are those of `repos` owned by them). */
  orgs?: string[];
  /** Branches covered by a protection rule (GitHub), by name. */
  protectedBranches?: string[];
}

/** Text of a fake file: `contents[path]`, else "rules for PATH". */
export const fileText = (r: FakeRepo, path: string): string => r.contents?.[path] ?? `rules for ${path}`;

export interface FakeMode {
  rateLimited?: boolean;
  /** GitHub: 403 "You have exceeded a secondary rate limit" without any rate-limit header. */
  secondaryRateLimited?: boolean;
  /** GitHub GraphQL: 200 with a RATE_LIMITED error. */
  graphqlRateLimited?: boolean;
  /** Every answer is this 5xx status. */
  serverError?: number;
  /** Every answer is a 403 that is not a rate limit (a token lacking a permission). */
  forbidden?: boolean;
  hang?: boolean;
  redirect?: boolean;
  /** Paging links (GitHub Link, Bitbucket next) point at another host. */
  foreignLinks?: boolean;
}

export interface FakeGitProvider {
  kind: FakeKind;
  /** 127.0.0.1:PORT (what a token's host holds). */
  host: string;
  port: number;
  requests: { method: string; path: string; auth: string | undefined; body: string }[];
  /** Requests whose path (without query) matches. */
  count(pathPrefix: string): number;
  /** Hanging requests whose client went away before an answer. */
  abandoned(): number;
  set(mode: FakeMode): void;
  close(): Promise<void>;
}

const SHA = (s: string) => Buffer.from(s).toString("hex").padEnd(40, "0").slice(0, 40);
const DATE = "2024-05-01T10:00:00Z";

export async function startFakeGitProvider(
  kind: FakeKind,
  accounts: FakeAccount[],
): Promise<FakeGitProvider> {
  const mode: Required<FakeMode> = {
    rateLimited: false,
    secondaryRateLimited: false,
    graphqlRateLimited: false,
    serverError: 0,
    forbidden: false,
    hang: false,
    redirect: false,
    foreignLinks: false,
  };
  const requests: FakeGitProvider["requests"] = [];
  const hanging = new Set<ServerResponse>();
  let abandoned = 0;
  let origin = "";
  /** Where paging links point when foreignLinks is on. */
  const FOREIGN = "http://127.0.0.2:9";

  const tokenOf = (req: IncomingMessage): string => {
    const auth = req.headers.authorization ?? "";
    if (auth.startsWith("Bearer ")) return auth.slice(7);
    if (auth.startsWith("token ")) return auth.slice(6);
    if (auth.startsWith("Basic ")) return Buffer.from(auth.slice(6), "base64").toString();
    return "";
  };

  const json = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) =>
    res
      .writeHead(status, { "content-type": "application/json; charset=utf-8", ...headers })
      .end(JSON.stringify(body));

  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => answer(req, res, Buffer.concat(chunks).toString()));
  });

  function answer(req: IncomingMessage, res: ServerResponse, body: string) {
    const url = new URL(req.url ?? "/", origin);
    requests.push({
      method: req.method ?? "",
      path: url.pathname + url.search,
      auth: req.headers.authorization,
      body,
    });
    if (mode.hang) {
      hanging.add(res);
      res.on("close", () => {
        if (hanging.delete(res)) abandoned++;
      });
      return;
    }
    if (mode.serverError > 0) return json(res, mode.serverError, { message: "Server Error" });
    if (mode.forbidden)
      return json(res, 403, {
        message: "Resource not accessible by personal access token",
        documentation_url:
          "https://docs.github.com/rest/repos/repos#list-repositories-for-the-authenticated-user",
      });
    if (mode.redirect) {
      res.writeHead(302, { location: `${origin}/redirected${url.pathname}` }).end();
      return;
    }
    const account = accounts.find((a) => a.token === tokenOf(req));
    if (account === undefined || account.expired === true) {
      if (kind === "github")
        return json(res, 401, {
          message: "Bad credentials",
          documentation_url: "https://docs.github.com/rest",
        });
      if (kind === "gitlab") return json(res, 401, { message: "401 Unauthorized" });
      return json(res, 401, { type: "error", error: { message: "Access token expired." } });
    }
    if (mode.secondaryRateLimited && kind === "github")
      return json(res, 403, {
        message:
          "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach out to GitHub Support for help, please include the request ID.",
        documentation_url:
          "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits",
      });
    if (mode.rateLimited) {
      const reset = String(Math.floor(Date.now() / 1000) + 30);
      if (kind === "github")
        return json(
          res,
          403,
          {
            message: `API rate limit exceeded for user ID ${account.id}.`,
            documentation_url: "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api",
          },
          {
            "x-ratelimit-limit": "5000",
            "x-ratelimit-remaining": "0",
            "x-ratelimit-reset": reset,
            "x-ratelimit-used": "5000",
          },
        );
      if (kind === "gitlab") {
        res
          .writeHead(429, {
            "content-type": "text/plain",
            "retry-after": "30",
            "ratelimit-limit": "2000",
            "ratelimit-remaining": "0",
            "ratelimit-reset": reset,
          })
          .end("Retry later");
        return;
      }
      return json(
        res,
        429,
        { type: "error", error: { message: "Rate limit for this resource has been exceeded" } },
        { "retry-after": "30" },
      );
    }
    if (req.method === "POST" && url.pathname === "/api/graphql") {
      let parsed: { query?: string; variables?: Record<string, unknown> };
      try {
        parsed = JSON.parse(body) as typeof parsed;
      } catch {
        return json(res, 400, { message: "Problems parsing JSON" });
      }
      return kind === "github"
        ? githubGraphql(parsed.query ?? "", parsed.variables ?? {}, account, res)
        : gitlabGraphql(parsed.query ?? "", account, res);
    }
    const handler = kind === "github" ? github : kind === "gitlab" ? gitlab : bitbucket;
    handler(url, account, res);
  }

  const pageOf = (url: URL, perPageName: string, def: number) => {
    const page = Math.max(1, Number(url.searchParams.get("page") ?? "1") || 1);
    const perPage = Math.max(1, Number(url.searchParams.get(perPageName) ?? String(def)) || def);
    return { page, perPage };
  };
  const slice = <T>(items: T[], page: number, perPage: number) => ({
    items: items.slice((page - 1) * perPage, page * perPage),
    last: Math.max(1, Math.ceil(items.length / perPage)),
  });
  const linkHeader = (url: URL, page: number, last: number) => {
    const at = (p: number) => {
      const u = new URL(mode.foreignLinks ? `${FOREIGN}${url.pathname}${url.search}` : url.toString());
      u.searchParams.set("page", String(p));
      return u.toString();
    };
    const parts: string[] = [];
    if (page < last) parts.push(`<${at(page + 1)}>; rel="next"`, `<${at(last)}>; rel="last"`);
    if (page > 1) parts.push(`<${at(1)}>; rel="first"`, `<${at(page - 1)}>; rel="prev"`);
    return parts.join(", ");
  };
  const repoId = (name: string) => [...name].reduce((h, c) => (h * 31 + c.charCodeAt(0)) >>> 0, 7);

  function github(url: URL, a: FakeAccount, res: ServerResponse) {
    // GitHub reads %2F in a path parameter as "/" (Octokit encodes the ref of matching-refs so).
    const p = decodeURIComponent(url.pathname).replace(/^\/api\/v3/, "");
    const ghRepo = (r: FakeRepo) => ({
      id: repoId(r.name),
      node_id: `R_${repoId(r.name)}`,
      name: r.name.split("/")[1],
      full_name: r.name,
      private: r.private === true,
      owner: { login: r.name.split("/")[0], id: 1, type: r.org === true ? "Organization" : "User" },
      html_url: `https://github.example/${r.name}`,
      stargazers_count: 3,
      pushed_at: DATE,
      default_branch: r.branches?.[0] ?? "main",
    });
    const paged = (items: unknown[], wrap?: (items: unknown[]) => unknown) => {
      const { page, perPage } = pageOf(url, "per_page", 30);
      const s = slice(items, page, perPage);
      const link = linkHeader(url, page, s.last);
      return json(res, 200, wrap ? wrap(s.items) : s.items, link === "" ? {} : { link });
    };
    if (p === "/user")
      return json(res, 200, {
        login: a.login,
        id: a.id,
        avatar_url: `https://avatars.example/${a.id}`,
        type: "User",
        name: `${a.login} name`,
        company: null,
        email: `${a.login}@example.com`,
      });
    if (p === "/user/repos") return paged(a.repos.map(ghRepo));
    if (p === "/user/installations")
      return json(res, 200, {
        total_count: (a.installations ?? []).length,
        installations: (a.installations ?? []).map((i) => ({
          id: i.id,
          account: { login: "org", type: "Organization" },
        })),
      });
    const inst = /^\/user\/installations\/(\d+)\/repositories$/.exec(p);
    if (inst !== null) {
      const i = (a.installations ?? []).find((x) => String(x.id) === inst[1]);
      if (i === undefined) return json(res, 404, { message: "Not Found" });
      const repos = a.repos.filter((r) => i.repos.includes(r.name)).map(ghRepo);
      return paged(repos, (items) => ({ total_count: repos.length, repositories: items }));
    }
    const branches = /^\/repos\/([^/]+\/[^/]+)\/branches$/.exec(p);
    if (branches !== null) {
      const r = a.repos.find((x) => x.name === decodeURIComponent(branches[1] ?? ""));
      if (r === undefined) return json(res, 404, { message: "Not Found" });
      return paged(
        (r.branches ?? ["main"]).map((b) => ({
          name: b,
          commit: { sha: SHA(b), url: "" },
          protected: b === "main",
        })),
      );
    }
    const contents = /^\/repos\/([^/]+\/[^/]+)\/contents\/(.+)$/.exec(p);
    if (contents !== null) {
      const r = a.repos.find((x) => x.name === contents[1]);
      const path = contents[2] ?? "";
      if (r === undefined) return json(res, 404, { message: "Not Found" });
      if ((r.files ?? []).includes(path))
        return json(res, 200, {
          type: "file",
          name: path.split("/").at(-1),
          path,
          encoding: "base64",
          // GitHub wraps the base64 body at 60 characters.
          content: (
            Buffer.from(fileText(r, path))
              .toString("base64")
              .match(/.{1,60}/g) ?? []
          ).join("\n"),
        });
      const dir = folderOf(r, path);
      if (!dir.exists) return json(res, 404, { message: "Not Found" });
      return json(
        res,
        200,
        dir.files.map((f) => ({ type: "file", name: f.split("/").at(-1), path: f, sha: SHA(f) })),
      );
    }
    const pull = /^\/repos\/([^/]+\/[^/]+)\/pulls\/(\d+)$/.exec(p);
    if (pull !== null) {
      const state = a.pullRequests?.[`${pull[1]}#${pull[2]}`];
      if (state === undefined) return json(res, 404, { message: "Not Found" });
      return json(res, 200, {
        number: Number(pull[2]),
        state: state === "merged" ? "closed" : state,
        merged: state === "merged",
        closed_at: state === "open" ? null : DATE,
      });
    }
    if (p === "/user/orgs")
      return json(
        res,
        200,
        (a.orgs ?? []).map((login, i) => ({ login, id: 9000 + i, url: `${origin}/api/v3/orgs/${login}` })),
      );
    if (p === "/search/repositories") {
      // Qualifiers user:, org:, in:name and is:public; the other words must appear in the repository name.
      const words = (url.searchParams.get("q") ?? "").split(/\s+/).filter((w) => w !== "");
      const owners = words.filter((w) => /^(user|org):/.test(w)).map((w) => w.slice(w.indexOf(":") + 1));
      const terms = words.filter((w) => !w.includes(":")).map((w) => w.split("/").at(-1) ?? "");
      const perPage = Number(url.searchParams.get("per_page") ?? "30");
      const items = a.repos
        .filter((r) => owners.every((o) => r.name.split("/")[0] === o))
        .filter((r) => terms.every((term) => (r.name.split("/")[1] ?? "").includes(term)))
        .slice(0, perPage)
        .map(ghRepo);
      return json(res, 200, { total_count: items.length, incomplete_results: false, items });
    }
    return json(res, 404, { message: "Not Found" });
  }

  function githubGraphql(query: string, vars: Record<string, unknown>, a: FakeAccount, res: ServerResponse) {
    if (mode.graphqlRateLimited)
      return json(
        res,
        200,
        {
          errors: [{ type: "RATE_LIMITED", message: `API rate limit exceeded for user ID ${a.id}.` }],
        },
        {
          "x-ratelimit-limit": "5000",
          "x-ratelimit-remaining": "0",
          "x-ratelimit-reset": String(Math.floor(Date.now() / 1000) + 40),
        },
      );
    if (query.includes("pullRequests(")) {
      if (vars.login !== a.login) return json(res, 200, { data: { user: null } });
      return json(res, 200, {
        data: {
          user: {
            pullRequests: {
              nodes: (a.prs ?? []).map((pr) => ({
                number: pr.number,
                title: pr.title,
                mergeable: pr.conflicts === true ? "CONFLICTING" : "MERGEABLE",
                repository: { nameWithOwner: pr.repo },
                commits: {
                  nodes: [
                    { commit: { statusCheckRollup: pr.checks === undefined ? null : { state: pr.checks } } },
                  ],
                },
                // The query asks for CHANGES_REQUESTED and COMMENTED reviews only.
                reviews: {
                  nodes: (pr.reviews ?? [])
                    .filter((s) => s === "CHANGES_REQUESTED" || s === "COMMENTED")
                    .map((state) => ({ state })),
                },
              })),
            },
          },
        },
      });
    }
    if (query.includes("issues(")) {
      if (vars.login !== a.login) return json(res, 200, { data: { user: null } });
      return json(res, 200, {
        data: {
          user: {
            issues: {
              nodes: (a.issues ?? []).map(([repo, number, title]) => ({
                number,
                title,
                repository: { nameWithOwner: repo },
              })),
            },
          },
        },
      });
    }
    if (query.includes("refs(")) {
      const r = a.repos.find((x) => x.name === `${String(vars.owner)}/${String(vars.name)}`);
      if (r === undefined)
        return json(res, 200, {
          data: { repository: null },
          errors: [
            {
              type: "NOT_FOUND",
              path: ["repository"],
              message: `Could not resolve to a Repository with the name '${String(vars.owner)}/${String(vars.name)}'.`,
            },
          ],
        });
      const text = String(vars.text ?? "");
      const first = Number(vars.first ?? 100);
      const nodes = (r.branches ?? ["main"])
        .filter((b) => b.includes(text))
        .sort()
        .slice(0, first)
        .map((b) => {
          const rule = (a.protectedBranches ?? []).includes(b) ? { id: `BPR_${b}`, pattern: b } : null;
          return {
            name: b,
            branchProtectionRule: rule === null ? null : { id: rule.id },
            refUpdateRule: rule === null ? null : { pattern: rule.pattern },
            target: { __typename: "Commit", oid: SHA(b), committedDate: DATE },
          };
        });
      return json(res, 200, { data: { repository: { refs: { nodes } } } });
    }
    return json(res, 200, { errors: [{ message: "Field is not supported by this fake" }] });
  }

  function gitlabGraphql(query: string, a: FakeAccount, res: ServerResponse) {
    if (!query.includes("authoredMergeRequests"))
      return json(res, 200, { errors: [{ message: "Field is not supported by this fake" }] });
    return json(res, 200, {
      data: {
        currentUser: {
          authoredMergeRequests: {
            nodes: (a.prs ?? []).map((pr) => ({
              iid: String(pr.number),
              title: pr.title,
              conflicts: pr.conflicts === true,
              project: { fullPath: pr.repo },
              pipelines: {
                nodes:
                  pr.checks === undefined
                    ? []
                    : [
                        {
                          status:
                            pr.checks === "FAILURE"
                              ? "FAILED"
                              : pr.checks === "SUCCESS"
                                ? "SUCCESS"
                                : "RUNNING",
                        },
                      ],
              },
              discussions: {
                nodes: [
                  { notes: { nodes: [{ resolvable: false, resolved: false }] } },
                  ...(pr.unresolved === true
                    ? [{ notes: { nodes: [{ resolvable: true, resolved: false }] } }]
                    : []),
                  { notes: { nodes: [{ resolvable: true, resolved: true }] } },
                ],
              },
            })),
          },
        },
      },
    });
  }

  function gitlab(url: URL, a: FakeAccount, res: ServerResponse) {
    const p = url.pathname.replace(/^\/api\/v4/, "");
    const project = (r: FakeRepo) => ({
      id: repoId(r.name),
      name: r.name.split("/").at(-1),
      path_with_namespace: r.name,
      visibility: r.private === true ? "private" : "public",
      star_count: 2,
      last_activity_at: DATE,
      default_branch: r.branches?.[0] ?? "main",
      namespace: { kind: r.org === true ? "group" : "user", full_path: r.name.split("/")[0] },
    });
    const paged = (items: unknown[]) => {
      const { page, perPage } = pageOf(url, "per_page", 20);
      const s = slice(items, page, perPage);
      const link = linkHeader(url, page, s.last);
      return json(res, 200, s.items, {
        "x-page": String(page),
        "x-per-page": String(perPage),
        "x-total": String(items.length),
        "x-total-pages": String(s.last),
        "x-next-page": page < s.last ? String(page + 1) : "",
        "x-prev-page": page > 1 ? String(page - 1) : "",
        ...(link === "" ? {} : { link }),
      });
    };
    if (p === "/user")
      return json(res, 200, {
        id: a.id,
        username: a.login,
        name: `${a.login} name`,
        state: "active",
        avatar_url: `https://gitlab.example/uploads/${a.id}.png`,
        web_url: `https://gitlab.example/${a.login}`,
        email: `${a.login}@example.com`,
        organization: "ACME",
      });
    if (p === "/projects") {
      const search = url.searchParams.get("search");
      const repos = a.repos.filter((r) => search === null || r.name.includes(search));
      return paged(repos.map(project));
    }
    const br = /^\/projects\/([^/]+)\/repository\/branches$/.exec(p);
    if (br !== null) {
      const r = a.repos.find((x) => x.name === decodeURIComponent(br[1] ?? ""));
      if (r === undefined) return json(res, 404, { message: "404 Project Not Found" });
      const search = url.searchParams.get("search");
      return paged(
        (r.branches ?? ["main"])
          .filter((b) => search === null || b.includes(search))
          .map((b) => ({
            name: b,
            merged: false,
            protected: b === "main",
            default: b === "main",
            commit: { id: SHA(b), committed_date: DATE },
          })),
      );
    }
    const tree = /^\/projects\/([^/]+)\/repository\/tree$/.exec(p);
    if (tree !== null) {
      const r = a.repos.find((x) => x.name === decodeURIComponent(tree[1] ?? ""));
      if (r === undefined) return json(res, 404, { message: "404 Project Not Found" });
      const dir = folderOf(r, url.searchParams.get("path") ?? "");
      if (!dir.exists) return json(res, 404, { message: "404 Tree Not Found" });
      return json(
        res,
        200,
        dir.files.map((f) => ({
          id: SHA(f),
          name: f.split("/").at(-1),
          type: "blob",
          path: f,
          mode: "100644",
        })),
      );
    }
    const raw = /^\/projects\/([^/]+)\/repository\/files\/([^/]+)\/raw$/.exec(p);
    if (raw !== null) {
      const r = a.repos.find((x) => x.name === decodeURIComponent(raw[1] ?? ""));
      const path = decodeURIComponent(raw[2] ?? "");
      if (r === undefined || !(r.files ?? []).includes(path))
        return json(res, 404, { message: "404 File Not Found" });
      res.writeHead(200, { "content-type": "text/plain; charset=utf-8" }).end(fileText(r, path));
      return;
    }
    const file = /^\/projects\/([^/]+)\/repository\/files\/([^/]+)$/.exec(p);
    if (file !== null) {
      const r = a.repos.find((x) => x.name === decodeURIComponent(file[1] ?? ""));
      const path = decodeURIComponent(file[2] ?? "");
      if (r === undefined || !(r.files ?? []).includes(path))
        return json(res, 404, { message: "404 File Not Found" });
      return json(res, 200, {
        file_name: path.split("/").at(-1),
        file_path: path,
        encoding: "base64",
        content: "",
      });
    }
    const mr = /^\/projects\/([^/]+)\/merge_requests\/(\d+)$/.exec(p);
    if (mr !== null) {
      const state = a.pullRequests?.[`${decodeURIComponent(mr[1] ?? "")}#${mr[2]}`];
      if (state === undefined) return json(res, 404, { message: "404 Not found" });
      return json(res, 200, { iid: Number(mr[2]), state });
    }
    if (p === "/issues") {
      const assignee = url.searchParams.get("assignee_username");
      const mine =
        url.searchParams.get("scope") === "assigned_to_me" && (assignee === null || assignee === a.login);
      return json(
        res,
        200,
        (mine ? (a.issues ?? []) : []).map(([repo, iid, title]) => ({
          id: iid * 100,
          iid,
          title,
          state: "opened",
          web_url: `https://gitlab.example/${repo}/-/issues/${iid}`,
          references: { short: `#${iid}`, relative: `#${iid}`, full: `${repo}#${iid}` },
        })),
      );
    }
    return json(res, 404, { message: "404 Not Found" });
  }

  function bitbucket(url: URL, a: FakeAccount, res: ServerResponse) {
    const p = url.pathname.replace(/^\/2\.0/, "");
    const repo = (r: FakeRepo) => ({
      type: "repository",
      uuid: `{${repoId(r.name)}}`,
      full_name: r.name,
      name: r.name.split("/")[1],
      is_private: r.private !== false,
      updated_on: DATE,
      mainbranch: { type: "branch", name: r.branches?.[0] ?? "main" },
      owner: { type: r.org === true ? "team" : "user" },
    });
    const paged = (items: unknown[]) => {
      const { page, perPage } = pageOf(url, "pagelen", 10);
      const s = slice(items, page, perPage);
      const next = new URL(mode.foreignLinks ? `${FOREIGN}${url.pathname}${url.search}` : url.toString());
      next.searchParams.set("page", String(page + 1));
      return json(res, 200, {
        pagelen: perPage,
        page,
        size: items.length,
        values: s.items,
        ...(page < s.last ? { next: next.toString() } : {}),
      });
    };
    const nameFilter = (name: string) => {
      const q = /name ~ "(.*)"/.exec(url.searchParams.get("q") ?? "")?.[1];
      return q === undefined || name.includes(q);
    };
    if (p === "/user")
      return json(res, 200, {
        type: "user",
        account_id: `acc-${a.id}`,
        uuid: `{u-${a.id}}`,
        username: a.login,
        nickname: a.login,
        display_name: `${a.login} name`,
        links: { avatar: { href: `https://bitbucket.example/avatar/${a.id}` } },
      });
    if (p === "/workspaces")
      return paged(
        (a.workspaces ?? []).map((slug) => ({ type: "workspace", slug, name: slug, uuid: `{${slug}}` })),
      );
    if (p === "/repositories")
      return paged(a.repos.filter((r) => nameFilter(r.name.split("/")[1] ?? "")).map(repo));
    const ws = /^\/repositories\/([^/]+)$/.exec(p);
    if (ws !== null)
      return paged(
        a.repos
          .filter((r) => r.name.split("/")[0] === ws[1] && nameFilter(r.name.split("/")[1] ?? ""))
          .map(repo),
      );
    const br = /^\/repositories\/([^/]+\/[^/]+)\/refs\/branches$/.exec(p);
    if (br !== null) {
      const r = a.repos.find((x) => x.name === br[1]);
      if (r === undefined)
        return json(res, 404, { type: "error", error: { message: "Repository not found" } });
      return paged(
        (r.branches ?? ["main"])
          .filter((b) => nameFilter(b))
          .map((b) => ({ type: "branch", name: b, target: { type: "commit", hash: SHA(b), date: DATE } })),
      );
    }
    const pr = /^\/repositories\/([^/]+\/[^/]+)\/pullrequests\/(\d+)$/.exec(p);
    if (pr !== null) {
      const state = a.pullRequests?.[`${decodeURIComponent(pr[1] ?? "")}#${pr[2]}`];
      if (state === undefined)
        return json(res, 404, { type: "error", error: { message: "Pull request not found" } });
      return json(res, 200, { type: "pullrequest", id: Number(pr[2]), state });
    }
    const src = /^\/repositories\/([^/]+\/[^/]+)\/src\/([^/]+)\/(.*)$/.exec(p);
    if (src !== null) {
      const r = a.repos.find((x) => x.name === src[1]);
      const path = decodeURIComponent(src[3] ?? "").replace(/\/$/, "");
      if (r === undefined)
        return json(res, 404, { type: "error", error: { message: "Repository not found" } });
      // Files are on the main branch only.
      if (decodeURIComponent(src[2] ?? "") !== (r.branches?.[0] ?? "main"))
        return json(res, 404, { type: "error", error: { message: "Commit not found" } });
      if ((r.files ?? []).includes(path)) {
        res.writeHead(200, { "content-type": "text/plain; charset=utf-8" }).end(fileText(r, path));
        return;
      }
      const dir = folderOf(r, path);
      if (!dir.exists)
        return json(res, 404, { type: "error", error: { message: "No such file or directory" } });
      return paged(dir.files.map((f) => ({ type: "commit_file", path: f })));
    }
    const one = /^\/repositories\/([^/]+\/[^/]+)$/.exec(p);
    if (one !== null) {
      const r = a.repos.find((x) => x.name === one[1]);
      return r === undefined
        ? json(res, 404, { type: "error", error: { message: "Not found" } })
        : json(res, 200, repo(r));
    }
    return json(res, 404, { type: "error", error: { message: "Resource not found" } });
  }

  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  origin = `http://127.0.0.1:${port}`;
  return {
    kind,
    host: `127.0.0.1:${port}`,
    port,
    requests,
    count: (prefix) => requests.filter((r) => r.path.split("?")[0]?.startsWith(prefix)).length,
    abandoned: () => abandoned,
    set(m) {
      Object.assign(mode, m);
      if (m.hang === false) {
        for (const res of hanging) res.destroy();
        hanging.clear();
      }
    },
    close: () =>
      new Promise((r) => {
        for (const res of hanging) res.destroy();
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
