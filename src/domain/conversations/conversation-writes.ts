/**
 * The writes of the conversation RPCs beyond starts: renaming a conversation, and deleting one with its
 * sub-conversations, their events and, when nothing else uses it, its sandbox. The agent server of a running
 * sandbox is told first (its own title, its conversations stopped); a failure there is logged, never fatal, as the
 * reference's. Scoped to the caller as app-conversation-service.ts says.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import type { Clock } from "../../core/clock.ts";
import { notFound } from "../../core/errors.ts";
import type { AgentClient, AgentEndpoint } from "../../ports/agent-client.ts";
import type {
  ConversationRecord,
  ConversationRepository,
  StartTaskRepository,
} from "../../ports/conversation-repository.ts";
import type { EventRepository } from "../../ports/event-repository.ts";
import type { ConversationSandboxes } from "./ports.ts";

/** Deadline of a delete or rename on the agent server (the reference's). */
const AGENT_CALL_TIMEOUT_MS = 30_000;

export interface ConversationWritesOptions {
  conversations: ConversationRepository;
  startTasks: Pick<StartTaskRepository, "listUnfinished">;
  sandboxes: ConversationSandboxes;
  agent: AgentClient;
  /** The conversations' events, deleted with them. */
  events?: Pick<EventRepository, "deleteConversation"> | undefined;
  clock: Clock;
  log: (msg: string, data?: Record<string, unknown>) => void;
}

/** Renames and deletes of a user's conversations. */
export class ConversationWrites {
  readonly #o: ConversationWritesOptions;

  constructor(options: ConversationWritesOptions) {
    this.#o = options;
  }

  /** Updates the conversation (its title, already checked); the record as updated. NOT_FOUND for an unknown id. */
  async update(userId: string, id: string, patch: { title?: string }): Promise<ConversationRecord> {
    if (!(await this.#o.conversations.update(id, userId, { ...patch, updatedAt: this.#o.clock.now() })))
      throw notFound();
    const record = await this.#o.conversations.get(id, userId);
    if (record === null) throw notFound();
    // The agent keeps a title of its own (as the reference, a failure there does not fail the rename).
    const title = patch.title;
    if (title !== undefined)
      await this.#onAgent(record, "rename", (agent, endpoint, timeoutMs) =>
        agent.updateConversationTitle?.(endpoint, id, title, timeoutMs),
      );
    return record;
  }

  /**
   * Deletes a conversation with its sub-conversations and their events, then its sandbox when no remaining
   * conversation of the user uses it and no start runs in it. `deleted` false for an unknown id.
   */
  async delete(userId: string, id: string): Promise<{ deleted: boolean; sandboxDeleted: boolean }> {
    const record = await this.#o.conversations.get(id, userId);
    if (record === null) return { deleted: false, sandboxDeleted: false };
    const doomed = [id, ...record.subConversationIds];
    // The agent stops each conversation first (it would otherwise go on running, and spending, in a sandbox that
    // stays); a failure there does not keep the records, as the reference's.
    for (const cid of doomed) {
      const r = cid === id ? record : await this.#o.conversations.get(cid, userId);
      if (r !== null)
        await this.#onAgent(r, "delete", (agent, endpoint, timeoutMs) =>
          agent.deleteConversation?.(endpoint, cid, timeoutMs),
        );
    }
    let deleted = false;
    for (const cid of doomed) {
      await this.#o.events?.deleteConversation(cid, userId);
      const gone = await this.#o.conversations.delete(cid, userId);
      if (cid === id) deleted = gone;
    }
    let sandboxDeleted = false;
    const others = await this.#o.conversations.count(userId, {
      includeSubConversations: true,
      sandboxIdEq: record.sandboxId,
    });
    // A start still running in the sandbox will use it too.
    const starting = await this.#startingIn(userId, record.sandboxId);
    if (others === 0 && !starting) {
      try {
        await this.#o.sandboxes.delete(userId, record.sandboxId);
        sandboxDeleted = true;
      } catch (err) {
        if (!(err instanceof ConnectError && err.code === Code.NotFound)) throw err;
      }
    }
    return { deleted, sandboxDeleted };
  }

  /** Runs `call` against the agent of the conversation's sandbox when it runs; logs (and swallows) its failure. */
  async #onAgent(
    record: ConversationRecord,
    what: string,
    call: (agent: AgentClient, endpoint: AgentEndpoint, timeoutMs: number) => Promise<void> | undefined,
  ): Promise<void> {
    const live = await this.#o.sandboxes.get(record.ownerId, record.sandboxId);
    if (live === null || live.status !== "RUNNING" || live.handle === null) return;
    const endpoint = { url: live.handle.agentUrl, sessionApiKey: this.#o.sandboxes.sessionKey(live.record) };
    try {
      await call(this.#o.agent, endpoint, AGENT_CALL_TIMEOUT_MS);
    } catch (err) {
      this.#o.log(`conversation ${what} on the agent server failed`, {
        conversationId: record.id,
        error: String(err),
      });
    }
  }

  /** Whether one of the user's unfinished starts is using the sandbox. */
  async #startingIn(userId: string, sandboxId: string): Promise<boolean> {
    // Any server's: unfinished tasks are few (they end within minutes).
    const tasks = await this.#o.startTasks.listUnfinished();
    return tasks.some((t) => t.ownerId === userId && t.sandboxId === sandboxId);
  }
}
