/**
 * The OpenHands SDK's events as the built-in agent makes them: the one place that knows each event's shape (its
 * `kind`, its fields and their defaults). Every event the agent emits is made here; readers of the event log test
 * `kind` against the names below.
 */
import { randomUUID } from "node:crypto";
import type { Json } from "./json.ts";

let lastTimestampUs = 0;
/**
 * The SDK's event timestamp: ISO-8601 with microseconds and no offset (here UTC). Strictly increasing, so that
 * events made in the same millisecond keep their order.
 */
export function sdkTimestamp(): string {
  lastTimestampUs = Math.max(Date.now() * 1000, lastTimestampUs + 1);
  const ms = Math.floor(lastTimestampUs / 1000);
  const micros = String(lastTimestampUs % 1_000_000).padStart(6, "0");
  return `${new Date(ms).toISOString().slice(0, 19)}.${micros}`;
}

/** The fields every event starts with: its kind, a new id, the timestamp and who it is from. */
function base(kind: string, source: "user" | "agent" | "environment"): Json {
  return { kind, id: randomUUID(), timestamp: sdkTimestamp(), source };
}

/** A MessageEvent as the SDK writes it. */
export function messageEvent(role: string, content: Json[]): Json {
  return {
    kind: "MessageEvent",
    id: randomUUID(),
    timestamp: sdkTimestamp(),
    source: role === "user" ? "user" : "agent",
    llm_message: { role, content },
    llm_response_id: null,
    activated_skills: [],
    extended_content: [],
    sender: null,
  };
}

/** A tool call of the model's answer (`action` null when the call cannot run: an AgentErrorEvent answers it). */
export function actionEvent(o: {
  thought: Json[];
  action: Json | null;
  toolName: string;
  toolCallId: string;
  /** The call's arguments as the model wrote them (JSON text). */
  arguments: string;
  responseId: string;
}): Json {
  return {
    ...base("ActionEvent", "agent"),
    thought: o.thought,
    reasoning_content: null,
    thinking_blocks: [],
    responses_reasoning_item: null,
    action: o.action,
    tool_name: o.toolName,
    tool_call_id: o.toolCallId,
    tool_call: {
      id: o.toolCallId,
      name: o.toolName,
      arguments: o.arguments,
      origin: "completion",
    },
    llm_response_id: o.responseId,
    security_risk: "UNKNOWN",
  };
}

/** A tool's result for an action (an ActionEvent). */
export function observationEvent(action: Json, observation: Json): Json {
  return {
    ...base("ObservationEvent", "environment"),
    tool_name: action.tool_name,
    tool_call_id: action.tool_call_id,
    observation,
    action_id: action.id,
  };
}

/** The user's rejection of an action waiting for confirmation. */
export function userRejectObservation(action: Json, reason: string): Json {
  return {
    ...base("UserRejectObservation", "environment"),
    tool_name: action.tool_name,
    tool_call_id: action.tool_call_id,
    rejection_reason: reason,
    action_id: action.id,
  };
}

/** An action that could not run (bad call, tool failure, restart): the model sees `error` as its result. */
export function agentErrorEvent(action: Json, error: string): Json {
  return {
    ...base("AgentErrorEvent", "agent"),
    tool_name: action.tool_name,
    tool_call_id: action.tool_call_id,
    error,
  };
}

/** A failure of the conversation itself (the model, its settings, the iteration limit, a restart). */
export function conversationErrorEvent(code: string, detail: string): Json {
  return { ...base("ConversationErrorEvent", "environment"), code, detail };
}

/** The user paused the conversation. */
export function pauseEvent(): Json {
  return base("PauseEvent", "user");
}

/** A change of the conversation's state: `execution_status`, or `full_state` (the snapshot a websocket gets first). */
export function stateUpdateEvent(key: "execution_status" | "full_state", value: unknown): Json {
  return { ...base("ConversationStateUpdateEvent", "environment"), key, value };
}
