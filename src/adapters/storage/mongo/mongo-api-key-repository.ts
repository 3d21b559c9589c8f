import type { Db } from "mongodb";
import type { ApiKeyRepository } from "../../../ports/api-key-repository.ts";
import { guarded } from "./mongo-errors.ts";
import { COLLECTIONS } from "./mongo-indexes.ts";
import { type ApiKeyDoc, fromApiKeyDoc, toApiKeyDoc } from "./mongo-mappers.ts";
import { DURABLE_WRITE } from "./mongo-write-concern.ts";

/** API keys on MongoDB; `hash` has a unique index (a duplicate insert rejects with the E11000 server error). */
export function createMongoApiKeyRepository(db: Db): ApiKeyRepository {
  const coll = db.collection<ApiKeyDoc>(COLLECTIONS.apiKeys);
  return {
    insert: (record) =>
      guarded(async () => {
        await coll.insertOne(toApiKeyDoc(record), DURABLE_WRITE);
      }),
    findByHash: (hash) =>
      guarded(async () => {
        const doc = await coll.findOne({ hash });
        return doc === null ? null : fromApiKeyDoc(doc);
      }),
    list: (userId) =>
      guarded(async () => {
        const docs = await coll
          .find(userId === undefined ? {} : { userId })
          .sort({ createdAt: 1, _id: 1 })
          .toArray();
        return docs.map(fromApiKeyDoc);
      }),
    revoke: (id, at) =>
      guarded(async () => {
        const result = await coll.updateOne(
          { _id: id, revokedAt: null },
          { $set: { revokedAt: at } },
          DURABLE_WRITE,
        );
        return result.matchedCount === 1;
      }),
    count: () => guarded(() => coll.countDocuments({})),
  };
}
