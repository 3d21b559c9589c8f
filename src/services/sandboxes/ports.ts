/**
 * What the sandbox service needs of another service, as a small interface: the composition root
 * (src/server/container.ts) passes the SandboxSpecService, tests may pass any list of specs.
 */
import type { SandboxSpec } from "./sandbox-spec-service.ts";

/** The configured sandbox templates (SandboxSpecService). */
export interface SpecCatalog {
  /** Every configured spec, the default first. */
  all(): readonly SandboxSpec[];
  /** The spec with this id (the default when undefined); INVALID_ARGUMENT for an unknown id. */
  resolve(id: string | undefined): SandboxSpec;
}
