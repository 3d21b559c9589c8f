/**
 * The settings service's RPC face (SettingsService): the legacy settings API over the user-data store, with its
 * jobs beside it: the settings document's JSON and GetSettings view (settings-document.ts), the sealed secrets
 * (settings-secrets.ts), provider token checks and verification (provider-tokens.ts), the field rules
 * (settings-rules.ts) and the MCP model (mcp-model.ts). Also the narrow reads other services need: a new
 * conversation's configuration and the caller's provider tokens for the git routes.
 */
import type { JsonObject } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { mcpConfigSchema } from "../../codec/mcp-model.ts";
import { mcpConfigJson, type StoredMcp, settingsJson, settingsView } from "../../codec/settings-document.ts";
import {
  isSecretField,
  RESETTABLE_FIELDS,
  SECRETS_STORE_FIELD,
  SETTINGS_FIELDS,
} from "../../codec/settings-fields.ts";
import { callerKey, requireCaller } from "../../core/context.ts";
import { type FieldViolation, notFound, unauthenticated, ValidationError } from "../../core/errors.ts";
import { parseModel } from "../../core/model/validate.ts";
import { ProviderHostPolicy } from "../../core/provider-host.ts";
import type { SecretBox } from "../../core/secret-box.ts";
import type {
  AddGitProvidersRequest,
  AddGitProvidersResponse,
  GetSettingsRequest,
  GetSettingsResponse,
  SettingsService as SettingsServiceDesc,
  StoreSettingsRequest,
  StoreSettingsResponse,
  UnsetProviderTokensResponse,
} from "../../gen/workspace/v1/settings_pb.js";
import type { GitProviderVerifier } from "../../ports/git-provider-verifier.ts";
import type { UserDataStore } from "../user-data-store.ts";
import { validateProviderKeys, verifyProviderTokens } from "./provider-tokens.ts";
import { checkSettingsRules } from "./settings-rules.ts";
import { SettingsSecrets } from "./settings-secrets.ts";

const SETTINGS_FIELD_SET: ReadonlySet<string> = new Set(SETTINGS_FIELDS);

/** A kept GetSettings answer: the stored version it was built from, and the change token taken before that read. */
interface KeptView {
  version: number;
  token: number;
  response: GetSettingsResponse;
}

/** GetSettings answers kept, for this many users (the most recently read). */
const CACHED_VIEWS = 1000;

/**
 * The legacy settings API: merge-on-store settings, write-only secrets sealed at rest, masked MCP keys, and git
 * provider tokens verified against the provider before they are stored.
 */
export class SettingsService implements ServiceImpl<typeof SettingsServiceDesc> {
  readonly #store: UserDataStore;
  readonly #secrets: SettingsSecrets;
  readonly #verifier: GitProviderVerifier | null;
  /**
   * The GetSettings answer of each recently read user: the stored document's version it was built from, and the
   * store's change token taken before that read (while the token is unchanged, the answer is served without a read).
   */
  readonly #views = new Map<string, KeptView>();

  readonly #hosts: ProviderHostPolicy;
  readonly #localRepositories: boolean;

  constructor(deps: {
    store: UserDataStore;
    box: SecretBox;
    verifier: GitProviderVerifier | null;
    /** Which provider hosts tokens may name (default: public domain names only). */
    hosts?: ProviderHostPolicy;
    /**
     * The server offers local repositories (LOCAL_REPOSITORY_ROOTS): a user without any git provider token is
     * answered `provider_tokens_set` with the local repositories' provider (see settingsView).
     */
    localRepositories?: boolean;
  }) {
    this.#hosts = deps.hosts ?? new ProviderHostPolicy();
    this.#localRepositories = deps.localRepositories ?? false;
    this.#store = deps.store;
    this.#secrets = new SettingsSecrets(deps.box);
    this.#verifier = deps.verifier;
  }

  /**
   * NOT_FOUND "Settings not found" until the caller first stores settings. The answer is a function of the stored
   * document alone, so it is kept per user with the document's version (which every store changes): built once per
   * stored version on every storage, and answered without a read while the store's change token says that nothing
   * changed. Strings stored before they had to be well-formed are shown with U+FFFD.
   */
  getSettings(
    _req: GetSettingsRequest,
    ctx: HandlerContext,
  ): GetSettingsResponse | Promise<GetSettingsResponse> {
    const caller = ctx.values.get(callerKey);
    if (caller === undefined) return Promise.reject(unauthenticated());
    const token = this.#store.changeToken();
    const cached = this.#views.get(caller.userId);
    // A kept answer is returned as it is (every transport takes a plain value as well as a promise): the common
    // read makes no promise and waits no turn.
    if (cached !== undefined && cached.token === token) return cached.response;
    return this.#readSettings(caller.userId, token, cached);
  }

