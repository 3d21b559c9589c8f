// SQLite gives the space freed by deletes back: new files are created in auto_vacuum=INCREMENTAL mode, older
// files are converted once at open, and Storage.compact (the sweep) returns freed pages to the file system.
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import { createSqliteStorage, sqliteDatabaseOf } from "../../src/adapters/storage/sqlite/sqlite-storage.ts";
import { conversationRecord } from "../helpers/conversation-fixtures.ts";

const dir = mkdtempSync(join(tmpdir(), "aws-compact-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const size = (path: string): number => {
  let n = 0;
  for (const suffix of ["", "-wal"]) {
    try {
      n += statSync(`${path}${suffix}`).size;
    } catch {
      // absent
    }
  }
  return n;
};

describe("SQLite space given back", () => {
  it("converts a file of an older build (auto_vacuum NONE) once, keeping its data", async () => {
    const path = join(dir, "old.sqlite");
    const old = new Database(path);
    old.exec("CREATE TABLE legacy (v TEXT); INSERT INTO legacy VALUES ('kept');");
    expect(old.pragma("auto_vacuum", { simple: true })).toBe(0);
    old.close();
    const storage = createSqliteStorage({ path });
    const db = sqliteDatabaseOf(storage);
    expect(db.pragma("auto_vacuum", { simple: true })).toBe(2);
    expect(db.prepare("SELECT v FROM legacy").pluck().get()).toBe("kept");
    await storage.close();
  });

  it("a deleted conversation's events give their pages back to the file system through compact", async () => {
    const path = join(dir, "new.sqlite");
    const storage = createSqliteStorage({ path });
    expect(sqliteDatabaseOf(storage).pragma("auto_vacuum", { simple: true })).toBe(2);
    const baseline = size(path);
    const owner = "compact-owner";
    const conversationId = "c".repeat(32);
    await storage.conversations.insert(conversationRecord({ id: conversationId, ownerId: owner }));
    const body = JSON.stringify({ text: "x".repeat(2000) });
    for (let batch = 0; batch < 20; batch++)
      await storage.events.append(
        Array.from({ length: 100 }, (_, i) => ({
          ownerId: owner,
          conversationId,
          id: `e-${batch}-${i}`,
          kind: "MessageEvent",
          timestampUs: batch * 1000 + i,
          body,
        })),
      );
    sqliteDatabaseOf(storage).pragma("wal_checkpoint(TRUNCATE)");
    const grown = size(path);
    expect(grown - baseline).toBeGreaterThan(4_000_000);
    expect(await storage.conversations.delete(conversationId, owner)).toBe(true);
    for (let i = 0; i < 4; i++) await storage.compact();
    sqliteDatabaseOf(storage).pragma("wal_checkpoint(TRUNCATE)");
    const after = size(path);
    expect(after - baseline).toBeLessThan(400_000);
    await storage.close();
  });
});
