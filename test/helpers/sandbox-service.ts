// A sandbox service composed as the server composes it (createSandboxService), from its collaborators and limit
// settings given in one object, for tests that set a few limits beside the fakes.
import { createSandboxService, type SandboxServiceDeps } from "../../src/server/container.ts";
import { type SandboxLimitSettings, sandboxLimits } from "../../src/services/sandboxes/sandbox-limits.ts";
import type { SandboxService } from "../../src/services/sandboxes/sandbox-service.ts";

/** The sandbox service's collaborators, and its limit settings (their defaults where left out). */
export type TestSandboxServiceOptions = Omit<SandboxServiceDeps, "limits"> & SandboxLimitSettings;

/** The sandbox service of `options`: sandboxLimits reads only the limit settings, the composition the rest. */
export function testSandboxService(options: TestSandboxServiceOptions): SandboxService {
  return createSandboxService({ ...options, limits: sandboxLimits(options) });
}
