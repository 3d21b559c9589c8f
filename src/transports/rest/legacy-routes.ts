import { create, fromJson } from "@bufbuild/protobuf";
import { mcpConfigSchema } from "../../codec/mcp-model.ts";
import { compileRestCodec } from "../../codec/rest-codec.ts";
import { mcpMessageJson, providerTokensModel, REST_JSON_DIFFERENCES } from "../../codec/rest-json.ts";
import { RESETTABLE_FIELDS, SECRET_FIELDS } from "../../codec/settings-fields.ts";
import { nullable, object } from "../../core/model/containers.ts";
import { str } from "../../core/model/scalars.ts";
import type { Schema } from "../../core/model/schema.ts";
import { validate } from "../../core/model/validate.ts";
import { SETTINGS_RULES } from "../../domain/settings/settings-rules.ts";
import { SecretsService } from "../../gen/workspace/v1/secrets_pb.js";
import {
  AddGitProvidersRequestSchema,
  type GetSettingsResponse,
  GetSettingsResponseSchema,
  SettingsSchema,
  SettingsService,
  StoreSettingsRequestSchema,
} from "../../gen/workspace/v1/settings_pb.js";
import { type RestRoute, route } from "./rest-route.ts";
import { pathParam } from "./route-kit.ts";
import type { JsonSchema, SchemaBuilder } from "./schema-builder.ts";

const optStr = { schema: nullable(str()) };

/** The REST face of the settings record, compiled from its descriptor at start (see rest-codec.ts). */
export const settingsCodec = compileRestCodec(SettingsSchema, {
  table: REST_JSON_DIFFERENCES,
  rules: SETTINGS_RULES,
  title: "Settings",
  extra: "ignore",
});

/** The flat GET /api/settings body: the settings fields, then the *_set fields. */
const getSettingsCodec = compileRestCodec(GetSettingsResponseSchema, { table: REST_JSON_DIFFERENCES });

/** Body of POST /api/settings: the Settings model of the reference (unknown top-level keys are ignored). */
export const settingsBodySchema = settingsCodec.model;

/** Body of POST /api/add-git-providers. */
export const addGitProvidersBodySchema = object(
  { provider_tokens: { schema: providerTokensModel }, mcp_config: { schema: nullable(mcpConfigSchema) } },
  { title: "POSTProviderModel", extra: "ignore" },
);

export const createSecretBodySchema = object(
  { name: { schema: str(), required: true }, value: { schema: str(), required: true }, description: optStr },
  { title: "CustomSecretModel" },
);

export const updateSecretBodySchema = object(
  { name: { schema: str(), required: true }, description: optStr },
  { title: "CustomSecretWithoutValueModel" },
);

function body<T>(schema: Schema<T>, value: unknown): T {
  return validate(schema, value, ["body"]);
}

/**
 * Settings body (as the REST model validated it, the reference's defaults filled in) → StoreSettingsRequest:
 * present fields go into `settings`, nulls into `reset_fields` (secrets and the secrets store are kept, not reset).
 * The service sees nothing else of the request.
 */
function bindStoreSettings(value: Record<string, unknown>) {
  const nulls: string[] = [];
  const settings = settingsCodec.fromRest(value, nulls);
  return create(StoreSettingsRequestSchema, {
    settings: fromJson(SettingsSchema, settings, { ignoreUnknownFields: false }),
    resetFields: nulls.filter((f) => RESETTABLE_FIELDS.has(f)),
  });
}

/** The keys of the GET /api/settings body, in the reference's order. */
const SETTINGS_BODY_KEYS = getSettingsCodec.keys;

/** GetSettingsResponse → the reference's flat GET /api/settings body. */
export function shapeSettings(res: GetSettingsResponse): Record<string, unknown> {
  return getSettingsCodec.toRest(res);
}

const message = (res: { message: string }) => ({ message: res.message });

const nullableString: JsonSchema = { type: ["string", "null"] };

/** GET /api/settings: the Settings fields at top level (secrets always null) plus the *_set fields. */
function settingsResponseSchema(s: SchemaBuilder): JsonSchema {
  s.message(SettingsSchema);
  const base = (s.components.Settings as { properties: Record<string, JsonSchema> }).properties;
  return {
    type: "object",
    required: [...SETTINGS_BODY_KEYS],
    properties: {
      ...base,
      secrets_store: {
        type: "object",
        description: "Names and hosts only: never token or secret values",
        properties: {
          provider_tokens: {
            type: "object",
            additionalProperties: {
              type: "object",
              properties: { host: nullableString, user_id: nullableString },
            },
          },
          custom_secrets: {
            type: "object",
            additionalProperties: { type: "object", properties: { description: { type: "string" } } },
          },
        },
      },
      ...Object.fromEntries(
        SECRET_FIELDS.map((f) => [f, { type: "null", description: "Write-only secret" }]),
      ),
      provider_tokens_set: { type: "object", additionalProperties: nullableString },
      llm_api_key_set: { type: "boolean" },
      search_api_key_set: { type: "boolean" },
    },
  };
}

