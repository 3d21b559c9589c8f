import type { JsonObject } from "@bufbuild/protobuf";
import { dict, list, nullable, object, taggedUnion } from "../core/model/containers.ts";
import { anyValue, bool, enumOf, literal, str } from "../core/model/scalars.ts";
import type { Infer } from "../core/model/schema.ts";
import type { SendMessageRequest } from "../gen/workspace/v1/app_conversation_pb.js";
import type { McpConfig } from "../gen/workspace/v1/mcp_pb.js";
import type { SecretsStore } from "../gen/workspace/v1/provider_pb.js";
import type { ProviderTokenSet } from "../gen/workspace/v1/settings_pb.js";
import { dashedUuid, messageJson, ROLE_NAMES } from "./conversation-json.ts";
import { mcpConfigSchema } from "./mcp-model.ts";
import type { RestJsonTable } from "./rest-codec.ts";
import { PROVIDERS } from "./settings-fields.ts";

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
const textContent = object(
  {
    type: { schema: literal(["text"]) },
    text: { schema: str(), required: true },
    cache_prompt: { schema: bool() },
  },
  { title: "TextContent", extra: "forbid" },
);
const imageContent = object(
  {
    type: { schema: literal(["image"]) },
    image_urls: { schema: list(str()), required: true },
    cache_prompt: { schema: bool() },
  },
  { title: "ImageContent", extra: "forbid" },
);
/** pydantic's discriminated union on "type": text or image content. */
const contentPart = taggedUnion("type", { text: textContent, image: imageContent });

/** The agent SDK's SendMessageRequest: roles as a Literal (lower-case), content parts by "type". */
const sendMessage = object(
  {
    role: { schema: literal(ROLE_NAMES) },
    content: { schema: list(contentPart) },
    run: { schema: bool() },
  },
  { title: "SendMessageRequest" },
);

/** A validated SendMessageRequest as the message's protobuf JSON, the model's defaults filled in. */
function sendMessageJson(m: Infer<typeof sendMessage>): JsonObject {
  return {
    role: `MESSAGE_ROLE_${(m.role ?? "user").toUpperCase()}`,
    content: (m.content ?? []).map((p) => {
      const cache_prompt = p.value.cache_prompt ?? false;
      return p.kind === "text"
        ? { text: { text: p.value.text, cache_prompt } }
        : { image: { image_urls: p.value.image_urls, cache_prompt } };
    }),
    run: m.run ?? false,
  };
}

const LOWER_CASE_ENUM = "the reference writes this enum's values in lower case";

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
  "workspace.v1.AppConversationStartRequest.initial_message": {
    reason:
      "The agent SDK's message: a role Literal, content parts told apart by a `type` key (not a oneof), defaults " +
      "filled in (role user, cache_prompt false, run false).",
    model: sendMessage,
    fromRest: sendMessageJson,
    toRest: (m: SendMessageRequest | undefined) => (m === undefined ? null : messageJson(m)),
  },
  "workspace.v1.AppConversationStartRequest.conversation_id": {
    reason: "A plain UUID field in the reference: accepted with or without dashes, echoed with dashes.",
    toRest: (id: string | undefined) => (id === undefined ? null : dashedUuid(id)),
  },
  "workspace.v1.AppConversationStartRequest.processors": {
    reason: "Free-form objects, at most 100; JSON null means none (and none is echoed as null).",
    model: nullable(list(dict(anyValue()), { maxItems: 100 })),
    toRest: (p: readonly JsonObject[]) => (p.length > 0 ? p : null),
  },
  "workspace.v1.AppConversationStartRequest.git_provider": { reason: LOWER_CASE_ENUM, enumSpelling: "lower" },
  "workspace.v1.AppConversationStartRequest.trigger": { reason: LOWER_CASE_ENUM, enumSpelling: "lower" },
  "workspace.v1.AppConversationStartRequest.agent_type": {
    reason: `${LOWER_CASE_ENUM}; left out means "default"`,
    enumSpelling: "lower",
    absent: "AGENT_TYPE_DEFAULT",
  },
  "workspace.v1.AppConversation.git_provider": { reason: LOWER_CASE_ENUM, enumSpelling: "lower" },
  "workspace.v1.AppConversation.trigger": { reason: LOWER_CASE_ENUM, enumSpelling: "lower" },
  "workspace.v1.AppConversation.execution_status": { reason: LOWER_CASE_ENUM, enumSpelling: "lower" },
  "workspace.v1.GetSettingsResponse.provider_tokens_set": {
    reason: "Provider name → host string (null for the public host), not an object.",
    toRest: (set: Record<string, ProviderTokenSet>) =>
      Object.fromEntries(Object.entries(set).map(([p, v]) => [p, v.host ?? null])),
  },
};
