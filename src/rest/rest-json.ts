import type { JsonObject } from "@bufbuild/protobuf";
import { dict, enumOf, nullable, object, str } from "../core/model.ts";
import type { McpConfig } from "../gen/workspace/v1/mcp_pb.js";
import type { SecretsStore } from "../gen/workspace/v1/provider_pb.js";
import type { ProviderTokenSet } from "../gen/workspace/v1/settings_pb.js";
import { mcpConfigSchema } from "../services/settings/mcp-model.ts";
import { PROVIDERS } from "../services/settings/settings-fields.ts";
import type { RestJsonTable } from "./rest-codec.ts";

const providerToken = object(
  {
    token: { schema: nullable(str()) },
    host: { schema: nullable(str()) },
    user_id: { schema: nullable(str()) },
  },
  { title: "ProviderToken" },
);

/** REST model of a provider-token map: keys are the provider names the reference's enum accepts. */
export const providerTokensModel = dict(providerToken, { key: enumOf(PROVIDERS), maxProperties: 16 });

/**
 * A validated MCP config as the message's JSON: an SHTTP server's `"timeout": null` (no timeout, kept as the
 * reference keeps it) is the message's 0; an absent one the model already filled with the default of 60.
 */
export function mcpMessageJson(mcp: unknown): JsonObject {
  const m = mcp as JsonObject;
  return {
    ...m,
    shttp_servers: ((m.shttp_servers ?? []) as JsonObject[]).map((e) =>
      e.timeout === null ? { ...e, timeout: 0 } : e,
    ),
  };
}

/** An McpConfig message as the reference answers it: unset keys null, timeout 0 (no timeout) null. */
function mcpRestJson(m: McpConfig | undefined): unknown {
  if (m === undefined) return null;
  return {
    sse_servers: m.sseServers.map((e) => ({ url: e.url, api_key: e.apiKey ?? null })),
    stdio_servers: m.stdioServers.map((e) => ({
      name: e.name,
      command: e.command,
      args: e.args,
      env: e.env,
    })),
    shttp_servers: m.shttpServers.map((e) => ({
      url: e.url,
      api_key: e.apiKey ?? null,
      timeout: e.timeout === undefined || e.timeout === 0 ? null : e.timeout,
    })),
  };
}

/**
 * THE table of the places where the reference's JSON differs from what the REST codec derives from a field's type
 * (rest-codec.ts: proto field names, every key answered, unset optional fields null, enums by unprefixed name,
 * `(behavior).secret` fields null in answers). Keyed by the field's full name. A field not listed here needs no
 * REST code: adding it to the proto adds it to the REST model, to answers and to requests.
 */
export const REST_JSON_DIFFERENCES: RestJsonTable = {
  "workspace.v1.Settings.secrets_store": {
    reason:
      "Answers name providers and secrets only (hosts, user ids, descriptions), never a token or secret value; " +
      "requests accept the reference's provider names as keys and at most 16 providers and 1000 secrets.",
    model: object(
      {
        provider_tokens: { schema: providerTokensModel },
        custom_secrets: {
          schema: dict(
            object(
              { secret: { schema: nullable(str()) }, description: { schema: nullable(str()) } },
              { title: "CustomSecret" },
            ),
            { maxProperties: 1000 },
          ),
        },
      },
      { title: "SecretsStore" },
    ),
    toRest: (store: SecretsStore | undefined) => ({
      provider_tokens: Object.fromEntries(
        Object.entries(store?.providerTokens ?? {}).map(([p, t]) => [
          p,
          { host: t.host ?? null, user_id: t.userId ?? null },
        ]),
      ),
      custom_secrets: Object.fromEntries(
        Object.entries(store?.customSecrets ?? {}).map(([n, v]) => [n, { description: v.description ?? "" }]),
      ),
    }),
  },
  "workspace.v1.Settings.mcp_config": {
    reason:
      "The reference's MCP model (its URL, name and command rules and defaults, mcp-model.ts); an SHTTP server's " +
      "timeout null (no timeout) is the message's 0.",
    model: mcpConfigSchema,
    fromRest: mcpMessageJson,
    toRest: mcpRestJson,
  },
  "workspace.v1.GetSettingsResponse.settings": {
    reason: "GET /api/settings answers the settings fields at top level, beside the *_set fields.",
    flatten: true,
  },
  "workspace.v1.GetSettingsResponse.provider_tokens_set": {
    reason: "Provider name → host string (null for the public host), not an object.",
    toRest: (set: Record<string, ProviderTokenSet>) =>
      Object.fromEntries(Object.entries(set).map(([p, v]) => [p, v.host ?? null])),
  },
};
