import type { FastifyInstance, FastifyRequest } from "fastify";
import type { Caller } from "../../core/context.ts";
import { unauthenticated } from "../../core/errors.ts";
import { NO_CACHE, sendRestError } from "./rest-errors.ts";

/** Model names offered by /api/options/models unless configured ("provider/model", as the UI groups them). */
export const DEFAULT_MODELS: readonly string[] = [
  "anthropic/claude-haiku-4-5-20251001",
  "anthropic/claude-opus-4-1-20250805",
  "anthropic/claude-sonnet-4-20250514",
  "anthropic/claude-sonnet-4-5-20250929",
  "deepseek/deepseek-chat",
  "gemini/gemini-2.5-pro",
  "mistral/devstral-medium-2507",
  "mistral/devstral-small-2507",
  "openai/gpt-4o",
  "openai/gpt-5-2025-08-07",
  "openai/gpt-5-mini-2025-08-07",
  "openai/o3",
  "openai/o4-mini",
  "openhands/claude-sonnet-4-20250514",
  "openhands/claude-sonnet-4-5-20250929",
  "openhands/gpt-5-2025-08-07",
];
export const DEFAULT_AGENTS: readonly string[] = ["CodeActAgent"];
export const DEFAULT_SECURITY_ANALYZERS: readonly string[] = ["invariant", "llm"];

export interface OptionsLists {
  models?: readonly string[] | undefined;
  agents?: readonly string[] | undefined;
  securityAnalyzers?: readonly string[] | undefined;
}

export interface OptionsRoutesOptions extends OptionsLists {
  /** The admitted caller of a request (header key, session cookie or single-user mode); null: not signed in. */
  caller: (req: FastifyRequest) => Promise<Caller | null>;
}

/**
 * The reference's GetConfigResponse for an open-source server: what the web UI reads before anything else (the
 * app mode decides that it is signed in, the feature flags which pages it shows). No analytics key and no GitHub
 * OAuth app: the UI then loads no analytics and offers token-based git settings.
 */
export function serverConfig() {
  return {
    APP_MODE: "oss",
    GITHUB_CLIENT_ID: "",
    POSTHOG_CLIENT_KEY: "",
    PROVIDERS_CONFIGURED: [],
    FEATURE_FLAGS: {
      ENABLE_BILLING: false,
      HIDE_LLM_SETTINGS: false,
      ENABLE_JIRA: false,
      ENABLE_JIRA_DC: false,
      ENABLE_LINEAR: false,
    },
  } as const;
}

/**
 * GET /api/options/config, /models, /agents, /security-analyzers, behind the session key as every /api path of
 * the reference (401 JSON without one; a browser signs in first). Lists are sorted.
 */
export function optionsRoutes(options: OptionsRoutesOptions) {
  const sorted = (list: readonly string[] | undefined, fallback: readonly string[]) =>
    [...(list ?? fallback)].sort();
  const models = sorted(options.models, DEFAULT_MODELS);
  const agents = sorted(options.agents, DEFAULT_AGENTS);
  const analyzers = sorted(options.securityAnalyzers, DEFAULT_SECURITY_ANALYZERS);
  const config = serverConfig();
  return async (app: FastifyInstance): Promise<void> => {
    app.addHook("onRequest", async (req, reply) => {
      let caller: Caller | null;
      try {
        caller = await options.caller(req);
      } catch (err) {
        return sendRestError(reply, err);
      }
      if (caller === null) return sendRestError(reply, unauthenticated());
    });
    app.get("/api/options/config", async (_req, reply) => reply.headers(NO_CACHE).send(config));
    app.get("/api/options/models", async (_req, reply) => reply.headers(NO_CACHE).send(models));
    app.get("/api/options/agents", async (_req, reply) => reply.headers(NO_CACHE).send(agents));
    app.get("/api/options/security-analyzers", async (_req, reply) =>
      reply.headers(NO_CACHE).send(analyzers),
    );
  };
}
