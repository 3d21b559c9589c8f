import type { Db, Filter } from "mongodb";
import type { ConversationFilter, ConversationRepository } from "../../../ports/conversation-repository.ts";
import { checkPageLimit, toKeysetPage } from "../keyset-page.ts";
import { guarded } from "./mongo-errors.ts";
import { COLLECTIONS } from "./mongo-indexes.ts";
import { keysetAfter, NEWEST_FIRST } from "./mongo-keyset.ts";
import {
  type ConversationDoc,
  fromConversationDoc,
  type StartTaskDoc,
  toConversationDoc,
} from "./mongo-mappers.ts";
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

/** `conversation_tombstones` document: a conversation deleted lately; `done` once everything of it is gone. */
export interface ConversationTombstoneDoc {
  _id: string;
  ownerId: string;
  at: Date;
  done: boolean;
}

/**
 * Conversations on MongoDB. A delete works without multi-document transactions: the tombstones of every doomed id
 * first (from then on, events appended for them are refused), then their events, finished start tasks and
 * sub-conversations, the conversation last, and the tombstones are marked done; a delete cut short leaves
 * tombstones not done, which {@link ConversationRepository.finishDeletes} completes.
 */
export function createMongoConversationRepository(db: Db): ConversationRepository {
  const coll = db.collection<ConversationDoc>(COLLECTIONS.conversations);
  const tombstones = db.collection<ConversationTombstoneDoc>(COLLECTIONS.conversationTombstones);
  const events = db.collection<{ _id: string; ownerId: string; conversationId: string }>(COLLECTIONS.events);
  const tasks = db.collection<StartTaskDoc>(COLLECTIONS.startTasks);
  /** Removes what belongs to these conversations of `ownerId`, and them; true when `ids[0]` existed. */
  const removeAll = async (ids: readonly string[], ownerId: string): Promise<boolean> => {
    const list = [...ids];
    await events.deleteMany({ ownerId, conversationId: { $in: list } }, DURABLE_WRITE);
    await tasks.deleteMany(
      {
        ownerId,
        status: { $in: ["READY", "ERROR"] },
        $or: [{ appConversationId: { $in: list } }, { "plan.conversationId": { $in: list } }],
      },
      DURABLE_WRITE,
    );
    if (list.length > 1) await coll.deleteMany({ _id: { $in: list.slice(1) }, ownerId }, DURABLE_WRITE);
    const found = (await coll.deleteOne({ _id: list[0] ?? "", ownerId }, DURABLE_WRITE)).deletedCount === 1;
    for (const id of list) await tombstones.updateOne({ _id: id }, { $set: { done: true } }, DURABLE_WRITE);
    return found;
  };
  return {
    insert: (record) =>
      guarded(async () => {
        await tombstones.deleteOne({ _id: record.id }, DURABLE_WRITE);
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
      guarded(async () => {
        const record = await coll.findOne({ _id: id, ownerId });
        const children = await coll.find({ ownerId, parentConversationId: id }).toArray();
        if (record === null && children.length === 0) return false;
        const doomed = [
          ...new Set([id, ...(record?.subConversationIds ?? []), ...children.map((c) => c._id)]),
        ];
        const at = new Date();
        for (const cid of doomed)
          await tombstones.updateOne(
            { _id: cid },
            { $set: { ownerId, at, done: false } },
            { ...DURABLE_WRITE, upsert: true },
          );
        return removeAll(doomed, ownerId);
      }),
    finishDeletes: (graceBefore, tombstonesBefore) =>
      guarded(async () => {
        const pending = await tombstones
          .find({ done: false, at: { $lt: graceBefore } })
          .limit(100)
          .toArray();
        for (const t of pending) await removeAll([t._id], t.ownerId);
        const pruned = await tombstones.deleteMany({ at: { $lt: tombstonesBefore } }, DURABLE_WRITE);
        return { finished: pending.length, pruned: pruned.deletedCount };
      }),
  };
}
