import { object } from "../../core/model/containers.ts";
import { int } from "../../core/model/numbers.ts";
import { enumOf, str } from "../../core/model/scalars.ts";
import { validate } from "../../core/model/validate.ts";
import {
  type GetMicroagentContentResponse,
  type GetUserInfoResponse,
  type GitBranch,
  type GitRepository,
  GitService,
  type ListBranchesResponse,
  type ListInstallationsResponse,
  type ListMicroagentsResponse,
  type ListRepositoriesResponse,
  type ListSuggestedTasksResponse,
  OwnerType,
  type SearchBranchesResponse,
  type SearchRepositoriesResponse,
  TaskType,
} from "../../gen/workspace/v1/git_pb.js";
import { ProviderType } from "../../gen/workspace/v1/provider_pb.js";
import { type RestInput, type RestRoute, route } from "./rest-route.ts";
import { present, single } from "./route-kit.ts";
import type { RouteDocs } from "./schema-builder.ts";

const PROVIDER_NAMES = ["github", "gitlab", "bitbucket", "azure_devops", "enterprise_sso"] as const;
const BY_NAME: Record<string, ProviderType> = {
  github: ProviderType.GITHUB,
  gitlab: ProviderType.GITLAB,
  bitbucket: ProviderType.BITBUCKET,
  azure_devops: ProviderType.AZURE_DEVOPS,
  enterprise_sso: ProviderType.ENTERPRISE_SSO,
};
const providerName = (p: ProviderType): string | null =>
  p === ProviderType.UNSPECIFIED ? null : (ProviderType[p]?.toLowerCase() ?? null);

const provider = enumOf(PROVIDER_NAMES);
const int32 = int({ bits: 32 });

/** Query parameters read as the reference's FastAPI signature does (types only; ranges are the service's). */
function query<T>(schema: ReturnType<typeof object>, input: RestInput["query"], names: readonly string[]): T {
  return validate(schema, present(Object.fromEntries(names.map((n) => [n, single(input[n])]))), [
    "query",
  ]) as T;
}

const installationsQuery = object({ provider: { schema: provider, required: true } }, { extra: "ignore" });
const repositoriesQuery = object(
  {
    sort: { schema: str() },
    selected_provider: { schema: provider },
    page: { schema: int32 },
    per_page: { schema: int32 },
    installation_id: { schema: str() },
  },
  { extra: "ignore" },
);
const searchRepositoriesQuery = object(
  {
    query: { schema: str(), required: true },
    per_page: { schema: int32 },
    sort: { schema: str() },
    order: { schema: str() },
    selected_provider: { schema: provider },
  },
  { extra: "ignore" },
);
const searchBranchesQuery = object(
  {
    repository: { schema: str(), required: true },
    query: { schema: str(), required: true },
    per_page: { schema: int32 },
    selected_provider: { schema: provider },
  },
  { extra: "ignore" },
);
const branchesQuery = object(
  { repository: { schema: str(), required: true }, page: { schema: int32 }, per_page: { schema: int32 } },
  { extra: "ignore" },
);

const contentQuery = object({ file_path: { schema: str(), required: true } }, { extra: "ignore" });

const providerDoc = { schema: { type: "string", enum: [...PROVIDER_NAMES] } };
const intDoc = (min: number, max: number, def?: number) => ({
  schema: { type: "integer", minimum: min, maximum: max, ...(def === undefined ? {} : { default: def }) },
});
const strDoc = { schema: { type: "string" } };

/** The reference's Repository JSON. */
export function shapeRepository(r: GitRepository) {
  return {
    id: r.id,
    full_name: r.fullName,
    git_provider: providerName(r.gitProvider),
    is_public: r.isPublic,
    stargazers_count: r.stargazersCount === undefined ? null : Number(r.stargazersCount),
    link_header: r.linkHeader ?? null,
    pushed_at: r.pushedAt ?? null,
    owner_type:
      r.ownerType === OwnerType.ORGANIZATION
        ? "organization"
        : r.ownerType === OwnerType.USER
          ? "user"
          : null,
    main_branch: r.mainBranch ?? null,
  };
}

