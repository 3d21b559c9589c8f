/**
 * The conversation's model: an OpenAI-compatible chat-completions API reached with the `openai` package (loaded on
 * the first model call), the endpoint found from a LiteLLM-style model name, and a failed call described so that
 * the user can act on it.
 */
import { randomUUID } from "node:crypto";
import type { Json } from "./json.ts";

/** The LLM of a start request (`agent.llm`), with LiteLLM's model names. */
export interface LlmSettings {
  model: string | null;
  baseUrl: string | null;
  apiKey: string | null;
  /** Seconds per model call (LLM.timeout; default 300). */
  timeoutSeconds: number;
  /** Retries of a failed call (429, 5xx, connection) with back-off (LLM.num_retries; default 4). */
  retries: number;
  temperature: number | null;
  maxOutputTokens: number | null;
}

/** Known LiteLLM provider prefixes and their OpenAI-compatible endpoints. */
const PROVIDER_URLS: Record<string, string> = {
  openai: "https://api.openai.com/v1",
  anthropic: "https://api.anthropic.com/v1/",
  gemini: "https://generativelanguage.googleapis.com/v1beta/openai/",
  openrouter: "https://openrouter.ai/api/v1",
  deepseek: "https://api.deepseek.com/v1",
  mistral: "https://api.mistral.ai/v1",
  groq: "https://api.groq.com/openai/v1",
  xai: "https://api.x.ai/v1",
  together_ai: "https://api.together.xyz/v1",
  fireworks_ai: "https://api.fireworks.ai/inference/v1",
  ollama: "http://localhost:11434/v1",
  lm_studio: "http://localhost:1234/v1",
};
/** Prefixes that only say "an OpenAI-compatible server at base_url". */
const GENERIC_PREFIXES = new Set([
  "litellm_proxy",
  "hosted_vllm",
  "openai_compatible",
  "custom_openai",
  "vllm",
]);

/**
 * The endpoint and model id for a LiteLLM-style model name: `openai/gpt-4o` → OpenAI's API with `gpt-4o`;
 * `anthropic/…`, `gemini/…`, … → that provider's OpenAI-compatible endpoint; with a base URL, any name (its
 * provider prefix dropped) goes to that server. Throws a readable error for a provider it cannot reach.
 */
export function resolveModel(
  model: string,
  baseUrl: string | null,
  gateway: string | null = process.env.SANDBOX_HOST_GATEWAY || null,
): { baseURL: string; model: string } {
  const target = resolveEndpoint(model, baseUrl);
  // In a network of its own (SANDBOX_HOST_GATEWAY, set by the runtimes) the host's loopback model is at the gateway.
  return gateway === null ? target : { ...target, baseURL: viaGateway(target.baseURL, gateway) };
}

/**
 * `url` with a loopback host replaced by `gateway`. The service's src/core/loopback-url.ts does the same; the agent
 * keeps its own copy because a sandbox sees only the agent's folder.
 */
function viaGateway(url: string, gateway: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return url;
  }
  const h = parsed.hostname.toLowerCase();
  if (!(h === "localhost" || h.endsWith(".localhost") || /^127\./.test(h) || h === "[::1]")) return url;
  parsed.hostname = gateway;
  const out = parsed.toString();
  return !url.endsWith("/") && out.endsWith("/") && parsed.pathname === "/" ? out.slice(0, -1) : out;
}

function resolveEndpoint(model: string, baseUrl: string | null): { baseURL: string; model: string } {
  const slash = model.indexOf("/");
  const prefix = slash > 0 ? model.slice(0, slash) : null;
  const known = prefix !== null && (prefix in PROVIDER_URLS || GENERIC_PREFIXES.has(prefix));
  const id = known ? model.slice(slash + 1) : model;
  if (baseUrl) {
    let url = baseUrl.replace(/\/+$/, "");
    // LiteLLM takes an Ollama base URL without /v1; its OpenAI-compatible API is under /v1.
    if (prefix === "ollama" && !url.endsWith("/v1")) url += "/v1";
    return { baseURL: url, model: id };
  }
  if (prefix === null) return { baseURL: PROVIDER_URLS.openai as string, model };
  const url = PROVIDER_URLS[prefix];
  if (url === undefined)
    throw new Error(
      `The built-in agent cannot reach model provider '${prefix}' of '${model}' on its own; set a base URL of an OpenAI-compatible server for it (for example a LiteLLM proxy) in the LLM settings.`,
    );
  return { baseURL: url, model: id };
}

