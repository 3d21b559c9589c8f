/** The `task_tracker` tool (the SDK's TaskTrackerTool): its spec for the model, its action, and the task list. */
import type { Json } from "../json.ts";
import { stringArg, text } from "./tool.ts";

/** The tool spec sent to the model (OpenAI function-calling format), with the SDK's name and parameters. */
export const TASK_TRACKER_SPEC: Json = {
  type: "function",
  function: {
    name: "task_tracker",
    description:
      "Keep a task list for complex work: `plan` replaces the list with `task_list`; `view` shows it.",
    parameters: {
      type: "object",
      properties: {
        command: { type: "string", enum: ["view", "plan"] },
        task_list: {
          type: "array",
          items: {
            type: "object",
            properties: {
              title: { type: "string" },
              notes: { type: "string" },
              status: { type: "string", enum: ["todo", "in_progress", "done"] },
            },
            required: ["title"],
          },
        },
      },
      required: ["command"],
    },
  },
};

/** The TaskTrackerAction of a tool call, or an error text for the model. */
export function taskTrackerAction(args: Json): Json | string {
  const str = (k: string): string | null => stringArg(args, k);
  const command = str("command");
  if (command !== "view" && command !== "plan") return "`command` must be `view` or `plan`.";
  const list = Array.isArray(args.task_list) ? args.task_list : [];
  return {
    kind: "TaskTrackerAction",
    command,
    task_list: list
      .filter((t): t is Json => typeof t === "object" && t !== null)
      .map((t) => ({
        title: String(t.title ?? ""),
        notes: typeof t.notes === "string" ? t.notes : "",
        status: ["todo", "in_progress", "done"].includes(t.status as string) ? t.status : "todo",
      })),
  };
}

/** A conversation's task list: `plan` replaces it, `view` shows it. */
export class TaskTracker {
  #tasks: Json[] = [];

  /** Runs a TaskTrackerAction; answers a TaskTrackerObservation. */
  run(action: Json): Json {
    if (action.command === "plan") this.#tasks = action.task_list as Json[];
    const lines = this.#tasks.map(
      (t, i) => `${i + 1}. [${t.status}] ${t.title}${t.notes ? ` (${t.notes})` : ""}`,
    );
    const summary =
      action.command === "plan"
        ? `Task list updated: ${this.#tasks.length} task(s).\n${lines.join("\n")}`
        : lines.length > 0
          ? lines.join("\n")
          : "No tasks yet.";
    return {
      kind: "TaskTrackerObservation",
      content: text(summary),
      is_error: false,
      command: action.command,
      task_list: this.#tasks,
    };
  }
}
