/**
 * The checks of the git service's request fields, the same for REST, Connect and gRPC: each records its
 * violation (pydantic's `type` and `loc`) and returns the value, so a request is answered with every problem at
 * once (ValidationError).
 */
import type { FieldViolation } from "../../core/errors.ts";
import { localRepositoryFolder } from "../../core/repository-names.ts";
import { ProviderType } from "../../gen/workspace/v1/provider_pb.js";
import type { GitProviderName } from "../../ports/git-provider.ts";
import { NAMES, PROVIDERS } from "./provider-names.ts";

export const REPO_SORTS: ReadonlySet<string> = new Set(["pushed", "updated", "created", "full_name"]);
export const SEARCH_SORTS: ReadonlySet<string> = new Set(["stars", "forks", "updated", "help-wanted-issues"]);
/** owner/name, or group/subgroup/name on GitLab; no "." or ".." segments. */
export const REPOSITORY = /^(?!.*(?:^|\/)\.{1,2}(?:\/|$))[A-Za-z0-9_.-]+(?:\/[A-Za-z0-9_.-]+){1,9}$/;

/** A request's selected provider: a provider served here, the local repositories, or null for every one. */
export type Selected = GitProviderName | "local" | null;

export function intIn(
  value: number | undefined,
  fallback: number,
  min: number,
  max: number,
  field: string,
  issues: FieldViolation[],
): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < min || value > max) {
    issues.push({
      loc: [field],
      msg: `Input should be between ${min} and ${max}`,
      type: "value_error",
      input: value,
    });
  }
  return value;
}

export function text(value: string, field: string, max: number, issues: FieldViolation[]): string {
  if (value.length === 0) issues.push({ loc: [field], msg: "Field required", type: "missing", input: value });
  else if (value.length > max)
    issues.push({
      loc: [field],
      msg: `String should have at most ${max} characters`,
      type: "string_too_long",
      input: value,
    });
  return value;
}

export function repositoryName(value: string, issues: FieldViolation[]): string {
  if (!REPOSITORY.test(value) && localRepositoryFolder(value) === null)
    issues.push({
      loc: ["repository"],
      msg: "repository must be 'owner/name' (or '@local/<folder>', a local repository)",
      type: "value_error",
      input: value,
    });
  return value;
}

/** A path inside a repository: relative, "/"-separated, no empty, "." or ".." segments, no control characters. */
export function filePath(value: string, issues: FieldViolation[]): string {
  const segments = value.split("/");
  if (
    value.length === 0 ||
    value.length > 1024 ||
    value.includes("\\") ||
    [...value].some((c) => c < " " || c === "\u007f") ||
    segments.some((s) => s === "" || s === "." || s === "..")
  )
    issues.push({
      loc: ["file_path"],
      msg: "file_path must be a relative path in the repository",
      type: value.length === 0 ? "missing" : "value_error",
      input: value,
    });
  return value;
}

/**
 * The selected provider of a request, or null for "every provider". `enterprise_sso` selects the local
 * repositories where the server offers them (`localOffered`).
 */
export function selectedProvider(
  value: ProviderType | undefined,
  issues: FieldViolation[],
  localOffered: boolean,
): Selected {
  // REST binders leave an absent provider undefined; messages hold UNSPECIFIED.
  if (value === undefined || value === ProviderType.UNSPECIFIED) return null;
  if (value === ProviderType.ENTERPRISE_SSO && localOffered) return "local";
  const name = NAMES[value];
  if (name === undefined || !(PROVIDERS as readonly string[]).includes(name)) {
    issues.push({
      loc: ["selected_provider"],
      msg: `Provider ${name ?? value} is not supported here`,
      type: "value_error",
      input: name ?? value,
    });
    return null;
  }
  return name as GitProviderName;
}