  /** GetSettings from the stored document, kept for the next reads. */
  async #readSettings(
    userId: string,
    token: number,
    cached: KeptView | undefined,
  ): Promise<GetSettingsResponse> {
    const doc = await this.#store.read(userId);
    const stored = doc?.value.settings;
    if (doc === null || stored === null || stored === undefined) {
      if (cached !== undefined) this.#views.delete(userId);
      throw notFound("Settings not found");
    }
    if (cached !== undefined && cached.version === doc.version) {
      cached.token = token;
      return cached.response;
    }
    const response = settingsView(doc.value, stored, this.#localRepositories);
    if (cached !== undefined) this.#views.delete(userId);
    else if (this.#views.size >= CACHED_VIEWS) {
      const oldest = this.#views.keys().next();
      if (oldest.done !== true) this.#views.delete(oldest.value);
    }
    this.#views.set(userId, { version: doc.version, token, response });
    return response;
  }

  /**
   * Merges the request into the stored settings: present fields replace, `reset_fields` reset to defaults,
   * secrets "" clears (search_api_key: keeps) / other strings replace, masked MCP values keep what is stored, provider tokens and custom
   * secrets in `secrets_store` merge. INVALID_ARGUMENT lists every problem.
   */
  async storeSettings(req: StoreSettingsRequest, ctx: HandlerContext): Promise<StoreSettingsResponse> {
    const { userId } = requireCaller(ctx);
    const incoming = req.settings ? settingsJson(req.settings) : {};
    const issues: FieldViolation[] = [];
    for (let i = 0; i < req.resetFields.length; i++) {
      const f = req.resetFields[i] as string;
      if (!RESETTABLE_FIELDS.has(f) && !isSecretField(f) && f !== SECRETS_STORE_FIELD) {
        issues.push({
          loc: ["reset_fields", i],
          msg: `Unknown settings field '${f}'`,
          type: "value_error",
          input: f,
        });
      }
    }
    checkSettingsRules(incoming, issues);
    const mcp =
      incoming.mcp_config === undefined
        ? undefined
        : parseModel(mcpConfigSchema, incoming.mcp_config, ["mcp_config"], issues);
    const tokens = validateProviderKeys(
      (incoming.secrets_store as JsonObject | undefined)?.provider_tokens,
      ["secrets_store", "provider_tokens"],
      issues,
      this.#hosts,
    );
    if (issues.length > 0) throw new ValidationError(issues);

    await this.#store.mutate(userId, (data) => {
      const s = data.settings ?? {};
      for (const f of req.resetFields) if (RESETTABLE_FIELDS.has(f)) delete s[f];
      for (const [field, value] of Object.entries(incoming)) {
        if (isSecretField(field)) {
          if (typeof value !== "string") continue;
          // The UI sends search_api_key "" with every App and LLM save (it reads back the null it is answered):
          // "" keeps the stored search key. The other secrets are cleared by "" (no UI form sends them empty).
          if (value.trim() === "" && field === "search_api_key") continue;
          if (value.trim() === "") delete s[field];
          else s[field] = this.#secrets.sealField(userId, field, value);
        } else if (field === "mcp_config") {
          if (mcp !== undefined)
            s.mcp_config = this.#secrets.mergeMcp(userId, mcp, (s.mcp_config ?? null) as StoredMcp | null);
        } else if (field === "secrets_store") {
          const store = value as JsonObject;
          if (tokens !== undefined) this.#secrets.mergeProviderTokens(userId, data, tokens, false);
          this.#secrets.upsertCustomSecrets(userId, data, store.custom_secrets as JsonObject | undefined);
        } else if (SETTINGS_FIELD_SET.has(field)) {
          s[field] = value;
        }
      }
      data.settings = s;
    });
    return { $typeName: "workspace.v1.StoreSettingsResponse", message: "Settings stored" };
  }

  /**
   * Verifies each non-empty token (and a stored token whose host changes) with the provider, then replaces the
   * stored provider map: an empty token keeps the stored one, the host is always overwritten, providers absent
   * from the request are removed. UNAUTHENTICATED for a rejected token, UNAVAILABLE when a provider can't be
   * reached.
   */
  async addGitProviders(req: AddGitProvidersRequest, ctx: HandlerContext): Promise<AddGitProvidersResponse> {
    const { userId } = requireCaller(ctx);
    const issues: FieldViolation[] = [];
    const tokens = validateProviderKeys(
      Object.fromEntries(
        Object.entries(req.providerTokens).map(([k, v]) => [
          k,
          { token: v.token ?? null, host: v.host ?? null, user_id: v.userId ?? null },
        ]),
      ),
      ["provider_tokens"],
      issues,
      this.#hosts,
    );
    const mcpJson = req.mcpConfig ? mcpConfigJson(req.mcpConfig) : undefined;
    const mcp =
      mcpJson === undefined ? undefined : parseModel(mcpConfigSchema, mcpJson, ["mcp_config"], issues);
    if (issues.length > 0) throw new ValidationError(issues);

    if (this.#verifier !== null && tokens !== undefined) {
      const current = (await this.#store.read(userId))?.value.providerTokens ?? {};
      await verifyProviderTokens(this.#verifier, current, tokens, (stored) =>
        this.#secrets.openProviderToken(userId, stored),
      );
    }
    await this.#store.mutate(userId, (data) => {
      this.#secrets.mergeProviderTokens(userId, data, tokens ?? {}, true);
      const nonEmpty =
        mcp !== undefined &&
        mcp !== null &&
        (mcp.sse_servers.length > 0 || mcp.stdio_servers.length > 0 || mcp.shttp_servers.length > 0);
      if (nonEmpty) {
        const s = data.settings ?? {};
        s.mcp_config = this.#secrets.mergeMcp(userId, mcp, (s.mcp_config ?? null) as StoredMcp | null);
        data.settings = s;
      }
    });
    return { $typeName: "workspace.v1.AddGitProvidersResponse", message: "Git providers stored" };
  }

  /** Removes every provider token; custom secrets stay. */
  async unsetProviderTokens(_req: unknown, ctx: HandlerContext): Promise<UnsetProviderTokensResponse> {
    const { userId } = requireCaller(ctx);
    await this.#store.mutate(userId, (data) => {
      data.providerTokens = {};
    });
    return { $typeName: "workspace.v1.UnsetProviderTokensResponse", message: "Unset Git provider tokens" };
  }

  /**
   * What starting a conversation needs from the user's settings, secrets opened: the LLM (model, base URL, key),
   * confirmation mode, MCP config, git identity and the provider tokens holding a token. Defaults when the user
   * never stored settings.
   */
  async openConversationConfig(userId: string): Promise<ConversationConfig> {
    const data = (await this.#store.read(userId))?.value;
    const s = data?.settings ?? {};
    const text = (v: unknown): string | null => (typeof v === "string" && v !== "" ? v : null);
    const apiKey = text(s.llm_api_key);
    const providerTokens = this.#secrets.openTokens(userId, data);
    return {
      llmModel: text(s.llm_model),
      llmBaseUrl: text(s.llm_base_url),
      llmApiKey: apiKey === null ? null : this.#secrets.openField(userId, "llm_api_key", apiKey),
      confirmationMode: s.confirmation_mode === true,
      securityAnalyzer: text(s.security_analyzer),
      maxIterations: typeof s.max_iterations === "number" ? s.max_iterations : null,
      gitUserName: text(s.git_user_name),
      gitUserEmail: text(s.git_user_email),
      mcpConfig: this.#secrets.openMcp(userId, s.mcp_config),
      providerTokens,
    };
  }

  /** The caller's provider tokens holding a token, in plaintext, keyed by provider (for the git routes). */
  async openProviderTokens(userId: string): Promise<Record<string, { token: string; host: string | null }>> {
    return this.#secrets.openTokens(userId, (await this.#store.read(userId))?.value);
  }

  /** MCP config with secrets opened (for passing to a sandbox's agent). */
  openMcp(userId: string, stored: unknown): StoredMcp | null {
    return this.#secrets.openMcp(userId, stored);
  }
}

/** The user's settings as a new conversation needs them, secrets in plaintext (see openConversationConfig). */
export interface ConversationConfig {
  llmModel: string | null;
  llmBaseUrl: string | null;
  llmApiKey: string | null;
  confirmationMode: boolean;
  securityAnalyzer: string | null;
  maxIterations: number | null;
  gitUserName: string | null;
  gitUserEmail: string | null;
  mcpConfig: StoredMcp | null;
  /** Keyed by lower-case provider name; only providers holding a token. */
  providerTokens: Record<string, { token: string; host: string | null }>;
}
