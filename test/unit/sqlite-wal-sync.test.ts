// WalSync (group fdatasync of the SQLite WAL on the thread pool) with file operations the test controls, and the
// SQLite storage's user-data writes over a real file: settled only after the WAL sync, failed when it fails.

import * as fs from "node:fs";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it, vi } from "vitest";
import { createSqliteStorage, sqliteDatabaseOf } from "../../src/adapters/storage/sqlite/sqlite-storage.ts";
import { type WalFileOps, WalSync } from "../../src/adapters/storage/sqlite/sqlite-wal-sync.ts";
import { StorageUnavailableError } from "../../src/core/errors.ts";
import type { UserData } from "../../src/ports/user-data-repository.ts";
import { syntheticConversation } from "../helpers/conversation-fixtures.ts";

type Cb = (err: NodeJS.ErrnoException | null) => void;
const errno = (code: string): NodeJS.ErrnoException => Object.assign(new Error(code), { code });

/**
 * A SQLite storage on a real file whose WAL fdatasync calls, while `gate.closed`, wait in `pending` until the test
 * calls them back (otherwise they run).
 */
function gatedStorage(path: string) {
  const pending: Cb[] = [];
  const gate = { closed: false };
  const storage = createSqliteStorage({
    path,
    walFileOps: {
      ...fs,
      fdatasync: (fd: number, cb: Cb) => (gate.closed ? pending.push(cb) : fs.fdatasync(fd, cb)),
    } as WalFileOps,
  });
  return { storage, pending, gate };
}

/** File operations whose fdatasync calls wait until the test completes them. */
function controlledOps(files: Record<string, object>) {
  const syncs: { fd: number; done: Cb }[] = [];
  const opened: string[] = [];
  const closed: number[] = [];
  let nextFd = 10;
  const ops: WalFileOps = {
    open: (path, _flags, cb) => {
      const file = files[path];
      if (file === undefined) return cb(errno("ENOENT"), -1);
      opened.push(path);
      cb(null, nextFd++);
    },
    fdatasync: (fd, cb) => {
      syncs.push({ fd, done: cb });
    },
    close: (fd, cb) => {
      closed.push(fd);
      cb(null);
    },
  };
  return { ops, syncs, opened, closed };
}

/** Records each call's outcome: "pending", "ok" or the error's class name. */
function track(sync: WalSync) {
  const state = { value: "pending" };
  sync.whenDurable((err) => {
    state.value = err === null ? "ok" : err.constructor.name;
  });
  return state;
}

