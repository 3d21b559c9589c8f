import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import { StorageUnavailableError } from "../../src/core/errors.ts";
import { SQLITE_SCHEMA_VERSION } from "../../src/storage/sqlite/sqlite-schema.ts";
import { createSqliteStorage, sqliteDatabaseOf } from "../../src/storage/sqlite/sqlite-storage.ts";
import { describeStorageContract } from "./storage-contract.ts";

/**
 * `instanceof StorageUnavailableError` cannot be used: ConnectError's Symbol.hasInstance answers for every subclass
 * by ConnectError's own rules (false for a renamed subclass). Compare prototypes instead.
 */
const isStorageUnavailable = (error: unknown): boolean =>
  error instanceof Error && Object.getPrototypeOf(error) === StorageUnavailableError.prototype;

const dir = mkdtempSync(join(tmpdir(), "storage-sqlite-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// Every make() opens a new connection on the same file, as the contract requires.
const file = join(dir, "contract.db");
describeStorageContract("sqlite", async () => createSqliteStorage({ path: file }));

describe("sqlite adapter", () => {
  it("opens in WAL mode with synchronous = FULL and a busy timeout", async () => {
    const storage = createSqliteStorage({ path: join(dir, "pragmas.db") });
    const db = sqliteDatabaseOf(storage);
    expect(db.pragma("journal_mode", { simple: true })).toBe("wal");
    expect(db.pragma("synchronous", { simple: true })).toBe(2); // FULL
    expect(db.pragma("busy_timeout", { simple: true })).toBe(5000);
    await storage.close();
  });

  it("works in memory", async () => {
    const storage = createSqliteStorage({ path: ":memory:" });
    expect(storage.kind).toBe("sqlite");
    await storage.ping();
    await storage.userData.compareAndSet("u", 0, { settings: null, providerTokens: {}, customSecrets: {} });
    expect((await storage.userData.get("u"))?.version).toBe(1);
    await storage.close();
  });

  it("records the schema version and refuses a file from a newer schema", async () => {
    const path = join(dir, "version.db");
    await createSqliteStorage({ path }).close();
    const raw = new Database(path);
    expect(raw.pragma("user_version", { simple: true })).toBe(SQLITE_SCHEMA_VERSION);
    raw.pragma(`user_version = ${SQLITE_SCHEMA_VERSION + 1}`);
    raw.close();
    expect(() => createSqliteStorage({ path })).toThrow(/newer/);
  });

  it("reports a file that cannot be opened as StorageUnavailableError", () => {
    let thrown: unknown;
    try {
      createSqliteStorage({ path: join(dir, "missing-dir", "x.db") });
    } catch (error: unknown) {
      thrown = error;
    }
    expect(thrown).toSatisfy(isStorageUnavailable);
  });

  it("reports use after close as StorageUnavailableError; close is idempotent", async () => {
    const storage = createSqliteStorage({ path: join(dir, "closed.db") });
    await storage.close();
    await storage.close();
    await expect(storage.ping()).rejects.toSatisfy(isStorageUnavailable);
    await expect(storage.userData.get("u")).rejects.toSatisfy(isStorageUnavailable);
  });

  it("reports a write lock held past the busy timeout as StorageUnavailableError", async () => {
    const path = join(dir, "busy.db");
    const storage = createSqliteStorage({ path });
    const db = sqliteDatabaseOf(storage);
    db.pragma("busy_timeout = 50");
    const other = new Database(path);
    other.exec("BEGIN IMMEDIATE");
    try {
      await expect(
        storage.userData.compareAndSet("u", 0, { settings: null, providerTokens: {}, customSecrets: {} }),
      ).rejects.toSatisfy(isStorageUnavailable);
    } finally {
      other.exec("ROLLBACK");
      other.close();
    }
    await storage.close();
  });
});
