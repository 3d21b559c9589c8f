/**
 * The repositories of LOCAL_REPOSITORY_ROOTS as the server's machine has them: found in the file system at each
 * call (a root that is a repository, and the repositories directly inside each root), their branches read with
 * `git --git-dir=… for-each-ref`. Git skips its ownership check (safe.directory) for a repository named with
 * --git-dir, so the server reads repositories of another user too, as the sandboxes clone them.
 */
import { execFile } from "node:child_process";
import { readdir, readFile, stat } from "node:fs/promises";
import { join, resolve } from "node:path";
import { localRepositoryName } from "../../core/repository-names.ts";
import type { BranchRecord } from "../../ports/git-provider.ts";
import type { LocalRepositoryCatalog, LocalRepositoryRecord } from "../../ports/local-repositories.ts";

export interface LocalRepositoryCatalogOptions {
  /** Absolute folders (LOCAL_REPOSITORY_ROOTS), in the order their repositories are listed. */
  roots: readonly string[];
  /** Deadline of one git call (default 10 s). */
  gitTimeoutMs?: number;
}

/** Largest output of one branch listing read (a repository with very many branches is cut there). */
const MAX_OUTPUT = 16 * 1024 * 1024;

export function createLocalRepositoryCatalog(options: LocalRepositoryCatalogOptions): LocalRepositoryCatalog {
  const timeout = options.gitTimeoutMs ?? 10_000;
  return {
    async list() {
      const out: LocalRepositoryRecord[] = [];
      const names = new Set<string>();
      const add = async (path: string): Promise<void> => {
        const gitDir = await gitDirOf(path);
        if (gitDir === null) return;
        const name = localRepositoryName(path);
        if (names.has(name)) return;
        names.add(name);
        out.push({ name, path, mainBranch: await headBranch(gitDir) });
      };
      for (const root of options.roots) {
        if ((await gitDirOf(root)) !== null) {
          await add(root);
          continue;
        }
        let entries: { name: string; isDirectory(): boolean }[];
        try {
          entries = await readdir(root, { withFileTypes: true });
        } catch {
          continue;
        }
        // Folders only (a link could lead out of the roots, which sandboxes do not see); hidden ones are not offered.
        const folders = entries
          .filter((e) => e.isDirectory() && !e.name.startsWith("."))
          .map((e) => e.name)
          .sort();
        for (const folder of folders) await add(join(root, folder));
      }
      return out;
    },

    async branches(repository) {
      const gitDir = await gitDirOf(repository.path);
      if (gitDir === null) throw new Error(`${repository.path} is not a git repository`);
      const stdout = await new Promise<string>((done, fail) =>
        execFile(
          "git",
          [
            `--git-dir=${gitDir}`,
            "for-each-ref",
            "--format=%(refname)%00%(objectname)%00%(committerdate:iso-strict)",
            "refs/heads/",
          ],
          { timeout, maxBuffer: MAX_OUTPUT, encoding: "utf8" },
          (err, out) => (err === null ? done(out) : fail(err)),
        ),
      );
      const branches: BranchRecord[] = [];
      for (const line of stdout.split("\n")) {
        const [ref = "", sha = "", date = ""] = line.split("\0");
        if (!ref.startsWith("refs/heads/")) continue;
        branches.push({
          name: ref.slice("refs/heads/".length),
          commitSha: sha,
          protected: false,
          lastPushDate: date === "" ? null : date,
        });
      }
      return branches.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    },
  };
}

/**
 * The git folder of a repository at `path`: `path/.git` (a folder, or a file naming one, as a linked worktree
 * has), or `path` itself when it is a bare repository; null when it is neither.
 */
async function gitDirOf(path: string): Promise<string | null> {
  const dotGit = join(path, ".git");
  const s = await stat(dotGit).catch(() => null);
  if (s?.isDirectory()) return dotGit;
  if (s?.isFile()) {
    const m = /^gitdir:\s*(.+?)\s*$/m.exec(await readFile(dotGit, "utf8").catch(() => ""));
    return m?.[1] === undefined ? null : resolve(path, m[1]);
  }
  const [head, objects, refs] = await Promise.all(
    ["HEAD", "objects", "refs"].map((f) => stat(join(path, f)).catch(() => null)),
  );
  return head?.isFile() && objects?.isDirectory() && refs?.isDirectory() ? path : null;
}

/** The branch HEAD names (`ref: refs/heads/<name>`), or null. */
async function headBranch(gitDir: string): Promise<string | null> {
  const head = await readFile(join(gitDir, "HEAD"), "utf8").catch(() => "");
  return /^ref: refs\/heads\/(.+?)\s*$/.exec(head)?.[1] ?? null;
}
