import { create, fromJson, type JsonObject } from "@bufbuild/protobuf";
import { invalid } from "../core/errors.ts";
import {
  bool,
  dict,
  enumOf,
  float,
  int,
  nullable,
  object,
  refine,
  type Schema,
  str,
  validate,
} from "../core/model.ts";
import { SecretsService } from "../gen/workspace/v1/secrets_pb.js";
import {
  AddGitProvidersRequestSchema,
  type GetSettingsResponse,
  type Settings,
  SettingsSchema,
  SettingsService,
  StoreSettingsRequestSchema,
} from "../gen/workspace/v1/settings_pb.js";
import { mcpConfigSchema } from "../services/settings/mcp-model.ts";
import { PROVIDERS, SECRET_FIELDS, SETTINGS_FIELDS } from "../services/settings/settings-fields.ts";
import type { JsonSchema, SchemaBuilder } from "./openapi.ts";
import { type RestRoute, route } from "./rest-route.ts";

const INT32 = { ge: -2147483648, le: 2147483647 };
const optStr = { schema: nullable(str()) };
const optInt = { schema: nullable(int(INT32)) };
const optBool = { schema: nullable(bool()) };

const providerToken = object(
  {
    token: { schema: nullable(str()) },
    host: { schema: nullable(str()) },
    user_id: { schema: nullable(str()) },
  },
  { title: "ProviderToken" },
);
const providerTokens = dict(providerToken, { key: enumOf(PROVIDERS), maxProperties: 16 });

