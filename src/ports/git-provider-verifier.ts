/** Outcome of checking a token against its provider's API. */
export type VerifyOutcome = "valid" | "invalid" | "unreachable";

/** Checks git provider tokens against the provider's API at `host` (null: the public host). */
export interface GitProviderVerifier {
  verify(provider: string, token: string, host: string | null): Promise<VerifyOutcome>;
}
