/**
 * The workspace of a conversation start, prepared through the sandbox's agent: the repository cloned (or reused)
 * and checked out, or git init; its setup script run; its git pre-commit hook installed; its skills read. Each
 * step's state is saved before it runs, and a failure ends the start with a detail a person can act on. One job of
 * a start (see conversation-start.ts).
 */

import { PROVIDERS } from "../../codec/settings-fields.ts";
import { localRepositoryFolder } from "../../core/repository-names.ts";
import type { AgentCommandResult } from "../../ports/agent-client.ts";
import type { LocalRepositoryCatalog, LocalRepositoryRecord } from "../../ports/local-repositories.ts";
import type { ConversationConfig } from "../settings/settings-service.ts";
import { parseSkillFiles, type SkillJson, skillFilesCommand, workHostsSkill } from "./agent-request.ts";
import type { Effective, StartFlowTimeouts } from "./start-deps.ts";
import { StartError, type StartProgress } from "./start-progress.ts";
import {
  cloneSource,
  gitHooksCommand,
  isDirectRepository,
  localRepositoryPath,
  PREPARE_EXIT,
  type PrepareOutput,
  parsePrepareOutput,
  prepareCommand,
  redact,
  repositoryDirName,
  SETUP_SCRIPT,
  setupScriptCommand,
  tail,
} from "./workspace-commands.ts";

export interface StartWorkspaceOptions {
  progress: StartProgress;
  timeouts: Pick<StartFlowTimeouts, "prepareSeconds" | "setupScriptSeconds">;
  /** The repositories of LOCAL_REPOSITORY_ROOTS, which a start names by `@local/<folder>` (none: no such names). */
  localRepositories?: LocalRepositoryCatalog | undefined;
  /** Secret values in play, never written into a detail or a log line: a clone source's are added. */
  secrets: string[];
  /** Runs a command through the sandbox's agent (stopped with the start's agent calls). */
  exec: (command: string, cwd: string | undefined, timeoutSeconds: number) => Promise<AgentCommandResult>;
  /** The signal of the start's agent calls: a failure once it aborted ends the start. */
  callSignal: AbortSignal;
  log: (msg: string, data?: Record<string, unknown>) => void;
}

/** The repository a start prepared: the project folder, the provider it is on, a listed local repository. */
export interface PreparedRepository {
  project: PrepareOutput;
  provider: string | null;
  local: LocalRepositoryRecord | null;
}

/** The workspace steps of one start. */
export class StartWorkspace {
  readonly #o: StartWorkspaceOptions;

  constructor(options: StartWorkspaceOptions) {
    this.#o = options;
  }

