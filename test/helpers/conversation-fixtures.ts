import { randomUUID } from "node:crypto";
import type { ConversationRecord } from "../../src/ports/conversation-repository.ts";

/** Start of the synthetic timeline (2025-01-01T00:00:00Z). */
export const SYNTHETIC_T0 = Date.UTC(2025, 0, 1);

const hex = (): string => randomUUID().replaceAll("-", "");

/**
 * The i-th synthetic conversation of an owner, for volume tests and benchmarks: pairs share createdAt (so ties are
 * broken by id) and one in ten is a sub-conversation (excluded by the default search).
 */
export function syntheticConversation(i: number, ownerId: string): ConversationRecord {
  const createdAt = new Date(SYNTHETIC_T0 + Math.floor(i / 2) * 1000);
  return {
    id: hex(),
    ownerId,
    sandboxId: hex(),
    selectedRepository: "octo/repo",
    selectedBranch: "main",
    gitProvider: "github",
    title: `Conversation number ${i}`,
    trigger: "gui",
    prNumber: [],
    llmModel: "anthropic/claude-sonnet",
    metrics: { accumulated_cost: i / 100 },
    parentConversationId: i % 10 === 9 ? hex() : null,
    subConversationIds: [],
    createdAt,
    updatedAt: createdAt,
  };
}
