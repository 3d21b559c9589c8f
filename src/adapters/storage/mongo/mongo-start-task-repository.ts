import type { Db, Filter } from "mongodb";
import { type ChangeLog, startTaskChange } from "../../../ports/change-log.ts";
import type {
  ClaimedStartTask,
  StartTaskFilter,
  StartTaskPatch,
  StartTaskRepository,
  StartTaskStatus,
} from "../../../ports/conversation-repository.ts";
import { checkPageLimit, toKeysetPage } from "../keyset-page.ts";
import { guarded } from "./mongo-errors.ts";
import { COLLECTIONS } from "./mongo-indexes.ts";
import { keysetAfter, NEWEST_FIRST, OLDEST_FIRST } from "./mongo-keyset.ts";
import { fromStartTaskDoc, type StartTaskDoc, toStartTaskDoc } from "./mongo-mappers.ts";
import { DURABLE_WRITE } from "./mongo-write-concern.ts";

const UNFINISHED: { $nin: StartTaskStatus[] } = { $nin: ["READY", "ERROR"] };

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
  if (patch.plan !== undefined) set.plan = patch.plan;
  return set;
}

/**
 * Start tasks on MongoDB. Lease writes are single-document compare-and-set updates: a claim matches the lease
 * expiry it read, so of two servers claiming the same task only one matches.
 */
export function createMongoStartTaskRepository(db: Db, changes?: ChangeLog): StartTaskRepository {
  const coll = db.collection<StartTaskDoc>(COLLECTIONS.startTasks);
  const logged = async (doc: StartTaskDoc | null): Promise<void> => {
    if (doc !== null) await changes?.append([startTaskChange(fromStartTaskDoc(doc))]);
  };
  return {
    insert: (record, lease, plan) =>
      guarded(async () => {
        await coll.insertOne(
          {
            ...toStartTaskDoc(record),
            leaseOwner: lease?.owner ?? null,
            leaseExpiresAt: lease?.expiresAt ?? new Date(0),
            attempts: 0,
            ...(plan === undefined ? {} : { plan }),
          },
          DURABLE_WRITE,
        );
        await logged(toStartTaskDoc(record));
      }),
    findPending: (ownerId, conversationId) =>
      guarded(async () => {
        const [doc] = await coll
          .find({ ownerId, "plan.conversationId": conversationId, status: { $ne: "READY" } })
          .sort(NEWEST_FIRST)
          .limit(1)
          .toArray();
        return doc === undefined ? null : fromStartTaskDoc(doc);
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
    update: (id, patch, leaseOwner) =>
      guarded(async () => {
        const set = toSet(patch);
        const filter: Filter<StartTaskDoc> = leaseOwner === undefined ? { _id: id } : { _id: id, leaseOwner };
        if (Object.keys(set).length === 0) return (await coll.countDocuments(filter, { limit: 1 })) === 1;
        const after = await coll.findOneAndUpdate(
          filter,
          { $set: set },
          { ...DURABLE_WRITE, returnDocument: "after" },
        );
        const { plan: _plan, updatedAt: _updatedAt, ...visible } = patch;
        if (Object.keys(visible).length > 0) await logged(after);
        return after !== null;
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
    pruneFinished: (before) =>
      guarded(
        async () =>
          (
            await coll.deleteMany(
              { status: { $in: ["READY", "ERROR"] }, updatedAt: { $lt: before } },
              DURABLE_WRITE,
            )
          ).deletedCount,
      ),
    listUnfinished: () =>
      guarded(async () => {
        const docs = await coll
          .find({ status: { $nin: ["READY", "ERROR"] } })
          .sort(OLDEST_FIRST)
          .toArray();
        return docs.map(fromStartTaskDoc);
      }),
    sandboxesInUse: (ownerId) =>
      guarded(async () => {
        const docs = await coll
          .find(
            { ownerId, status: { $nin: ["READY", "ERROR"] } },
            { projection: { sandboxId: 1, "plan.sandboxId": 1 } },
          )
          .toArray();
        return docs.flatMap((d) => {
          const id = d.sandboxId ?? d.plan?.sandboxId;
          return typeof id === "string" ? [id] : [];
        });
      }),
    renewLeases: (owner, ids, expiresAt) =>
      guarded(async () => {
        const held = await Promise.all(
          ids.map(
            async (id) =>
              (
                await coll.updateOne(
                  { _id: id, leaseOwner: owner, status: UNFINISHED },
                  { $set: { leaseExpiresAt: expiresAt } },
                  DURABLE_WRITE,
                )
              ).matchedCount === 1,
          ),
        );
        return ids.filter((_, i) => held[i]);
      }),
    releaseLeases: (owner, ids) =>
      guarded(async () => {
        await Promise.all(
          ids.map((id) =>
            coll.updateOne(
              { _id: id, leaseOwner: owner },
              { $set: { leaseExpiresAt: new Date(0) } },
              DURABLE_WRITE,
            ),
          ),
        );
      }),
    claimExpired: (owner, now, expiresAt, limit) =>
      guarded(async () => {
        const expired = await coll
          .find({ status: UNFINISHED, leaseExpiresAt: { $lt: now } })
          .sort({ leaseExpiresAt: 1 })
          .limit(limit)
          .toArray();
        // Documents of older builds have no lease fields: they match as expired (null sorts and compares low).
        const legacy =
          expired.length < limit
            ? await coll
                .find({ status: UNFINISHED, leaseExpiresAt: { $exists: false } })
                .limit(limit - expired.length)
                .toArray()
            : [];
        const claimed: ClaimedStartTask[] = [];
        for (const doc of [...expired, ...legacy]) {
          const attempts = (doc.attempts ?? 0) + 1;
          const result = await coll.updateOne(
            {
              _id: doc._id,
              status: UNFINISHED,
              leaseExpiresAt: doc.leaseExpiresAt === undefined ? { $exists: false } : doc.leaseExpiresAt,
            },
            { $set: { leaseOwner: owner, leaseExpiresAt: expiresAt, attempts } },
            DURABLE_WRITE,
          );
          if (result.matchedCount === 1)
            claimed.push({ task: fromStartTaskDoc(doc), plan: doc.plan ?? {}, attempts });
        }
        return claimed;
      }),
  };
}