  /** The repository: clone (or reuse a clone already in the workspace) and check out, or git init. */
  async prepare(eff: Effective, config: ConversationConfig): Promise<PreparedRepository> {
    await this.#o.progress.save({ status: "PREPARING_REPOSITORY" });
    const provider = eff.provider ?? firstProviderWithToken(config);
    const token = provider === null ? null : (config.providerTokens[provider] ?? null);
    // A listed local repository is cloned from its path, whether the request named it or gave its path or URL.
    const local = await this.#localRepository(eff.repository);
    const source =
      eff.repository === null
        ? null
        : local !== null
          ? { url: local.path, secrets: [] }
          : cloneSource(eff.repository, provider, token);
    this.#o.secrets.push(...(source?.secrets ?? []));
    const prepared = await this.#o.exec(
      prepareCommand({
        clone:
          source === null || eff.repository === null
            ? null
            : { url: source.url, dir: repositoryDirName(eff.repository) },
        branch: eff.branch,
        gitUserName: config.gitUserName,
        gitUserEmail: config.gitUserEmail,
      }),
      undefined,
      this.#o.timeouts.prepareSeconds,
    );
    if (prepared.exitCode !== 0) throw new StartError(prepareFailure(prepared, eff));
    const project = parsePrepareOutput(prepared.stdout);
    if (project === null) throw new StartError("Preparing the repository printed no project folder");
    return { project, provider, local };
  }

  /** The project's setup script, then its git pre-commit hook (each skipped when a resumed start had run it). */
  async setUp(project: PrepareOutput): Promise<void> {
    const { progress, timeouts } = this.#o;
    await progress.save({ status: "RUNNING_SETUP_SCRIPT" });
    // A resumed start runs the setup script again unless it had finished (scripts are expected to be re-runnable).
    if (project.hasSetupScript && !progress.past("RUNNING_SETUP_SCRIPT")) {
      const r = await this.#o.exec(setupScriptCommand(), project.projectDir, timeouts.setupScriptSeconds);
      if (r.exitCode !== 0) {
        const output = tail(`${r.stdout}${r.stderr ? `\n${r.stderr}` : ""}`);
        const why =
          r.exitCode === -1
            ? `did not finish within ${timeouts.setupScriptSeconds} s`
            : `failed with exit code ${r.exitCode}`;
        throw new StartError(`Setup script ${SETUP_SCRIPT} ${why}. Last output:\n${output}`);
      }
    }

    await progress.save({ status: "SETTING_UP_GIT_HOOKS" });
    // The setup script may have created the pre-commit script, so check again after it ran.
    if ((project.hasPreCommit || project.hasSetupScript) && !progress.past("SETTING_UP_GIT_HOOKS")) {
      const r = await this.#o.exec(gitHooksCommand(), project.projectDir, 60);
      if (r.exitCode !== 0)
        throw new StartError(`Installing the git pre-commit hook failed: ${tail(r.stderr || r.stdout, 500)}`);
    }
  }

  /**
   * The skills of the repository in `projectDir`, after a skill telling where the sandbox serves applications
   * (`workers`, its WORKER_ URLs). A failure to read them is logged and the start goes on without them, as the
   * reference's.
   */
  async skills(workers: { url: string; port: number }[], projectDir: string): Promise<SkillJson[]> {
    const skills: SkillJson[] = [];
    const hosts = workHostsSkill(workers);
    if (hosts !== null) skills.push(hosts);
    const skip = (path: string, why: string) =>
      this.#o.log("skill file left out", { taskId: this.#o.progress.task.id, path, why });
    try {
      const r = await this.#o.exec(skillFilesCommand(), projectDir, 30);
      if (r.exitCode === 0) skills.push(...parseSkillFiles(r.stdout, skip));
      else skip(projectDir, `listing skills exited with ${r.exitCode}: ${tail(r.stderr, 300)}`);
    } catch (err) {
      if (this.#o.callSignal.aborted) throw err;
      skip(projectDir, redact(String(err), this.#o.secrets));
    }
    return skills;
  }

  /**
   * The listed local repository a start is on: named (`@local/<folder>`), or given by a path or file:// URL that
   * is one; null for any other repository (an unlisted local path is cloned as given). A name that is not listed
   * (any more) ends the start.
   */
  async #localRepository(repository: string | null): Promise<LocalRepositoryRecord | null> {
    if (repository === null) return null;
    const named = localRepositoryFolder(repository) !== null;
    const path = named ? null : localRepositoryPath(repository);
    if (!named && path === null) return null;
    const listed = (await this.#o.localRepositories?.list()) ?? [];
    const found = listed.find((r) => (named ? r.name === repository : r.path === path)) ?? null;
    if (named && found === null)
      throw new StartError(
        `No local repository is named ${repository}: the server offers the repositories in LOCAL_REPOSITORY_ROOTS (see GET /api/user/repositories)`,
      );
    return found;
  }
}

function firstProviderWithToken(config: ConversationConfig): string | null {
  return PROVIDERS.find((p) => config.providerTokens[p] !== undefined) ?? null;
}

/** What to check when a clone fails: the token only matters for a provider's "owner/repo". */
function cloneHint(repository: string): string {
  if (localRepositoryPath(repository) !== null || localRepositoryFolder(repository) !== null)
    return "Check that the path is a git repository inside LOCAL_REPOSITORY_ROOTS, readable by the server's user.";
  if (isDirectRepository(repository))
    return "Check the URL, and that the sandbox can reach it (its credentials, if any, go in the URL).";
  return "Check the repository name and your git provider token.";
}

function prepareFailure(r: { exitCode: number; stdout: string; stderr: string }, eff: Effective): string {
  const output = tail(r.stderr || r.stdout, 1000);
  switch (r.exitCode) {
    case PREPARE_EXIT.clone:
      return `Could not clone ${eff.repository}: ${output || "git clone failed"}. ${cloneHint(eff.repository ?? "")}`;
    case PREPARE_EXIT.checkout:
      return eff.branch === null
        ? `Could not create a working branch in ${eff.repository}: ${output}`
        : `Could not check out branch ${eff.branch} of ${eff.repository}: ${output}`;
    case PREPARE_EXIT.occupied:
      return `Cannot clone ${eff.repository} into the sandbox: the folder is taken (${output}). Start the conversation in a new sandbox.`;
    case PREPARE_EXIT.init:
      return `Could not initialise a git repository in the workspace: ${output}`;
    case -1:
      return `Preparing the repository did not finish in time: ${output}`;
    default:
      return `Preparing the repository failed with exit code ${r.exitCode}: ${output}`;
  }
}
