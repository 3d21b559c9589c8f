/**
 * Shell commands the start flow runs in a sandbox's workspace through the agent (POST
 * /api/bash/execute_bash_command), and how a repository becomes a clone URL. Pure functions: no I/O here.
 */
import { posix } from "node:path";
import { base62 } from "../../core/ids.ts";
import { LOCAL_REPOSITORY_OWNER, localRepositoryFolder } from "../../core/repository-names.ts";

/** Public hosts of the providers, used when a stored token has no host. */
const PUBLIC_HOST: Readonly<Record<string, string>> = {
  github: "github.com",
  gitlab: "gitlab.com",
  bitbucket: "bitbucket.org",
  azure_devops: "dev.azure.com",
};

/** Marker lines printed by the prepare command (parsed by {@link parsePrepareOutput}). */
const PROJECT_MARK = "__OH_PROJECT_DIR__=";
const SETUP_MARK = "__OH_HAS_SETUP_SCRIPT__";
const HOOK_MARK = "__OH_HAS_PRE_COMMIT__";
/** Exit codes of the prepare command's steps. */
export const PREPARE_EXIT = { clone: 90, enter: 91, checkout: 92, init: 93, occupied: 94 } as const;
export const SETUP_SCRIPT = ".openhands/setup.sh";
export const PRE_COMMIT_SCRIPT = ".openhands/pre-commit.sh";
/** First line of the hook we install, so that a second install recognises its own hook. */
const HOOK_SIGNATURE = "# This hook was installed by OpenHands";

/** `'...'` quoting for POSIX shells. */
export function shellQuote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/** True for a repository given as a local path or URL (cloned as given, no token), not as "owner/repo". */
export function isDirectRepository(repo: string): boolean {
  return repo.startsWith("/") || /^[a-z][a-z0-9+.-]*:\/\//i.test(repo);
}

/** The host path of a repository given as an absolute path or a file:// URL; null for any other repository. */
export function localRepositoryPath(repo: string): string | null {
  if (repo.startsWith("/")) return posix.resolve(repo);
  if (!/^file:\/\//i.test(repo)) return null;
  try {
    const url = new URL(repo);
    // file://host/path names another machine's file: not a local path (git refuses it too).
    if (url.hostname !== "" && url.hostname !== "localhost") return null;
    return posix.resolve(decodeURIComponent(url.pathname));
  } catch {
    return null;
  }
}

/**
 * Why a local repository (absolute path or file:// URL) cannot be cloned in a sandbox, or null when it can (or
 * is not local): sandboxes see only the LOCAL_REPOSITORY_ROOTS folders of the host, read-only.
 */
export function localRepositoryProblem(repo: string, roots: readonly string[]): string | null {
  const path = localRepositoryPath(repo);
  if (path === null) return null;
  if (roots.some((root) => path === root || path.startsWith(root === "/" ? "/" : `${root}/`))) return null;
  return roots.length === 0
    ? "selected_repository is a local path, but this server allows none: sandboxes cannot see the host's folders. The server's administrator can list the folders holding local repositories in LOCAL_REPOSITORY_ROOTS (they are bound read-only into sandboxes)"
    : `selected_repository is a local path outside LOCAL_REPOSITORY_ROOTS (${roots.join(", ")}): sandboxes see only those folders of the host`;
}

const PROVIDER_REPO = /^[A-Za-z0-9_.-]+(?:\/[A-Za-z0-9_.-]+)+$/;

/** Why a selected_repository cannot be used, or null when it can. */
export function repositoryProblem(repo: string): string | null {
  if (repo.startsWith("-")) return "selected_repository must not start with '-'";
  if (isDirectRepository(repo) || PROVIDER_REPO.test(repo) || localRepositoryFolder(repo) !== null)
    return null;
  return `selected_repository must be 'owner/repo', '${LOCAL_REPOSITORY_OWNER}/<folder>' (a local repository), an absolute path, or a URL with a scheme`;
}

/** Why a selected_branch cannot be used, or null when it can (git's own rules are checked by git). */
export function branchProblem(branch: string): string | null {
  if (branch.startsWith("-")) return "selected_branch must not start with '-'";
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are exactly what is refused.
  if (/[\s\u0000-\u001f\u007f~^:?*[\\]/.test(branch) || branch.includes(".."))
    return "selected_branch is not a valid git branch name";
  return null;
}

export { repositoryDirName } from "../../core/repository-names.ts";

/** A clone URL, and the secrets in it (the token and the URL's userinfo: to redact from any output shown). */
export interface CloneSource {
  url: string;
  secrets: string[];
}

/**
 * How to clone `repo`: a local path or URL as given; "owner/repo" from the provider's host (the stored host, else
 * the public one; a host with a scheme keeps it) with the token in the URL as the reference does it: GitHub
 * `https://<token>@host/owner/repo.git`, GitLab `https://oauth2:<token>@...`, Bitbucket
 * `https://x-token-auth:<token>@...` (or `user:app_password@`), Azure DevOps `https://<token>@host/org/project/_git/repo`.
 */
export function cloneSource(
  repo: string,
  provider: string | null,
  token: { token: string; host: string | null } | null,
): CloneSource {
  if (isDirectRepository(repo)) return { url: repo, secrets: [] };
  const rawHost = token?.host?.trim() || PUBLIC_HOST[provider ?? "github"] || "github.com";
  const scheme = /^http:\/\//i.test(rawHost) ? "http" : "https";
  const host = rawHost.replace(/^[a-z][a-z0-9+.-]*:\/\//i, "").replace(/\/+$/, "");
  let path = `${repo}.git`;
  if (provider === "azure_devops") {
    const [org, project, name] = repo.split("/");
    path = name === undefined ? repo : `${org}/${project}/_git/${name}`;
  }
  if (token === null) return { url: `${scheme}://${host}/${path}`, secrets: [] };
  const t = token.token;
  const enc = encodeURIComponent;
  let userinfo: string;
  switch (provider) {
    case "gitlab":
      userinfo = `oauth2:${enc(t)}`;
      break;
    case "bitbucket": {
      const colon = t.indexOf(":");
      userinfo =
        colon >= 0 ? `${enc(t.slice(0, colon))}:${enc(t.slice(colon + 1))}` : `x-token-auth:${enc(t)}`;
      break;
    }
    default:
      userinfo = enc(t);
  }
  return { url: `${scheme}://${userinfo}@${host}/${path}`, secrets: [t, userinfo] };
}

/** A clone URL without credentials (`https://token@host/x` → `https://host/x`), to compare clones. */
export function withoutCredentials(url: string): string {
  return url.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^@/]*@/i, "$1");
}

/** Replaces every secret in text with `***`. */
export function redact(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const s of secrets) if (s.length >= 4) out = out.replaceAll(s, "***");
  return out;
}

