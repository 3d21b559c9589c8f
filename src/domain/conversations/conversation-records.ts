import { type Clock, systemClock } from "../../core/clock.ts";
import type { AgentClient } from "../../ports/agent-client.ts";
import type { ConversationRecord, ConversationRepository } from "../../ports/conversation-repository.ts";
import type { SandboxReader } from "./ports.ts";

export interface ConversationRecordsOptions {
  conversations: ConversationRepository;
  sandboxes: SandboxReader;
  agent: AgentClient;
  clock?: Clock;
  /** How long the agent server may take to answer (default 5000 ms). */
  agentTimeoutMs?: number;
}

/**
 * The conversation records as the event service reads and updates them (its ConversationAccess): a conversation
 * by id, its title and what its agent server reports, and a title from the agent server.
 */
export class ConversationRecords {
  readonly #o: ConversationRecordsOptions;
  readonly #clock: Clock;

  constructor(options: ConversationRecordsOptions) {
    this.#o = options;
    this.#clock = options.clock ?? systemClock;
  }

  /** Sets a conversation's title (the title processor); false when it is gone. */
  setTitle(id: string, ownerId: string, title: string): Promise<boolean> {
    return this.#o.conversations.update(id, ownerId, { title, updatedAt: this.#clock.now() });
  }

  /** Applies what the agent server reports of a conversation. */
  applyAgentInfo(
    id: string,
    ownerId: string,
    info: { llmModel?: string; metrics?: Record<string, unknown> | null },
  ): Promise<boolean> {
    return this.#o.conversations.update(id, ownerId, { ...info, updatedAt: this.#clock.now() });
  }

  /** A title from the conversation's agent server (its generate_title), or null when it cannot give one. */
  async generateTitle(record: ConversationRecord, maxLength: number): Promise<string | null> {
    const generate = this.#o.agent.generateTitle?.bind(this.#o.agent);
    if (generate === undefined) return null;
    const live = await this.#o.sandboxes.get(record.ownerId, record.sandboxId);
    if (live === null || live.status !== "RUNNING" || live.handle === null) return null;
    const endpoint = { url: live.handle.agentUrl, sessionApiKey: this.#o.sandboxes.sessionKey(live.record) };
    return generate(endpoint, record.id, maxLength, this.#o.agentTimeoutMs ?? 5000);
  }

  /** The conversation record. */
  get(id: string, ownerId: string): Promise<ConversationRecord | null> {
    return this.#o.conversations.get(id, ownerId);
  }
}
