/**
 * How repositories are named where the start flow, the git routes and the local repository catalog must agree:
 * the folder a repository is cloned into, and the names of the repositories under LOCAL_REPOSITORY_ROOTS.
 *
 * A local repository is named `@local/<folder>`: `<folder>` is the folder it is cloned into, so that the OpenHands
 * UI, which takes a conversation's working folder from the second path segment of its `selected_repository`
 * (`/workspace/project/<second segment>`), finds the clone; `@` cannot begin a provider's owner name, so the name
 * never stands for a provider's repository.
 */

/** The first path segment of every local repository's name. */
export const LOCAL_REPOSITORY_OWNER = "@local";

const FOLDER = /^[A-Za-z0-9._-]+$/;

/** The folder a repository is cloned into: its last path segment without `.git` (other characters become "-"). */
export function repositoryDirName(repo: string): string {
  const last =
    repo
      .replace(/[?#].*$/, "")
      .replace(/\/+$/, "")
      .split(/[/:]/)
      .at(-1) ?? "";
  const name = last.replace(/\.git$/, "").replace(/[^A-Za-z0-9._-]/g, "-");
  return name === "" || name === "." || name === ".." ? "project" : name;
}

/** The name of the local repository at `path` (an absolute path on the server's machine). */
export function localRepositoryName(path: string): string {
  return `${LOCAL_REPOSITORY_OWNER}/${repositoryDirName(path)}`;
}

/** The folder of a local repository's name (`@local/<folder>`), or null when `name` is not one. */
export function localRepositoryFolder(name: string): string | null {
  const prefix = `${LOCAL_REPOSITORY_OWNER}/`;
  if (!name.startsWith(prefix)) return null;
  const folder = name.slice(prefix.length);
  return FOLDER.test(folder) && folder !== "." && folder !== ".." ? folder : null;
}

/**
 * The `git_provider` of local repositories in listings and of conversations on them: `enterprise_sso`, the one
 * provider name of the reference that its open-source UI neither links to a provider's site nor offers a token
 * field for, while still showing the repository and branch of a conversation that has it.
 */
export const LOCAL_REPOSITORY_PROVIDER = "enterprise_sso";
