import { existsSync, mkdirSync } from "node:fs";
import { dirname } from "node:path";
import { mongoDbName, mongoHosts } from "../adapters/storage/mongo/mongo-db-name.ts";
import type { Storage } from "../ports/storage.ts";
import type { StorageConfig } from "./config-types.ts";

/** Thrown by {@link openStorage} with `mustExist` when there is no database yet; nothing was created. */
export class MissingDatabaseError extends Error {
  override name = "MissingDatabaseError";
}

/**
 * Opens the configured storage adapter (MongoDB indexes are created here, before serving). Adapters are imported
 * on demand, so a SQLite server never loads the MongoDB driver (~7 MB of RSS).
 *
 * @param options.mustExist open only a database that exists (the SQLite file, or a MongoDB database holding this
 *   service's data); otherwise reject with {@link MissingDatabaseError} and create nothing.
 */
export async function openStorage(
  config: StorageConfig,
  options: { mustExist?: boolean } = {},
): Promise<Storage> {
  if (config.kind === "mongo") {
    const { createMongoStorage, MissingStoreError } = await import(
      "../adapters/storage/mongo/mongo-storage.ts"
    );
    try {
      return await createMongoStorage({
        uri: config.uri,
        ...(config.dbName ? { dbName: config.dbName } : {}),
        ...(options.mustExist === true ? { mustExist: true } : {}),
      });
    } catch (err) {
      if (err instanceof MissingStoreError) throw new MissingDatabaseError(err.message);
      throw err;
    }
  }
  if (options.mustExist === true && !existsSync(config.path))
    throw new MissingDatabaseError(`no SQLite database at ${config.path}`);
  mkdirSync(dirname(config.path), { recursive: true, mode: 0o700 });
  const { createSqliteStorage } = await import("../adapters/storage/sqlite/sqlite-storage.ts");
  return createSqliteStorage({ path: config.path });
}

/**
 * Which store a configuration opens, for people: the SQLite file, or the MongoDB database and hosts (never the
 * URI's credentials), with the variable that chose it.
 */
export function describeStorage(config: StorageConfig, dataDir: string): string {
  if (config.kind === "sqlite") return `SQLite database ${config.path} (DATA_DIR=${dataDir})`;
  const db = mongoDbName(config.uri, config.dbName);
  return `MongoDB database ${db} at ${mongoHosts(config.uri)} (MONGODB_URI${config.dbName ? ", MONGODB_DB" : ""})`;
}
