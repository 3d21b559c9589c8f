import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";

/**
 * Fake GitHub, GitLab and Bitbucket Cloud APIs on loopback, answering with the shapes of the providers' public
 * REST documentation (GitHub REST v3 under /api/v3 as on Enterprise Server, GitLab v4 under /api/v4, Bitbucket
 * 2.0 under /2.0): the current user, repositories with the providers' own paging (GitHub Link headers, GitLab
 * X-Next-Page/X-Total and Link, Bitbucket `next` URLs), installations/workspaces, branches, branch and
 * repository search, and the searches behind suggested tasks. Switches: an account's token expired (401),
 * rate limiting (GitHub 403 + x-ratelimit-remaining: 0, GitLab and Bitbucket 429 + Retry-After), hanging
 * (never answers), a redirect. Every request is recorded with its Authorization header.
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
}

/** Files directly in a folder, and whether the folder exists. */
function folderOf(r: FakeRepo, folder: string): { files: string[]; exists: boolean } {
  const prefix = `${folder.replace(/\/+$/, "")}/`;
  const inside = (r.files ?? []).filter((f) => f.startsWith(prefix));
  return { files: inside.filter((f) => !f.slice(prefix.length).includes("/")), exists: inside.length > 0 };
}

export interface FakeAccount {
  token: string;
  login: string;
  id: number;
  repos: FakeRepo[];
  expired?: boolean;
  /** Open PRs authored / issues assigned: [repo, number, title]. */
  prs?: [string, number, string][];
  issues?: [string, number, string][];
  workspaces?: string[];
  installations?: { id: number; repos: string[] }[];
  /**
   * Pull (merge) requests by "owner/name#number", in the provider's own state words (GitHub open/closed, GitLab
   * opened/closed/merged, Bitbucket OPEN/MERGED/DECLINED); a GitHub entry "merged" answers closed with merged true.
   */
  pullRequests?: Record<string, string>;
}

export interface FakeGitProvider {
  kind: FakeKind;
  /** 127.0.0.1:PORT (what a token's host holds). */
  host: string;
  port: number;
  requests: { method: string; path: string; auth: string | undefined }[];
  /** Requests whose path (without query) matches. */
  count(pathPrefix: string): number;
  set(mode: { rateLimited?: boolean; hang?: boolean; redirect?: boolean }): void;
  close(): Promise<void>;
}

const SHA = (s: string) => Buffer.from(s).toString("hex").padEnd(40, "0").slice(0, 40);
const DATE = "2024-05-01T10:00:00Z";

export async function startFakeGitProvider(
  kind: FakeKind,
  accounts: FakeAccount[],
): Promise<FakeGitProvider> {
  const mode = { rateLimited: false, hang: false, redirect: false };
  const requests: FakeGitProvider["requests"] = [];
  const hanging = new Set<ServerResponse>();
  let origin = "";

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
    const url = new URL(req.url ?? "/", origin);
    requests.push({
      method: req.method ?? "",
      path: url.pathname + url.search,
      auth: req.headers.authorization,
    });
    if (mode.hang) {
      hanging.add(res);
      return;
    }
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
    const handler = kind === "github" ? github : kind === "gitlab" ? gitlab : bitbucket;
    handler(url, account, res);
  });

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
      const u = new URL(url.toString());
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
    const refs = /^\/repos\/([^/]+\/[^/]+)\/git\/matching-refs\/heads\/(.*)$/.exec(p);
    if (refs !== null) {
      const r = a.repos.find((x) => x.name === decodeURIComponent(refs[1] ?? ""));
      if (r === undefined) return json(res, 404, { message: "Not Found" });
      const prefix = decodeURIComponent(refs[2] ?? "");
      return json(
        res,
        200,
        (r.branches ?? ["main"])
          .filter((b) => b.startsWith(prefix))
          .map((b) => ({
            ref: `refs/heads/${b}`,
            node_id: "x",
            url: "",
            object: { sha: SHA(b), type: "commit", url: "" },
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
          content: "",
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
    if (p === "/search/repositories") {
      const q = url.searchParams.get("q") ?? "";
      const term = /in:name (\S+)/.exec(q)?.[1] ?? "";
      const items = a.repos
        .filter((r) => r.name.split("/")[1]?.includes(term.split("/").at(-1) ?? ""))
        .map(ghRepo);
      return json(res, 200, { total_count: items.length, incomplete_results: false, items });
    }
    if (p === "/search/issues") {
      const q = url.searchParams.get("q") ?? "";
      const list = q.includes("is:pr") ? (a.prs ?? []) : (a.issues ?? []);
      return json(res, 200, {
        total_count: list.length,
        incomplete_results: false,
        items: list.map(([repo, number, title]) => ({
          number,
          title,
          state: "open",
          repository_url: `${origin}/api/v3/repos/${repo}`,
        })),
      });
    }
    return json(res, 404, { message: "Not Found" });
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
    if (p === "/merge_requests" || p === "/issues") {
      const list = p === "/merge_requests" ? (a.prs ?? []) : (a.issues ?? []);
      return json(
        res,
        200,
        list.map(([repo, iid, title]) => ({
          id: iid * 100,
          iid,
          title,
          state: "opened",
          web_url: `https://gitlab.example/${repo}/-/${p === "/issues" ? "issues" : "merge_requests"}/${iid}`,
          references: { full: `${repo}${p === "/issues" ? "#" : "!"}${iid}` },
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
      const next = new URL(url.toString());
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
    const src = /^\/repositories\/([^/]+\/[^/]+)\/src\/HEAD\/(.*)$/.exec(p);
    if (src !== null) {
      const r = a.repos.find((x) => x.name === src[1]);
      const path = decodeURIComponent(src[2] ?? "");
      if (r === undefined)
        return json(res, 404, { type: "error", error: { message: "Repository not found" } });
      if ((r.files ?? []).includes(path)) {
        res.writeHead(200, { "content-type": "text/plain" }).end("rules");
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
