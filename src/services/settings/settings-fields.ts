/** Field names of the settings record, in the reference's order (the REST response follows it). */
export const SETTINGS_FIELDS = [
  "language",
  "agent",
  "max_iterations",
  "security_analyzer",
  "confirmation_mode",
  "llm_model",
  "llm_api_key",
  "llm_base_url",
  "remote_runtime_resource_factor",
  "secrets_store",
  "enable_default_condenser",
  "enable_sound_notifications",
  "enable_proactive_conversation_starters",
  "enable_solvability_analysis",
  "user_consents_to_analytics",
  "sandbox_base_container_image",
  "sandbox_runtime_container_image",
  "mcp_config",
  "search_api_key",
  "sandbox_api_key",
  "max_budget_per_task",
  "condenser_max_size",
  "email",
  "email_verified",
  "git_user_name",
  "git_user_email",
  "v1_enabled",
] as const;

export type SettingsField = (typeof SETTINGS_FIELDS)[number];

/** Secret fields: write-only, sealed at rest, absent or null keeps the stored value, "" clears it (search_api_key: keeps it). */
export const SECRET_FIELDS = ["llm_api_key", "search_api_key", "sandbox_api_key"] as const;

/** Boolean fields that are never null: their defaults. */
export const BOOLEAN_DEFAULTS: Readonly<Record<string, boolean>> = {
  enable_default_condenser: true,
  enable_sound_notifications: false,
  enable_proactive_conversation_starters: true,
  enable_solvability_analysis: true,
};

/** Fields that `StoreSettings` can reset (JSON null in REST): every plain field, booleans back to their defaults. */
export const RESETTABLE_FIELDS: ReadonlySet<string> = new Set(
  SETTINGS_FIELDS.filter((f) => f !== "secrets_store" && !(SECRET_FIELDS as readonly string[]).includes(f)),
);

/** The value MCP api keys and stdio env values are shown as; posting it back keeps the stored value. */
export const MASK = "**********";

/** Provider names accepted as provider_tokens keys (lower-case, as in REST). */
export const PROVIDERS = ["github", "gitlab", "bitbucket", "azure_devops", "enterprise_sso"] as const;
export type Provider = (typeof PROVIDERS)[number];
export const isProvider = (s: string): s is Provider => (PROVIDERS as readonly string[]).includes(s);
