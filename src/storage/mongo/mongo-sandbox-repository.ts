import type { Db, Filter } from "mongodb";
import type { SandboxRepository } from "../../ports/sandbox-repository.ts";
import { checkPageLimit, toKeysetPage } from "../keyset-page.ts";
import { guarded } from "./mongo-errors.ts";
import { COLLECTIONS } from "./mongo-indexes.ts";
import { keysetAfter, NEWEST_FIRST } from "./mongo-keyset.ts";
import { fromSandboxDoc, type SandboxDoc, toSandboxDoc } from "./mongo-mappers.ts";
import { DURABLE_WRITE } from "./mongo-write-concern.ts";

/** The sandbox registry on MongoDB; listings use the `{ownerId: 1, createdAt: -1, _id: -1}` index. */
export function createMongoSandboxRepository(db: Db): SandboxRepository {
  const coll = db.collection<SandboxDoc>(COLLECTIONS.sandboxes);
  return {
    insert: (record) =>
      guarded(async () => {
        await coll.insertOne(toSandboxDoc(record), DURABLE_WRITE);
      }),
    get: (id, ownerId) =>
      guarded(async () => {
        const doc = await coll.findOne(ownerId === undefined ? { _id: id } : { _id: id, ownerId });
        return doc === null ? null : fromSandboxDoc(doc);
      }),
    getMany: (ids, ownerId) =>
      guarded(async () => {
        if (ids.length === 0) return [];
        const docs = await coll.find({ _id: { $in: [...ids] }, ownerId }).toArray();
        return docs.map(fromSandboxDoc);
      }),
    update: (id, patch) =>
      guarded(async () => {
        const set: Partial<Pick<SandboxDoc, "handle" | "status" | "updatedAt">> = {};
        if (patch.handle !== undefined) set.handle = patch.handle;
        if (patch.status !== undefined) set.status = patch.status;
        if (patch.updatedAt !== undefined) set.updatedAt = patch.updatedAt;
        if (Object.keys(set).length === 0)
          return (await coll.countDocuments({ _id: id }, { limit: 1 })) === 1;
        const result = await coll.updateOne({ _id: id }, { $set: set }, DURABLE_WRITE);
        return result.matchedCount === 1;
      }),
    list: (ownerId, page) =>
      guarded(async () => {
        checkPageLimit(page.limit);
        const filter: Filter<SandboxDoc> =
          page.after === null ? { ownerId } : { ownerId, ...keysetAfter(page.after, false) };
        const docs = await coll
          .find(filter)
          .sort(NEWEST_FIRST)
          .limit(page.limit + 1)
          .toArray();
        return toKeysetPage(docs.map(fromSandboxDoc), page.limit);
      }),
    listAll: (ownerId) =>
      guarded(async () => {
        const docs = await coll
          .find(ownerId === undefined ? {} : { ownerId })
          .sort(NEWEST_FIRST)
          .toArray();
        return docs.map(fromSandboxDoc);
      }),
    delete: (id) =>
      guarded(async () => {
        const result = await coll.deleteOne({ _id: id }, DURABLE_WRITE);
        return result.deletedCount === 1;
      }),
  };
}
