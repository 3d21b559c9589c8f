/**
 * Git provider tokens as a settings request carries them (AddGitProviders' `provider_tokens`, StoreSettings'
 * `secrets_store.provider_tokens`): the check of their provider names and hosts, and their verification against
 * the provider before they are stored.
 */
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { isProvider, PROVIDERS } from "../../codec/settings-fields.ts";
import type { FieldViolation } from "../../core/errors.ts";
import type { ProviderHostPolicy } from "../../core/provider-host.ts";
import type { GitProviderVerifier } from "../../ports/git-provider-verifier.ts";
import type { StoredProviderToken } from "../../ports/user-data-repository.ts";

/** One provider's entry of a request, as checked (plaintext token; empty or null keeps the stored one). */
export interface IncomingToken {
  token: string | null;
  host: string | null;
  user_id: string | null;
}

/**
 * Checks provider names and hosts (a host name with an optional port, see ProviderHostPolicy); returns the
 * entries keyed by provider, or undefined when absent.
 */
export function validateProviderKeys(
  value: JsonValue | undefined,
  loc: (string | number)[],
  issues: FieldViolation[],
  hosts: ProviderHostPolicy,
): Record<string, IncomingToken> | undefined {
  if (value === undefined || value === null) return undefined;
  const out: Record<string, IncomingToken> = {};
  const expected = `${PROVIDERS.slice(0, -1)
    .map((p) => `'${p}'`)
    .join(", ")} or '${PROVIDERS.at(-1)}'`;
  for (const [key, raw] of Object.entries(value as JsonObject)) {
    if (!isProvider(key)) {
      issues.push({
        loc: [...loc, key, "[key]"],
        msg: `Input should be ${expected}`,
        type: "enum",
        input: key,
        ctx: { expected },
      });
      continue;
    }
    const v = (raw ?? {}) as JsonObject;
    if (typeof v.host === "string" && v.host.trim() !== "") {
      const checked = hosts.check(v.host);
      if (typeof checked === "string")
        issues.push({
          loc: [...loc, key, "host"],
          msg: `Value error, ${checked}`,
          type: "value_error",
          input: v.host,
        });
    }
    out[key] = {
      token: typeof v.token === "string" ? v.token : null,
      host: typeof v.host === "string" ? v.host : null,
      user_id: typeof v.user_id === "string" ? v.user_id : null,
    };
  }
  return out;
}

/**
 * Verifies each non-empty token, and a stored token (`current`, opened with `open`) whose host changes, with the
 * provider. UNAUTHENTICATED for a rejected token, UNAVAILABLE when a provider can't be reached.
 */
export async function verifyProviderTokens(
  verifier: GitProviderVerifier,
  current: Record<string, StoredProviderToken>,
  tokens: Record<string, IncomingToken>,
  open: (stored: StoredProviderToken) => string | null,
): Promise<void> {
  const checks = Object.entries(tokens).map(async ([provider, t]): Promise<[string, string] | null> => {
    const host = t.host === null || t.host.trim() === "" ? null : t.host.trim();
    let token = t.token?.trim() ?? "";
    if (token === "") {
      const stored = current[provider];
      if (stored === undefined || stored.token === null || (stored.host ?? null) === (t.host ?? null))
        return null;
      token = open(stored) ?? "";
      if (token === "") return null;
    }
    const outcome = await verifier.verify(provider, token, host);
    return outcome === "valid" ? null : [provider, outcome];
  });
  for (const result of await Promise.all(checks)) {
    if (result === null) continue;
    const [provider, outcome] = result;
    if (outcome === "invalid") {
      throw new ConnectError(
        `Invalid token. Please make sure it is a valid ${provider} token.`,
        Code.Unauthenticated,
      );
    }
    throw new ConnectError(
      `Could not reach ${provider} to verify the token. Please try again later.`,
      Code.Unavailable,
    );
  }
}
