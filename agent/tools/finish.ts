/** The SDK's built-in `finish` tool: the model says the task is done, with a final message; the turn ends. */
import type { Json } from "../json.ts";
import { stringArg, text } from "./tool.ts";

/** The tool spec sent to the model (OpenAI function-calling format), with the SDK's name and parameters. */
export const FINISH_SPEC: Json = {
  type: "function",
  function: {
    name: "finish",
    description: "Signal that the task is done, with a final message to the user.",
    parameters: {
      type: "object",
      properties: { message: { type: "string" } },
      required: ["message"],
    },
  },
};

/** The FinishAction of a tool call. */
export function finishAction(args: Json): Json {
  return { kind: "FinishAction", message: stringArg(args, "message") ?? "" };
}

/** The FinishObservation that answers it. */
export function finishObservation(action: Json): Json {
  return {
    kind: "FinishObservation",
    content: text(String(action.message ?? "")),
    is_error: false,
  };
}
