/**
 * The repositories of LOCAL_REPOSITORY_ROOTS as the git service answers them: listed, searched and with branches as
 * provider `enterprise_sso` (core/repository-names), with or without a token. Without a catalog the server offers
 * none and every read is empty.
 */
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  GitRepositorySchema,
  type ListRepositoriesResponse,
  ListRepositoriesResponseSchema,
  OwnerType,
} from "../../gen/workspace/v1/git_pb.js";
import { ProviderType } from "../../gen/workspace/v1/provider_pb.js";
import type { BranchRecord } from "../../ports/git-provider.ts";
import type { LocalRepositoryCatalog, LocalRepositoryRecord } from "../../ports/local-repositories.ts";

/** A local repository as the UI's Repository; `linkHeader` points at the next page of a listing. */
export function localRepositoryMessage(r: LocalRepositoryRecord, linkHeader: string | null = null) {
  return create(GitRepositorySchema, {
    id: r.name,
    fullName: r.name,
    gitProvider: ProviderType.ENTERPRISE_SSO,
    isPublic: false,
    ownerType: OwnerType.USER,
    ...(linkHeader === null ? {} : { linkHeader }),
    ...(r.mainBranch === null ? {} : { mainBranch: r.mainBranch }),
  });
}

/** Whether a local repository matches a search (its name or its path, ignoring case). */
export function localMatch(r: LocalRepositoryRecord, query: string): boolean {
  const q = query.toLowerCase();
  return r.name.toLowerCase().includes(q) || r.path.toLowerCase().includes(q);
}

export class LocalRepositories {
  readonly #catalog: LocalRepositoryCatalog | undefined;

  constructor(catalog: LocalRepositoryCatalog | undefined) {
    this.#catalog = catalog;
  }

  /** Whether the server offers local repositories at all. */
  get offered(): boolean {
    return this.#catalog !== undefined;
  }

  /** The local repositories (none when the server offers none). */
  async list(): Promise<LocalRepositoryRecord[]> {
    return (await this.#catalog?.list()) ?? [];
  }

  /** The listed local repository of a name (`@local/<folder>`), or null. */
  async find(name: string): Promise<LocalRepositoryRecord | null> {
    return (await this.list()).find((r) => r.name === name) ?? null;
  }

  /** A local repository's branches; UNAVAILABLE when git cannot read them. */
  async branches(repository: LocalRepositoryRecord): Promise<BranchRecord[]> {
    try {
      return (await this.#catalog?.branches(repository)) ?? [];
    } catch {
      throw new ConnectError(`The branches of ${repository.name} could not be read`, Code.Unavailable);
    }
  }

  /** One page of the local repositories, each entry with the next page's link (as GitHub's listing has it). */
  async page(page: number, perPage: number): Promise<ListRepositoriesResponse> {
    const all = await this.list();
    const from = (page - 1) * perPage;
    const next =
      from + perPage < all.length
        ? `</api/user/repositories?selected_provider=enterprise_sso&page=${page + 1}&per_page=${perPage}>; rel="next"`
        : null;
    return create(ListRepositoriesResponseSchema, {
      repositories: all.slice(from, from + perPage).map((r) => localRepositoryMessage(r, next)),
    });
  }
}
