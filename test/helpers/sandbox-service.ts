// A sandbox service composed as the server composes it (createSandboxService), from its collaborators and limit
// settings given in one object, for tests that set a few limits beside the fakes.

import { type SandboxLimitSettings, sandboxLimits } from "../../src/domain/sandboxes/sandbox-limits.ts";
import type { SandboxService } from "../../src/domain/sandboxes/sandbox-service.ts";
import { createSandboxService, type SandboxServiceDeps } from "../../src/server/container.ts";

/** The sandbox service's collaborators, and its limit settings (their defaults where left out). */
export type TestSandboxServiceOptions = Omit<SandboxServiceDeps, "limits"> & SandboxLimitSettings;

/** The sandbox service of `options`: sandboxLimits reads only the limit settings, the composition the rest. */
export function testSandboxService(options: TestSandboxServiceOptions): SandboxService {
  return createSandboxService({ ...options, limits: sandboxLimits(options) });
}
