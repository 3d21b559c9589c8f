// The SQLite user-data repository's cache of committed documents: a committed batch leaves what it stored in the
// cache (the next reads need no SQLite), a write that was not stored leaves nothing, and other connections'
// commits still drop it.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import type { UserData } from "../../src/ports/user-data-repository.ts";
import { createSqliteStorage, sqliteDatabaseOf } from "../../src/storage/sqlite/sqlite-storage.ts";

const dir = mkdtempSync(join(tmpdir(), "user-data-cache-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const doc = (language: string): UserData => ({
  settings: { language } as UserData["settings"],
  providerTokens: {},
  customSecrets: {},
});

describe("SQLite user-data cache", () => {
  it("keeps what a committed batch stored, and nothing of a write that was not stored", async () => {
    const path = join(dir, "cache.db");
    const storage = createSqliteStorage({ path });
    const repo = storage.userData;
    const db = sqliteDatabaseOf(storage);
    expect(await repo.compareAndSet("u", 0, doc("a"))).toBe(true);
    expect(await repo.compareAndSet("u", 1, doc("b"))).toBe(true);
    // Behind the cache's back on the same connection (which does not change data_version): reads still answer
    // the committed state the batch left in the cache, without asking SQLite.
    db.prepare("UPDATE user_data SET value = ? WHERE user_id = 'u'").run(JSON.stringify(doc("sqlite")));
    const plain = await repo.get("u");
    expect(plain).toEqual({ version: 2, value: doc("b") });
    expect(Object.isFrozen(plain?.value)).toBe(true);
    expect(await repo.get("u")).toBe(plain); // one frozen parse shared by plain reads
    const mine = await repo.get("u", { forUpdate: true });
    expect(mine).toEqual({ version: 2, value: doc("b") });
    expect(Object.isFrozen(mine?.value)).toBe(false);
    expect(mine?.value).not.toBe(plain?.value);
    // A conflicting write is not stored and leaves no entry: the next read asks SQLite.
    expect(await repo.compareAndSet("u", 1, doc("stale"))).toBe(false);
    expect((await repo.get("u"))?.value).toEqual(doc("sqlite"));
    // Another connection's commit drops the cache (data_version).
    expect(await repo.compareAndSet("u", 2, doc("c"))).toBe(true);
    expect((await repo.get("u"))?.value).toEqual(doc("c"));
    const other = new Database(path);
    other
      .prepare("UPDATE user_data SET value = ?, version = 9 WHERE user_id = 'u'")
      .run(JSON.stringify(doc("other")));
    other.close();
    await new Promise((r) => setImmediate(r)); // a new turn: the next read probes data_version
    expect(await repo.get("u")).toEqual({ version: 9, value: doc("other") });
    await storage.close();
  });
});
