/**
 * The model's view of a conversation: the system prompt, and the chat history rebuilt from the conversation's
 * events, bounded to its last turns.
 */
import type { Json } from "./json.ts";

/**
 * The model's view of a long conversation is bounded (the built-in agent has no condenser): each step sends the
 * events of the last MODEL_VIEW_TURNS user messages, at most MODEL_VIEW_EVENTS of them, after a note holding the
 * conversation's first user message and how many events are left out. Finding and building that tail looks only at
 * the tail, so a step's work and garbage are the same in turn 500 as in turn 5 (docs/builtin-agent.md).
 */
export const MODEL_VIEW_TURNS = 20;
export const MODEL_VIEW_EVENTS = 400;

/** What the system prompt says of the conversation. */
export interface PromptContext {
  /** Where the tools start. */
  workingDir: string;
  /** The agent's workspace folder (the UI names files in the reference image's /workspace layout). */
  workspaceDir: string;
  /** The names of the terminal's environment variables holding the user's secrets. */
  secretNames: string[];
  /** The request's `agent.agent_context.system_message_suffix`. */
  suffix: string | null;
}

/** The system prompt of a conversation. */
export function systemPrompt(p: PromptContext): string {
  const { secretNames } = p;
  const lines = [
    "You are an autonomous software engineering agent working in a sandbox for the user.",
    `The working directory is ${p.workingDir}; run commands and edit files there unless told otherwise.`,
    "Use the `terminal` tool to run bash commands and the `file_editor` tool to view, create and edit files " +
      "(absolute paths). Work in small verified steps: look before you change, and check your changes (run the " +
      "code or tests). When the task is done, call `finish` with a short summary, or answer without a tool call.",
    "If the user only asks a question, answer it directly.",
  ];
  const workspace = p.workspaceDir;
  if (workspace !== "/workspace" && !workspace.startsWith("/workspace/"))
    // The UI names files in the reference image's layout (uploads go to /workspace/<name>).
    lines.push(
      `Paths under /workspace/project or /workspace that the user mentions (uploaded files, for example) are in ` +
        `${workspace} here: /workspace/project/a and /workspace/a both mean ${workspace}/a. The file editor ` +
        `takes either; in the terminal use ${workspace}.`,
    );
  if (secretNames.length > 0)
    lines.push(
      `These environment variables of the terminal hold the user's secrets: ${secretNames.join(", ")}. Use them ` +
        "by name (e.g. $NAME); never print their values.",
    );
  if (p.suffix) lines.push(p.suffix);
  return lines.join("\n");
}

/**
 * Where the model's view starts among the events: the last MODEL_VIEW_TURNS user messages' events, at most
 * MODEL_VIEW_EVENTS; 0 when the whole conversation fits. Scans only the tail.
 */
export function viewStart(events: readonly Json[]): number {
  const floor = Math.max(0, events.length - MODEL_VIEW_EVENTS);
  let turns = 0;
  for (let i = events.length - 1; i >= floor; i--) {
    const e = events[i] as Json;
    if (e.kind === "MessageEvent" && e.source === "user" && ++turns >= MODEL_VIEW_TURNS) return i;
  }
  return floor;
}

/**
 * The chat history for the model, rebuilt from the events of its bounded view ({@link viewStart}). When the
 * start of the conversation is left out, a first user message says so and repeats the user's first message (the
 * task), and a tool result whose call was left out is dropped, so that every tool message answers a call the
 * model sees (as the chat-completions API requires).
 */
export function modelMessages(events: readonly Json[], system: string): Json[] {
  const out: Json[] = [{ role: "system", content: system }];
  let assistant: Json | null = null;
  let assistantResponse: unknown = null;
  const textOf = (content: unknown): string =>
    Array.isArray(content)
      ? content
          .filter((c: Json) => c?.type === "text" && typeof c.text === "string")
          .map((c: Json) => c.text as string)
          .join("\n")
      : "";
  const start = viewStart(events);
  const calls = start > 0 ? new Set<unknown>() : null;
  if (start > 0) {
    const index = events.findIndex((e) => e.kind === "MessageEvent" && e.source === "user");
    const first = index >= 0 && index < start ? (events[index] as Json) : null;
    const text = first !== null ? textOf((first.llm_message as Json | undefined)?.content) : "";
    out.push({
      role: "user",
      content:
        `(The first ${start} events of this conversation are left out of your view to keep it bounded.` +
        (text !== "" ? ` It began with this message from the user:)\n\n${text}` : ")"),
    });
  }
  for (let i = start; i < events.length; i++) {
    const e = events[i] as Json;
    if (e.kind !== "ActionEvent") assistant = null;
    // A result (or error, or rejection) of a call before the view's start: its call is not in the view.
    if (
      calls !== null &&
      e.kind !== "ActionEvent" &&
      e.tool_call_id !== undefined &&
      !calls.has(e.tool_call_id)
    )
      continue;
    switch (e.kind) {
      case "MessageEvent": {
        const m = e.llm_message as Json;
        const role = m.role === "assistant" ? "assistant" : "user";
        if (role === "user") {
          const parts: Json[] = [];
          for (const c of (m.content as Json[]) ?? []) {
            if (c.type === "text" && typeof c.text === "string") parts.push({ type: "text", text: c.text });
            else if (c.type === "image" && Array.isArray(c.image_urls))
              for (const url of c.image_urls) parts.push({ type: "image_url", image_url: { url } });
          }
          out.push({
            role,
            content: parts.length === 1 && parts[0]?.type === "text" ? parts[0].text : parts,
          });
        } else out.push({ role, content: textOf(m.content) });
        break;
      }
      case "ActionEvent": {
        const call = e.tool_call as Json;
        calls?.add(e.tool_call_id);
        const toolCall = {
          id: e.tool_call_id,
          type: "function",
          function: { name: e.tool_name, arguments: call?.arguments ?? "{}" },
        };
        if (assistant !== null && assistantResponse === e.llm_response_id) {
          (assistant.tool_calls as Json[]).push(toolCall);
        } else {
          assistant = { role: "assistant", content: textOf(e.thought) || null, tool_calls: [toolCall] };
          assistantResponse = e.llm_response_id;
          out.push(assistant);
        }
        break;
      }
      case "ObservationEvent": {
        const obs = e.observation as Json;
        out.push({
          role: "tool",
          tool_call_id: e.tool_call_id,
          content: textOf(obs?.content) || "(no output)",
        });
        break;
      }
      case "UserRejectObservation":
        out.push({
          role: "tool",
          tool_call_id: e.tool_call_id,
          content: `The user rejected this action: ${String(e.rejection_reason)}`,
        });
        break;
      case "AgentErrorEvent":
        out.push({ role: "tool", tool_call_id: e.tool_call_id, content: String(e.error) });
        break;
    }
  }
  return out;
}
