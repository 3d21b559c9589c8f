import type { Db } from "mongodb";
import type { UserDataRepository } from "../../../ports/user-data-repository.ts";
import { guarded, isDuplicateKeyError } from "./mongo-errors.ts";
import { COLLECTIONS } from "./mongo-indexes.ts";
import { fromUserDataDoc, toUserDataValue, type UserDataDoc } from "./mongo-mappers.ts";
import { DURABLE_WRITE } from "./mongo-write-concern.ts";

/**
 * User data on MongoDB: one document per user (`_id` = user id). Compare-and-set is an insert for version 0
 * (a duplicate key means someone else created it first) and otherwise an update matching the expected version.
 */
export function createMongoUserDataRepository(db: Db): UserDataRepository {
  const coll = db.collection<UserDataDoc>(COLLECTIONS.userData);
  // Other servers' writes are not seen without a change stream (which needs a replica set): every token is new,
  // so every read asks the server.
  let token = 0;
  return {
    changeToken: () => ++token,
    get: (userId) =>
      guarded(async () => {
        const doc = await coll.findOne({ _id: userId });
        return doc === null ? null : fromUserDataDoc(doc);
      }),
    compareAndSet: (userId, expectedVersion, next) =>
      guarded(async () => {
        const value = toUserDataValue(next);
        if (expectedVersion === 0) {
          try {
            await coll.insertOne({ _id: userId, version: 1, value }, DURABLE_WRITE);
            return true;
          } catch (error: unknown) {
            if (isDuplicateKeyError(error)) return false;
            throw error;
          }
        }
        const result = await coll.updateOne(
          { _id: userId, version: expectedVersion },
          { $set: { value, version: expectedVersion + 1 } },
          DURABLE_WRITE,
        );
        return result.matchedCount === 1;
      }),
  };
}
