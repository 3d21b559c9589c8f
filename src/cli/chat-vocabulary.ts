/**
 * What the agents' events mean to the terminal chat: the tools of both agents (the built-in agent's and the
 * OpenHands agent-server's, also the older names of its terminal and file editor), the kinds that say nothing a
 * person needs, the words of an execution status, and a model failure explained.
 */

import { str } from "./chat-text.ts";

const TERMINAL_TOOLS = new Set(["terminal", "execute_bash", "bash"]);
const TERMINAL_KINDS = new Set(["TerminalAction", "ExecuteBashAction", "CmdRunAction"]);
const TERMINAL_OBSERVATIONS = new Set([
  "TerminalObservation",
  "ExecuteBashObservation",
  "CmdOutputObservation",
]);
const EDITOR_TOOLS = new Set(["file_editor", "str_replace_editor", "planning_file_editor"]);
const EDITOR_KINDS = new Set(["FileEditorAction", "StrReplaceEditorAction", "PlanningFileEditorAction"]);
const EDITOR_OBSERVATIONS = new Set([
  "FileEditorObservation",
  "StrReplaceEditorObservation",
  "PlanningFileEditorObservation",
]);
/** Kinds that say nothing a person needs (the system prompt, tokens, streaming, logs). */
export const QUIET_KINDS = new Set([
  "SystemPromptEvent",
  "TokenEvent",
  "StreamingDeltaEvent",
  "LLMCompletionLogEvent",
  "HookExecutionEvent",
  "CondensationRequest",
  "PauseEvent",
]);

/** What a tool does, as the chat shows it. */
export type ToolKind = "terminal" | "editor" | "tasks" | "think" | "finish" | "other";

/** The kind of a tool, from its name or its action's or observation's kind (both agents, older names too). */
export function toolKind(toolName: unknown, actionKind: unknown): ToolKind {
  const name = str(toolName) ?? "";
  const kind = str(actionKind) ?? "";
  if (TERMINAL_TOOLS.has(name) || TERMINAL_KINDS.has(kind) || TERMINAL_OBSERVATIONS.has(kind))
    return "terminal";
  if (EDITOR_TOOLS.has(name) || EDITOR_KINDS.has(kind) || EDITOR_OBSERVATIONS.has(kind)) return "editor";
  if (name === "task_tracker" || kind.startsWith("TaskTracker")) return "tasks";
  if (name === "think" || kind.startsWith("Think")) return "think";
  if (name === "finish" || kind.startsWith("Finish")) return "finish";
  return "other";
}

/** What an execution status is called in the chat; null for one not worth a line (idle). */
export function statusWords(status: string): string | null {
  switch (status) {
    case "idle":
      return null;
    case "running":
      return "running";
    case "finished":
      return "finished";
    case "paused":
      return "paused (send a message or /resume to go on)";
    case "waiting_for_confirmation":
      return "waiting for your confirmation";
    case "error":
      return "stopped on an error (send a message to try again)";
    case "stuck":
      return "stuck (send a message to steer the agent)";
    default:
      return status.replaceAll("_", " ");
  }
}

/** A model failure told as what it means for the person, with what to check; null for another error. */
export function explainError(code: string, detail: string): { headline: string; hint: string } | null {
  const text = `${code} ${detail}`;
  const settings = "npm run cli -- settings get, then settings set KEY=VALUE";
  if (
    /APIConnectionError|could not be reached|connection error|ECONNREFUSED|ENOTFOUND|EAI_AGAIN|getaddrinfo|ServiceUnavailable/i.test(
      text,
    ) ||
    /APIConnectionTimeoutError|Timeout|timed? ?out/i.test(text)
  )
    return {
      headline: "The model could not be reached.",
      hint: `Check llm_base_url (the model server's address, reachable from the sandbox) and llm_api_key in your settings (${settings}).`,
    };
  if (/AuthenticationError|PermissionDenied|status 40[13]\b|api key|api_key/i.test(text))
    return {
      headline: "The model provider refused the API key.",
      hint: `Check llm_api_key (and llm_base_url) in your settings (${settings}).`,
    };
  if (/LLMConfigurationError|NotFoundError|status 404\b|No LLM model|llm_model|base URL/i.test(text))
    return {
      headline: "The model is not set up right.",
      hint: `Check llm_model, llm_base_url and llm_api_key in your settings (${settings}).`,
    };
  if (/RateLimit|status 429\b|quota/i.test(text))
    return {
      headline: "The model provider is rate-limiting or out of quota.",
      hint: "Wait a moment, then send a message to try again.",
    };
  return null;
}
