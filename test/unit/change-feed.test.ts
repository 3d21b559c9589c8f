import { describe, expect, it, vi } from "vitest";
import { createMongoChangeLog } from "../../src/adapters/storage/mongo/mongo-change-log.ts";
import { COLLECTIONS } from "../../src/adapters/storage/mongo/mongo-indexes.ts";
import { createMongoStorageFromDb } from "../../src/adapters/storage/mongo/mongo-storage.ts";
import { ChangeFeed, ChangeTooOldError } from "../../src/domain/change-feed.ts";
import type { ChangeRecord } from "../../src/ports/change-log.ts";
import { parseSandboxChange } from "../../src/ports/change-log.ts";
import { InMemoryChangeLog } from "../helpers/fakes/index.ts";
import { createMongoStandin } from "../helpers/mongo-standin.ts";

const entry = (key: string, ownerId = "u") => ({ ownerId, topic: "sandbox" as const, key, body: "{}" });

/** Collects what a follow yields until `n` entries arrived (or 2 s passed). */
async function take(feed: ChangeFeed, after: number, n: number, filter = (_: ChangeRecord) => true) {
  const abort = new AbortController();
  const got: ChangeRecord[] = [];
  const timer = setTimeout(() => abort.abort(), 2000);
  for await (const c of feed.follow(after, filter, abort.signal)) {
    got.push(c);
    if (got.length === n) break;
  }
  clearTimeout(timer);
  return got;
}

describe("ChangeFeed", () => {
  it("a follower from an older position catches up alone, then gets the live entries, each once and in order", async () => {
    const log = new InMemoryChangeLog();
    const feed = new ChangeFeed(log, { pollMs: 5, batch: 2 });
    await log.append([entry("a"), entry("b"), entry("c")]);
    // A live follower keeps the shared reader at the head.
    const live = take(feed, await feed.head(), 2);
    const resumed = take(feed, 1, 4);
    await new Promise((r) => setTimeout(r, 20));
    await log.append([entry("d"), entry("e", "other")]);
    feed.poke();
    expect((await resumed).map((c) => c.key)).toEqual(["b", "c", "d", "e"]);
    expect((await live).map((c) => c.seq)).toEqual([4, 5]);
    feed.close();
  });

  it("filters per follower, and refuses a position older than the log keeps", async () => {
    const log = new InMemoryChangeLog();
    const feed = new ChangeFeed(log, { pollMs: 5 });
    await log.append([entry("a", "u"), entry("b", "v"), entry("c", "u")]);
    expect((await take(feed, 0, 2, (c) => c.ownerId === "u")).map((c) => c.key)).toEqual(["a", "c"]);
    await new Promise((r) => setTimeout(r, 5));
    await log.prune(new Date());
    await expect(take(feed, 1, 1)).rejects.toBeInstanceOf(ChangeTooOldError);
    feed.close();
  });
});

describe("MongoDB change log", () => {
  it("stops at a number handed out but not stored, and reads past it once its writer is presumed dead", async () => {
    const db = createMongoStandin();
    const log = createMongoChangeLog(db as never);
    await log.append([entry("a")]);
    // A writer took number 2 and died before storing its entry.
    await db.collection(COLLECTIONS.counters).updateOne({ _id: "changes" }, { $inc: { seq: 1 } });
    await log.append([entry("c")]);
    expect((await log.read(0, 10)).map((c) => c.seq)).toEqual([1]);
    expect(await log.read(1, 10)).toEqual([]);
    vi.useFakeTimers({ toFake: ["Date"] });
    try {
      vi.setSystemTime(Date.now() + 6_000);
      expect((await log.read(1, 10)).map((c) => [c.seq, c.key])).toEqual([[3, "c"]]);
    } finally {
      vi.useRealTimers();
    }
    expect(await log.head()).toBe(3);
  });
});

describe("two servers on one MongoDB (stand-in)", () => {
  it("a sandbox created and paused through one server's storage reaches the other server's feed, in order", async () => {
    const db = createMongoStandin();
    const a = await createMongoStorageFromDb(db as never);
    const b = await createMongoStorageFromDb(db as never);
    const feedB = new ChangeFeed(b.changes, { pollMs: 5 });
    const from = await feedB.head();
    const now = new Date();
    const record = {
      id: "sbx1",
      ownerId: "u",
      specId: "default",
      runtime: "process",
      handle: {},
      sessionApiKey: "sealed",
      status: "STARTING" as const,
      createdAt: now,
      updatedAt: now,
    };
    const seen = take(feedB, from, 3, (c) => c.topic === "sandbox");
    expect(await a.sandboxes.create(record, { maxPerUser: 5, maxRunning: 5 })).toMatchObject({
      created: true,
    });
    expect(await a.sandboxes.transition("sbx1", ["STARTING"], "RUNNING", new Date())).toBe(true);
    expect(await a.sandboxes.transition("sbx1", ["RUNNING"], "PAUSED", new Date())).toBe(true);
    const got = await seen;
    expect(got.map((c) => parseSandboxChange(c.body)?.record.status)).toEqual([
      "STARTING",
      "RUNNING",
      "PAUSED",
    ]);
    expect(got.map((c) => c.key)).toEqual(["sbx1", "sbx1", "sbx1"]);
    feedB.close();
  });
});