describe("WalSync", () => {
  it("commits made while a sync runs share the next one: one fdatasync per group", () => {
    const { ops, syncs } = controlledOps({ "/db-wal": {} });
    const sync = new WalSync("/db-wal", ops);
    const a = track(sync);
    expect(syncs).toHaveLength(1);
    const b = track(sync);
    const c = track(sync);
    expect(syncs).toHaveLength(1); // b and c wait: the running sync may have begun before their commits
    syncs[0]?.done(null);
    expect([a.value, b.value, c.value]).toEqual(["ok", "pending", "pending"]);
    expect(syncs).toHaveLength(2);
    syncs[1]?.done(null);
    expect([b.value, c.value]).toEqual(["ok", "ok"]);
    const d = track(sync);
    expect(syncs).toHaveLength(3); // idle again: a new commit starts a sync at once
    syncs[2]?.done(null);
    expect(d.value).toBe("ok");
  });

  it("a failed sync fails the commits it covered as StorageUnavailableError, and only those", () => {
    const { ops, syncs } = controlledOps({ "/db-wal": {} });
    const sync = new WalSync("/db-wal", ops);
    const a = track(sync);
    const b = track(sync);
    syncs[0]?.done(errno("EIO"));
    expect([a.value, b.value]).toEqual([StorageUnavailableError.name, "pending"]);
    syncs[1]?.done(null);
    expect(b.value).toBe("ok");
  });

  it("opens the WAL once, and needs no sync when there is none", () => {
    const { ops, syncs, opened } = controlledOps({ "/db-wal": {} });
    const sync = new WalSync("/db-wal", ops);
    track(sync);
    syncs[0]?.done(null);
    const b = track(sync);
    expect(opened).toEqual(["/db-wal"]);
    expect(syncs[1]?.fd).toBe(syncs[0]?.fd);
    syncs[1]?.done(null);
    expect(b.value).toBe("ok");

    const none = new WalSync("/missing-wal", ops);
    expect(track(none).value).toBe("ok");
    expect(track(new WalSync(null, ops)).value).toBe("ok");
  });

  it("whenSyncEnds runs after the ending sync's commits were answered; a commit made then starts the next sync", () => {
    const { ops, syncs } = controlledOps({ "/db-wal": {} });
    const sync = new WalSync("/db-wal", ops);
    expect(sync.syncing).toBe(false);
    expect(() => sync.whenSyncEnds(() => {})).toThrow(/no sync is running/);
    const events: string[] = [];
    sync.whenDurable((err) => events.push(`a ${String(err)}`));
    expect(sync.syncing).toBe(true);
    let held: { value: string } | undefined;
    sync.whenSyncEnds(() => {
      events.push("ended");
      held = track(sync); // the held-back commit
      expect(sync.syncing).toBe(true);
    });
    const waiting = track(sync); // committed during the sync, not held: covered by the next sync too
    expect(events).toEqual([]);
    syncs[0]?.done(null);
    expect(events).toEqual(["a null", "ended"]);
    expect(syncs).toHaveLength(2); // one next sync for both
    expect([held?.value, waiting.value]).toEqual(["pending", "pending"]);
    syncs[1]?.done(null);
    expect([held?.value, waiting.value]).toEqual(["ok", "ok"]);
    expect(sync.syncing).toBe(false);
    expect(syncs).toHaveLength(2);
  });

  it("close waits for the running sync before closing the file; later commits are answered at once", () => {
    const { ops, syncs, closed } = controlledOps({ "/db-wal": {} });
    const sync = new WalSync("/db-wal", ops);
    const a = track(sync);
    const b = track(sync);
    sync.close();
    expect(closed).toEqual([]);
    syncs[0]?.done(null);
    // b committed before close: closing the connection checkpointed and synced it into the database file.
    expect([a.value, b.value]).toEqual(["ok", "ok"]);
    expect(closed).toEqual([syncs[0]?.fd]);
    expect(track(sync).value).toBe("ok");
    expect(syncs).toHaveLength(1);
  });
});

const dir = mkdtempSync(join(tmpdir(), "wal-sync-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const doc = (language: string): UserData => ({
  settings: { language } as UserData["settings"],
  providerTokens: {},
  customSecrets: {},
});

describe("SQLite user-data writes over a real file", () => {
  it("commit under NORMAL and settle after an fdatasync of the WAL file; other connections see them", async () => {
    const path = join(dir, "real.db");
    const synced: string[] = [];
    const storage = createSqliteStorage({
      path,
      walFileOps: {
        open: (p, flags, cb) => {
          synced.push(`open ${p}`);
          fs.open(p, flags, cb);
        },
        fdatasync: (fd, cb) => {
          synced.push("fdatasync");
          fs.fdatasync(fd, cb);
        },
        close: fs.close,
      },
    });
    const writes = await Promise.all(
      ["a", "b", "c"].map((user) => storage.userData.compareAndSet(user, 0, doc(user))),
    );
    expect(writes).toEqual([true, true, true]);
    expect(synced).toEqual([`open ${path}-wal`, "fdatasync"]); // one batch, one sync
    // The connection's own writes outside the batches stay FULL.
    expect(sqliteDatabaseOf(storage).pragma("synchronous", { simple: true })).toBe(2);
    const other = new Database(path, { readonly: true });
    expect(other.prepare("SELECT count(*) AS n FROM user_data").get()).toEqual({ n: 3 });
    other.close();
    await storage.close();
  });

  it("writes queued while the WAL syncs are committed together in one transaction when that sync ends", async () => {
    const path = join(dir, "held.db");
    const { storage, pending, gate } = gatedStorage(path);
    const other = new Database(path, { readonly: true });
    const count = () => (other.prepare("SELECT count(*) AS n FROM user_data").get() as { n: number }).n;
    gate.closed = true;
    const first = storage.userData.compareAndSet("a", 0, doc("a"));
    await vi.waitFor(() => expect(pending).toHaveLength(1)); // a's batch committed and its sync runs
    expect(count()).toBe(1);
    const held = ["b", "c", "d"].map((u) => storage.userData.compareAndSet(u, 0, doc(u)));
    // Later turns: still held (a commit now would only be covered by the next sync).
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setTimeout(r, 5));
    expect(count()).toBe(1);
    // A read for update sees the held writes (so that chained read-modify-writes do not conflict).
    expect((await storage.userData.get("b", { forUpdate: true }))?.version).toBe(1);
    (pending.shift() as Cb)(null);
    expect(await first).toBe(true);
    expect(count()).toBe(4); // committed as the sync ended, all three in one transaction
    expect(pending).toHaveLength(1);
    gate.closed = false;
    (pending.shift() as Cb)(null);
    expect(await Promise.all(held)).toEqual([true, true, true]);
    other.close();
    await storage.close();
  });

  it("a failed WAL sync fails the batch's writes with StorageUnavailableError", async () => {
    const storage = createSqliteStorage({
      path: join(dir, "failing.db"),
      walFileOps: { ...fs, fdatasync: (_fd, cb) => cb(errno("EIO")) } as WalFileOps,
    });
    const write = storage.userData.compareAndSet("u", 0, doc("x"));
    const error = await write.then(
      () => null,
      (e: unknown) => e,
    );
    expect(Object.getPrototypeOf(error)).toBe(StorageUnavailableError.prototype);
    await storage.close();
  });

  it("in memory there is no WAL to sync", async () => {
    let calls = 0;
    const storage = createSqliteStorage({
      path: ":memory:",
      walFileOps: {
        ...fs,
        open: (...args: Parameters<WalFileOps["open"]>) => {
          calls++;
          fs.open(...args);
        },
      } as WalFileOps,
    });
    expect(await storage.userData.compareAndSet("u", 0, doc("x"))).toBe(true);
    expect(calls).toBe(0);
    await storage.close();
  });
});

