import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import type { Storage } from "../ports/storage.ts";
import { createMongoStorage } from "../storage/mongo/mongo-storage.ts";
import { createSqliteStorage } from "../storage/sqlite/sqlite-storage.ts";
import type { StorageConfig } from "./config.ts";

/** Opens the configured storage adapter (MongoDB indexes are created here, before serving). */
export async function openStorage(config: StorageConfig): Promise<Storage> {
  if (config.kind === "mongo")
    return createMongoStorage({ uri: config.uri, ...(config.dbName ? { dbName: config.dbName } : {}) });
  mkdirSync(dirname(config.path), { recursive: true, mode: 0o700 });
  return createSqliteStorage({ path: config.path });
}
