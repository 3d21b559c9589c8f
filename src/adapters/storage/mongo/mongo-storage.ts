import { hostname } from "node:os";
import { type Db, MongoClient } from "mongodb";
import type { Storage } from "../../../ports/storage.ts";
import { createMongoApiKeyRepository } from "./mongo-api-key-repository.ts";
import { createMongoChangeLog } from "./mongo-change-log.ts";
import { createMongoConversationRepository } from "./mongo-conversation-repository.ts";
import { mongoDbName } from "./mongo-db-name.ts";
import { guarded, toMongoStorageError } from "./mongo-errors.ts";
import { createMongoEventRepository } from "./mongo-event-repository.ts";
import { COLLECTIONS, ensureMongoIndexes } from "./mongo-indexes.ts";
import { createMongoSandboxRepository } from "./mongo-sandbox-repository.ts";
import { createMongoStartTaskRepository } from "./mongo-start-task-repository.ts";
import { createMongoUserDataRepository } from "./mongo-user-data-repository.ts";
import { DURABLE_WRITE } from "./mongo-write-concern.ts";

/** Options of {@link createMongoStorage}. */
export interface MongoStorageOptions {
  /** Connection string; driver options such as `serverSelectionTimeoutMS` may be given in its query. */
  uri: string;
  /** Database name; defaults to the one in the URI path, else "agent_workspace". */
  dbName?: string;
  /**
   * Only open a database this service has used before (it holds the API key collection): otherwise reject with
   * {@link MissingStoreError} and create nothing (the admin CLI, so that a wrong URI does not make a new database).
   */
  mustExist?: boolean;
}

/** The store asked for with `mustExist` does not exist; nothing was created. */
export class MissingStoreError extends Error {
  override name = "MissingStoreError";
}

/**
 * Connects to MongoDB with the official driver, creates the indexes and returns the storage; `close()` closes the
 * client. The driver reconnects by itself afterwards, so the storage recovers when the server comes back.
 *
 * @throws StorageUnavailableError when no server can be selected (unreachable, wrong replica set, timeout).
 * @throws MongoParseError for a malformed URI (a configuration error, not an outage).
 */
export async function createMongoStorage(options: MongoStorageOptions): Promise<Storage> {
  const client = new MongoClient(options.uri);
  try {
    await client.connect();
    const name = mongoDbName(options.uri, options.dbName);
    const db = client.db(name);
    if (options.mustExist === true) {
      const found = await db.listCollections({ name: COLLECTIONS.apiKeys }, { nameOnly: true }).toArray();
      if (found.length === 0)
        throw new MissingStoreError(`MongoDB database ${name} holds no data of this service`);
    }
    return await createMongoStorageFromDb(db, client);
  } catch (error: unknown) {
    await client.close().catch(() => undefined);
    throw error instanceof MissingStoreError ? error : toMongoStorageError(error);
  }
}

/**
 * Storage over an existing database handle (the real driver's `Db`, or a test stand-in with the same API).
 * Creates the indexes first. Every write uses write concern `{ w: "majority", journal: true }`; errors meaning
 * the server cannot be reached reject with StorageUnavailableError, others unchanged.
 *
 * @param client closed by `close()` when given (the handle's owner otherwise stays responsible for it).
 */
export async function createMongoStorageFromDb(
  db: Db,
  client?: { close(): Promise<void> },
): Promise<Storage> {
  await guarded(() => ensureMongoIndexes(db));
  let closed = false;
  const heartbeats = db.collection<{ _id: string; at: Date }>(COLLECTIONS.heartbeats);
  const serverId = `${hostname()}:${process.pid}`;
  const changes = createMongoChangeLog(db);
  return {
    kind: "mongo",
    userData: createMongoUserDataRepository(db),
    apiKeys: createMongoApiKeyRepository(db),
    sandboxes: createMongoSandboxRepository(db, changes),
    conversations: createMongoConversationRepository(db),
    startTasks: createMongoStartTaskRepository(db, changes),
    events: createMongoEventRepository(db, changes),
    changes,
    ping: () =>
      guarded(async () => {
        await db.command({ ping: 1 });
      }),
    checkWritable: () =>
      guarded(async () => {
        await heartbeats.updateOne(
          { _id: serverId },
          { $set: { at: new Date() } },
          { ...DURABLE_WRITE, upsert: true },
        );
      }),
    compact: async () => {},
    close: async () => {
      if (closed) return;
      closed = true;
      await client?.close();
    },
  };
}
