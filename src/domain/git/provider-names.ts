/**
 * The git providers this service reads, by the names the token store and the ports use and by the API's
 * ProviderType.
 */
import { ProviderType } from "../../gen/workspace/v1/provider_pb.js";
import type { GitProviderName } from "../../ports/git-provider.ts";

/** Providers served here, in the order they are tried. */
export const PROVIDERS: readonly GitProviderName[] = ["github", "gitlab", "bitbucket"];

/** Every provider type's lower-case name (also those not served here, for the messages that name them). */
export const NAMES: Partial<Record<ProviderType, string>> = {
  [ProviderType.GITHUB]: "github",
  [ProviderType.GITLAB]: "gitlab",
  [ProviderType.BITBUCKET]: "bitbucket",
  [ProviderType.AZURE_DEVOPS]: "azure_devops",
  [ProviderType.ENTERPRISE_SSO]: "enterprise_sso",
};

export const TYPES: Record<GitProviderName, ProviderType> = {
  github: ProviderType.GITHUB,
  gitlab: ProviderType.GITLAB,
  bitbucket: ProviderType.BITBUCKET,
};