describe("SQLite conversation updates over a real file", () => {
  it("commit under NORMAL and are answered only once an fdatasync of the WAL file has ended", async () => {
    const path = join(dir, "updates.db");
    const { storage, pending, gate } = gatedStorage(path);
    const conv = syntheticConversation(0, "owner");
    await storage.conversations.insert(conv);
    const other = new Database(path, { readonly: true });
    const title = () =>
      (other.prepare("SELECT title FROM conversations WHERE id = ?").get(conv.id) as { title: string }).title;
    gate.closed = true;
    let answered = false;
    const first = storage.conversations
      .update(conv.id, "owner", { title: "first", updatedAt: new Date(1) })
      .then((found) => {
        answered = true;
        return found;
      });
    await vi.waitFor(() => expect(pending).toHaveLength(1)); // committed, its sync runs
    expect(title()).toBe("first");
    expect(sqliteDatabaseOf(storage).pragma("synchronous", { simple: true })).toBe(2); // FULL again after it
    // Made while the sync runs: held until it ends (a commit now would only be covered by the next sync).
    const held = ["second", "third"].map((t, i) =>
      storage.conversations.update(conv.id, "owner", { title: t, updatedAt: new Date(i + 2) }),
    );
    await new Promise((r) => setTimeout(r, 5));
    expect(answered).toBe(false);
    expect(title()).toBe("first");
    (pending.shift() as Cb)(null);
    expect(await first).toBe(true);
    expect(title()).toBe("third"); // committed as the sync ended, in the order made
    expect(pending).toHaveLength(1);
    gate.closed = false;
    (pending.shift() as Cb)(null);
    expect(await Promise.all(held)).toEqual([true, true]);
    other.close();
    await storage.close();
  });

  it("a failed WAL sync fails the batch's updates with StorageUnavailableError", async () => {
    let fail = false;
    const storage = createSqliteStorage({
      path: join(dir, "failing-updates.db"),
      walFileOps: {
        ...fs,
        fdatasync: (fd: number, cb: Cb) => (fail ? cb(errno("EIO")) : fs.fdatasync(fd, cb)),
      } as WalFileOps,
    });
    const conv = syntheticConversation(0, "owner");
    await storage.conversations.insert(conv);
    fail = true;
    const error = await storage.conversations
      .update(conv.id, "owner", { title: "x", updatedAt: new Date(1) })
      .then(
        () => null,
        (e: unknown) => e,
      );
    expect(Object.getPrototypeOf(error)).toBe(StorageUnavailableError.prototype);
    await storage.close();
  });
});
