import type { Db, Filter } from "mongodb";
import type { StartTaskFilter, StartTaskRepository } from "../../ports/conversation-repository.ts";
import { checkPageLimit, toKeysetPage } from "../keyset-page.ts";
import { guarded } from "./mongo-errors.ts";
import { COLLECTIONS } from "./mongo-indexes.ts";
import { keysetAfter, NEWEST_FIRST, OLDEST_FIRST } from "./mongo-keyset.ts";
import { fromStartTaskDoc, type StartTaskDoc, toStartTaskDoc } from "./mongo-mappers.ts";
import { DURABLE_WRITE } from "./mongo-write-concern.ts";

type StartTaskPatch = Parameters<StartTaskRepository["update"]>[1];

/** The MongoDB filter of a start-task search/count. */
export function toStartTaskFilter(ownerId: string, filter: StartTaskFilter): Filter<StartTaskDoc> {
  const f: Filter<StartTaskDoc> = { ownerId };
  if (filter.conversationIdEq !== undefined) f.appConversationId = filter.conversationIdEq;
  if (filter.createdAtGte !== undefined) f.createdAt = { $gte: filter.createdAtGte };
  return f;
}

/** Only the fields present in the patch (a present null sets the field to null). */
function toSet(patch: StartTaskPatch): Partial<StartTaskDoc> {
  const set: Partial<StartTaskDoc> = {};
  if (patch.status !== undefined) set.status = patch.status;
  if (patch.detail !== undefined) set.detail = patch.detail;
  if (patch.appConversationId !== undefined) set.appConversationId = patch.appConversationId;
  if (patch.sandboxId !== undefined) set.sandboxId = patch.sandboxId;
  if (patch.agentServerUrl !== undefined) set.agentServerUrl = patch.agentServerUrl;
  if (patch.updatedAt !== undefined) set.updatedAt = patch.updatedAt;
  return set;
}

/** Start tasks on MongoDB. */
export function createMongoStartTaskRepository(db: Db): StartTaskRepository {
  const coll = db.collection<StartTaskDoc>(COLLECTIONS.startTasks);
  return {
    insert: (record) =>
      guarded(async () => {
        await coll.insertOne(toStartTaskDoc(record), DURABLE_WRITE);
      }),
    get: (id, ownerId) =>
      guarded(async () => {
        const doc = await coll.findOne({ _id: id, ownerId });
        return doc === null ? null : fromStartTaskDoc(doc);
      }),
    getMany: (ids, ownerId) =>
      guarded(async () => {
        if (ids.length === 0) return [];
        const docs = await coll.find({ _id: { $in: [...ids] }, ownerId }).toArray();
        return docs.map(fromStartTaskDoc);
      }),
    update: (id, patch) =>
      guarded(async () => {
        const set = toSet(patch);
        if (Object.keys(set).length === 0)
          return (await coll.countDocuments({ _id: id }, { limit: 1 })) === 1;
        const result = await coll.updateOne({ _id: id }, { $set: set }, DURABLE_WRITE);
        return result.matchedCount === 1;
      }),
    search: (ownerId, filter, page, ascending) =>
      guarded(async () => {
        checkPageLimit(page.limit);
        const base = toStartTaskFilter(ownerId, filter);
        const query: Filter<StartTaskDoc> =
          page.after === null ? base : { ...base, ...keysetAfter(page.after, ascending) };
        const docs = await coll
          .find(query)
          .sort(ascending ? OLDEST_FIRST : NEWEST_FIRST)
          .limit(page.limit + 1)
          .toArray();
        return toKeysetPage(docs.map(fromStartTaskDoc), page.limit);
      }),
    count: (ownerId, filter) => guarded(() => coll.countDocuments(toStartTaskFilter(ownerId, filter))),
    listUnfinished: () =>
      guarded(async () => {
        const docs = await coll
          .find({ status: { $nin: ["READY", "ERROR"] } })
          .sort(OLDEST_FIRST)
          .toArray();
        return docs.map(fromStartTaskDoc);
      }),
  };
}