export interface PrepareOptions {
  /** null: no repository, `git init` the workspace. */
  clone: { url: string; dir: string } | null;
  /** Branch to check out; null: a new branch openhands-workspace-<random> right after cloning. */
  branch: string | null;
  gitUserName: string | null;
  gitUserEmail: string | null;
}

/**
 * Run in the workspace: clones (unless the folder already holds a clone of the same repository, e.g. in a reused
 * sandbox; a clone of another repository there is an error) and checks out,
 * or initialises git in the workspace; sets the user's git identity in the repository; then prints the project
 * folder and whether it has a setup script and a pre-commit script. Exits with {@link PREPARE_EXIT} codes.
 */
export function prepareCommand(o: PrepareOptions): string {
  const lines = ["export GIT_TERMINAL_PROMPT=0 GIT_ASKPASS=/bin/false"];
  if (o.clone === null) {
    lines.push(`git init -q >&2 || exit ${PREPARE_EXIT.init}`);
  } else {
    const dir = shellQuote(o.clone.dir);
    const newBranch = `openhands-workspace-${base62(16)}`;
    const origin = shellQuote(withoutCredentials(o.clone.url));
    lines.push(
      `if [ -d ${dir}/.git ]; then`,
      `  cd ${dir} || exit ${PREPARE_EXIT.enter}`,
      // A folder of that name holding another repository is not silently reused.
      `  current=$(git config --get remote.origin.url | sed -E 's#^([a-zA-Z][a-zA-Z0-9+.-]*://)[^@/]*@#\\1#')`,
      `  [ "$current" = ${origin} ] || { echo "it holds a clone of $current" >&2; exit ${PREPARE_EXIT.occupied}; }`,
      o.branch === null
        ? "  :"
        : `  git checkout -q ${shellQuote(o.branch)} -- >&2 || exit ${PREPARE_EXIT.checkout}`,
      "else",
      ...cloneLines(o.clone.url, dir),
      `  cd ${dir} || exit ${PREPARE_EXIT.enter}`,
      o.branch === null
        ? `  git checkout -q -b ${newBranch} >&2 || exit ${PREPARE_EXIT.checkout}`
        : `  git checkout -q ${shellQuote(o.branch)} -- >&2 || exit ${PREPARE_EXIT.checkout}`,
      "fi",
    );
  }
  if (o.gitUserName !== null) lines.push(`git config user.name ${shellQuote(o.gitUserName)} || true`);
  if (o.gitUserEmail !== null) lines.push(`git config user.email ${shellQuote(o.gitUserEmail)} || true`);
  lines.push(
    `printf '%s%s\\n' ${shellQuote(PROJECT_MARK)} "$PWD"`,
    `if [ -f ${SETUP_SCRIPT} ]; then echo ${SETUP_MARK}; fi`,
    `if [ -f ${PRE_COMMIT_SCRIPT} ]; then echo ${HOOK_MARK}; fi`,
  );
  return lines.join("\n");
}

