import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import type { Storage } from "../ports/storage.ts";
import type { StorageConfig } from "./config.ts";

/**
 * Opens the configured storage adapter (MongoDB indexes are created here, before serving). Adapters are imported
 * on demand, so a SQLite server never loads the MongoDB driver (~7 MB of RSS).
 */
export async function openStorage(config: StorageConfig): Promise<Storage> {
  if (config.kind === "mongo") {
    const { createMongoStorage } = await import("../storage/mongo/mongo-storage.ts");
    return createMongoStorage({ uri: config.uri, ...(config.dbName ? { dbName: config.dbName } : {}) });
  }
  mkdirSync(dirname(config.path), { recursive: true, mode: 0o700 });
  const { createSqliteStorage } = await import("../storage/sqlite/sqlite-storage.ts");
  return createSqliteStorage({ path: config.path });
}