/** A tool call of the model's answer, as the model wrote it. */
export interface ModelCall {
  /** The call's id ("" when the model gave none). */
  id: string;
  name: string;
  /** The arguments as JSON text ("" when none were given). */
  arguments: string;
}

/** What one model call answered: its text and its function calls. */
export interface ModelAnswer {
  /** The completion's id (a new UUID when it has none): every event of the answer carries it. */
  responseId: string;
  text: string;
  calls: ModelCall[];
}

/** One chat-completions call: the messages (model-view.ts) and the tool specs offered; aborted by `signal`. */
export type CompleteChat = (
  messages: Json[],
  tools: Json[],
  signal: AbortSignal,
) => Promise<import("openai").OpenAI.Chat.Completions.ChatCompletion>;

/** The text, the function calls and the id of a completion. */
export function readAnswer(completion: import("openai").OpenAI.Chat.Completions.ChatCompletion): ModelAnswer {
  const msg = completion.choices?.[0]?.message;
  return {
    responseId: typeof completion.id === "string" && completion.id !== "" ? completion.id : randomUUID(),
    text: typeof msg?.content === "string" ? msg.content : "",
    calls: (msg?.tool_calls ?? [])
      .filter((c) => c.type === "function")
      .map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments ?? "" })),
  };
}

/** The model of one conversation: its client made on the first call, kept for the next ones. */
export class ModelClient {
  readonly #llm: LlmSettings;
  #client: Promise<import("openai").OpenAI> | undefined;

  constructor(llm: LlmSettings) {
    this.#llm = llm;
  }

  /**
   * The call function for the conversation's model; rejects with a readable error when it cannot be made (no model
   * set, a provider it cannot reach, the openai package missing), and is tried again on the next call.
   */
  async connect(): Promise<CompleteChat> {
    const client = await this.#openai();
    const model = resolveModel(this.#llm.model as string, this.#llm.baseUrl).model;
    return (messages, tools, signal) =>
      client.chat.completions.create(
        {
          model,
          messages: messages as never,
          tools: tools as never,
          tool_choice: "auto",
          ...(this.#llm.temperature !== null ? { temperature: this.#llm.temperature } : {}),
          ...(this.#llm.maxOutputTokens !== null ? { max_tokens: this.#llm.maxOutputTokens } : {}),
        },
        { signal },
      );
  }

  async #openai(): Promise<import("openai").OpenAI> {
    this.#client ??= (async () => {
      if (this.#llm.model === null)
        throw new Error("No LLM model is set for this conversation; choose one in the LLM settings.");
      const target = resolveModel(this.#llm.model, this.#llm.baseUrl);
      let OpenAI: typeof import("openai").OpenAI;
      try {
        ({ default: OpenAI } = await import("openai"));
      } catch (e: unknown) {
        throw new Error(
          `The built-in agent cannot load its model client (the openai package): ${errorText(e)}`,
        );
      }
      return new OpenAI({
        apiKey: this.#llm.apiKey ?? "not-needed",
        baseURL: target.baseURL,
        timeout: this.#llm.timeoutSeconds * 1000,
        maxRetries: this.#llm.retries,
      });
    })();
    this.#client.catch(() => {
      this.#client = undefined;
    });
    return this.#client;
  }
}

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** A model failure as an error event's code and detail the user can act on. */
export function describeLlmError(e: unknown): { code: string; detail: string } {
  const err = e as { status?: unknown; name?: unknown; message?: unknown; constructor?: { name?: string } };
  const code = (
    typeof err?.constructor?.name === "string" && err.constructor.name !== "Object"
      ? err.constructor.name
      : "LLMError"
  ) as string;
  const message = typeof err?.message === "string" ? err.message : String(e);
  const status = typeof err?.status === "number" ? err.status : null;
  let hint = "";
  if (status === 401 || status === 403)
    hint = "The model provider refused the API key; check it in the LLM settings.";
  else if (status === 404) hint = "The model or endpoint was not found; check the model name and base URL.";
  else if (status === 429)
    hint = "The model provider is rate-limiting or out of quota; wait and send a message to retry.";
  else if (status !== null && status >= 500) hint = "The model provider failed; send a message to retry.";
  else if (/timed? ?out/i.test(message) || code === "APIConnectionTimeoutError")
    hint = "The model did not answer in time; send a message to retry.";
  else if (code === "APIConnectionError")
    hint = "The model endpoint could not be reached; check the base URL.";
  const head = status !== null ? `LLM request failed with status ${status}` : "LLM request failed";
  return { code, detail: `${head}: ${message}${hint ? `. ${hint}` : ""}` };
}
