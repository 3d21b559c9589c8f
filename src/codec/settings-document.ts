/**
 * The settings document in its two JSON forms: the JSON a StoreSettings request is merged from (`settingsJson`,
 * `mcpConfigJson`: REST field names, as protobuf-es writes them), and the GetSettings answer built from a stored
 * document (`settingsView`: secrets left out, MCP secrets masked). `StoredMcp` is how an MCP config is stored.
 */
import { create, fromJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { setOwn } from "../core/model/schema.ts";
import { toWellFormedJson } from "../core/model/well-formed.ts";
import { LOCAL_REPOSITORY_PROVIDER } from "../core/repository-names.ts";
import type { McpConfig } from "../gen/workspace/v1/mcp_pb.js";
import {
  type GetSettingsResponse,
  GetSettingsResponseSchema,
  type Settings,
  SettingsSchema,
} from "../gen/workspace/v1/settings_pb.js";
import type { UserData } from "../ports/user-data-repository.ts";
import { BOOLEAN_DEFAULTS, isSecretField, MASK, SETTINGS_FIELDS } from "./settings-fields.ts";

/** An MCP config as the settings document stores it (secrets sealed). */
export type StoredMcp = {
  sse_servers: { url: string; api_key: string | null }[];
  stdio_servers: { name: string; command: string; args: string[]; env: Record<string, string> }[];
  shttp_servers: { url: string; api_key: string | null; timeout: number | null }[];
};

/** Settings fields holding one string, number or boolean: proto (= REST) name and message property. */
const SCALAR_FIELDS = SettingsSchema.fields
  .filter((f) => f.fieldKind === "scalar")
  .map((f) => [f.name, f.localName as keyof Settings] as const);

/**
 * The set fields of a Settings message as JSON with the REST (proto) field names, as protobuf-es toJson with
 * `useProtoFieldName` writes them (which cost more than the rest of a store): unset fields and empty maps absent,
 * non-finite numbers as their JSON strings.
 */
export function settingsJson(s: Settings): JsonObject {
  const out: JsonObject = {};
  for (const [name, local] of SCALAR_FIELDS) {
    const v = s[local] as string | number | boolean | undefined;
    if (v !== undefined) out[name] = typeof v === "number" && !Number.isFinite(v) ? String(v) : v;
  }
  if (s.mcpConfig !== undefined) out.mcp_config = mcpConfigJson(s.mcpConfig);
  const store = s.secretsStore;
  if (store !== undefined) {
    const json: JsonObject = {};
    const tokens = Object.entries(store.providerTokens);
    if (tokens.length > 0) {
      const t: JsonObject = {};
      for (const [p, v] of tokens) setOwn(t, p, present({ token: v.token, host: v.host, user_id: v.userId }));
      json.provider_tokens = t;
    }
    const secrets = Object.entries(store.customSecrets);
    if (secrets.length > 0) {
      const c: JsonObject = {};
      for (const [n, v] of secrets) setOwn(c, n, present({ secret: v.secret, description: v.description }));
      json.custom_secrets = c;
    }
    out.secrets_store = json;
  }
  return out;
}

function present(o: Record<string, string | number | undefined>): JsonObject {
  const out: JsonObject = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) out[k] = v;
  return out;
}

/** `{url, api_key}` of an MCP server with the set ones of the two (as `present`, without the intermediate object). */
function urlAndKey(url: string | undefined, apiKey: string | undefined): JsonObject {
  const out: JsonObject = {};
  if (url !== undefined) out.url = url;
  if (apiKey !== undefined) out.api_key = apiKey;
  return out;
}

/**
 * An McpConfig message as the MCP model's JSON. An SHTTP server's `timeout` of 0 (the message's "no timeout", REST's
 * JSON null) becomes null; unset stays absent (the model's default of 60).
 */
export function mcpConfigJson(m: McpConfig): JsonObject {
  return {
    sse_servers: m.sseServers.map((e) => urlAndKey(e.url, e.apiKey)),
    stdio_servers: m.stdioServers.map((e) => ({
      name: e.name,
      command: e.command,
      args: e.args,
      env: { ...e.env },
    })),
    shttp_servers: m.shttpServers.map((e) => {
      const json = urlAndKey(e.url, e.apiKey);
      if (e.timeout !== undefined) json.timeout = e.timeout === 0 ? null : e.timeout;
      return json;
    }),
  };
}

function secretsStoreView(data: UserData): JsonObject {
  const providerTokens: JsonObject = {};
  for (const [p, t] of Object.entries(data.providerTokens)) {
    const entry: JsonObject = {};
    if (t.host !== null) entry.host = t.host;
    if (t.userId !== null) entry.user_id = t.userId;
    providerTokens[p] = entry;
  }
  const customSecrets: JsonObject = {};
  for (const [name, s] of Object.entries(data.customSecrets))
    setOwn(customSecrets, name, { description: s.description });
  return { provider_tokens: providerTokens, custom_secrets: customSecrets };
}

function maskMcp(m: StoredMcp): JsonObject {
  const mask = (v: string | null): JsonObject => (v === null ? {} : { api_key: MASK });
  return {
    sse_servers: m.sse_servers.map((e) => ({ url: e.url, ...mask(e.api_key) })),
    stdio_servers: m.stdio_servers.map((e) => ({
      name: e.name,
      command: e.command,
      args: e.args,
      env: Object.fromEntries(Object.keys(e.env).map((k) => [k, MASK])),
    })),
    shttp_servers: m.shttp_servers.map((e) => ({
      url: e.url,
      ...mask(e.api_key),
      timeout: e.timeout ?? 0,
    })),
  };
}

/**
 * The GetSettings answer for a stored document: secrets never included, MCP secrets masked. Where the server
 * offers local repositories and the user has no git provider token, `provider_tokens_set` names the local
 * repositories' provider (LOCAL_REPOSITORY_PROVIDER, no host): the OpenHands UI shows its repository picker only to
 * a user with a provider, and lists that provider's repositories, which the git routes answer with the local ones.
 */
export function settingsView(
  data: UserData,
  stored: Record<string, unknown>,
  localRepositories: boolean,
): GetSettingsResponse {
  const out: JsonObject = {};
  for (const field of SETTINGS_FIELDS) {
    if (isSecretField(field)) continue;
    if (field === "secrets_store") {
      out[field] = secretsStoreView(data);
    } else if (field === "mcp_config") {
      if (stored.mcp_config != null) out[field] = maskMcp(stored.mcp_config as StoredMcp);
    } else if (stored[field] !== undefined && stored[field] !== null) {
      out[field] = stored[field] as JsonValue;
    } else if (field in BOOLEAN_DEFAULTS) {
      out[field] = BOOLEAN_DEFAULTS[field] as boolean;
    }
  }
  const tokensSet: Record<string, { host?: string }> = {};
  for (const [provider, t] of Object.entries(data.providerTokens)) {
    if (t.token !== null || t.userId !== null)
      tokensSet[provider] = t.host === null ? {} : { host: t.host.toWellFormed() };
  }
  if (localRepositories && Object.keys(tokensSet).length === 0) tokensSet[LOCAL_REPOSITORY_PROVIDER] = {};
  return create(GetSettingsResponseSchema, {
    settings: fromJson(SettingsSchema, toWellFormedJson(out)),
    llmApiKeySet: typeof stored.llm_api_key === "string",
    searchApiKeySet: typeof stored.search_api_key === "string",
    providerTokensSet: tokensSet,
  });
}
