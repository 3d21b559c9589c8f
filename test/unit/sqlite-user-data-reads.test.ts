// The SQLite user-data repository keeps no cache of its own: every read answers what SQLite holds now (this
// connection's writes, and other connections' commits at once) as the reader's own copy.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import { createSqliteStorage, sqliteDatabaseOf } from "../../src/adapters/storage/sqlite/sqlite-storage.ts";
import type { UserData } from "../../src/ports/user-data-repository.ts";

const dir = mkdtempSync(join(tmpdir(), "user-data-reads-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const doc = (language: string): UserData => ({
  settings: { language } as UserData["settings"],
  providerTokens: {},
  customSecrets: {},
});

describe("SQLite user-data reads", () => {
  it("answer the stored row every time, each reader its own copy", async () => {
    const path = join(dir, "reads.db");
    const storage = createSqliteStorage({ path });
    const repo = storage.userData;
    const db = sqliteDatabaseOf(storage);
    expect(await repo.compareAndSet("u", 0, doc("a"))).toBe(true);
    expect(await repo.compareAndSet("u", 1, doc("b"))).toBe(true);
    const first = await repo.get("u");
    expect(first).toEqual({ version: 2, value: doc("b") });
    const second = await repo.get("u");
    expect(second?.value).not.toBe(first?.value);
    expect(Object.isFrozen(first?.value)).toBe(false);
    // Changed behind the repository's back on the same connection: the next read sees it.
    db.prepare("UPDATE user_data SET value = ? WHERE user_id = 'u'").run(JSON.stringify(doc("sqlite")));
    expect((await repo.get("u"))?.value).toEqual(doc("sqlite"));
    // A conflicting write is not stored.
    expect(await repo.compareAndSet("u", 1, doc("stale"))).toBe(false);
    expect((await repo.get("u"))?.value).toEqual(doc("sqlite"));
    // Another connection's commit is seen at once, in the same event-loop turn.
    const other = new Database(path);
    other
      .prepare("UPDATE user_data SET value = ?, version = 9 WHERE user_id = 'u'")
      .run(JSON.stringify(doc("other")));
    other.close();
    expect(await repo.get("u")).toEqual({ version: 9, value: doc("other") });
    await storage.close();
  });
});