/**
 * The clone step. A local repository (LOCAL_REPOSITORY_ROOTS) belongs to the server's user, and an isolated
 * sandbox runs as a uid of its own, so git refuses it as of "dubious ownership"; git honours the exception
 * (safe.directory) only from the global or system configuration, so the clone gets a global configuration of its
 * own that includes the user's and trusts that one repository: the path as given (a bare repository, or a .git
 * folder named itself) and its `.git` folder, which is what git checks in a repository with a working tree.
 */
function cloneLines(url: string, dir: string): string[] {
  const clone = `git clone -q -- ${shellQuote(url)} ${dir} >&2 || exit ${PREPARE_EXIT.clone}`;
  const local = localRepositoryPath(url);
  // biome-ignore lint/suspicious/noControlCharactersInRegex: a line break would end the configuration value.
  if (local === null || /[\u0000-\u001f\u007f]/.test(local)) return [`  ${clone}`];
  const quoted = (path: string) => shellQuote(`"${path.replaceAll("\\", "\\\\").replaceAll('"', '\\"')}"`);
  const gitDir = local === "/" ? "/.git" : `${local}/.git`;
  return [
    // mktemp where the image has it (a minimal image may not).
    `  trust=$(mktemp 2>/dev/null) || trust="\${TMPDIR:-/tmp}/.openhands-git-trust-$$"`,
    `  printf '[include]\\n\\tpath = %s\\n[safe]\\n\\tdirectory = %s\\n\\tdirectory = %s\\n' "\${GIT_CONFIG_GLOBAL:-$HOME/.gitconfig}" ${quoted(local)} ${quoted(gitDir)} >"$trust" || exit ${PREPARE_EXIT.clone}`,
    `  GIT_CONFIG_GLOBAL="$trust" git clone -q -- ${shellQuote(url)} ${dir} >&2; cloned=$?; rm -f "$trust"`,
    `  [ "$cloned" = 0 ] || exit ${PREPARE_EXIT.clone}`,
  ];
}

export interface PrepareOutput {
  projectDir: string;
  hasSetupScript: boolean;
  hasPreCommit: boolean;
}

/** Reads the markers of {@link prepareCommand}; null when the project folder is missing. */
export function parsePrepareOutput(stdout: string): PrepareOutput | null {
  const lines = stdout.split("\n");
  const project = lines.findLast((l) => l.startsWith(PROJECT_MARK));
  if (project === undefined) return null;
  return {
    projectDir: project.slice(PROJECT_MARK.length),
    hasSetupScript: lines.includes(SETUP_MARK),
    hasPreCommit: lines.includes(HOOK_MARK),
  };
}

/** Runs the project's setup script (output of both streams interleaved on stdout). */
export function setupScriptCommand(): string {
  // Only the end of its output is answered: a chatty script (a verbose install) would otherwise exceed the
  // agent-server's 1 MiB output chunk, whose split answer can lose the exit code.
  return [
    `chmod +x ${SETUP_SCRIPT} 2>/dev/null`,
    `out="\${TMPDIR:-/tmp}/openhands-setup-$$.log"`,
    `bash ${SETUP_SCRIPT} >"$out" 2>&1`,
    `status=$?`,
    `tail -c 65536 "$out"`,
    `rm -f "$out"`,
    `exit $status`,
  ].join("\n");
}

/**
 * Installs a pre-commit hook that runs .openhands/pre-commit.sh (when the project has one), keeping an existing
 * foreign hook as pre-commit.local, which the new hook runs afterwards. Exit 0 with nothing to do.
 */
export function gitHooksCommand(): string {
  const hook = [
    "#!/bin/sh",
    HOOK_SIGNATURE,
    "# It runs .openhands/pre-commit.sh, then the hook that was here before (pre-commit.local).",
    "root=$(git rev-parse --show-toplevel) || exit 1",
    'if [ -f "$root/.openhands/pre-commit.sh" ]; then bash "$root/.openhands/pre-commit.sh" || exit $?; fi',
    'if [ -x "$root/.git/hooks/pre-commit.local" ]; then exec "$root/.git/hooks/pre-commit.local" "$@"; fi',
    "exit 0",
  ].join("\n");
  return [
    `[ -f ${PRE_COMMIT_SCRIPT} ] || exit 0`,
    "[ -d .git ] || { echo 'the workspace is not a git repository' >&2; exit 1; }",
    "mkdir -p .git/hooks || exit 1",
    `if [ -f .git/hooks/pre-commit ] && ! grep -q ${shellQuote(HOOK_SIGNATURE)} .git/hooks/pre-commit; then`,
    "  mv .git/hooks/pre-commit .git/hooks/pre-commit.local && chmod +x .git/hooks/pre-commit.local || exit 1",
    "fi",
    `cat > .git/hooks/pre-commit <<'OPENHANDS_HOOK_EOF'\n${hook}\nOPENHANDS_HOOK_EOF`,
    `chmod +x .git/hooks/pre-commit ${PRE_COMMIT_SCRIPT}`,
  ].join("\n");
}

/** The last `max` characters of a command's output, for an error detail. */
export function tail(text: string, max = 2000): string {
  const t = text.trimEnd();
  return t.length <= max ? t : `…${t.slice(t.length - max)}`;
}
