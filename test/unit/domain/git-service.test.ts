// GitService over fakes: an in-memory token source and provider clients that record their calls. Tokens, provider
// order, the repository cache, the error model and pull request states; the HTTP provider clients themselves are
// tested against fake provider APIs in test/integration/git-*.test.ts.

import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { beforeEach, describe, expect, it } from "vitest";
import { GitService } from "../../../src/domain/git/git-service.ts";
import {
  ListBranchesRequestSchema,
  ListRepositoriesRequestSchema,
} from "../../../src/gen/workspace/v1/git_pb.js";
import { ProviderType } from "../../../src/gen/workspace/v1/provider_pb.js";
import {
  type GitProviderApi,
  type GitProviderClients,
  GitProviderError,
  type GitProviderName,
  type RepositoryRecord,
} from "../../../src/ports/git-provider.ts";
import { callAs } from "../../helpers/fakes/index.ts";

type StoredTokens = Record<string, { token: string; host: string | null }>;

/** One provider as the fake serves it: its repositories and what its calls do. */
interface FakeProvider {
  repositories: string[];
  /** Thrown by every call of this provider (a rejected token, a rate limit, ...). */
  failure: GitProviderError | null;
  /** Pull requests still open, as "owner/name#number". */
  openPrs: Set<string>;
}

class FakeClients implements GitProviderClients {
  readonly providers = new Map<GitProviderName, FakeProvider>();
  /** Every call: "<provider> <token> <method>". */
  readonly calls: string[] = [];

  provider(name: GitProviderName): FakeProvider {
    let p = this.providers.get(name);
    if (p === undefined) {
      p = { repositories: [], failure: null, openPrs: new Set() };
      this.providers.set(name, p);
    }
    return p;
  }

  client(provider: GitProviderName, token: string, host: string | null): GitProviderApi {
    if (host === "blocked.example") throw new Error("host not allowed");
    const p = this.provider(provider);
    const call = async <T>(method: string, answer: () => T): Promise<T> => {
      this.calls.push(`${provider} ${token} ${method}`);
      if (p.failure !== null) throw p.failure;
      return answer();
    };
    const repo = (fullName: string, i: number): RepositoryRecord => ({
      id: `${provider}-${i}`,
      fullName,
      provider,
      isPublic: true,
      stargazersCount: null,
      linkHeader: null,
      pushedAt: null,
      ownerType: "user",
      mainBranch: "main",
    });
    const unused = (): never => {
      throw new Error("not used by these tests");
    };
    return {
      provider,
      getUser: () =>
        call("getUser", () => ({
          id: `${provider}-user`,
          login: `${provider}-login`,
          avatarUrl: "",
          company: null,
          name: null,
          email: null,
        })),
      listInstallations: () => call("listInstallations", () => []),
      listRepositories: () => call("listRepositories", () => p.repositories.map(repo)),
      listAllRepositories: () => call("listAllRepositories", () => p.repositories.map(repo)),
      searchRepositories: unused,
      listBranches: (repository, page, perPage) =>
        call("listBranches", () => {
          if (!p.repositories.includes(repository))
            throw new GitProviderError(provider, "not_found", `${repository} not found`);
          return {
            branches: [{ name: "main", commitSha: "abc", protected: false, lastPushDate: null }],
            hasNextPage: false,
            currentPage: page,
            perPage,
            totalCount: 1,
          };
        }),
      searchBranches: unused,
      listSuggestedTasks: unused,
      listFiles: unused,
      hasFile: unused,
      pullRequestOpen: (repository, number) =>
        call("pullRequestOpen", () => p.openPrs.has(`${repository}#${number}`)),
      readFile: unused,
    };
  }
}

interface World {
  service: GitService;
  clients: FakeClients;
  tokens: Map<string, StoredTokens>;
  now: number;
}

let w: World;

function world(): World {
  const clients = new FakeClients();
  const tokens = new Map<string, StoredTokens>();
  const out: World = { clients, tokens, now: 1_000_000, service: undefined as unknown as GitService };
  out.service = new GitService({
    tokens: { openProviderTokens: async (userId) => tokens.get(userId) ?? {} },
    clients,
    repositoryCacheSeconds: 60,
    now: () => out.now,
  });
  return out;
}

const alice = callAs("alice");
const codeOf = async (p: Promise<unknown>): Promise<Code | "ok"> =>
  p.then(
    () => "ok" as const,
    (e: unknown) => ConnectError.from(e).code,
  );

beforeEach(() => {
  w = world();
});