/** Body of POST /api/settings: the Settings model of the reference (unknown top-level keys are ignored). */
export const settingsBodySchema = object(
  {
    language: optStr,
    agent: optStr,
    // The agent-server refuses fewer than one iteration (its StartConversationRequest): refused when stored.
    max_iterations: { schema: nullable(int({ ge: 1, le: INT32.le })) },
    security_analyzer: optStr,
    confirmation_mode: optBool,
    llm_model: optStr,
    llm_api_key: optStr,
    llm_base_url: optStr,
    remote_runtime_resource_factor: optInt,
    secrets_store: {
      schema: nullable(
        object(
          {
            provider_tokens: { schema: providerTokens },
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
      ),
    },
    enable_default_condenser: optBool,
    enable_sound_notifications: optBool,
    enable_proactive_conversation_starters: optBool,
    enable_solvability_analysis: optBool,
    user_consents_to_analytics: optBool,
    sandbox_base_container_image: optStr,
    sandbox_runtime_container_image: optStr,
    mcp_config: { schema: nullable(mcpConfigSchema) },
    search_api_key: optStr,
    sandbox_api_key: optStr,
    max_budget_per_task: { schema: nullable(float()) },
    condenser_max_size: {
      schema: nullable(refine(int(INT32), (v) => (v < 20 ? "condenser_max_size must be at least 20" : null))),
    },
    email: optStr,
    email_verified: optBool,
    git_user_name: optStr,
    git_user_email: optStr,
    v1_enabled: optBool,
  },
  { title: "Settings", extra: "ignore" },
);

/** Body of POST /api/add-git-providers. */
export const addGitProvidersBodySchema = object(
  { provider_tokens: { schema: providerTokens }, mcp_config: { schema: nullable(mcpConfigSchema) } },
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
 * present fields go into `settings`, nulls into `reset_fields`. The service sees nothing else of the request.
 */
function bindStoreSettings(value: Record<string, unknown>) {
  const settings: JsonObject = {};
  const reset: string[] = [];
  for (const [k, v] of Object.entries(value)) {
    if (v === null) {
      if (!(SECRET_FIELDS as readonly string[]).includes(k) && k !== "secrets_store") reset.push(k);
    } else if (v !== undefined) {
      settings[k] = k === "mcp_config" ? mcpMessageJson(v) : (v as JsonObject);
    }
  }
  return create(StoreSettingsRequestSchema, {
    settings: fromJson(SettingsSchema, settings, { ignoreUnknownFields: false }),
    resetFields: reset,
  });
}

/**
 * A validated MCP config as the message's JSON: an SHTTP server's `"timeout": null` (no timeout, kept as the
 * reference keeps it) is the message's 0; an absent one the model already filled with the default of 60.
 */
function mcpMessageJson(mcp: unknown): JsonObject {
  const m = mcp as JsonObject;
  return {
    ...m,
    shttp_servers: ((m.shttp_servers ?? []) as JsonObject[]).map((e) =>
      e.timeout === null ? { ...e, timeout: 0 } : e,
    ),
  };
}

/** The keys of the GET /api/settings body, in the reference's order. */
const SETTINGS_BODY_KEYS = [
  ...SETTINGS_FIELDS,
  "provider_tokens_set",
  "llm_api_key_set",
  "search_api_key_set",
] as const;

/**
 * Every key of the body with a null value: each answer starts as a copy of it and only assigns existing keys, so
 * the answer keeps this object's fast shape. Built key by key instead, an object of 30 keys becomes a hash table,
 * which shaping and JSON.stringify then walk ~2x slower (4.0 against 1.9 µs a call on the bench machine).
 */
const SETTINGS_BODY_TEMPLATE: Readonly<Record<(typeof SETTINGS_BODY_KEYS)[number], unknown>> =
  Object.fromEntries(SETTINGS_BODY_KEYS.map((k) => [k, null])) as never;

/** REST name and message property of the body's fields holding one string, number or boolean. */
const SCALAR_FIELDS: readonly (readonly [string, keyof Settings])[] = SettingsSchema.fields
  .filter((f) => f.fieldKind === "scalar" && f.name in SETTINGS_BODY_TEMPLATE)
  .map((f) => [f.name, f.localName as keyof Settings] as const);

/** GetSettingsResponse → the reference's flat GET /api/settings body. */
export function shapeSettings(res: GetSettingsResponse): Record<string, unknown> {
  // Read from the message directly (its fields are the REST fields; see SCALAR_FIELDS): converting it with
  // protobuf-es toJson first cost more than the rest of the request.
  const s = res.settings;
  const out: Record<string, unknown> = { ...SETTINGS_BODY_TEMPLATE };
  if (s !== undefined) for (const [name, local] of SCALAR_FIELDS) out[name] = s[local] ?? null;
  const store = s?.secretsStore;
  out.secrets_store = {
    provider_tokens: Object.fromEntries(
      Object.entries(store?.providerTokens ?? {}).map(([p, t]) => [
        p,
        { host: t.host ?? null, user_id: t.userId ?? null },
      ]),
    ),
    custom_secrets: Object.fromEntries(
      Object.entries(store?.customSecrets ?? {}).map(([n, v]) => [n, { description: v.description ?? "" }]),
    ),
  };
  const m = s?.mcpConfig;
  if (m !== undefined)
    out.mcp_config = {
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
  out.provider_tokens_set = Object.fromEntries(
    Object.entries(res.providerTokensSet).map(([p, v]) => [p, v.host ?? null]),
  );
  out.llm_api_key_set = res.llmApiKeySet;
  out.search_api_key_set = res.searchApiKeySet;
  return out;
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
    service: SettingsService,
    rpc: "getSettings",
    dialect: "legacy",
    summary: "Read the caller's settings (404 until first stored)",
    docs: { response: settingsResponseSchema },
    bind: () => ({}),
    shape: shapeSettings,
  }),
  route({
    method: "POST",
    url: "/api/settings",
    service: SettingsService,
    rpc: "storeSettings",
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
    service: SettingsService,
    rpc: "addGitProviders",
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
    service: SettingsService,
    rpc: "unsetProviderTokens",
    writesUserData: true,
    dialect: "legacy",
    summary: "Remove every git provider token",
    bind: () => ({}),
    shape: message,
  }),
  route({
    method: "GET",
    url: "/api/secrets",
    service: SecretsService,
    rpc: "listSecrets",
    dialect: "legacy",
    summary: "List custom secret names",
    bind: () => ({}),
    shape: (res: { customSecrets: { name: string; description?: string }[] }) => ({
      custom_secrets: res.customSecrets.map((s) => ({ name: s.name, description: s.description ?? null })),
    }),
  }),
  route({
    method: "POST",
    url: "/api/secrets",
    service: SecretsService,
    rpc: "createSecret",
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
    service: SecretsService,
    rpc: "updateSecret",
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
    service: SecretsService,
    rpc: "deleteSecret",
    writesUserData: true,
    dialect: "legacy",
    summary: "Delete a custom secret",
    bind: ({ params }) => ({ secretId: pathParam(params.secret_id, "secret_id") }),
    shape: message,
  }),
];

export function pathParam(value: string | undefined, name: string): string {
  if (value === undefined || value.length === 0)
    throw invalid(["path", name], "Field required", "missing", null);
  return value;
}
