/**
 * The request shapes of the conversation routes shared by the REST routes and the events websocket: a conversation
 * id in either of its spellings, a SendMessageRequest.
 */
import type { Json } from "./json.ts";
import { type AgentViolation, unprocessable } from "./replies.ts";

const UUID = /^[0-9a-f]{32}$|^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** A conversation id as the agent keys it (32 hex digits, lower case), from either UUID spelling; null otherwise. */
export function normaliseId(raw: string): string | null {
  const s = raw.trim().toLowerCase();
  return UUID.test(s) ? s.replaceAll("-", "") : null;
}

/** A SendMessageRequest (`{role?, content?}`), checked. */
export function parseMessage(value: unknown, loc: (string | number)[]): { role: string; content: Json[] } {
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw unprocessable([
      { type: "model_attributes_type", loc, msg: "Input should be a valid dictionary", input: value },
    ]);
  const v = value as Json;
  const role = v.role ?? "user";
  const content = v.content ?? [];
  const problems: AgentViolation[] = [];
  if (typeof role !== "string" || !["user", "system", "assistant", "tool"].includes(role))
    problems.push({
      type: "literal_error",
      loc: [...loc, "role"],
      msg: "Input should be 'user', 'system', 'assistant' or 'tool'",
      input: role,
    });
  if (!Array.isArray(content) || content.some((c) => typeof c !== "object" || c === null))
    problems.push({
      type: "list_type",
      loc: [...loc, "content"],
      msg: "Input should be a valid list of content",
      input: content,
    });
  if (problems.length > 0) throw unprocessable(problems);
  return { role: role as string, content: content as Json[] };
}
