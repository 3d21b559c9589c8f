import { enumNames } from "../core/enum-names.ts";
import { fieldFacts } from "../core/field-behavior.ts";
import { ProviderTypeSchema } from "../gen/workspace/v1/provider_pb.js";
import { SettingsSchema } from "../gen/workspace/v1/settings_pb.js";

/**
 * Field names of the settings record, from its descriptor: declared in the reference's order (the REST answer
 * follows it). A field added to `Settings` in settings.proto is stored, answered and reset on every protocol.
 */
export const SETTINGS_FIELDS: readonly string[] = SettingsSchema.fields.map((f) => f.name);

/**
 * Secret fields (`[(behavior).secret = true]`): write-only, sealed at rest, absent or null keeps the stored value,
 * "" clears it (search_api_key: keeps it).
 */
export const SECRET_FIELDS: readonly string[] = SettingsSchema.fields
  .filter((f) => fieldFacts(f).secret)
  .map((f) => f.name);
const SECRET_FIELD_SET: ReadonlySet<string> = new Set(SECRET_FIELDS);
export const isSecretField = (f: string): boolean => SECRET_FIELD_SET.has(f);

/** Boolean fields that are never null (`[(behavior).default_bool = …]`): their defaults. */
export const BOOLEAN_DEFAULTS: Readonly<Record<string, boolean>> = Object.freeze(
  Object.fromEntries(
    SettingsSchema.fields.flatMap((f) => {
      const d = fieldFacts(f).defaultBool;
      return d === undefined ? [] : [[f.name, d]];
    }),
  ),
);

/** The settings field holding provider tokens and custom secrets: merged, never reset by JSON null. */
export const SECRETS_STORE_FIELD = "secrets_store";

/** Fields that `StoreSettings` can reset (JSON null in REST): every plain field, booleans back to their defaults. */
export const RESETTABLE_FIELDS: ReadonlySet<string> = new Set(
  SETTINGS_FIELDS.filter((f) => f !== SECRETS_STORE_FIELD && !SECRET_FIELDS.includes(f)),
);

/** The value MCP api keys and stdio env values are shown as; posting it back keeps the stored value. */
export const MASK = "**********";

/** Provider names accepted as provider_tokens keys (the ProviderType values, lower-case, as in REST). */
export const PROVIDERS: readonly string[] = enumNames(ProviderTypeSchema, "lower");
export const isProvider = (s: string): boolean => PROVIDERS.includes(s);
