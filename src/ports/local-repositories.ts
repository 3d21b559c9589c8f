import type { BranchRecord } from "./git-provider.ts";

/** A git repository on the server's machine, under one of the LOCAL_REPOSITORY_ROOTS folders. */
export interface LocalRepositoryRecord {
  /** What the git routes list it as and a start request names it by: `@local/<folder>` (core/repository-names). */
  name: string;
  /** Its absolute path on the server's machine: what a sandbox clones (the roots are bound into sandboxes). */
  path: string;
  /** The branch its HEAD names; null when HEAD names none. */
  mainBranch: string | null;
}

/**
 * The repositories the server offers from LOCAL_REPOSITORY_ROOTS: each root that is a git repository itself, and
 * the repositories directly inside each root (bare ones, and ones with a working tree), read from the file system
 * at each call. Names are unique: of two repositories with the same folder name, the first (roots in their
 * configured order, folders in name order) is listed; the other is reached by its path only.
 */
export interface LocalRepositoryCatalog {
  /** Every repository, roots in order, each root's folders in name order. Never rejects (an unreadable root is empty). */
  list(): Promise<LocalRepositoryRecord[]>;
  /** The branches of a listed repository, in name order; rejects when git cannot read them. */
  branches(repository: LocalRepositoryRecord): Promise<BranchRecord[]>;
}
