import type { GitProviderVerifier, VerifyOutcome } from "../../../src/ports/git-provider-verifier.ts";

/** Verifies tokens from a table (token → outcome; unknown tokens are valid) and records every check. */
export class FakeGitVerifier implements GitProviderVerifier {
  readonly outcomes = new Map<string, VerifyOutcome>();
  readonly checks: { provider: string; token: string; host: string | null }[] = [];

  async verify(provider: string, token: string, host: string | null): Promise<VerifyOutcome> {
    this.checks.push({ provider, token, host });
    return this.outcomes.get(token) ?? "valid";
  }
}
