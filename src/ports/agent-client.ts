/**
 * Talks to the agent server inside a sandbox (the built-in sandbox agent or the reference's agent-server image):
 * command execution in its workspace and conversations. Every call carries the sandbox's session key.
 */
export interface AgentEndpoint {
  /** Base URL of the agent server, e.g. http://127.0.0.1:41234. */
  url: string;
  sessionApiKey: string;
}

export interface AgentCommand {
  command: string;
  /** Working directory, absolute or relative to the agent's workspace (default: the workspace). */
  cwd?: string;
  /** Seconds before the agent kills the command (agent default 60, at most 600). */
  timeoutSeconds?: number;
}

export interface AgentCommandResult {
  /** The command's exit code; -1 when it timed out or could not start. */
  exitCode: number;
  stdout: string;
  stderr: string;
}

/** The part of an agent-side conversation the app server reads. */
export interface AgentConversationInfo {
  id: string;
  /** Lower-case execution status ("idle", "running", ...); null when the agent reports none. */
  executionStatus: string | null;
}

/** A failed call: the agent answered with an error status, could not be reached, or timed out. */
export class AgentCallError extends Error {
  readonly status: number | null;
  constructor(message: string, status: number | null, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "AgentCallError";
    this.status = status;
  }
}

export interface AgentClient {
  /** POST /api/bash/execute_bash_command. Rejects with AgentCallError (also when `signal` aborts). */
  executeCommand(
    agent: AgentEndpoint,
    command: AgentCommand,
    signal?: AbortSignal,
  ): Promise<AgentCommandResult>;
  /** POST /api/conversations with the start request; resolves to the created conversation. */
  startConversation(
    agent: AgentEndpoint,
    request: Record<string, unknown>,
    signal?: AbortSignal,
  ): Promise<AgentConversationInfo>;
  /** GET /api/conversations?ids=..: aligned with ids, null where unknown. Rejects after timeoutMs. */
  getConversations(
    agent: AgentEndpoint,
    ids: readonly string[],
    timeoutMs: number,
  ): Promise<(AgentConversationInfo | null)[]>;
  /** DELETE /api/conversations/{id}: the agent stops and forgets the conversation. Rejects with AgentCallError. */
  deleteConversation?(agent: AgentEndpoint, conversationId: string, timeoutMs: number): Promise<void>;
  /** PATCH /api/conversations/{id} `{title}`. Rejects with AgentCallError. */
  updateConversationTitle?(
    agent: AgentEndpoint,
    conversationId: string,
    title: string,
    timeoutMs: number,
  ): Promise<void>;
  /**
   * POST /api/conversations/{id}/generate_title `{max_length}` → the title; null when the agent gives none.
   * Rejects with AgentCallError (a client without it leaves titles to the message text).
   */
  generateTitle?(
    agent: AgentEndpoint,
    conversationId: string,
    maxLength: number,
    timeoutMs: number,
  ): Promise<string | null>;
}