const shapeBranch = (b: GitBranch) => ({
  name: b.name,
  commit_sha: b.commitSha,
  protected: b.protected,
  last_push_date: b.lastPushDate ?? null,
});

const bindProvider = (v: string | undefined) => {
  const p = v === undefined ? undefined : BY_NAME[v];
  return p === undefined ? {} : { selectedProvider: p };
};

const docs = (q: NonNullable<RouteDocs["query"]>): RouteDocs => ({ query: q });

/** The reference's /api/user git routes (openhands/server/routes/git.py), on GitService. */
export const gitRoutes: RestRoute[] = [
  route({
    method: "GET",
    url: "/api/user/installations",
    rpc: GitService.method.listInstallations,
    dialect: "git",
    location: "query",
    summary: "GitHub app installation ids or Bitbucket workspaces of the caller's token",
    docs: docs({ provider: { ...providerDoc, required: true } }),
    bind: ({ query: q }) => {
      const v = query<{ provider: string }>(installationsQuery, q, ["provider"]);
      const provider = BY_NAME[v.provider];
      return provider === undefined ? {} : { provider };
    },
    shape: (res: ListInstallationsResponse) => res.installationIds,
  }),
  route({
    method: "GET",
    url: "/api/user/repositories",
    rpc: GitService.method.listRepositories,
    dialect: "git",
    location: "query",
    summary: "The caller's repositories (one page of one provider, or up to 1000 of each)",
    docs: docs({
      sort: {
        schema: { type: "string", enum: ["pushed", "updated", "created", "full_name"], default: "pushed" },
      },
      selected_provider: providerDoc,
      page: intDoc(1, 100_000),
      per_page: intDoc(1, 100),
      installation_id: strDoc,
    }),
    bind: ({ query: q }) => {
      const v = query<{
        sort?: string;
        selected_provider?: string;
        page?: number;
        per_page?: number;
        installation_id?: string;
      }>(repositoriesQuery, q, ["sort", "selected_provider", "page", "per_page", "installation_id"]);
      return {
        ...(v.sort === undefined ? {} : { sort: v.sort }),
        ...bindProvider(v.selected_provider),
        ...(v.page === undefined ? {} : { page: v.page }),
        ...(v.per_page === undefined ? {} : { perPage: v.per_page }),
        ...(v.installation_id === undefined ? {} : { installationId: v.installation_id }),
      };
    },
    shape: (res: ListRepositoriesResponse) => res.repositories.map(shapeRepository),
  }),
  route({
    method: "GET",
    url: "/api/user/info",
    rpc: GitService.method.getUserInfo,
    dialect: "git",
    summary: "The git provider account behind the caller's first working token",
    bind: () => ({}),
    shape: (res: GetUserInfoResponse) => ({
      id: res.user?.id ?? "",
      login: res.user?.login ?? "",
      avatar_url: res.user?.avatarUrl ?? "",
      company: res.user?.company ?? null,
      name: res.user?.name ?? null,
      email: res.user?.email ?? null,
    }),
  }),
  route({
    method: "GET",
    url: "/api/user/search/repositories",
    rpc: GitService.method.searchRepositories,
    dialect: "git",
    location: "query",
    summary: "Repositories matching a name or a repository URL",
    docs: docs({
      query: { ...strDoc, required: true },
      per_page: intDoc(1, 100, 5),
      sort: { schema: { type: "string", default: "stars" } },
      order: { schema: { type: "string", enum: ["asc", "desc"], default: "desc" } },
      selected_provider: providerDoc,
    }),
    bind: ({ query: q }) => {
      const v = query<{
        query: string;
        per_page?: number;
        sort?: string;
        order?: string;
        selected_provider?: string;
      }>(searchRepositoriesQuery, q, ["query", "per_page", "sort", "order", "selected_provider"]);
      return {
        query: v.query,
        ...(v.per_page === undefined ? {} : { perPage: v.per_page }),
        ...(v.sort === undefined ? {} : { sort: v.sort }),
        ...(v.order === undefined ? {} : { order: v.order }),
        ...bindProvider(v.selected_provider),
      };
    },
    shape: (res: SearchRepositoriesResponse) => res.repositories.map(shapeRepository),
  }),
  route({
    method: "GET",
    url: "/api/user/search/branches",
    rpc: GitService.method.searchBranches,
    dialect: "git",
    location: "query",
    summary: "Branches of a repository matching a name",
    docs: docs({
      repository: { ...strDoc, required: true },
      query: { ...strDoc, required: true },
      per_page: intDoc(1, 100, 30),
      selected_provider: providerDoc,
    }),
    bind: ({ query: q }) => {
      const v = query<{ repository: string; query: string; per_page?: number; selected_provider?: string }>(
        searchBranchesQuery,
        q,
        ["repository", "query", "per_page", "selected_provider"],
      );
      return {
        repository: v.repository,
        query: v.query,
        ...(v.per_page === undefined ? {} : { perPage: v.per_page }),
        ...bindProvider(v.selected_provider),
      };
    },
    shape: (res: SearchBranchesResponse) => res.branches.map(shapeBranch),
  }),
  route({
    method: "GET",
    url: "/api/user/suggested-tasks",
    rpc: GitService.method.listSuggestedTasks,
    dialect: "git",
    summary: "Open pull/merge requests by the caller and issues assigned to them",
    bind: () => ({}),
    shape: (res: ListSuggestedTasksResponse) =>
      res.tasks.map((t) => ({
        git_provider: providerName(t.gitProvider),
        task_type: TaskType[t.taskType],
        repo: t.repo,
        issue_number: Number(t.issueNumber),
        title: t.title,
      })),
  }),
  route({
    method: "GET",
    url: "/api/user/repository/branches",
    rpc: GitService.method.listBranches,
    dialect: "git",
    location: "query",
    summary: "One page of a repository's branches",
    docs: docs({
      repository: { ...strDoc, required: true },
      page: intDoc(1, 100_000, 1),
      per_page: intDoc(1, 100, 30),
    }),
    bind: ({ query: q }) => {
      const v = query<{ repository: string; page?: number; per_page?: number }>(branchesQuery, q, [
        "repository",
        "page",
        "per_page",
      ]);
      return {
        repository: v.repository,
        ...(v.page === undefined ? {} : { page: v.page }),
        ...(v.per_page === undefined ? {} : { perPage: v.per_page }),
      };
    },
    shape: (res: ListBranchesResponse) => ({
      branches: res.branches.map(shapeBranch),
      has_next_page: res.hasNextPage,
      current_page: res.currentPage,
      per_page: res.perPage,
      total_count: res.totalCount === undefined ? null : Number(res.totalCount),
    }),
  }),
  route({
    method: "GET",
    url: "/api/user/repository/{repository_name:path}/microagents",
    rpc: GitService.method.listMicroagents,
    dialect: "git",
    location: "path",
    fieldLocations: { repository: ["path", "repository_name"] },
    summary: "Microagent files of a repository (names and paths, no content)",
    bind: ({ params }) => ({ repository: params.repository_name ?? "" }),
    shape: (res: ListMicroagentsResponse) =>
      res.microagents.map((m) => ({ name: m.name, path: m.path, created_at: m.createdAt })),
  }),
  route({
    method: "GET",
    url: "/api/user/repository/{repository_name:path}/microagents/content",
    rpc: GitService.method.getMicroagentContent,
    dialect: "git",
    location: "query",
    fieldLocations: { repository: ["path", "repository_name"] },
    summary: "One microagent file of a repository: its content and triggers",
    docs: docs({ file_path: { ...strDoc, required: true } }),
    bind: ({ params, query: q }) => {
      const v = query<{ file_path: string }>(contentQuery, q, ["file_path"]);
      return { repository: params.repository_name ?? "", filePath: v.file_path };
    },
    shape: (res: GetMicroagentContentResponse) => ({
      content: res.content,
      path: res.path,
      triggers: res.triggers,
      git_provider: providerName(res.gitProvider),
    }),
  }),
];
