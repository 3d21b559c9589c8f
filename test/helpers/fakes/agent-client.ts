import type {
  AgentClient,
  AgentCommand,
  AgentCommandResult,
  AgentConversationInfo,
  AgentEndpoint,
} from "../../../src/ports/agent-client.ts";

/**
 * An agent client that talks to nothing. Commands are answered by `onCommand` (default: the prepare step's
 * project marker, exit 0), conversations are created with the requested id (or a fixed one), and
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
    id: typeof request.conversation_id === "string" ? request.conversation_id : "ab".repeat(16),
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

  async getConversations(
    agent: AgentEndpoint,
    ids: readonly string[],
  ): Promise<(AgentConversationInfo | null)[]> {
    this.lookUps.push({ agent, ids });
    if (this.onGetConversations !== null) return this.onGetConversations(ids);
    return ids.map((id) => {
      const status = this.executionStatus.get(id);
      return status === undefined ? null : { id, executionStatus: status };
    });
  }
}
