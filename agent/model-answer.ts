/**
 * A model's answer as the events that record it: a MessageEvent when it calls no tool, else an ActionEvent per tool
 * call, each followed by an AgentErrorEvent when the call cannot run (a tool not offered, arguments that are not a
 * JSON object). Events are made in the order they are emitted, so their timestamps follow that order.
 */
import { randomUUID } from "node:crypto";
import { actionEvent, agentErrorEvent, messageEvent } from "./events.ts";
import type { Json } from "./json.ts";
import type { ModelAnswer } from "./model-client.ts";
import { toAction } from "./tools/toolbox.ts";

/** What a model answer gave: its message, or its actions and every event to emit for them, in order. */
export interface AnswerEvents {
  /** The assistant's message, when the model called no tool. */
  message: Json | null;
  /** The ActionEvents (an action that cannot run has `action` null). */
  actions: Json[];
  /** The ActionEvents with the AgentErrorEvent answering each one that cannot run, in emission order. */
  events: Json[];
}

/** The events of `answer`; `mask` hides the conversation's secrets in an error text. */
export function answerEvents(
  answer: ModelAnswer,
  toolSpecs: readonly Json[],
  mask: (s: string) => string,
): AnswerEvents {
  const { responseId, text: textContent, calls } = answer;
  if (calls.length === 0) {
    const message = messageEvent("assistant", textContent ? [{ type: "text", text: textContent }] : []);
    message.llm_response_id = responseId;
    return { message, actions: [], events: [] };
  }
  const actions: Json[] = [];
  const events: Json[] = [];
  calls.forEach((call, i) => {
    const name = call.name;
    const rawArgs = call.arguments;
    let args: unknown;
    let action: Json | string;
    try {
      args = rawArgs.trim() === "" ? {} : JSON.parse(rawArgs);
      const offered = toolSpecs.some((spec) => (spec.function as Json).name === name);
      action = !offered
        ? `Tool '${name}' not found. Available: ${toolSpecs.map((spec) => (spec.function as Json).name).join(", ")}.`
        : typeof args === "object" && args !== null && !Array.isArray(args)
          ? toAction(name, args as Json)
          : "Tool arguments must be a JSON object.";
    } catch {
      action = `Error parsing the arguments of tool '${name}' as JSON: ${rawArgs.slice(0, 200)}`;
    }
    const event = actionEvent({
      thought: i === 0 && textContent ? [{ type: "text", text: textContent }] : [],
      action: typeof action === "string" ? null : action,
      toolName: name,
      toolCallId: call.id || `call_${randomUUID().replaceAll("-", "")}`,
      arguments: rawArgs,
      responseId,
    });
    events.push(event);
    if (typeof action === "string") events.push(agentErrorEvent(event, mask(action)));
    actions.push(event);
  });
  return { message: null, actions, events };
}
