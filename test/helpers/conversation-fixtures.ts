// Stored app-conversation records (ConversationRecord, the conversation repository's row) for tests and
// benchmarks: one builder with plain defaults that a test overrides with the fields it is about, and the synthetic
// timeline of the volume tests built on it.
import { newHexId } from "../../src/core/ids.ts";
import type { ConversationRecord } from "../../src/ports/conversation-repository.ts";

/**
 * A conversation record: new hex ids for itself and its sandbox, owner "owner", no repository, title, trigger,
 * model or metrics, no parent nor sub-conversations, created now; `updatedAt` is `createdAt` unless given. Pass
 * only what the test is about, so that a field added to the record needs no test to change.
 */
export function conversationRecord(overrides: Partial<ConversationRecord> = {}): ConversationRecord {
  const createdAt = overrides.createdAt ?? new Date();
  return {
    id: newHexId(),
    ownerId: "owner",
    sandboxId: newHexId(),
    selectedRepository: null,
    selectedBranch: null,
    gitProvider: null,
    title: null,
    trigger: null,
    prNumber: [],
    llmModel: null,
    metrics: null,
    parentConversationId: null,
    subConversationIds: [],
    createdAt,
    updatedAt: createdAt,
    ...overrides,
  };
}

/** Start of the synthetic timeline (2025-01-01T00:00:00Z). */
export const SYNTHETIC_T0 = Date.UTC(2025, 0, 1);

/**
 * The i-th synthetic conversation of an owner, for volume tests and benchmarks: pairs share createdAt (so ties are
 * broken by id) and one in ten is a sub-conversation (excluded by the default search).
 */
export function syntheticConversation(i: number, ownerId: string): ConversationRecord {
  return conversationRecord({
    ownerId,
    selectedRepository: "octo/repo",
    selectedBranch: "main",
    gitProvider: "github",
    title: `Conversation number ${i}`,
    trigger: "gui",
    llmModel: "anthropic/claude-sonnet",
    metrics: { accumulated_cost: i / 100 },
    parentConversationId: i % 10 === 9 ? newHexId() : null,
    createdAt: new Date(SYNTHETIC_T0 + Math.floor(i / 2) * 1000),
  });
}
