import { randomBytes } from "node:crypto";
import {
  AgentCallError,
  type AgentClient,
  type AgentCommand,
  type AgentCommandResult,
  type AgentConversationInfo,
  type AgentEndpoint,
} from "../../../src/ports/agent-client.ts";

/**
 * An agent client that talks to nothing. Commands are answered by `onCommand` (default: the prepare step's
 * project marker, exit 0), conversations are created with the requested id (or a fresh one), and
 * getConversations answers from `executionStatus`. Every call is recorded.
 */
export class FakeAgentClient implements AgentClient {
  readonly commands: { agent: AgentEndpoint; command: AgentCommand }[] = [];
  readonly starts: { agent: AgentEndpoint; request: Record<string, unknown> }[] = [];
  readonly lookUps: { agent: AgentEndpoint; ids: readonly string[] }[] = [];
  onCommand: (command: AgentCommand) => AgentCommandResult | Promise<AgentCommandResult> = () => ({
    exitCode: 0,
    stdout: "__OH_PROJECT_DIR__=/workspace/project\n",
    stderr: "",
  });
  onStart: (request: Record<string, unknown>) => AgentConversationInfo | Promise<AgentConversationInfo> = (
    request,
  ) => ({
    id:
      typeof request.conversation_id === "string" ? request.conversation_id : randomBytes(16).toString("hex"),
    executionStatus: "idle",
  });
  /** Execution status by conversation id; ids not in it are unknown to the agent (null). */
  readonly executionStatus = new Map<string, string | null>();
  onGetConversations: ((ids: readonly string[]) => Promise<(AgentConversationInfo | null)[]>) | null = null;

  async executeCommand(agent: AgentEndpoint, command: AgentCommand): Promise<AgentCommandResult> {
    this.commands.push({ agent, command });
    return this.onCommand(command);
  }

  async startConversation(
    agent: AgentEndpoint,
    request: Record<string, unknown>,
  ): Promise<AgentConversationInfo> {
    this.starts.push({ agent, request });
    return this.onStart(request);
  }

  /** As the port says: rejects with AgentCallError when no answer came within timeoutMs. */
  async getConversations(
    agent: AgentEndpoint,
    ids: readonly string[],
    timeoutMs: number,
  ): Promise<(AgentConversationInfo | null)[]> {
    this.lookUps.push({ agent, ids });
    if (this.onGetConversations !== null) {
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new AgentCallError("timed out", null)), timeoutMs);
      });
      try {
        return await Promise.race([this.onGetConversations(ids), timeout]);
      } finally {
        clearTimeout(timer);
      }
    }
    return ids.map((id) => {
      const status = this.executionStatus.get(id);
      return status === undefined ? null : { id, executionStatus: status };
    });
  }
}
