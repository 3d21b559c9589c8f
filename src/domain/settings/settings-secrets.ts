/**
 * The secrets of a user's settings document, sealed at rest with the SecretBox (each under its own context, so a
 * sealed value cannot be moved to another field or user): secret fields, git provider tokens, custom secrets and
 * MCP keys. Merged in sealed when settings are stored, opened for starting conversations and for the git routes.
 */
import type { JsonObject } from "@bufbuild/protobuf";
import type { McpConfigInput } from "../../codec/mcp-model.ts";
import type { StoredMcp } from "../../codec/settings-document.ts";
import { MASK } from "../../codec/settings-fields.ts";
import { setOwn } from "../../core/model/schema.ts";
import type { SecretBox } from "../../core/secret-box.ts";
import type { StoredProviderToken, UserData } from "../../ports/user-data-repository.ts";
import type { IncomingToken } from "./provider-tokens.ts";

export class SettingsSecrets {
  readonly #box: SecretBox;

  constructor(box: SecretBox) {
    this.#box = box;
  }

  /** A secret settings field's value, sealed. */
  sealField(userId: string, field: string, value: string): string {
    return this.#box.seal(value, `${userId}:${field}`);
  }

  /** A sealed secret settings field's plaintext. */
  openField(userId: string, field: string, sealed: string): string {
    return this.#box.open(sealed, `${userId}:${field}`);
  }

  /** The plaintext of a stored provider token. */
  openProviderToken(userId: string, token: StoredProviderToken): string | null {
    return token.token === null ? null : this.#box.open(token.token, `${userId}:provider_token`);
  }

  /** The stored provider tokens holding a token, in plaintext, keyed by provider. */
  openTokens(
    userId: string,
    data: UserData | undefined,
  ): Record<string, { token: string; host: string | null }> {
    const out: Record<string, { token: string; host: string | null }> = {};
    for (const [provider, stored] of Object.entries(data?.providerTokens ?? {})) {
      const token = this.openProviderToken(userId, stored);
      if (token !== null && token !== "") out[provider] = { token, host: stored.host };
    }
    return out;
  }

  /**
   * The request's provider tokens merged into the stored ones: a non-empty token is sealed, an empty one keeps the
   * stored token, the host is always overwritten; `replace` removes the providers absent from the request.
   */
  mergeProviderTokens(
    userId: string,
    data: UserData,
    tokens: Record<string, IncomingToken>,
    replace: boolean,
  ): void {
    const next: Record<string, StoredProviderToken> = replace ? {} : { ...data.providerTokens };
    for (const [provider, t] of Object.entries(tokens)) {
      const stored = data.providerTokens[provider];
      const token = t.token?.trim() ?? "";
      const entry: StoredProviderToken =
        token !== ""
          ? { token: this.#box.seal(token, `${userId}:provider_token`), host: t.host, userId: t.user_id }
          : { token: stored?.token ?? null, host: t.host, userId: stored?.userId ?? t.user_id };
      if (entry.token !== null) next[provider] = entry;
      else delete next[provider];
    }
    data.providerTokens = next;
  }

  /** Custom secrets added or updated; a secret without a value keeps the stored one. */
  upsertCustomSecrets(userId: string, data: UserData, secrets: JsonObject | undefined): void {
    if (secrets === undefined) return;
    for (const [name, raw] of Object.entries(secrets)) {
      const v = (raw ?? {}) as JsonObject;
      const existing = Object.hasOwn(data.customSecrets, name) ? data.customSecrets[name] : undefined;
      const secret =
        typeof v.secret === "string" ? this.#box.seal(v.secret, `${userId}:custom_secret`) : existing?.secret;
      setOwn(data.customSecrets, name, {
        secret: secret ?? this.#box.seal("", `${userId}:custom_secret`),
        description: typeof v.description === "string" ? v.description : (existing?.description ?? ""),
      });
    }
  }

  /** An MCP config to store, its keys sealed; a masked value keeps the stored key it refers to. */
  mergeMcp(userId: string, next: McpConfigInput | null, stored: StoredMcp | null): StoredMcp | null {
    if (next === null) return null;
    const ctx = `${userId}:mcp`;
    const keep = (value: string | null, previous: string | null | undefined): string | null => {
      if (value === null) return null;
      if (value === MASK) return previous ?? null;
      return this.#box.seal(value, ctx);
    };
    // The stored entry a masked value refers to: the one with the same URL (sse, shttp) or name (stdio), else the
    // one at the same list position (the UI's edit form posts the mask back after changing the URL or name).
    const previousOf = <T>(list: T[] | undefined, i: number, same: (e: T) => boolean): T | undefined =>
      list?.find(same) ?? list?.[i];
    return {
      sse_servers: next.sse_servers.map((e, i) => ({
        url: e.url,
        api_key: keep(e.api_key, previousOf(stored?.sse_servers, i, (p) => p.url === e.url)?.api_key),
      })),
      shttp_servers: next.shttp_servers.map((e, i) => ({
        url: e.url,
        api_key: keep(e.api_key, previousOf(stored?.shttp_servers, i, (p) => p.url === e.url)?.api_key),
        timeout: e.timeout,
      })),
      stdio_servers: next.stdio_servers.map((e, i) => {
        const previous = previousOf(stored?.stdio_servers, i, (p) => p.name === e.name)?.env ?? {};
        const env: Record<string, string> = {};
        for (const [k, v] of Object.entries(e.env)) {
          const value = keep(v, Object.hasOwn(previous, k) ? previous[k] : undefined);
          if (value !== null) setOwn(env, k, value);
        }
        return { name: e.name, command: e.command, args: e.args, env };
      }),
    };
  }

  /** MCP config with secrets opened (for passing to a sandbox's agent). */
  openMcp(userId: string, stored: unknown): StoredMcp | null {
    if (stored === null || stored === undefined) return null;
    const m = stored as StoredMcp;
    const ctx = `${userId}:mcp`;
    const open = (v: string | null): string | null => (v === null ? null : this.#box.open(v, ctx));
    return {
      sse_servers: m.sse_servers.map((e) => ({ ...e, api_key: open(e.api_key) })),
      shttp_servers: m.shttp_servers.map((e) => ({ ...e, api_key: open(e.api_key) })),
      stdio_servers: m.stdio_servers.map((e) => ({
        ...e,
        env: Object.fromEntries(Object.entries(e.env).map(([k, v]) => [k, open(v) ?? ""])),
      })),
    };
  }
}
