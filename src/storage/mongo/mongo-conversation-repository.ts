import type { Db, Filter } from "mongodb";
import type { ConversationFilter, ConversationRepository } from "../../ports/conversation-repository.ts";
import { checkPageLimit, toKeysetPage } from "../keyset-page.ts";
import { guarded } from "./mongo-errors.ts";
import { COLLECTIONS } from "./mongo-indexes.ts";
import { keysetAfter, NEWEST_FIRST } from "./mongo-keyset.ts";
import { type ConversationDoc, fromConversationDoc, toConversationDoc } from "./mongo-mappers.ts";
import { DURABLE_WRITE } from "./mongo-write-concern.ts";

/** `text` as a regular expression matching it literally. */
export function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** Date range condition, or undefined when neither bound is given. */
function range(gte: Date | undefined, lt: Date | undefined): { $gte?: Date; $lt?: Date } | undefined {
  if (gte === undefined && lt === undefined) return undefined;
  const r: { $gte?: Date; $lt?: Date } = {};
  if (gte !== undefined) r.$gte = gte;
  if (lt !== undefined) r.$lt = lt;
  return r;
}

/**
 * The MongoDB filter of a conversation search/count: owner equality, `parentConversationId: null` unless
 * sub-conversations are included, a case-insensitive literal substring match on the title, date ranges.
 */
export function toConversationFilter(ownerId: string, filter: ConversationFilter): Filter<ConversationDoc> {
  const f: Filter<ConversationDoc> = { ownerId };
  if (filter.includeSubConversations !== true) f.parentConversationId = null;
  if (filter.sandboxIdEq !== undefined) f.sandboxId = filter.sandboxIdEq;
  if (filter.triggerEq !== undefined) f.trigger = filter.triggerEq;
  if (filter.selectedRepositoryEq !== undefined) f.selectedRepository = filter.selectedRepositoryEq;
  if (filter.titleContains !== undefined)
    f.title = { $regex: escapeRegExp(filter.titleContains), $options: "i" };
  const created = range(filter.createdAtGte, filter.createdAtLt);
  if (created !== undefined) f.createdAt = created;
  const updated = range(filter.updatedAtGte, filter.updatedAtLt);
  if (updated !== undefined) f.updatedAt = updated;
  return f;
}

/** Conversations on MongoDB. */
export function createMongoConversationRepository(db: Db): ConversationRepository {
  const coll = db.collection<ConversationDoc>(COLLECTIONS.conversations);
  return {
    insert: (record) =>
      guarded(async () => {
        await coll.insertOne(toConversationDoc(record), DURABLE_WRITE);
      }),
    get: (id, ownerId) =>
      guarded(async () => {
        const doc = await coll.findOne({ _id: id, ownerId });
        return doc === null ? null : fromConversationDoc(doc);
      }),
    getMany: (ids, ownerId) =>
      guarded(async () => {
        if (ids.length === 0) return [];
        const docs = await coll.find({ _id: { $in: [...ids] }, ownerId }).toArray();
        return docs.map(fromConversationDoc);
      }),
    addSubConversation: (parentId, childId, updatedAt) =>
      guarded(async () => {
        // $addToSet: atomic on the server and idempotent when a caller retries.
        const result = await coll.updateOne(
          { _id: parentId },
          { $addToSet: { subConversationIds: childId }, $set: { updatedAt } },
          DURABLE_WRITE,
        );
        return result.matchedCount === 1;
      }),
    search: (ownerId, filter, page) =>
      guarded(async () => {
        checkPageLimit(page.limit);
        const base = toConversationFilter(ownerId, filter);
        const query: Filter<ConversationDoc> =
          page.after === null ? base : { ...base, ...keysetAfter(page.after, false) };
        const docs = await coll
          .find(query)
          .sort(NEWEST_FIRST)
          .limit(page.limit + 1)
          .toArray();
        return toKeysetPage(docs.map(fromConversationDoc), page.limit);
      }),
    count: (ownerId, filter) => guarded(() => coll.countDocuments(toConversationFilter(ownerId, filter))),
    update: (id, ownerId, patch) =>
      guarded(async () => {
        const set: Partial<ConversationDoc> = { updatedAt: patch.updatedAt };
        if (patch.title !== undefined) set.title = patch.title;
        if (patch.llmModel !== undefined) set.llmModel = patch.llmModel;
        if (patch.metrics !== undefined) set.metrics = patch.metrics;
        const result = await coll.updateOne({ _id: id, ownerId }, { $set: set }, DURABLE_WRITE);
        return result.matchedCount === 1;
      }),
    delete: (id, ownerId) =>
      guarded(async () => (await coll.deleteOne({ _id: id, ownerId }, DURABLE_WRITE)).deletedCount === 1),
  };
}
