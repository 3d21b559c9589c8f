/** What every tool module shares: the result of running an action, and the pieces of the SDK's shapes. */
import type { Json } from "../json.ts";

/** What a tool call produced: the observation (SDK shape, with `kind`) and whether the conversation ends. */
export interface ToolResult {
  observation: Json;
  finished?: boolean;
}

/** An observation's `content`: one text part. */
export const text = (t: string): Json[] => [{ type: "text", text: t }];

/** A tool call's string argument, or null when it is absent or not a string. */
export const stringArg = (args: Json, k: string): string | null =>
  typeof args[k] === "string" ? (args[k] as string) : null;
