/**
 * What the service knows of the built-in agent: the spec marker that asks for it, its entry's path, how Node starts
 * it and the npm packages it loads. With proc-tree.ts and require-node.mjs, the only part of agent/ the service
 * imports: it imports nothing else of the agent, so the service never loads the agent's code.
 */
import { fileURLToPath } from "node:url";

/**
 * Marker a sandbox spec can give as its command (alone, or followed by extra arguments) to run the built-in agent
 * server: the process runtime starts `node agent/main.ts`, the Docker runtime the image's default command. An
 * empty command means the same.
 */
export const BUILTIN_AGENT_COMMAND = "@builtin/sandbox-agent";

/** Absolute path of the built-in agent's entry point (run it with `process.execPath`). */
export const BUILTIN_AGENT_MAIN = fileURLToPath(
  // The same extension as this module: main.ts when run from source, main.js when compiled (npm start).
  new URL(import.meta.url.endsWith(".ts") ? "../main.ts" : "../main.js", import.meta.url),
);

/**
 * Node options the built-in agent is started with (before its main file): no signal opens the inspector, a
 * debugger that would listen on the host's loopback, where any sandbox could run code in the agent (its keys,
 * its secrets). The agent also ignores SIGUSR1 itself once it runs (main.ts), for images that start it otherwise.
 */
export const BUILTIN_AGENT_NODE_FLAGS = ["--disable-sigusr1"] as const;

/** The npm packages the built-in agent's conversations load (the events websocket, the model client). */
export const BUILTIN_AGENT_PACKAGES = ["ws", "openai"] as const;

/** True when a spec command asks for the built-in agent. */
export function isBuiltinAgentCommand(command: readonly string[]): boolean {
  return command.length === 0 || command[0] === BUILTIN_AGENT_COMMAND;
}
