/**
 * The built-in agent's tools, with the OpenHands SDK's names, parameters and observation shapes: `terminal` (a
 * persistent shell), `file_editor` (view, create, str_replace, insert, undo_edit), `task_tracker`, and the SDK's
 * built-in `finish` and `think`, one module each. Loaded with the agent loop, on the first conversation.
 */
import type { Json } from "../json.ts";
import { FILE_EDITOR_SPEC, FileEditor, fileEditorAction } from "./file-editor.ts";
import { FINISH_SPEC, finishAction, finishObservation } from "./finish.ts";
import { TASK_TRACKER_SPEC, TaskTracker, taskTrackerAction } from "./task-tracker.ts";
import { TERMINAL_SPEC, type Terminal, terminalAction } from "./terminal.ts";
import { THINK_SPEC, thinkAction, thinkObservation } from "./think.ts";
import type { ToolResult } from "./tool.ts";

/** The tool specs sent to the model (OpenAI function-calling format), SDK names and parameters. */
export const TOOL_SPECS: Json[] = [
  TERMINAL_SPEC,
  FILE_EDITOR_SPEC,
  TASK_TRACKER_SPEC,
  THINK_SPEC,
  FINISH_SPEC,
];

/** The action object of an ActionEvent for a tool call (SDK `kind` and defaults), or an error text. */
export function toAction(toolName: string, args: Json): Json | string {
  switch (toolName) {
    case "terminal":
      return terminalAction(args);
    case "file_editor":
      return fileEditorAction(args);
    case "task_tracker":
      return taskTrackerAction(args);
    case "think":
      return thinkAction(args);
    case "finish":
      return finishAction(args);
    default:
      return `Tool '${toolName}' not found. Available: terminal, file_editor, task_tracker, think, finish.`;
  }
}

/** Runs an action (from {@link toAction}) with the conversation's tools. */
export class Toolbox {
  readonly terminal: Terminal;
  readonly #editor: FileEditor;
  readonly #tasks = new TaskTracker();

  /** `mapPath` turns a file editor path into the one to open (see {@link FileEditor}). */
  constructor(terminal: Terminal, mapPath?: (path: string) => string) {
    this.terminal = terminal;
    this.#editor = new FileEditor(mapPath);
  }

  async run(action: Json): Promise<ToolResult> {
    switch (action.kind) {
      case "TerminalAction":
        return { observation: await this.terminal.execute(action) };
      case "FileEditorAction":
        return { observation: this.#editor.execute(action) };
      case "TaskTrackerAction":
        return { observation: this.#tasks.run(action) };
      case "ThinkAction":
        return { observation: thinkObservation() };
      case "FinishAction":
        return { observation: finishObservation(action), finished: true };
      default:
        throw new Error(`no tool for ${String(action.kind)}`);
    }
  }

  close(): void {
    this.terminal.close();
  }
}
