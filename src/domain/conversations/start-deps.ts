/**
 * What a start runs with: its collaborators and timeouts (the container and StartTaskRunner build them), and the
 * values a sub-conversation takes from its parent. Apart from conversation-start.ts so that the jobs of a start
 * (start-progress.ts, start-sandbox.ts, start-workspace.ts) never import the module that runs them.
 */
import type { Clock } from "../../core/clock.ts";
import type { AgentClient } from "../../ports/agent-client.ts";
import type {
  ConversationRecord,
  ConversationRepository,
  StartTaskRecord,
  StartTaskRepository,
} from "../../ports/conversation-repository.ts";
import type { LocalRepositoryCatalog } from "../../ports/local-repositories.ts";
import type { ConversationConfigSource, SecretSource, StartSandboxes } from "./ports.ts";

/** Timeouts of the start flow. */
export interface StartFlowTimeouts {
  /** How long a STARTING sandbox may take to become RUNNING (default 120 s). */
  sandboxStartMs: number;
  /** Clone and checkout (default 600 s; the agent caps a command at 600 s). */
  prepareSeconds: number;
  /** .openhands/setup.sh (default 600 s). */
  setupScriptSeconds: number;
}

export interface StartFlowDeps {
  startTasks: StartTaskRepository;
  conversations: ConversationRepository;
  sandboxes: StartSandboxes;
  settings: ConversationConfigSource;
  secrets: SecretSource;
  agent: AgentClient;
  clock: Clock;
  timeouts: StartFlowTimeouts;
  /** Called with a copy of the task after each saved state. */
  onChange: (task: StartTaskRecord) => void;
  /**
   * Called once a conversation's record exists (the events service names it from a first user message that the
   * agent posted before the record was created). Must not throw.
   */
  conversationCreated?: (record: ConversationRecord) => void;
  /** Final states (READY/ERROR) whose save failed, by task id: `sweepStartTasks` saves them later. */
  unsaved?: Map<string, StartTaskRecord>;
  log: (msg: string, data?: Record<string, unknown>) => void;
  /** This server's lease owner name: every save is a compare-and-set on it (see StartTaskRepository). */
  leaseOwner: string;
  /** The repositories of LOCAL_REPOSITORY_ROOTS, which a start names by `@local/<folder>` (none: no such names). */
  localRepositories?: LocalRepositoryCatalog;
}

/** Values a sub-conversation takes from its parent when the request leaves them unset. */
export interface Effective {
  sandboxId: string | null;
  repository: string | null;
  branch: string | null;
  provider: string | null;
  llmModel: string | null;
  parent: ConversationRecord | null;
}
