import { create, fromJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { callerKey, requireCaller } from "../../core/context.ts";
import { type FieldViolation, notFound, unauthenticated, ValidationError } from "../../core/errors.ts";
import { setOwn } from "../../core/model/schema.ts";
import { parseModel } from "../../core/model/validate.ts";
import { toWellFormedJson } from "../../core/model/well-formed.ts";
import { ProviderHostPolicy } from "../../core/provider-host.ts";
import { LOCAL_REPOSITORY_PROVIDER } from "../../core/repository-names.ts";
import type { SecretBox } from "../../core/secret-box.ts";
import type { McpConfig } from "../../gen/workspace/v1/mcp_pb.js";
import {
  type AddGitProvidersRequest,
  type AddGitProvidersResponse,
  type GetSettingsRequest,
  type GetSettingsResponse,
  GetSettingsResponseSchema,
  type Settings,
  SettingsSchema,
  type SettingsService as SettingsServiceDesc,
  type StoreSettingsRequest,
  type StoreSettingsResponse,
  type UnsetProviderTokensResponse,
} from "../../gen/workspace/v1/settings_pb.js";
import type { GitProviderVerifier } from "../../ports/git-provider-verifier.ts";
import type { StoredProviderToken, UserData } from "../../ports/user-data-repository.ts";
import type { UserDataStore } from "../user-data-store.ts";
import { type McpConfigInput, mcpConfigSchema } from "./mcp-model.ts";
import {
  BOOLEAN_DEFAULTS,
  isProvider,
  MASK,
  PROVIDERS,
  RESETTABLE_FIELDS,
  SECRET_FIELDS,
  SECRETS_STORE_FIELD,
  SETTINGS_FIELDS,
} from "./settings-fields.ts";
import { checkSettingsRules } from "./settings-rules.ts";

type StoredMcp = {
  sse_servers: { url: string; api_key: string | null }[];
  stdio_servers: { name: string; command: string; args: string[]; env: Record<string, string> }[];
  shttp_servers: { url: string; api_key: string | null; timeout: number | null }[];
};

const SECRET_FIELD_SET: ReadonlySet<string> = new Set(SECRET_FIELDS);
const SETTINGS_FIELD_SET: ReadonlySet<string> = new Set(SETTINGS_FIELDS);
const isSecretField = (f: string): boolean => SECRET_FIELD_SET.has(f);

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
  readonly #box: SecretBox;
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
    this.#box = deps.box;
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
          else s[field] = this.#box.seal(value, `${userId}:${field}`);
        } else if (field === "mcp_config") {
          if (mcp !== undefined)
            s.mcp_config = this.#mergeMcp(userId, mcp, (s.mcp_config ?? null) as StoredMcp | null);
        } else if (field === "secrets_store") {
          const store = value as JsonObject;
          if (tokens !== undefined) this.#mergeProviderTokens(userId, data, tokens, false);
          this.#upsertCustomSecrets(userId, data, store.custom_secrets as JsonObject | undefined);
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

    if (this.#verifier !== null && tokens !== undefined) await this.#verifyAll(userId, tokens);
    await this.#store.mutate(userId, (data) => {
      this.#mergeProviderTokens(userId, data, tokens ?? {}, true);
      const nonEmpty =
        mcp !== undefined &&
        mcp !== null &&
        (mcp.sse_servers.length > 0 || mcp.stdio_servers.length > 0 || mcp.shttp_servers.length > 0);
      if (nonEmpty) {
        const s = data.settings ?? {};
        s.mcp_config = this.#mergeMcp(userId, mcp, (s.mcp_config ?? null) as StoredMcp | null);
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
    const providerTokens = this.#openTokens(userId, data);
    return {
      llmModel: text(s.llm_model),
      llmBaseUrl: text(s.llm_base_url),
      llmApiKey: apiKey === null ? null : this.#box.open(apiKey, `${userId}:llm_api_key`),
      confirmationMode: s.confirmation_mode === true,
      securityAnalyzer: text(s.security_analyzer),
      maxIterations: typeof s.max_iterations === "number" ? s.max_iterations : null,
      gitUserName: text(s.git_user_name),
      gitUserEmail: text(s.git_user_email),
      mcpConfig: this.openMcp(userId, s.mcp_config),
      providerTokens,
    };
  }

  /** The caller's provider tokens holding a token, in plaintext, keyed by provider (for the git routes). */
  async openProviderTokens(userId: string): Promise<Record<string, { token: string; host: string | null }>> {
    return this.#openTokens(userId, (await this.#store.read(userId))?.value);
  }

  #openTokens(
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

  /** The plaintext of a stored provider token (for starting conversations). */
  openProviderToken(userId: string, token: StoredProviderToken): string | null {
    return token.token === null ? null : this.#box.open(token.token, `${userId}:provider_token`);
  }

  async #verifyAll(userId: string, tokens: Record<string, IncomingToken>): Promise<void> {
    const current = (await this.#store.read(userId))?.value.providerTokens ?? {};
    const checks = Object.entries(tokens).map(async ([provider, t]): Promise<[string, string] | null> => {
      const verifier = this.#verifier as GitProviderVerifier;
      const host = t.host === null || t.host.trim() === "" ? null : t.host.trim();
      let token = t.token?.trim() ?? "";
      if (token === "") {
        const stored = current[provider];
        if (stored === undefined || stored.token === null || (stored.host ?? null) === (t.host ?? null))
          return null;
        token = this.openProviderToken(userId, stored) ?? "";
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

  #mergeProviderTokens(
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

  #upsertCustomSecrets(userId: string, data: UserData, secrets: JsonObject | undefined): void {
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

  #mergeMcp(userId: string, next: McpConfigInput | null, stored: StoredMcp | null): StoredMcp | null {
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

interface IncomingToken {
  token: string | null;
  host: string | null;
  user_id: string | null;
}

/**
 * Checks provider names and hosts (a host name with an optional port, see ProviderHostPolicy); returns the
 * entries keyed by provider, or undefined when absent.
 */
function validateProviderKeys(
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

/** Settings fields holding one string, number or boolean: proto (= REST) name and message property. */
const SCALAR_FIELDS = SettingsSchema.fields
  .filter((f) => f.fieldKind === "scalar")
  .map((f) => [f.name, f.localName as keyof Settings] as const);

/**
 * The set fields of a Settings message as JSON with the REST (proto) field names, as protobuf-es toJson with
 * `useProtoFieldName` writes them (which cost more than the rest of a store): unset fields and empty maps absent,
 * non-finite numbers as their JSON strings.
 */
function settingsJson(s: Settings): JsonObject {
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
function mcpConfigJson(m: McpConfig): JsonObject {
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
function settingsView(
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
