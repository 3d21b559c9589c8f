/** The SDK's built-in `think` tool: the model writes down a thought, with no effect on the workspace. */
import type { Json } from "../json.ts";
import { stringArg, text } from "./tool.ts";

/** The tool spec sent to the model (OpenAI function-calling format), with the SDK's name and parameters. */
export const THINK_SPEC: Json = {
  type: "function",
  function: {
    name: "think",
    description: "Write down a thought (no effect on the workspace).",
    parameters: {
      type: "object",
      properties: { thought: { type: "string" } },
      required: ["thought"],
    },
  },
};

/** The ThinkAction of a tool call. */
export function thinkAction(args: Json): Json {
  return { kind: "ThinkAction", thought: stringArg(args, "thought") ?? "" };
}

/** The ThinkObservation that answers it. */
export function thinkObservation(): Json {
  return {
    kind: "ThinkObservation",
    content: text("Your thought has been logged."),
    is_error: false,
  };
}