describe("GitService tokens and providers", () => {
  it("without any stored token: UNAUTHENTICATED, and no provider is called", async () => {
    w.tokens.set("alice", { github: { token: "", host: null } });
    expect(await codeOf(w.service.getUserInfo({}, alice))).toBe(Code.Unauthenticated);
    expect(await codeOf(w.service.listRepositories(create(ListRepositoriesRequestSchema, {}), alice))).toBe(
      Code.Unauthenticated,
    );
    expect(w.clients.calls).toEqual([]);
  });

  it("getUserInfo answers with the first provider whose token works, in provider order", async () => {
    w.tokens.set("alice", {
      gitlab: { token: "gl-token", host: null },
      github: { token: "gh-token", host: null },
    });
    w.clients.provider("github").failure = new GitProviderError("github", "unauthorized", "Bad credentials");
    const res = await w.service.getUserInfo({}, alice);
    expect(res.user?.login).toBe("gitlab-login");
    expect(w.clients.calls).toEqual(["github gh-token getUser", "gitlab gl-token getUser"]);
  });

  it("a token whose host is no longer allowed: FAILED_PRECONDITION", async () => {
    w.tokens.set("alice", { github: { token: "gh", host: "blocked.example" } });
    expect(
      await codeOf(
        w.service.listBranches(create(ListBranchesRequestSchema, { repository: "alice/app" }), alice),
      ),
    ).toBe(Code.FailedPrecondition);
  });
});

describe("GitService repository listing", () => {
  beforeEach(() => {
    w.tokens.set("alice", {
      github: { token: "gh", host: null },
      gitlab: { token: "gl", host: null },
    });
    w.clients.provider("github").repositories = ["alice/app"];
    w.clients.provider("gitlab").repositories = ["alice/lib"];
  });

  it("lists every provider's repositories, from memory within the cache time, again after it", async () => {
    const list = () => w.service.listRepositories(create(ListRepositoriesRequestSchema, {}), alice);
    expect((await list()).repositories.map((r) => r.fullName).sort()).toEqual(["alice/app", "alice/lib"]);
    expect(w.clients.calls).toHaveLength(2);
    await list();
    expect(w.clients.calls).toHaveLength(2);
    w.now += 61_000;
    await list();
    expect(w.clients.calls).toHaveLength(4);
  });

  it("a new token is not answered from the old token's cached listing; another user has a listing of its own", async () => {
    const list = (ctx = alice) => w.service.listRepositories(create(ListRepositoriesRequestSchema, {}), ctx);
    await list();
    w.tokens.set("alice", { github: { token: "gh-2", host: null } });
    expect((await list()).repositories.map((r) => r.fullName)).toEqual(["alice/app"]);
    expect(w.clients.calls.at(-1)).toBe("github gh-2 listAllRepositories");
    w.tokens.set("bob", { github: { token: "gh-2", host: null } });
    const before = w.clients.calls.length;
    await list(callAs("bob"));
    expect(w.clients.calls.length).toBe(before + 1);
  });

  it("one provider failing leaves the others' repositories; all failing answers the telling failure", async () => {
    w.clients.provider("gitlab").failure = new GitProviderError("gitlab", "unavailable", "GitLab is down");
    const res = await w.service.listRepositories(create(ListRepositoriesRequestSchema, {}), alice);
    expect(res.repositories.map((r) => r.fullName)).toEqual(["alice/app"]);
    w.now += 61_000;
    w.clients.provider("github").failure = new GitProviderError("github", "rate_limited", "slow down", 30);
    const err = await w.service
      .listRepositories(create(ListRepositoriesRequestSchema, {}), alice)
      .catch((e: unknown) => ConnectError.from(e));
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.ResourceExhausted);
  });

  it("a provider's rate limit is RESOURCE_EXHAUSTED with its Retry-After", async () => {
    w.clients.provider("github").failure = new GitProviderError("github", "rate_limited", "slow down", 30);
    const err = await w.service
      .listRepositories(
        create(ListRepositoriesRequestSchema, {
          selectedProvider: ProviderType.GITHUB,
          page: 1,
          perPage: 30,
        }),
        alice,
      )
      .catch((e: unknown) => ConnectError.from(e));
    expect((err as ConnectError).code).toBe(Code.ResourceExhausted);
    expect((err as ConnectError).metadata.get("retry-after")).toBe("30");
  });

  it("refuses a bad sort and a provider page without its size before calling any provider", async () => {
    expect(
      await codeOf(
        w.service.listRepositories(create(ListRepositoriesRequestSchema, { sort: "random" }), alice),
      ),
    ).toBe(Code.InvalidArgument);
    expect(
      await codeOf(
        w.service.listRepositories(
          create(ListRepositoriesRequestSchema, { selectedProvider: ProviderType.GITHUB }),
          alice,
        ),
      ),
    ).toBe(Code.InvalidArgument);
    expect(w.clients.calls).toEqual([]);
  });
});