/** The legacy /api family: settings, git providers, custom secrets. */
export const legacyRoutes: RestRoute[] = [
  route({
    method: "GET",
    url: "/api/settings",
    rpc: SettingsService.method.getSettings,
    dialect: "legacy",
    summary: "Read the caller's settings (404 until first stored)",
    docs: { response: settingsResponseSchema },
    bind: () => ({}),
    shape: shapeSettings,
  }),
  route({
    method: "POST",
    url: "/api/settings",
    rpc: SettingsService.method.storeSettings,
    writesUserData: true,
    dialect: "legacy",
    bodyRequired: true,
    summary: "Store settings in full or in part (merge)",
    docs: { body: settingsBodySchema },
    bind: ({ body: b }) => bindStoreSettings(body(settingsBodySchema, b) as Record<string, unknown>),
    shape: message,
  }),
  route({
    method: "POST",
    url: "/api/add-git-providers",
    rpc: SettingsService.method.addGitProviders,
    writesUserData: true,
    dialect: "legacy",
    bodyRequired: true,
    summary: "Verify and store git provider tokens",
    docs: { body: addGitProvidersBodySchema },
    bind: ({ body: b }) => {
      const v = body(addGitProvidersBodySchema, b);
      const tokens = (v.provider_tokens ?? {}) as Record<
        string,
        { token?: string | null; host?: string | null; user_id?: string | null }
      >;
      return create(AddGitProvidersRequestSchema, {
        providerTokens: Object.fromEntries(
          Object.entries(tokens).map(([p, t]) => [
            p,
            {
              ...(typeof t.token === "string" ? { token: t.token } : {}),
              ...(typeof t.host === "string" ? { host: t.host } : {}),
              ...(typeof t.user_id === "string" ? { userId: t.user_id } : {}),
            },
          ]),
        ),
        ...(v.mcp_config
          ? {
              mcpConfig: fromJson(SettingsSchema, { mcp_config: mcpMessageJson(v.mcp_config) }).mcpConfig,
            }
          : {}),
      });
    },
    shape: message,
  }),
  route({
    method: "POST",
    url: "/api/unset-provider-tokens",
    rpc: SettingsService.method.unsetProviderTokens,
    writesUserData: true,
    // The UI's Logout (open-source mode) posts this and reloads: a browser session ends with it (docs/ui-web.md).
    endsBrowserSession: true,
    dialect: "legacy",
    summary:
      "Remove every git provider token (and, called with the browser session cookie, sign that browser out)",
    bind: () => ({}),
    shape: message,
  }),
  route({
    method: "GET",
    url: "/api/secrets",
    rpc: SecretsService.method.listSecrets,
    dialect: "legacy",
    summary: "List custom secret names",
    bind: () => ({}),
    shape: (res) => ({
      custom_secrets: res.customSecrets.map((s) => ({ name: s.name, description: s.description ?? null })),
    }),
  }),
  route({
    method: "POST",
    url: "/api/secrets",
    rpc: SecretsService.method.createSecret,
    writesUserData: true,
    dialect: "legacy",
    bodyRequired: true,
    successStatus: 201,
    summary: "Create a custom secret",
    docs: { body: createSecretBodySchema },
    bind: ({ body: b }) => {
      const v = body(createSecretBodySchema, b);
      return {
        name: v.name as string,
        value: v.value as string,
        ...(typeof v.description === "string" ? { description: v.description } : {}),
      };
    },
    shape: message,
  }),
  route({
    method: "PUT",
    url: "/api/secrets/:secret_id",
    rpc: SecretsService.method.updateSecret,
    writesUserData: true,
    dialect: "legacy",
    bodyRequired: true,
    summary: "Rename or re-describe a custom secret",
    docs: { body: updateSecretBodySchema },
    bind: ({ body: b, params }) => {
      const v = body(updateSecretBodySchema, b);
      return {
        secretId: pathParam(params.secret_id, "secret_id"),
        name: v.name as string,
        ...(typeof v.description === "string" ? { description: v.description } : {}),
      };
    },
    shape: message,
  }),
  route({
    method: "DELETE",
    url: "/api/secrets/:secret_id",
    rpc: SecretsService.method.deleteSecret,
    writesUserData: true,
    dialect: "legacy",
    summary: "Delete a custom secret",
    bind: ({ params }) => ({ secretId: pathParam(params.secret_id, "secret_id") }),
    shape: message,
  }),
];
