import type { Db, IndexSpecification } from "mongodb";

/** Collection names used by the MongoDB adapter. */
export const COLLECTIONS = {
  userData: "user_data",
  apiKeys: "api_keys",
  sandboxes: "sandboxes",
  conversations: "conversations",
  startTasks: "start_tasks",
  /** Per-owner locks serialising sandbox creates and claims (see createMongoSandboxRepository). */
  sandboxLocks: "sandbox_locks",
  /** One small document per server, rewritten by the readiness write check. */
  heartbeats: "heartbeats",
  events: "events",
  /** The change log (see createMongoChangeLog) and the counter of its sequence numbers. */
  changes: "changes",
  counters: "counters",
  /** Conversations deleted lately (see createMongoConversationRepository). */
  conversationTombstones: "conversation_tombstones",
} as const;

/** One index the adapter relies on. */
export interface MongoIndex {
  collection: string;
  name: string;
  key: IndexSpecification & Record<string, 1 | -1>;
  unique?: boolean;
}

/**
 * Every index the queries need; each listing's filter equalities followed by its sort form an index prefix, so
 * a page is an index range scan. (`user_data` is only read by `_id`.)
 */
export const MONGO_INDEXES: readonly MongoIndex[] = [
  { collection: COLLECTIONS.apiKeys, name: "hash_unique", key: { hash: 1 }, unique: true },
  { collection: COLLECTIONS.apiKeys, name: "user_created", key: { userId: 1, createdAt: 1, _id: 1 } },
  { collection: COLLECTIONS.apiKeys, name: "created", key: { createdAt: 1, _id: 1 } },
  { collection: COLLECTIONS.sandboxes, name: "owner_created", key: { ownerId: 1, createdAt: -1, _id: -1 } },
  { collection: COLLECTIONS.sandboxes, name: "created", key: { createdAt: -1, _id: -1 } },
  {
    collection: COLLECTIONS.conversations,
    name: "owner_created",
    key: { ownerId: 1, createdAt: -1, _id: -1 },
  },
  {
    // The default search (sub-conversations excluded) is an equality on parentConversationId: null.
    collection: COLLECTIONS.conversations,
    name: "owner_parent_created",
    key: { ownerId: 1, parentConversationId: 1, createdAt: -1, _id: -1 },
  },
  { collection: COLLECTIONS.startTasks, name: "owner_created", key: { ownerId: 1, createdAt: -1, _id: -1 } },
  {
    collection: COLLECTIONS.startTasks,
    name: "owner_conversation_created",
    key: { ownerId: 1, appConversationId: 1, createdAt: -1, _id: -1 },
  },
  { collection: COLLECTIONS.startTasks, name: "status_created", key: { status: 1, createdAt: 1, _id: 1 } },
  // Expired leases of unfinished tasks are looked up by expiry.
  { collection: COLLECTIONS.startTasks, name: "status_lease", key: { status: 1, leaseExpiresAt: 1 } },
  {
    collection: COLLECTIONS.startTasks,
    name: "owner_planned_conversation",
    key: { ownerId: 1, "plan.conversationId": 1, createdAt: -1, _id: -1 },
  },
  { collection: COLLECTIONS.changes, name: "at", key: { at: 1 } },
  // Finished tasks are pruned by age; sub-conversations are found by parent when it is deleted.
  { collection: COLLECTIONS.startTasks, name: "status_updated", key: { status: 1, updatedAt: 1 } },
  { collection: COLLECTIONS.conversations, name: "parent", key: { parentConversationId: 1 } },
  { collection: COLLECTIONS.conversationTombstones, name: "done_at", key: { done: 1, at: 1 } },
  { collection: COLLECTIONS.conversationTombstones, name: "at", key: { at: 1 } },
  { collection: COLLECTIONS.conversations, name: "owner_sandbox", key: { ownerId: 1, sandboxId: 1 } },
  // Events: _id is "<conversationId>:<eventId>" (unique per conversation); searches start with the owner.
  { collection: COLLECTIONS.events, name: "event_id", key: { eventId: 1 } },
  {
    collection: COLLECTIONS.events,
    name: "owner_conversation_ts",
    key: { ownerId: 1, conversationId: 1, ts: 1, eventId: 1 },
  },
  {
    collection: COLLECTIONS.events,
    name: "owner_conversation_kind_ts",
    key: { ownerId: 1, conversationId: 1, kind: 1, ts: 1, eventId: 1 },
  },
  { collection: COLLECTIONS.events, name: "owner_ts", key: { ownerId: 1, ts: 1, eventId: 1 } },
  { collection: COLLECTIONS.events, name: "owner_kind_ts", key: { ownerId: 1, kind: 1, ts: 1, eventId: 1 } },
];

/** Creates the indexes of {@link MONGO_INDEXES} (a no-op for those that already exist with the same spec). */
export async function ensureMongoIndexes(db: Db): Promise<void> {
  await Promise.all(
    MONGO_INDEXES.map((index) =>
      db
        .collection(index.collection)
        .createIndex(
          index.key,
          index.unique === true ? { name: index.name, unique: true } : { name: index.name },
        ),
    ),
  );
}