describe("GitService branches and pull requests", () => {
  it("listBranches answers from the first provider that has the repository", async () => {
    w.tokens.set("alice", {
      github: { token: "gh", host: null },
      gitlab: { token: "gl", host: null },
    });
    w.clients.provider("gitlab").repositories = ["group/app"];
    const res = await w.service.listBranches(
      create(ListBranchesRequestSchema, { repository: "group/app" }),
      alice,
    );
    expect(res.branches.map((b) => b.name)).toEqual(["main"]);
    expect(
      await codeOf(
        w.service.listBranches(create(ListBranchesRequestSchema, { repository: "../etc" }), alice),
      ),
    ).toBe(Code.InvalidArgument);
  });

  it("pullRequestsOpen: the provider's answer where it can tell, true where it cannot; never rejects", async () => {
    w.tokens.set("alice", { github: { token: "gh", host: null } });
    w.clients.provider("github").openPrs.add("alice/app#1");
    const open = await w.service.pullRequestsOpen("alice", [
      { provider: "github", repository: "alice/app", number: 1 },
      { provider: "github", repository: "alice/app", number: 2 },
      { provider: "gitlab", repository: "alice/app", number: 3 },
      { provider: "github", repository: "not a repo", number: 4 },
    ]);
    expect(open).toEqual([true, false, true, true]);
    w.clients.provider("github").failure = new GitProviderError("github", "timeout", "too slow");
    expect(
      await w.service.pullRequestsOpen("alice", [{ provider: "github", repository: "alice/app", number: 2 }]),
    ).toEqual([true]);
  });
});

describe("GitService local repositories (LOCAL_REPOSITORY_ROOTS)", () => {
  const local = (name: string) => ({
    name: `@local/${name}`,
    path: `/srv/repos/${name}`,
    mainBranch: "main",
  });
  const branch = (name: string) => ({ name, commitSha: `${name}-sha`, protected: false, lastPushDate: null });
  let service: GitService;
  beforeEach(() => {
    service = new GitService({
      tokens: { openProviderTokens: async (userId) => w.tokens.get(userId) ?? {} },
      clients: w.clients,
      repositoryCacheSeconds: 60,
      now: () => w.now,
      local: {
        list: async () => [local("alpha"), local("beta"), local("gamma")],
        branches: async (r) =>
          r.name === "@local/alpha" ? [branch("dev"), branch("main")] : [branch("main")],
      },
    });
  });
  const names = (res: { repositories: { fullName: string }[] }) => res.repositories.map((r) => r.fullName);

  it("as provider enterprise_sso: one page at a time, each entry linking the next page as GitHub's listing does", async () => {
    const page = (n: number) =>
      service.listRepositories(
        create(ListRepositoriesRequestSchema, {
          selectedProvider: ProviderType.ENTERPRISE_SSO,
          page: n,
          perPage: 2,
        }),
        alice,
      );
    const first = await page(1);
    expect(names(first)).toEqual(["@local/alpha", "@local/beta"]);
    expect(first.repositories[0]).toMatchObject({
      id: "@local/alpha",
      gitProvider: ProviderType.ENTERPRISE_SSO,
      mainBranch: "main",
      linkHeader: '</api/user/repositories?selected_provider=enterprise_sso&page=2&per_page=2>; rel="next"',
    });
    const second = await page(2);
    expect(names(second)).toEqual(["@local/gamma"]);
    expect(second.repositories[0]?.linkHeader).toBeUndefined();
    expect(w.clients.calls).toEqual([]);
  });

  it("with a token: after the provider's first page only, and alone when the provider fails", async () => {
    w.tokens.set("alice", { github: { token: "gh", host: null } });
    w.clients.provider("github").repositories = ["alice/app"];
    const page = (n: number) =>
      service.listRepositories(
        create(ListRepositoriesRequestSchema, {
          selectedProvider: ProviderType.GITHUB,
          page: n,
          perPage: 30,
        }),
        alice,
      );
    expect(names(await page(1))).toEqual(["alice/app", "@local/alpha", "@local/beta", "@local/gamma"]);
    expect(names(await page(2))).toEqual(["alice/app"]);
    w.clients.provider("github").failure = new GitProviderError("github", "unavailable", "down");
    w.now += 61_000;
    expect(names(await page(1))).toEqual(["@local/alpha", "@local/beta", "@local/gamma"]);
    expect(await codeOf(page(2))).toBe(Code.Unavailable);
  });

  it("branches of a local repository need no token; an unlisted name has none", async () => {
    const list = (repository: string, page = 1, perPage = 30) =>
      service.listBranches(create(ListBranchesRequestSchema, { repository, page, perPage }), alice);
    const first = await list("@local/alpha", 1, 1);
    expect(first.branches.map((b) => b.name)).toEqual(["dev"]);
    expect(first).toMatchObject({ hasNextPage: true, currentPage: 1, perPage: 1, totalCount: 2n });
    expect((await list("@local/alpha", 2, 1)).branches.map((b) => b.name)).toEqual(["main"]);
    expect(await list("@local/nothing")).toMatchObject({ branches: [], hasNextPage: false, totalCount: 0n });
    expect(w.clients.calls).toEqual([]);
  });

  it("without a token the account routes answer the caller and no suggested tasks, instead of UNAUTHENTICATED", async () => {
    expect((await service.getUserInfo({}, alice)).user).toMatchObject({ id: "alice", login: "alice" });
    expect((await service.listSuggestedTasks({}, alice)).tasks).toEqual([]);
    expect(
      (await service.listMicroagents({ repository: "@local/alpha" } as never, alice)).microagents,
    ).toEqual([]);
  });
});
