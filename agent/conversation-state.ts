/**
 * What a conversation is made of: its settings and record, read once from its start request, and what its event
 * log says of where it stands (an answer given, input waiting for the model, actions without a result).
 */
import { statSync } from "node:fs";
import { resolve } from "node:path";
import type { Json } from "./json.ts";
import type { LlmSettings } from "./model-client.ts";
import { redact } from "./redact.ts";
import { TOOL_SPECS } from "./tools/toolbox.ts";
import { inWorkspace } from "./workspace-paths.ts";

export type ExecutionStatus =
  | "idle"
  | "running"
  | "paused"
  | "waiting_for_confirmation"
  | "finished"
  | "error"
  | "stuck";

const MAX_ITERATIONS_DEFAULT = 500;

/** A conversation's settings, from its start request. */
export interface ConversationStart {
  llm: LlmSettings;
  /** The request's secrets by variable name (the terminal's environment holds them). */
  secrets: Map<string, string>;
  /** Confirmation mode: actions wait for the user's accept (`confirmation_policy` AlwaysConfirm). */
  confirm: boolean;
  maxIterations: number;
  /** The tool specs offered to the model: the request's `agent.tools` this agent has, plus think and finish. */
  toolSpecs: Json[];
  /** Where the tools start: the request's `workspace.working_dir` when it is an existing folder in the workspace. */
  workingDir: string;
  /** `agent.agent_context.system_message_suffix`. */
  systemSuffix: string | null;
  /** The conversation's record as the API answers it: the request, secrets left out and redacted, and its state. */
  record: Json;
}

/** Reads a start request (already checked by the route) into a conversation's settings and first record. */
export function readStart(id: string, body: Json, workspaceDir: string): ConversationStart {
  const agent = (body.agent ?? {}) as Json;
  const llmRequest = (agent.llm ?? {}) as Json;
  const num = (v: unknown): number | null => (typeof v === "number" && Number.isFinite(v) ? v : null);
  const llm: LlmSettings = {
    model: typeof llmRequest.model === "string" && llmRequest.model !== "" ? llmRequest.model : null,
    baseUrl:
      typeof llmRequest.base_url === "string" && llmRequest.base_url !== "" ? llmRequest.base_url : null,
    apiKey: typeof llmRequest.api_key === "string" && llmRequest.api_key !== "" ? llmRequest.api_key : null,
    timeoutSeconds: Math.max(1, num(llmRequest.timeout) ?? 300),
    retries: Math.max(0, Math.min(10, num(llmRequest.num_retries) ?? 4)),
    temperature: num(llmRequest.temperature),
    maxOutputTokens: num(llmRequest.max_output_tokens),
  };
  const secrets = new Map<string, string>();
  const requested = body.secrets;
  if (requested && typeof requested === "object" && !Array.isArray(requested)) {
    for (const [name, value] of Object.entries(requested as Json)) {
      const v = typeof value === "string" ? value : (value as Json | null)?.value;
      if (typeof v === "string" && /^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) secrets.set(name, v);
    }
  }
  const policy = (body.confirmation_policy ?? {}) as Json;
  const confirm = policy.kind === "AlwaysConfirm";
  const maxIterations = num(body.max_iterations) ?? MAX_ITERATIONS_DEFAULT;
  // The SDK's agent has only the tools the request names (plus think and finish); without a list, all of ours.
  const named = Array.isArray(agent.tools)
    ? new Set(agent.tools.map((t: unknown) => (t as Json | null)?.name).filter((n) => typeof n === "string"))
    : null;
  const toolSpecs = TOOL_SPECS.filter((spec) => {
    const name = (spec.function as Json).name as string;
    return named === null || name === "think" || name === "finish" || named.has(name);
  });
  const requestedDir = ((body.workspace ?? {}) as Json).working_dir;
  let workingDir = workspaceDir;
  if (typeof requestedDir === "string" && requestedDir !== "") {
    const mapped = inWorkspace(resolve(workspaceDir, requestedDir), workspaceDir);
    if (mapped !== null && isDirectory(mapped)) workingDir = mapped;
  }
  const context = (agent.agent_context ?? {}) as Json;
  const systemSuffix =
    typeof context.system_message_suffix === "string" ? context.system_message_suffix : null;

  const record: Json = {};
  for (const [key, value] of Object.entries(body)) {
    if (key === "conversation_id" || key === "initial_message") continue;
    // Secrets stay out of the record: only their names are kept.
    if (key === "secrets") record.secret_names = [...secrets.keys()];
    else record[key] = redact(value);
  }
  if (body.initial_message !== undefined) record.initial_message = body.initial_message;
  const now = new Date().toISOString();
  Object.assign(record, {
    id,
    title: null,
    execution_status: "idle",
    max_iterations: maxIterations,
    workspace: { kind: "LocalWorkspace", working_dir: workingDir },
    metrics: null,
    created_at: now,
    updated_at: now,
  });
  return { llm, secrets, confirm, maxIterations, toolSpecs, workingDir, systemSuffix, record };
}

/**
 * Whether the events after the model's last answer hold something for it: a user message, or a tool's result,
 * error or rejection (the model goes on from those). False when its last answer (a message, or the finish tool)
 * is the latest of them, or when there is nothing at all.
 */
export function hasNewInput(events: readonly Json[]): boolean {
  for (let i = events.length - 1; i >= 0; i--) {
    const e = events[i] as Json;
    switch (e.kind) {
      case "MessageEvent":
        return e.source === "user";
      case "ObservationEvent":
        return e.tool_name !== "finish";
      case "AgentErrorEvent":
      case "UserRejectObservation":
        return true;
    }
  }
  return false;
}

/** Whether the model's last step was an answer (a message, or the finish tool), not an action under way. */
export function hasAnswered(events: readonly Json[]): boolean {
  const last = events.findLast(
    (e) => e.kind === "MessageEvent" || e.kind === "ObservationEvent" || e.kind === "ActionEvent",
  );
  return (
    last !== undefined &&
    ((last.kind === "MessageEvent" && last.source === "agent") ||
      (last.kind === "ObservationEvent" && last.tool_name === "finish"))
  );
}

/** The actions the model asked for that have no result (observation, error or rejection) among the events. */
export function openActions(events: readonly Json[]): Json[] {
  const answered = new Set<unknown>();
  for (const e of events)
    if (e.kind === "ObservationEvent" || e.kind === "AgentErrorEvent" || e.kind === "UserRejectObservation")
      answered.add(e.tool_call_id);
  return events.filter((e) => e.kind === "ActionEvent" && e.action !== null && !answered.has(e.tool_call_id));
}

/** The text of the first user message among the events (the SDK's title source), whitespace collapsed. */
export function firstUserText(list: Json[]): string | null {
  for (const e of list) {
    if (e.kind !== "MessageEvent" || e.source !== "user") continue;
    const content = (e.llm_message as { content?: Json[] } | undefined)?.content ?? [];
    const text = content
      .filter((c) => c.type === "text" && typeof c.text === "string")
      .map((c) => c.text as string)
      .join(" ")
      .replace(/\s+/g, " ")
      .trim();
    if (text !== "") return text;
  }
  return null;
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}
