import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import { SQLITE_SCHEMA_VERSION } from "../../src/adapters/storage/sqlite/sqlite-schema.ts";
import { createSqliteStorage, sqliteDatabaseOf } from "../../src/adapters/storage/sqlite/sqlite-storage.ts";
import { StorageUnavailableError } from "../../src/core/errors.ts";
import { DEFAULT_USER_DATA_LIMITS, UserDataStore } from "../../src/domain/user-data-store.ts";
import type { UserData } from "../../src/ports/user-data-repository.ts";
import { syntheticConversation } from "../helpers/conversation-fixtures.ts";
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

  describe("group commit of user data", () => {
    const doc = (counter: number): UserData => ({
      settings: { counter },
      providerTokens: {},
      customSecrets: {},
    });
    const counterOf = (path: string, user: string): unknown => {
      const raw = new Database(path, { readonly: true });
      try {
        const row = raw.prepare("SELECT value FROM user_data WHERE user_id = ?").get(user) as
          | { value: string }
          | undefined;
        return row === undefined ? undefined : (JSON.parse(row.value) as UserData).settings?.counter;
      } finally {
        raw.close();
      }
    };

    it("chains concurrent read-modify-writes of one user into one commit, each durable when acknowledged", async () => {
      const path = join(dir, "group.db");
      const storage = createSqliteStorage({ path });
      // No write rate: fifty writes at once are the point here.
      const store = new UserDataStore(storage.userData, { ...DEFAULT_USER_DATA_LIMITS, writesPerSecond: 0 });
      const seen: unknown[] = [];
      await Promise.all(
        Array.from({ length: 50 }, () =>
          store
            .mutate("u", (data) => {
              const s = data.settings ?? {};
              s.counter = Number(s.counter ?? 0) + 1;
              data.settings = s;
              return s.counter;
            })
            // Acknowledged only once committed: another connection sees at least this value.
            .then((counter) => seen.push([counter, counterOf(path, "u")])),
        ),
      );
      expect(await storage.userData.get("u")).toStrictEqual({ version: 50, value: doc(50) });
      for (const [mine, durable] of seen as [number, number][]) expect(durable).toBeGreaterThanOrEqual(mine);
      await storage.close();
    });

    it("answers plain reads from committed state only, reads for update from the queued writes", async () => {
      const storage = createSqliteStorage({ path: join(dir, "queued-reads.db") });
      const write = storage.userData.compareAndSet("u", 0, doc(1));
      expect(await storage.userData.get("u")).toBeNull();
      expect(await storage.userData.get("u", { forUpdate: true })).toStrictEqual({
        version: 1,
        value: doc(1),
      });
      expect(await write).toBe(true);
      expect(await storage.userData.get("u")).toStrictEqual({ version: 1, value: doc(1) });
      await storage.close();
    });

    it("stores no write chained on a queued write that lost to another connection", async () => {
      const path = join(dir, "chain.db");
      const storage = createSqliteStorage({ path });
      await storage.userData.compareAndSet("u", 0, doc(1));
      const first = storage.userData.compareAndSet("u", 1, doc(2));
      const queued = await storage.userData.get("u", { forUpdate: true });
      const chained = storage.userData.compareAndSet("u", queued?.version ?? 0, doc(3));
      const other = new Database(path);
      other
        .prepare("UPDATE user_data SET value = ?, version = version + 1 WHERE user_id = 'u'")
        .run(JSON.stringify(doc(100)));
      other.close();
      expect(await first).toBe(false);
      expect(await chained).toBe(false);
      expect(await storage.userData.get("u")).toStrictEqual({ version: 2, value: doc(100) });
      await storage.close();
    });

    it("stores each user's chained writes of one batch to the version the chain leads to, conflicts left out", async () => {
      const storage = createSqliteStorage({ path: join(dir, "chains.db") });
      await storage.userData.compareAndSet("old", 0, doc(1));
      // One batch: a chain of three on an existing row, a chain of two on a new row, a conflict inside each.
      const forUpdate = async (user: string) =>
        (await storage.userData.get(user, { forUpdate: true }))?.version ?? 0;
      const writes: Promise<boolean>[] = [];
      writes.push(storage.userData.compareAndSet("old", await forUpdate("old"), doc(2)));
      writes.push(storage.userData.compareAndSet("new", await forUpdate("new"), doc(10)));
      writes.push(storage.userData.compareAndSet("old", 1, doc(99)));
      writes.push(storage.userData.compareAndSet("old", await forUpdate("old"), doc(3)));
      writes.push(storage.userData.compareAndSet("new", 0, doc(98)));
      writes.push(storage.userData.compareAndSet("new", await forUpdate("new"), doc(11)));
      writes.push(storage.userData.compareAndSet("old", await forUpdate("old"), doc(4)));
      expect(await Promise.all(writes)).toStrictEqual([true, true, false, true, false, true, true]);
      expect(await storage.userData.get("old")).toStrictEqual({ version: 4, value: doc(4) });
      expect(await storage.userData.get("new")).toStrictEqual({ version: 2, value: doc(11) });
      // The next write builds on the chain's last version.
      expect(await storage.userData.compareAndSet("old", 4, doc(5))).toBe(true);
      expect(await storage.userData.compareAndSet("new", 1, doc(12))).toBe(false);
      expect(await storage.userData.get("old")).toStrictEqual({ version: 5, value: doc(5) });
      await storage.close();
    });

    it("hands a queued document to one reader for update; its edits reach neither later readers nor the store", async () => {
      const storage = createSqliteStorage({ path: join(dir, "handover.db") });
      const next = doc(1);
      const write = storage.userData.compareAndSet("u", 0, next, JSON.stringify(next));
      const first = await storage.userData.get("u", { forUpdate: true });
      expect(first).toStrictEqual({ version: 1, value: doc(1) });
      (first?.value.settings as Record<string, unknown>).counter = 42;
      expect(await storage.userData.get("u", { forUpdate: true })).toStrictEqual({
        version: 1,
        value: doc(1),
      });
      expect(await write).toBe(true);
      expect(await storage.userData.get("u")).toStrictEqual({ version: 1, value: doc(1) });
      await storage.close();
    });

    it("rejects every write of a batch whose commit fails and keeps none of them", async () => {
      const path = join(dir, "failed-batch.db");
      const storage = createSqliteStorage({ path });
      await storage.userData.compareAndSet("a", 0, doc(1));
      sqliteDatabaseOf(storage).pragma("busy_timeout = 50");
      const other = new Database(path);
      other.exec("BEGIN IMMEDIATE");
      const writes = [
        storage.userData.compareAndSet("a", 1, doc(2)),
        storage.userData.compareAndSet("b", 0, doc(1)),
      ];
      try {
        for (const w of writes) await expect(w).rejects.toSatisfy(isStorageUnavailable);
      } finally {
        other.exec("ROLLBACK");
        other.close();
      }
      expect(await storage.userData.get("a")).toStrictEqual({ version: 1, value: doc(1) });
      expect(await storage.userData.get("b")).toBeNull();
      await storage.close();
    });

    it("hands each reader its own copy, so a reader cannot change what others read", async () => {
      const storage = createSqliteStorage({ path: join(dir, "copies.db") });
      await storage.userData.compareAndSet("u", 0, doc(1));
      const read = await storage.userData.get("u");
      (read?.value.settings as Record<string, unknown>).counter = 99;
      expect(await storage.userData.get("u")).toStrictEqual({ version: 1, value: doc(1) });
      await storage.userData.compareAndSet("u", 1, doc(2));
      expect(await storage.userData.get("u")).toStrictEqual({ version: 2, value: doc(2) });
      await storage.close();
    });

    it("sees another connection's commit from the next event-loop turn on, even one that keeps the version", async () => {
      const path = join(dir, "other-writer.db");
      const storage = createSqliteStorage({ path });
      await storage.userData.compareAndSet("u", 0, doc(1));
      expect(await storage.userData.get("u")).toStrictEqual({ version: 1, value: doc(1) });
      const other = new Database(path);
      try {
        other.prepare("UPDATE user_data SET value = ? WHERE user_id = 'u'").run(JSON.stringify(doc(7)));
        await new Promise((resolve) => setImmediate(resolve));
        expect(await storage.userData.get("u")).toStrictEqual({ version: 1, value: doc(7) });
        other.prepare("DELETE FROM user_data WHERE user_id = 'u'").run();
        await new Promise((resolve) => setImmediate(resolve));
        expect(await storage.userData.get("u")).toBeNull();
      } finally {
        other.close();
      }
      await storage.close();
    });

    it("keeps its change token while nothing is written, within a turn and across turns", async () => {
      const path = join(dir, "token.db");
      const storage = createSqliteStorage({ path });
      await storage.userData.compareAndSet("u", 0, doc(1));
      const token = storage.userData.changeToken();
      expect(storage.userData.changeToken()).toBe(token);
      await new Promise((resolve) => setImmediate(resolve));
      expect(storage.userData.changeToken()).toBe(token);
      const other = new Database(path);
      try {
        // A write of another connection to any table, even one that keeps every version, changes it.
        other.prepare("UPDATE user_data SET value = ? WHERE user_id = 'u'").run(JSON.stringify(doc(7)));
        await new Promise((resolve) => setImmediate(resolve));
        const next = storage.userData.changeToken();
        expect(next).not.toBe(token);
        await new Promise((resolve) => setImmediate(resolve));
        expect(storage.userData.changeToken()).toBe(next);
      } finally {
        other.close();
      }
      await storage.close();
    });

    it("keeps nothing read inside a transaction that rolls back", async () => {
      const storage = createSqliteStorage({ path: join(dir, "rolled-back.db") });
      await storage.userData.compareAndSet("u", 0, doc(1));
      expect(await storage.userData.get("u")).toStrictEqual({ version: 1, value: doc(1) });
      const db = sqliteDatabaseOf(storage);
      db.exec("BEGIN");
      expect(await storage.userData.compareAndSet("u", 1, doc(2))).toBe(true);
      expect(await storage.userData.get("u")).toStrictEqual({ version: 2, value: doc(2) });
      db.exec("ROLLBACK");
      expect(await storage.userData.get("u")).toStrictEqual({ version: 1, value: doc(1) });
      await storage.close();
    });
  });

  describe("group commit of conversation updates", () => {
    const titleOf = (path: string, id: string): unknown => {
      const raw = new Database(path, { readonly: true });
      try {
        return (raw.prepare("SELECT title FROM conversations WHERE id = ?").get(id) as { title: string })
          .title;
      } finally {
        raw.close();
      }
    };

    it("keeps the order of concurrent updates: the last one's values are stored, each committed when acknowledged", async () => {
      const path = join(dir, "updates.db");
      const storage = createSqliteStorage({ path });
      const conv = syntheticConversation(0, "owner");
      await storage.conversations.insert(conv);
      const seen: [number, unknown][] = [];
      const results = await Promise.all(
        Array.from({ length: 50 }, (_, i) =>
          storage.conversations
            .update(conv.id, "owner", { title: `t${i}`, metrics: { turn: i }, updatedAt: new Date(i + 1) })
            .then((found) => {
              seen.push([i, titleOf(path, conv.id)]);
              return found;
            }),
        ),
      );
      expect(results).toStrictEqual(Array(50).fill(true));
      // Acknowledged only once committed: another connection sees the batch's last value by then.
      for (const [, title] of seen) expect(title).toBe("t49");
      expect(await storage.conversations.get(conv.id, "owner")).toStrictEqual({
        ...conv,
        title: "t49",
        metrics: { turn: 49 },
        updatedAt: new Date(50),
      });
      // A missing conversation (or another owner's) is reported as not found, the others of the batch stored.
      const mixed = await Promise.all([
        storage.conversations.update(conv.id, "someone-else", { title: "theirs", updatedAt: new Date(60) }),
        storage.conversations.update("f".repeat(32), "owner", { title: "none", updatedAt: new Date(61) }),
        storage.conversations.update(conv.id, "owner", { title: "mine", updatedAt: new Date(62) }),
      ]);
      expect(mixed).toStrictEqual([false, false, true]);
      expect((await storage.conversations.get(conv.id, "owner"))?.title).toBe("mine");
      await storage.close();
    });

    it("stores queued updates before a later write of the conversation, in the order they were made", async () => {
      const storage = createSqliteStorage({ path: join(dir, "update-order.db") });
      const conv = syntheticConversation(0, "owner");
      await storage.conversations.insert(conv);
      // Made in one turn: the update is queued, the sub-conversation's write runs at once, after it.
      const updated = storage.conversations.update(conv.id, "owner", {
        title: "before",
        updatedAt: new Date(5),
      });
      const added = storage.conversations.addSubConversation(conv.id, "a".repeat(32), new Date(6));
      expect(await Promise.all([updated, added])).toStrictEqual([true, true]);
      expect(await storage.conversations.get(conv.id, "owner")).toMatchObject({
        title: "before",
        subConversationIds: ["a".repeat(32)],
        updatedAt: new Date(6),
      });
      // An update made before a delete finds the conversation; the delete then removes it.
      const last = storage.conversations.update(conv.id, "owner", { title: "last", updatedAt: new Date(7) });
      const deleted = storage.conversations.delete(conv.id, "owner");
      expect(await Promise.all([last, deleted])).toStrictEqual([true, true]);
      expect(await storage.conversations.get(conv.id, "owner")).toBeNull();
      await storage.close();
    });

    it("rejects every update of a batch whose commit fails and keeps none of them", async () => {
      const path = join(dir, "failed-updates.db");
      const storage = createSqliteStorage({ path });
      const a = syntheticConversation(0, "owner");
      const b = syntheticConversation(1, "owner");
      await storage.conversations.insert(a);
      await storage.conversations.insert(b);
      sqliteDatabaseOf(storage).pragma("busy_timeout = 50");
      const other = new Database(path);
      other.exec("BEGIN IMMEDIATE");
      const updates = [
        storage.conversations.update(a.id, "owner", { title: "a2", updatedAt: new Date(1) }),
        storage.conversations.update(b.id, "owner", { title: "b2", updatedAt: new Date(2) }),
      ];
      try {
        for (const u of updates) await expect(u).rejects.toSatisfy(isStorageUnavailable);
      } finally {
        other.exec("ROLLBACK");
        other.close();
      }
      expect((await storage.conversations.get(a.id, "owner"))?.title).toBe(a.title);
      expect((await storage.conversations.get(b.id, "owner"))?.title).toBe(b.title);
      await storage.close();
    });

    it("runs an update at once inside a transaction of the caller's own", async () => {
      const storage = createSqliteStorage({ path: join(dir, "update-in-transaction.db") });
      const conv = syntheticConversation(0, "owner");
      await storage.conversations.insert(conv);
      const db = sqliteDatabaseOf(storage);
      db.exec("BEGIN");
      const update = storage.conversations.update(conv.id, "owner", {
        title: "inside",
        updatedAt: new Date(1),
      });
      expect(db.prepare("SELECT title FROM conversations WHERE id = ?").get(conv.id)).toStrictEqual({
        title: "inside",
      });
      db.exec("ROLLBACK");
      expect(await update).toBe(true);
      expect((await storage.conversations.get(conv.id, "owner"))?.title).toBe(conv.title);
      await storage.close();
    });

    it("keeps every acknowledged update when its process is killed with SIGKILL", async () => {
      const path = join(dir, "killed.db");
      const setup = createSqliteStorage({ path });
      const conv = syntheticConversation(0, "owner");
      await setup.conversations.insert(conv);
      await setup.close();
      const writer = spawn(
        process.execPath,
        [join(import.meta.dirname, "..", "helpers", "sqlite-update-writer.ts"), path, conv.id, "owner"],
        { stdio: ["ignore", "pipe", "inherit"] },
      );
      let acknowledged = 0;
      let out = "";
      await new Promise<void>((resolve, reject) => {
        writer.on("error", reject);
        writer.on("exit", (code) => reject(new Error(`the writer exited (${code}) before it was killed`)));
        writer.stdout.on("data", (d: Buffer) => {
          out += d.toString();
          const lines = out.split("\n");
          out = lines.pop() ?? "";
          for (const line of lines) acknowledged = Number(line);
          if (acknowledged >= 200) resolve();
        });
      });
      writer.removeAllListeners("exit");
      const exited = new Promise((resolve) => writer.on("exit", resolve));
      writer.kill("SIGKILL");
      await exited;
      // Updates the writer made after the last line read may be stored as well, never fewer.
      const reopened = createSqliteStorage({ path });
      const title = (await reopened.conversations.get(conv.id, "owner"))?.title ?? "";
      expect(Number(title.replace("title ", ""))).toBeGreaterThanOrEqual(acknowledged);
      await reopened.close();
    });
  });
});
