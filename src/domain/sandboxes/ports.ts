/**
 * What the sandbox service needs of another service, as a small interface: the composition root
 * (src/server/container.ts) passes the SandboxSpecService, tests may pass any list of specs. And what its jobs
 * share of the sandboxes' session keys (sealed with the service's SecretBox).
 */
import type { SandboxRecord } from "../../ports/sandbox-repository.ts";
import type { SandboxSpec } from "./sandbox-spec-service.ts";

/** The configured sandbox templates (SandboxSpecService). */
export interface SpecCatalog {
  /** Every configured spec, the default first. */
  all(): readonly SandboxSpec[];
  /** The spec with this id (the default when undefined); INVALID_ARGUMENT for an unknown id. */
  resolve(id: string | undefined): SandboxSpec;
}

/** A sandbox's session key: sealed into its record, opened from it. */
export interface SessionKeys {
  /** The sealed form of a new sandbox's key, for its owner's record. */
  seal(ownerId: string, key: string): string;
  /** The plaintext key of a sandbox. */
  open(record: SandboxRecord): string;
}
