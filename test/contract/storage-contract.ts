import { createHash, randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ApiKeyRecord } from "../../src/ports/api-key-repository.ts";
import type {
  ConversationFilter,
  ConversationRecord,
  StartTaskRecord,
  StartTaskStatus,
} from "../../src/ports/conversation-repository.ts";
import type { EventRecord } from "../../src/ports/event-repository.ts";
import type { Cursor, Page } from "../../src/ports/page.ts";
import type { SandboxRecord } from "../../src/ports/sandbox-repository.ts";
import type { Storage } from "../../src/ports/storage.ts";
import type { UserData, UserDataRepository } from "../../src/ports/user-data-repository.ts";
import { conversationRecord } from "../helpers/conversation-fixtures.ts";

// ---- record builders -------------------------------------------------------------------------------------------

const hex = (): string => randomUUID().replaceAll("-", "");
const newOwner = (): string => `user-${hex()}`;
/** n distinct hex ids in ascending order. */
const sortedIds = (n: number): string[] => Array.from({ length: n }, hex).sort();
const T0 = Date.UTC(2025, 0, 1);
/** A date `seconds` after a fixed origin (millisecond precision, as both adapters store). */
const at = (seconds: number): Date => new Date(T0 + seconds * 1000);
const cursorOf = (item: { createdAt: Date; id: string }): Cursor => ({
  createdAt: item.createdAt,
  id: item.id,
});
const ids = (items: readonly { id: string }[]): string[] => items.map((i) => i.id);
const byId = <T extends { id: string }>(items: readonly T[]): T[] =>
  [...items].sort((a, b) => (a.id < b.id ? -1 : 1));

function userData(counter: number): UserData {
  return { settings: { counter, llm_model: "anthropic/claude" }, providerTokens: {}, customSecrets: {} };
}

function apiKey(userId: string, createdAt: Date, overrides: Partial<ApiKeyRecord> = {}): ApiKeyRecord {
  return {
    id: `k${hex().slice(0, 12)}`,
    userId,
    hash: createHash("sha256").update(randomUUID()).digest("hex"),
    label: "laptop",
    createdAt,
    revokedAt: null,
    ...overrides,
  };
}

function sandbox(ownerId: string, createdAt: Date, overrides: Partial<SandboxRecord> = {}): SandboxRecord {
  return {
    id: hex(),
    ownerId,
    specId: "default",
    runtime: "process",
    handle: { pid: 4242, port: 41234, args: ["--x", 1, true, null], nested: { dir: "/tmp/ws" } },
    sessionApiKey: "sealed:v1:abc",
    status: "RUNNING",
    createdAt,
    updatedAt: createdAt,
    ...overrides,
  };
}

function conversation(
  ownerId: string,
  createdAt: Date,
  overrides: Partial<ConversationRecord> = {},
): ConversationRecord {
  // Every field set, so that each one's round trip is checked.
  return conversationRecord({
    ownerId,
    selectedRepository: "octo/repo",
    selectedBranch: "main",
    gitProvider: "github",
    title: "A conversation",
    trigger: "gui",
    prNumber: [12, 34],
    llmModel: "anthropic/claude-sonnet",
    metrics: { accumulated_cost: 0.25, token_usage: { prompt_tokens: 10, completion_tokens: 3 }, costs: [] },
    createdAt,
    ...overrides,
  });
}

function startTask(
  ownerId: string,
  createdAt: Date,
  overrides: Partial<StartTaskRecord> = {},
): StartTaskRecord {
  return {
    id: hex(),
    ownerId,
    status: "WORKING",
    detail: null,
    appConversationId: null,
    sandboxId: null,
    agentServerUrl: null,
    request: { initial_message: { content: [{ type: "text", text: "hello" }] }, selected_repository: null },
    createdAt,
    updatedAt: createdAt,
    ...overrides,
  };
}

function event(
  ownerId: string,
  conversationId: string,
  us: number,
  overrides: Partial<EventRecord> = {},
): EventRecord {
  const id = overrides.id ?? randomUUID();
  return {
    ownerId,
    conversationId,
    id,
    kind: "MessageEvent",
    timestampUs: T0 * 1000 + us,
    body: JSON.stringify({ id, kind: overrides.kind ?? "MessageEvent", "a.b": { $x: [1, null, "é"] } }),
    ...overrides,
  };
}

/** Follows `next` cursors from the first page to the last; returns every page. */
async function allPages<T>(fetch: (after: Cursor | null) => Promise<Page<T>>): Promise<Page<T>[]> {
  const pages: Page<T>[] = [];
  let after: Cursor | null = null;
  for (let i = 0; i < 1000; i++) {
    const page: Page<T> = await fetch(after);
    pages.push(page);
    if (page.next === null) return pages;
    after = page.next;
  }
  throw new Error("paging did not terminate");
}

// ---- the suite -------------------------------------------------------------------------------------------------

/**
 * Registers the storage contract tests: every method of every storage port, run against one adapter.
 *
 * `make` opens a storage on the suite's backing store. Every call must reach the same data: the suite opens a
 * second storage for cross-connection concurrency and closes and reopens to prove durability. Tests use fresh
 * random owners and ids, so the store may hold other data; global listings are checked by inclusion and counts by
 * difference. The suite closes every storage it opened.
 */
export function describeStorageContract(name: string, make: () => Promise<Storage>): void {
  describe(`storage contract: ${name}`, () => {
    const opened: Storage[] = [];
    const open = async (): Promise<Storage> => {
      const s = await make();
      opened.push(s);
      return s;
    };
    let storage: Storage;

    beforeAll(async () => {
      storage = await open();
    });

    afterAll(async () => {
      for (const s of opened) await s.close();
    });

    it("identifies its kind and answers ping", async () => {
      expect(["sqlite", "mongo"]).toContain(storage.kind);
      await expect(storage.ping()).resolves.toBeUndefined();
    });

    describe("userData", () => {
      it("returns null for a user without a document", async () => {
        expect(await storage.userData.get(newOwner())).toBeNull();
      });

      it("creates with expected version 0 at version 1", async () => {
        const user = newOwner();
        expect(await storage.userData.compareAndSet(user, 0, userData(1))).toBe(true);
        expect(await storage.userData.get(user)).toStrictEqual({ version: 1, value: userData(1) });
      });

      it("refuses a second create (version 0) without throwing and keeps the first value", async () => {
        const user = newOwner();
        expect(await storage.userData.compareAndSet(user, 0, userData(1))).toBe(true);
        expect(await storage.userData.compareAndSet(user, 0, userData(2))).toBe(false);
        expect(await storage.userData.get(user)).toStrictEqual({ version: 1, value: userData(1) });
      });

      it("updates only from the current version, which then increases by one", async () => {
        const user = newOwner();
        await storage.userData.compareAndSet(user, 0, userData(1));
        expect(await storage.userData.compareAndSet(user, 1, userData(2))).toBe(true);
        expect(await storage.userData.compareAndSet(user, 1, userData(3))).toBe(false); // stale
        expect(await storage.userData.compareAndSet(user, 3, userData(3))).toBe(false); // from the future
        expect(await storage.userData.get(user)).toStrictEqual({ version: 2, value: userData(2) });
        expect(await storage.userData.compareAndSet(user, 2, userData(3))).toBe(true);
        expect(await storage.userData.get(user)).toStrictEqual({ version: 3, value: userData(3) });
      });

      it("answers a read for update with the caller's own copy: changing it changes nothing stored or read", async () => {
        const user = newOwner();
        await storage.userData.compareAndSet(user, 0, userData(1));
        const plain = await storage.userData.get(user);
        const mine = await storage.userData.get(user, { forUpdate: true });
        if (mine === null || mine.value.settings === null) throw new Error("document expected");
        mine.value.settings.language = "changed";
        mine.value.customSecrets.NEW = { secret: "s", description: "" };
        expect(plain).toStrictEqual({ version: 1, value: userData(1) });
        expect(await storage.userData.get(user)).toStrictEqual({ version: 1, value: userData(1) });
        expect(await storage.userData.get(user, { forUpdate: true })).toStrictEqual({
          version: 1,
          value: userData(1),
        });
        expect(await storage.userData.compareAndSet(user, 1, mine.value)).toBe(true);
        expect((await storage.userData.get(user))?.value.settings?.language).toBe("changed");
      });

      it("does not create a document from a non-zero expected version", async () => {
        const user = newOwner();
        expect(await storage.userData.compareAndSet(user, 1, userData(1))).toBe(false);
        expect(await storage.userData.get(user)).toBeNull();
      });

      it("stores the document as opaque JSON (keys with dots and dollars, nulls, nesting)", async () => {
        const user = newOwner();
        const value: UserData = {
          settings: {
            llm_api_key: "sealed:v1:xyz",
            confirmation_mode: false,
            max_iterations: 50,
            temperature: 0.5,
            search_api_key: null,
            mcp_config: { stdio_servers: [{ name: "s", env: { "A.B": "1", $X: "2" }, args: [] }] },
          },
          providerTokens: { github: { token: "sealed:t", host: null, userId: null } },
          customSecrets: {
            "my.secret": { secret: "sealed:1", description: "with a dot" },
            $dollar: { secret: "sealed:2", description: "" },
          },
        };
        await storage.userData.compareAndSet(user, 0, value);
        expect(await storage.userData.get(user)).toStrictEqual({ version: 1, value });
        const changed: UserData = {
          ...value,
          customSecrets: { "other.key": { secret: "s", description: "d" } },
        };
        expect(await storage.userData.compareAndSet(user, 1, changed)).toBe(true);
        expect(await storage.userData.get(user)).toStrictEqual({ version: 2, value: changed });
      });

      it("keeps users apart", async () => {
        const a = newOwner();
        const b = newOwner();
        await storage.userData.compareAndSet(a, 0, userData(1));
        await storage.userData.compareAndSet(b, 0, userData(7));
        await storage.userData.compareAndSet(b, 1, userData(8));
        expect(await storage.userData.get(a)).toStrictEqual({ version: 1, value: userData(1) });
        expect(await storage.userData.get(b)).toStrictEqual({ version: 2, value: userData(8) });
      });

      it("changes its change token with every write of this repository, and after another connection's write", async () => {
        const second = await open();
        const user = newOwner();
        const before = storage.userData.changeToken();
        await storage.userData.compareAndSet(user, 0, userData(1));
        const afterOwn = storage.userData.changeToken();
        expect(afterOwn).not.toBe(before);
        await second.userData.compareAndSet(user, 1, userData(2));
        // Another connection's commit is seen from the next event-loop turn on (or at once).
        await new Promise((resolve) => setImmediate(resolve));
        expect(storage.userData.changeToken()).not.toBe(afterOwn);
      });

      it("loses no write when 20 read-modify-write loops race over two connections", async () => {
        const second = await open();
        const user = newOwner();
        let conflicts = 0;
        const increment = async (repo: UserDataRepository): Promise<void> => {
          for (;;) {
            const current = await repo.get(user);
            const n = current === null ? 0 : Number(current.value.settings?.counter);
            if (await repo.compareAndSet(user, current?.version ?? 0, userData(n + 1))) return;
            conflicts++;
          }
        };
        await Promise.all(
          Array.from({ length: 20 }, (_, i) => increment(i % 2 === 0 ? storage.userData : second.userData)),
        );
        expect(await storage.userData.get(user)).toStrictEqual({ version: 20, value: userData(20) });
        expect(await second.userData.get(user)).toStrictEqual({ version: 20, value: userData(20) });
        expect(conflicts).toBeGreaterThan(0); // the loops really raced
      });
    });

    describe("apiKeys", () => {
      it("finds a key by hash, and nothing for an unknown hash", async () => {
        const key = apiKey(newOwner(), at(1));
        await storage.apiKeys.insert(key);
        expect(await storage.apiKeys.findByHash(key.hash)).toStrictEqual(key);
        expect(await storage.apiKeys.findByHash("0".repeat(64))).toBeNull();
        const unlabelled = apiKey(key.userId, at(2), { label: null });
        await storage.apiKeys.insert(unlabelled);
        expect(await storage.apiKeys.findByHash(unlabelled.hash)).toStrictEqual(unlabelled);
      });

      it("rejects a second key with the same hash and keeps the first", async () => {
        const key = apiKey(newOwner(), at(1));
        await storage.apiKeys.insert(key);
        await expect(storage.apiKeys.insert(apiKey(newOwner(), at(2), { hash: key.hash }))).rejects.toThrow();
        expect(await storage.apiKeys.findByHash(key.hash)).toStrictEqual(key);
      });

      it("lists a user's keys oldest first (ties by id) and everyone's without a user", async () => {
        const user = newOwner();
        const other = newOwner();
        const [idA, idB] = sortedIds(2).map((h) => `k${h.slice(0, 12)}`);
        const k3 = apiKey(user, at(30));
        const k1b = apiKey(user, at(10), { id: idB ?? "" });
        const k1a = apiKey(user, at(10), { id: idA ?? "" });
        const theirs = apiKey(other, at(20));
        for (const k of [k3, k1b, theirs, k1a]) await storage.apiKeys.insert(k);
        expect(await storage.apiKeys.list(user)).toStrictEqual([k1a, k1b, k3]);
        expect(await storage.apiKeys.list(other)).toStrictEqual([theirs]);
        expect(await storage.apiKeys.list(newOwner())).toStrictEqual([]);
        const mine = new Set([k1a.id, k1b.id, k3.id, theirs.id]);
        const all = await storage.apiKeys.list();
        expect(all.filter((k) => mine.has(k.id))).toStrictEqual([k1a, k1b, theirs, k3]);
      });

      it("revokes once; unknown or already revoked ids give false; revoked keys stay listed", async () => {
        const user = newOwner();
        const key = apiKey(user, at(1));
        await storage.apiKeys.insert(key);
        expect(await storage.apiKeys.revoke(key.id, at(5))).toBe(true);
        expect(await storage.apiKeys.revoke(key.id, at(6))).toBe(false);
        expect(await storage.apiKeys.revoke(`k${hex().slice(0, 12)}`, at(6))).toBe(false);
        const revoked = { ...key, revokedAt: at(5) };
        expect(await storage.apiKeys.findByHash(key.hash)).toStrictEqual(revoked);
        expect(await storage.apiKeys.list(user)).toStrictEqual([revoked]);
      });

      it("counts every key, revoked included", async () => {
        const before = await storage.apiKeys.count();
        const user = newOwner();
        const keys = [apiKey(user, at(1)), apiKey(user, at(2)), apiKey(user, at(3))];
        for (const k of keys) await storage.apiKeys.insert(k);
        await storage.apiKeys.revoke(keys[0]?.id ?? "", at(4));
        expect(await storage.apiKeys.count()).toBe(before + 3);
      });
    });

    describe("sandboxes", () => {
      it("gets a sandbox by id, with or without its owner, and hides it from other owners", async () => {
        const owner = newOwner();
        const s = sandbox(owner, at(1));
        await storage.sandboxes.insert(s);
        expect(await storage.sandboxes.get(s.id)).toStrictEqual(s);
        expect(await storage.sandboxes.get(s.id, owner)).toStrictEqual(s);
        expect(await storage.sandboxes.get(s.id, newOwner())).toBeNull();
        expect(await storage.sandboxes.get(hex())).toBeNull();
        expect(await storage.sandboxes.get(hex(), owner)).toBeNull();
      });

      it("rejects a duplicate id", async () => {
        const s = sandbox(newOwner(), at(1));
        await storage.sandboxes.insert(s);
        await expect(storage.sandboxes.insert({ ...s, ownerId: newOwner() })).rejects.toThrow();
        expect(await storage.sandboxes.get(s.id)).toStrictEqual(s);
      });

      it("getMany returns only the owner's records among the ids", async () => {
        const owner = newOwner();
        const mine = [sandbox(owner, at(1)), sandbox(owner, at(2)), sandbox(owner, at(3))];
        const theirs = sandbox(newOwner(), at(4));
        for (const s of [...mine, theirs]) await storage.sandboxes.insert(s);
        const got = await storage.sandboxes.getMany(
          [mine[0]?.id ?? "", mine[2]?.id ?? "", theirs.id, hex()],
          owner,
        );
        expect(byId(got)).toStrictEqual(byId([mine[0]!, mine[2]!]));
        expect(await storage.sandboxes.getMany([], owner)).toStrictEqual([]);
      });

      it("updates only the patched fields; false for an unknown id", async () => {
        const s = sandbox(newOwner(), at(1), { status: "STARTING" });
        await storage.sandboxes.insert(s);
        expect(await storage.sandboxes.update(s.id, { status: "PAUSED" })).toBe(true);
        expect(await storage.sandboxes.get(s.id)).toStrictEqual({ ...s, status: "PAUSED" });
        const handle = { containerId: "c0ffee", port: 5000 };
        expect(await storage.sandboxes.update(s.id, { handle, updatedAt: at(9) })).toBe(true);
        expect(await storage.sandboxes.get(s.id)).toStrictEqual({
          ...s,
          status: "PAUSED",
          handle,
          updatedAt: at(9),
        });
        expect(await storage.sandboxes.update(s.id, {})).toBe(true);
        expect(await storage.sandboxes.update(hex(), { status: "ERROR" })).toBe(false);
        expect(await storage.sandboxes.update(hex(), {})).toBe(false);
      });

      it("lists newest first with exact next cursors, stable while items are inserted", async () => {
        const owner = newOwner();
        const s = [1, 2, 3, 4, 5].map((i) => sandbox(owner, at(i)));
        for (const i of [2, 0, 4, 1, 3]) await storage.sandboxes.insert(s[i] as SandboxRecord);
        await storage.sandboxes.insert(sandbox(newOwner(), at(3))); // another owner's, never listed

        const page1 = await storage.sandboxes.list(owner, { limit: 2, after: null });
        expect(page1.items).toStrictEqual([s[4], s[3]]);
        expect(page1.next).toStrictEqual(cursorOf(s[3] as SandboxRecord));

        // A newer and an older item arrive between pages: the newer never shows up later, the older does.
        const newer = sandbox(owner, at(6));
        const older = sandbox(owner, at(0));
        await storage.sandboxes.insert(newer);
        await storage.sandboxes.insert(older);

        const page2 = await storage.sandboxes.list(owner, { limit: 2, after: page1.next });
        expect(page2.items).toStrictEqual([s[2], s[1]]);
        expect(page2.next).toStrictEqual(cursorOf(s[1] as SandboxRecord));
        // Exactly `limit` items remain: the last page says so with next = null.
        const page3 = await storage.sandboxes.list(owner, { limit: 2, after: page2.next });
        expect(page3.items).toStrictEqual([s[0], older]);
        expect(page3.next).toBeNull();

        const fresh = await storage.sandboxes.list(owner, { limit: 100, after: null });
        expect(fresh.items).toStrictEqual([newer, ...[...s].reverse(), older]);
        expect(fresh.next).toBeNull();
        expect(await storage.sandboxes.list(newOwner(), { limit: 10, after: null })).toStrictEqual({
          items: [],
          next: null,
        });
      });

      it("breaks createdAt ties by id, descending, across page boundaries", async () => {
        const owner = newOwner();
        const tied = sortedIds(3).map((id) => sandbox(owner, at(5), { id }));
        const before = sandbox(owner, at(4));
        const after = sandbox(owner, at(6));
        for (const x of [tied[1], before, tied[0], after, tied[2]])
          await storage.sandboxes.insert(x as SandboxRecord);
        const pages = await allPages((c) => storage.sandboxes.list(owner, { limit: 1, after: c }));
        expect(pages.map((p) => ids(p.items))).toStrictEqual([
          [after.id],
          [tied[2]?.id],
          [tied[1]?.id],
          [tied[0]?.id],
          [before.id],
        ]);
        expect(pages.map((p) => p.next)).toStrictEqual([
          cursorOf(after),
          cursorOf(tied[2] as SandboxRecord),
          cursorOf(tied[1] as SandboxRecord),
          cursorOf(tied[0] as SandboxRecord),
          null,
        ]);
      });

      it("rejects a page limit below 1", async () => {
        await expect(storage.sandboxes.list(newOwner(), { limit: 0, after: null })).rejects.toThrow(
          RangeError,
        );
      });

      it("listAll returns an owner's records, or everyone's, newest first", async () => {
        const a = newOwner();
        const b = newOwner();
        const a1 = sandbox(a, at(1));
        const b2 = sandbox(b, at(2));
        const a3 = sandbox(a, at(3));
        for (const x of [a1, b2, a3]) await storage.sandboxes.insert(x);
        expect(await storage.sandboxes.listAll(a)).toStrictEqual([a3, a1]);
        const mine = new Set([a1.id, b2.id, a3.id]);
        expect((await storage.sandboxes.listAll()).filter((x) => mine.has(x.id))).toStrictEqual([a3, b2, a1]);
      });

      it("deletes once", async () => {
        const s = sandbox(newOwner(), at(1));
        await storage.sandboxes.insert(s);
        expect(await storage.sandboxes.delete(s.id)).toBe(true);
        expect(await storage.sandboxes.get(s.id)).toBeNull();
        expect(await storage.sandboxes.delete(s.id)).toBe(false);
        expect(await storage.sandboxes.listAll(s.ownerId)).toStrictEqual([]);
      });
    });

    describe("sandbox slots and limits", () => {
      const limits = { maxPerUser: 10, maxRunning: 2 };
      const noHandle = (owner: string, seconds: number, overrides: Partial<SandboxRecord> = {}) =>
        sandbox(owner, at(seconds), { status: "STARTING", handle: {}, ...overrides });

      it("create inserts as STARTING and evicts the oldest slot holders beyond maxRunning, as they were", async () => {
        const owner = newOwner();
        const paused = sandbox(owner, at(0), { status: "PAUSED" });
        const failed = sandbox(owner, at(0.5), { status: "ERROR" });
        const a = sandbox(owner, at(1), { status: "RUNNING" });
        const b = noHandle(owner, 2);
        for (const r of [paused, failed, a, b]) await storage.sandboxes.insert(r);
        const c = noHandle(owner, 3, { status: "RUNNING" });
        const outcome = await storage.sandboxes.create(c, limits);
        expect(outcome).toStrictEqual({ created: true, evicted: [a] });
        expect(await storage.sandboxes.get(c.id)).toStrictEqual({ ...c, status: "STARTING" });
        expect((await storage.sandboxes.get(a.id))?.status).toBe("PAUSED");
        expect((await storage.sandboxes.get(b.id))?.status).toBe("STARTING");
        expect((await storage.sandboxes.get(paused.id))?.status).toBe("PAUSED");
        expect((await storage.sandboxes.get(failed.id))?.status).toBe("ERROR");
        // Another owner's slots are not touched.
        const other = noHandle(newOwner(), 4);
        expect(await storage.sandboxes.create(other, { maxPerUser: 10, maxRunning: 1 })).toStrictEqual({
          created: true,
          evicted: [],
        });
        expect((await storage.sandboxes.get(b.id))?.status).toBe("STARTING");
      });

      it("create refuses at maxPerUser, counting every status, and writes nothing", async () => {
        const owner = newOwner();
        const existing = [
          sandbox(owner, at(1), { status: "ERROR" }),
          sandbox(owner, at(2), { status: "PAUSED" }),
          sandbox(owner, at(3), { status: "RUNNING" }),
        ];
        for (const r of existing) await storage.sandboxes.insert(r);
        const refused = noHandle(owner, 4);
        expect(await storage.sandboxes.create(refused, { maxPerUser: 3, maxRunning: 1 })).toStrictEqual({
          created: false,
          count: 3,
        });
        expect(await storage.sandboxes.get(refused.id)).toBeNull();
        expect((await storage.sandboxes.get(existing[2]!.id))?.status).toBe("RUNNING");
      });

      it("12 concurrent creates over two connections: each eviction once, never a STARTING record; the rest busy", async () => {
        const second = await open();
        const owner = newOwner();
        const running = Array.from({ length: 9 }, (_, i) => sandbox(owner, at(i + 1), { status: "RUNNING" }));
        for (const r of running) await storage.sandboxes.insert(r);
        const records = Array.from({ length: 12 }, (_, i) => noHandle(owner, 10 + i));
        const outcomes = await Promise.all(
          records.map((r, i) =>
            (i % 2 === 0 ? storage : second).sandboxes.create(r, { maxPerUser: 30, maxRunning: 3 }),
          ),
        );
        // Three creates take the slots of the nine RUNNING records; then every slot is held by a STARTING one.
        expect(outcomes.filter((o) => o.created)).toHaveLength(3);
        expect(outcomes.filter((o) => !o.created)).toStrictEqual(
          Array.from({ length: 9 }, () => ({ created: false, busy: true, holders: 3 })),
        );
        const all = await storage.sandboxes.listAll(owner);
        expect(all).toHaveLength(12);
        expect(all.filter((r) => r.status === "STARTING")).toHaveLength(3);
        expect(all.filter((r) => r.status === "PAUSED")).toHaveLength(9);
        const evicted = outcomes.flatMap((o) => (o.created ? o.evicted.map((e) => e.id) : []));
        expect(new Set(evicted).size).toBe(evicted.length); // nobody evicted twice
        expect([...evicted].sort()).toStrictEqual(running.map((r) => r.id).sort());
      });

      it("create and claim never evict STARTING or protected records: busy, and nothing written", async () => {
        const owner = newOwner();
        const starting = noHandle(owner, 1);
        const inUse = sandbox(owner, at(2), { status: "RUNNING" });
        const free = sandbox(owner, at(3), { status: "RUNNING" });
        const paused = sandbox(owner, at(4), { status: "PAUSED" });
        for (const r of [starting, inUse, free, paused]) await storage.sandboxes.insert(r);
        const limits3 = { maxPerUser: 10, maxRunning: 3, protect: [inUse.id] };
        // A fourth holder: the one RUNNING, unprotected record goes.
        const c = noHandle(owner, 5);
        expect(await storage.sandboxes.create(c, limits3)).toStrictEqual({ created: true, evicted: [free] });
        // A fifth: only STARTING and protected holders are left.
        const d = noHandle(owner, 6);
        expect(await storage.sandboxes.create(d, limits3)).toStrictEqual({
          created: false,
          busy: true,
          holders: 3,
        });
        expect(await storage.sandboxes.get(d.id)).toBeNull();
        expect(await storage.sandboxes.claim(paused.id, owner, 3, at(7), [inUse.id])).toStrictEqual({
          record: paused,
          claimed: false,
          evicted: [],
          busy: true,
        });
        expect((await storage.sandboxes.get(paused.id))?.status).toBe("PAUSED");
        // Without the protection the RUNNING one may go.
        const claimed = await storage.sandboxes.claim(paused.id, owner, 3, at(8));
        expect(claimed?.claimed && claimed.evicted.map((e) => e.id)).toStrictEqual([inUse.id]);
        expect((await storage.sandboxes.get(starting.id))?.status).toBe("STARTING");
        expect((await storage.sandboxes.get(c.id))?.status).toBe("STARTING");
      });

      it("claim moves a record into a slot, evicting the oldest other holders; a holder is returned unchanged", async () => {
        const owner = newOwner();
        const old = sandbox(owner, at(1), { status: "PAUSED" });
        const a = sandbox(owner, at(2), { status: "RUNNING" });
        const b = sandbox(owner, at(3), { status: "STARTING" });
        for (const r of [old, a, b]) await storage.sandboxes.insert(r);
        const claimed = await storage.sandboxes.claim(old.id, owner, 2, at(10));
        expect(claimed).toStrictEqual({
          record: { ...old, status: "STARTING", updatedAt: at(10) },
          claimed: true,
          evicted: [a],
        });
        expect(await storage.sandboxes.get(old.id)).toStrictEqual({
          ...old,
          status: "STARTING",
          updatedAt: at(10),
        });
        expect(await storage.sandboxes.get(a.id)).toStrictEqual({
          ...a,
          status: "PAUSED",
          updatedAt: at(10),
        });
        expect(await storage.sandboxes.claim(b.id, owner, 2, at(11))).toStrictEqual({
          record: b,
          claimed: false,
          evicted: [],
        });
        expect(await storage.sandboxes.claim(old.id, newOwner(), 2, at(12))).toBeNull();
        expect(await storage.sandboxes.claim(hex(), owner, 2, at(12))).toBeNull();
      });

      it("setHandle saves the handle whatever the status and tells the status it found; null when deleted", async () => {
        const owner = newOwner();
        const first = noHandle(owner, 1);
        await storage.sandboxes.create(first, { maxPerUser: 10, maxRunning: 1 });
        const handle = { data: { pid: 7 }, agentUrl: "http://127.0.0.1:1", port: 1 };
        expect(await storage.sandboxes.setHandle(first.id, handle, at(5))).toStrictEqual({
          ...first,
          handle,
          status: "STARTING",
          updatedAt: at(5),
        });
        // Running, the first is evicted by a second start; its next handle write sees PAUSED.
        expect(await storage.sandboxes.transition(first.id, ["STARTING"], "RUNNING", at(5))).toBe(true);
        const second = noHandle(owner, 2);
        const outcome = await storage.sandboxes.create(second, { maxPerUser: 10, maxRunning: 1 });
        expect(outcome.created && outcome.evicted.map((e) => e.handle)).toStrictEqual([handle]);
        expect((await storage.sandboxes.setHandle(first.id, handle, at(6)))?.status).toBe("PAUSED");
        const later = await storage.sandboxes.setHandle(second.id, handle, at(6));
        expect(later?.status).toBe("STARTING");
        // Still starting, the second is not evicted: a third start is refused as busy.
        const third = noHandle(owner, 3);
        expect(await storage.sandboxes.create(third, { maxPerUser: 10, maxRunning: 1 })).toStrictEqual({
          created: false,
          busy: true,
          holders: 1,
        });
        expect((await storage.sandboxes.get(second.id))?.status).toBe("STARTING");
        expect(await storage.sandboxes.setHandle(hex(), handle, at(7))).toBeNull();
      });

      it("transition is a compare-and-set on the status", async () => {
        const s = sandbox(newOwner(), at(1), { status: "STARTING" });
        await storage.sandboxes.insert(s);
        expect(await storage.sandboxes.transition(s.id, ["RUNNING"], "ERROR", at(2))).toBe(false);
        expect(await storage.sandboxes.get(s.id)).toStrictEqual(s);
        expect(await storage.sandboxes.transition(s.id, ["STARTING", "RUNNING"], "RUNNING", at(3))).toBe(
          true,
        );
        expect(await storage.sandboxes.get(s.id)).toStrictEqual({
          ...s,
          status: "RUNNING",
          updatedAt: at(3),
        });
        expect(await storage.sandboxes.transition(hex(), ["RUNNING"], "ERROR", at(4))).toBe(false);
      });

      it("transition with ifUpdatedAt is also a compare-and-set on the version read; deleting marks the record", async () => {
        const s = sandbox(newOwner(), at(1), { status: "PAUSED" });
        await storage.sandboxes.insert(s);
        // Another write since the read (a resume): the background decision loses.
        expect(await storage.sandboxes.claim(s.id, s.ownerId, 5, at(2))).toMatchObject({ claimed: true });
        expect(
          await storage.sandboxes.transition(s.id, ["PAUSED", "STARTING"], "PAUSED", at(3), {
            ifUpdatedAt: at(1),
          }),
        ).toBe(false);
        expect((await storage.sandboxes.get(s.id))?.status).toBe("STARTING");
        expect(
          await storage.sandboxes.transition(s.id, ["STARTING"], "ERROR", at(4), { ifUpdatedAt: at(2) }),
        ).toBe(true);
        expect(await storage.sandboxes.get(s.id)).toStrictEqual({ ...s, status: "ERROR", updatedAt: at(4) });
        expect(
          await storage.sandboxes.transition(s.id, ["ERROR"], "MISSING", at(5), {
            ifUpdatedAt: at(4),
            deleting: true,
          }),
        ).toBe(true);
        expect(await storage.sandboxes.get(s.id)).toStrictEqual({
          ...s,
          status: "MISSING",
          updatedAt: at(5),
          deleting: true,
        });
        expect((await storage.sandboxes.listAll(s.ownerId))[0]?.deleting).toBe(true);
        // The mark stays through later writes.
        expect(await storage.sandboxes.transition(s.id, ["MISSING"], "MISSING", at(6))).toBe(true);
        expect((await storage.sandboxes.get(s.id))?.deleting).toBe(true);
      });

      it("checkWritable writes a heartbeat, repeatedly", async () => {
        await expect(storage.checkWritable()).resolves.toBeUndefined();
        await expect(storage.checkWritable()).resolves.toBeUndefined();
      });
    });

    describe("conversations", () => {
      it("round-trips every field, null-valued ones included", async () => {
        const owner = newOwner();
        const full = conversation(owner, at(1), { updatedAt: at(2) });
        const sparse = conversation(owner, at(3), {
          selectedRepository: null,
          selectedBranch: null,
          gitProvider: null,
          title: null,
          trigger: null,
          prNumber: [],
          llmModel: null,
          metrics: null,
        });
        await storage.conversations.insert(full);
        await storage.conversations.insert(sparse);
        expect(await storage.conversations.get(full.id, owner)).toStrictEqual(full);
        expect(await storage.conversations.get(sparse.id, owner)).toStrictEqual(sparse);
      });

      it("hides conversations from other owners", async () => {
        const owner = newOwner();
        const c = conversation(owner, at(1));
        await storage.conversations.insert(c);
        expect(await storage.conversations.get(c.id, newOwner())).toBeNull();
        expect(await storage.conversations.get(hex(), owner)).toBeNull();
        expect(await storage.conversations.getMany([c.id], newOwner())).toStrictEqual([]);
      });

      it("rejects a duplicate id", async () => {
        const c = conversation(newOwner(), at(1));
        await storage.conversations.insert(c);
        await expect(storage.conversations.insert(c)).rejects.toThrow();
      });

      it("getMany returns the owner's records among the ids", async () => {
        const owner = newOwner();
        const mine = [conversation(owner, at(1)), conversation(owner, at(2)), conversation(owner, at(3))];
        const theirs = conversation(newOwner(), at(1));
        for (const c of [...mine, theirs]) await storage.conversations.insert(c);
        const got = await storage.conversations.getMany(
          [mine[1]?.id ?? "", theirs.id, mine[2]?.id ?? "", hex()],
          owner,
        );
        expect(byId(got)).toStrictEqual(byId([mine[1]!, mine[2]!]));
        expect(await storage.conversations.getMany([], owner)).toStrictEqual([]);
      });

      it("adds sub-conversation ids in order, once each, bumping updatedAt; false for an unknown parent", async () => {
        const owner = newOwner();
        const parent = conversation(owner, at(1));
        await storage.conversations.insert(parent);
        const [c1, c2] = [hex(), hex()];
        expect(await storage.conversations.addSubConversation(parent.id, c1, at(5))).toBe(true);
        expect(await storage.conversations.addSubConversation(parent.id, c2, at(6))).toBe(true);
        expect(await storage.conversations.addSubConversation(parent.id, c1, at(7))).toBe(true);
        const got = await storage.conversations.get(parent.id, owner);
        expect(got?.subConversationIds).toStrictEqual([c1, c2]);
        expect(got?.updatedAt).toStrictEqual(at(7));
        expect(got?.createdAt).toStrictEqual(at(1));
        expect(await storage.conversations.addSubConversation(hex(), c1, at(8))).toBe(false);
      });

      it("excludes sub-conversations unless asked for, in search and count", async () => {
        const owner = newOwner();
        const parent = conversation(owner, at(1));
        const child = conversation(owner, at(2), { parentConversationId: parent.id });
        const lone = conversation(owner, at(3));
        for (const c of [parent, child, lone]) await storage.conversations.insert(c);
        await storage.conversations.addSubConversation(parent.id, child.id, at(2));
        const parentNow = { ...parent, subConversationIds: [child.id], updatedAt: at(2) };
        const page = { limit: 100, after: null };

        expect(await storage.conversations.search(owner, {}, page)).toStrictEqual({
          items: [lone, parentNow],
          next: null,
        });
        expect(
          await storage.conversations.search(owner, { includeSubConversations: false }, page),
        ).toStrictEqual({
          items: [lone, parentNow],
          next: null,
        });
        expect(
          await storage.conversations.search(owner, { includeSubConversations: true }, page),
        ).toStrictEqual({
          items: [lone, child, parentNow],
          next: null,
        });
        expect(await storage.conversations.count(owner, {})).toBe(2);
        expect(await storage.conversations.count(owner, { includeSubConversations: true })).toBe(3);
        expect(await storage.conversations.count(newOwner(), { includeSubConversations: true })).toBe(0);
      });

      it("filters by title substring, case-insensitively, with LIKE and regex characters taken literally", async () => {
        const owner = newOwner();
        const titles = [
          "Fix the Login bug",
          "login page",
          "Unrelated",
          "100% done",
          "snake_case name",
          "a.b*c(d)",
        ];
        const convs = titles.map((title, i) => conversation(owner, at(i + 1), { title }));
        const untitled = conversation(owner, at(20), { title: null });
        for (const c of [...convs, untitled]) await storage.conversations.insert(c);
        const search = async (titleContains: string): Promise<(string | null)[]> =>
          (
            await storage.conversations.search(owner, { titleContains }, { limit: 100, after: null })
          ).items.map((c) => c.title);

        expect(await search("LOGIN")).toStrictEqual(["login page", "Fix the Login bug"]);
        expect(await search("the log")).toStrictEqual(["Fix the Login bug"]);
        expect(await search("%")).toStrictEqual(["100% done"]);
        expect(await search("0% d")).toStrictEqual(["100% done"]);
        expect(await search("_")).toStrictEqual(["snake_case name"]);
        expect(await search(".b*c(")).toStrictEqual(["a.b*c(d)"]);
        expect(await search("a.b")).toStrictEqual(["a.b*c(d)"]);
        expect(await search("[")).toStrictEqual([]);
        expect(await search("nowhere")).toStrictEqual([]);
        expect(await storage.conversations.count(owner, { titleContains: "login" })).toBe(2);
      });

      it("filters by createdAt and updatedAt ranges (from inclusive, to exclusive)", async () => {
        const owner = newOwner();
        // created at 1..5, updated at 20, 19, ..., 16
        const convs = [1, 2, 3, 4, 5].map((i) => conversation(owner, at(i), { updatedAt: at(21 - i) }));
        for (const c of convs) await storage.conversations.insert(c);
        const search = async (filter: ConversationFilter): Promise<string[]> =>
          ids((await storage.conversations.search(owner, filter, { limit: 100, after: null })).items);
        const idOf = (i: number): string => convs[i - 1]?.id ?? "";

        expect(await search({ createdAtGte: at(2), createdAtLt: at(4) })).toStrictEqual([idOf(3), idOf(2)]);
        expect(await search({ createdAtGte: at(4) })).toStrictEqual([idOf(5), idOf(4)]);
        expect(await search({ createdAtLt: at(2) })).toStrictEqual([idOf(1)]);
        expect(await search({ updatedAtGte: at(19) })).toStrictEqual([idOf(2), idOf(1)]);
        expect(await search({ updatedAtLt: at(17) })).toStrictEqual([idOf(5)]);
        expect(await search({ updatedAtGte: at(17), updatedAtLt: at(19) })).toStrictEqual([idOf(4), idOf(3)]);
        expect(await storage.conversations.count(owner, { createdAtGte: at(2), createdAtLt: at(4) })).toBe(2);
        expect(await storage.conversations.count(owner, { updatedAtLt: at(17) })).toBe(1);
      });

      it("combines filters", async () => {
        const owner = newOwner();
        const parent = conversation(owner, at(1), { title: "deploy service" });
        const child = conversation(owner, at(4), { title: "Deploy fix", parentConversationId: parent.id });
        const late = conversation(owner, at(6), { title: "deploy later", updatedAt: at(30) });
        const other = conversation(owner, at(5), { title: "unrelated" });
        const mid = conversation(owner, at(3), { title: "DEPLOY docs", updatedAt: at(10) });
        for (const c of [parent, child, late, other, mid]) await storage.conversations.insert(c);
        const filter: ConversationFilter = {
          titleContains: "deploy",
          createdAtGte: at(2),
          updatedAtLt: at(20),
        };
        const page = { limit: 100, after: null };

        expect(ids((await storage.conversations.search(owner, filter, page)).items)).toStrictEqual([mid.id]);
        const withSubs = { ...filter, includeSubConversations: true };
        expect(ids((await storage.conversations.search(owner, withSubs, page)).items)).toStrictEqual([
          child.id,
          mid.id,
        ]);
        expect(await storage.conversations.count(owner, filter)).toBe(1);
        expect(await storage.conversations.count(owner, withSubs)).toBe(2);
      });

      it("pages filtered results newest first with exact cursors, ties broken by id", async () => {
        const owner = newOwner();
        const tiedIds = sortedIds(2);
        const matching = [
          conversation(owner, at(1), { title: "match 1" }),
          conversation(owner, at(2), { title: "match 2", id: tiedIds[0] ?? "" }),
          conversation(owner, at(2), { title: "match 3", id: tiedIds[1] ?? "" }),
          conversation(owner, at(3), { title: "match 4" }),
          conversation(owner, at(4), { title: "match 5" }),
        ];
        const noise = [
          conversation(owner, at(2), { title: "noise" }),
          conversation(owner, at(5), { title: "noise" }),
        ];
        for (const c of [...noise, ...matching].reverse()) await storage.conversations.insert(c);

        const filter = { titleContains: "match" };
        const pages = await allPages((after) =>
          storage.conversations.search(owner, filter, { limit: 2, after }),
        );
        const [m1, m2, m3, m4, m5] = matching as [
          ConversationRecord,
          ConversationRecord,
          ConversationRecord,
          ConversationRecord,
          ConversationRecord,
        ];
        expect(pages).toStrictEqual([
          { items: [m5, m4], next: cursorOf(m4) },
          { items: [m3, m2], next: cursorOf(m2) },
          { items: [m1], next: null },
        ]);
        // Inserting between pages shifts nothing: a newer match does not reappear after the first page.
        await storage.conversations.insert(conversation(owner, at(9), { title: "match new" }));
        expect(
          await storage.conversations.search(owner, filter, { limit: 2, after: cursorOf(m4) }),
        ).toStrictEqual(pages[1]);
        expect(await storage.conversations.count(owner, filter)).toBe(6);
      });

      it("rejects a page limit below 1", async () => {
        await expect(storage.conversations.search(newOwner(), {}, { limit: 0, after: null })).rejects.toThrow(
          RangeError,
        );
      });

      it("filters by sandbox in search and count", async () => {
        const owner = newOwner();
        const a = conversation(owner, at(1), { sandboxId: "sbx-a" });
        const b = conversation(owner, at(2), { sandboxId: "sbx-b" });
        const sub = conversation(owner, at(3), { sandboxId: "sbx-a", parentConversationId: a.id });
        for (const c of [a, b, sub]) await storage.conversations.insert(c);
        await storage.conversations.insert(conversation(newOwner(), at(4), { sandboxId: "sbx-a" }));
        const page = await storage.conversations.search(
          owner,
          { sandboxIdEq: "sbx-a" },
          { limit: 10, after: null },
        );
        expect(ids(page.items)).toStrictEqual([a.id]);
        expect(
          await storage.conversations.count(owner, { sandboxIdEq: "sbx-a", includeSubConversations: true }),
        ).toBe(2);
        expect(await storage.conversations.count(owner, { sandboxIdEq: "sbx-c" })).toBe(0);
      });

      it("filters by trigger and by exact repository in search and count", async () => {
        const owner = newOwner();
        const mine = conversation(owner, at(1), {
          trigger: "microagent_management",
          selectedRepository: "octo/app",
        });
        const otherRepo = conversation(owner, at(2), {
          trigger: "microagent_management",
          selectedRepository: "octo/app-2",
        });
        const gui = conversation(owner, at(3), { trigger: "gui", selectedRepository: "octo/app" });
        const newer = conversation(owner, at(4), {
          trigger: "microagent_management",
          selectedRepository: "octo/app",
        });
        const sub = conversation(owner, at(5), {
          trigger: "microagent_management",
          selectedRepository: "octo/app",
          parentConversationId: mine.id,
        });
        for (const c of [mine, otherRepo, gui, newer, sub]) await storage.conversations.insert(c);
        await storage.conversations.insert(
          conversation(newOwner(), at(6), {
            trigger: "microagent_management",
            selectedRepository: "octo/app",
          }),
        );
        const filter = { triggerEq: "microagent_management", selectedRepositoryEq: "octo/app" };
        const first = await storage.conversations.search(owner, filter, { limit: 1, after: null });
        expect(ids(first.items)).toStrictEqual([newer.id]);
        const second = await storage.conversations.search(owner, filter, { limit: 1, after: first.next });
        expect(ids(second.items)).toStrictEqual([mine.id]);
        expect(second.next).toBeNull();
        expect(await storage.conversations.count(owner, filter)).toBe(2);
        expect(await storage.conversations.count(owner, { ...filter, includeSubConversations: true })).toBe(
          3,
        );
        expect(await storage.conversations.count(owner, { triggerEq: "gui" })).toBe(1);
        // Exact, case-sensitive: no prefix or other case matches.
        expect(await storage.conversations.count(owner, { selectedRepositoryEq: "octo/ap" })).toBe(0);
        expect(await storage.conversations.count(owner, { selectedRepositoryEq: "Octo/App" })).toBe(0);
      });

      it("updates only the patched fields of the owner's conversation; false otherwise", async () => {
        const owner = newOwner();
        const c = conversation(owner, at(1));
        await storage.conversations.insert(c);
        expect(await storage.conversations.update(c.id, owner, { title: "Renamed", updatedAt: at(2) })).toBe(
          true,
        );
        expect(await storage.conversations.get(c.id, owner)).toStrictEqual({
          ...c,
          title: "Renamed",
          updatedAt: at(2),
        });
        const metrics = { accumulated_cost: 1.5, nested: { a: [1, 2] } };
        expect(
          await storage.conversations.update(c.id, owner, { llmModel: "m2", metrics, updatedAt: at(3) }),
        ).toBe(true);
        expect(await storage.conversations.get(c.id, owner)).toStrictEqual({
          ...c,
          title: "Renamed",
          llmModel: "m2",
          metrics,
          updatedAt: at(3),
        });
        expect(await storage.conversations.update(c.id, newOwner(), { title: "x", updatedAt: at(4) })).toBe(
          false,
        );
        expect(await storage.conversations.update(hex(), owner, { title: "x", updatedAt: at(4) })).toBe(
          false,
        );
        expect((await storage.conversations.get(c.id, owner))?.title).toBe("Renamed");
      });

      it("deletes the owner's conversation once; never another owner's", async () => {
        const owner = newOwner();
        const c = conversation(owner, at(1));
        await storage.conversations.insert(c);
        expect(await storage.conversations.delete(c.id, newOwner())).toBe(false);
        expect(await storage.conversations.get(c.id, owner)).not.toBeNull();
        expect(await storage.conversations.delete(c.id, owner)).toBe(true);
        expect(await storage.conversations.delete(c.id, owner)).toBe(false);
        expect(await storage.conversations.get(c.id, owner)).toBeNull();
      });

      it("a delete takes the sub-conversations, their events and finished start tasks, and refuses later events", async () => {
        const owner = newOwner();
        const parent = conversation(owner, at(1));
        const child = conversation(owner, at(2), { parentConversationId: parent.id });
        const other = conversation(owner, at(3));
        for (const c of [parent, child, other]) await storage.conversations.insert(c);
        await storage.conversations.addSubConversation(parent.id, child.id, at(4));
        await storage.events.append([event(owner, parent.id, 1), event(owner, child.id, 2)]);
        const kept = event(owner, other.id, 3);
        await storage.events.append([kept]);
        const done = startTask(owner, at(5), { status: "READY", appConversationId: parent.id });
        const failed = startTask(owner, at(6), { status: "ERROR", appConversationId: child.id });
        const running = startTask(owner, at(7), { status: "WORKING", appConversationId: parent.id });
        const planned = startTask(owner, at(8), { status: "ERROR" });
        const otherTask = startTask(owner, at(9), { status: "READY", appConversationId: other.id });
        for (const t of [done, failed, running, otherTask]) await storage.startTasks.insert(t);
        await storage.startTasks.insert(planned, undefined, { conversationId: parent.id });

        expect(await storage.conversations.delete(parent.id, owner)).toBe(true);
        expect(await storage.conversations.get(parent.id, owner)).toBeNull();
        expect(await storage.conversations.get(child.id, owner)).toBeNull();
        expect(await storage.conversations.get(other.id, owner)).not.toBeNull();
        expect(await storage.events.count(owner, {})).toBe(1);
        expect(
          ids(await storage.startTasks.getMany([done.id, failed.id, running.id, planned.id], owner)),
        ).toEqual([running.id]);
        expect(await storage.startTasks.get(otherTask.id, owner)).not.toBeNull();
        // A webhook arriving after the delete stores nothing for the deleted conversations.
        expect(
          await storage.events.append([event(owner, parent.id, 10), event(owner, child.id, 11)]),
        ).toEqual([]);
        expect(await storage.events.count(owner, {})).toBe(1);
        expect(await storage.events.getMany([kept.id], owner)).toStrictEqual([kept]);
        // A conversation created again under the same id takes events again.
        await storage.conversations.insert({ ...parent, subConversationIds: [] });
        const again = event(owner, parent.id, 12);
        expect(await storage.events.append([again])).toStrictEqual([again]);
        expect(await storage.conversations.delete(hex(), owner)).toBe(false);
      });

      it("finishDeletes drops the tombstones older than asked", async () => {
        const owner = newOwner();
        const c = conversation(owner, at(1));
        await storage.conversations.insert(c);
        expect(await storage.conversations.delete(c.id, owner)).toBe(true);
        expect(await storage.events.append([event(owner, c.id, 1)])).toEqual([]);
        const kept = await storage.conversations.finishDeletes(new Date(), new Date(Date.now() - 60_000));
        expect(kept.finished).toBe(0);
        expect(await storage.events.append([event(owner, c.id, 2)])).toEqual([]);
        await new Promise((r) => setTimeout(r, 5));
        const result = await storage.conversations.finishDeletes(new Date(), new Date());
        expect(result.pruned).toBeGreaterThanOrEqual(1);
        const late = event(owner, c.id, 3);
        expect(await storage.events.append([late])).toStrictEqual([late]);
      });
    });

    describe("events", () => {
      it("appends durably, returns what was new, and skips an event stored before (same conversation and id)", async () => {
        const owner = newOwner();
        const conv = hex();
        const a = event(owner, conv, 1);
        const b = event(owner, conv, 2);
        expect(await storage.events.append([a, b])).toStrictEqual([a, b]);
        const again = event(owner, conv, 3, { id: a.id, body: '{"changed":true}' });
        const c = event(owner, conv, 4);
        expect(await storage.events.append([again, c])).toStrictEqual([c]);
        // The same event id in another conversation is another event.
        const elsewhere = event(owner, hex(), 5, { id: a.id });
        expect(await storage.events.append([elsewhere])).toStrictEqual([elsewhere]);
        const page = await storage.events.search(
          owner,
          { conversationIdEq: conv },
          { limit: 10, after: null },
          false,
        );
        expect(page).toStrictEqual({ items: [a, b, c], next: null });
        expect(await storage.events.append([])).toStrictEqual([]);
      });

      it("commits concurrent appends of one turn together, each resolving with its own new events", async () => {
        const owner = newOwner();
        const conv = hex();
        const batches = Array.from({ length: 20 }, (_, i) => [
          event(owner, conv, i * 2),
          event(owner, conv, i * 2 + 1),
        ]);
        const results = await Promise.all(batches.map((b) => storage.events.append(b)));
        expect(results).toStrictEqual(batches);
        expect(await storage.events.count(owner, { conversationIdEq: conv })).toBe(40);
      });

      it("orders by timestamp then id, both directions, with exact cursors; filters by kind and time", async () => {
        const owner = newOwner();
        const conv = hex();
        const evs = [
          event(owner, conv, 10, { id: "e-b" }),
          event(owner, conv, 10, { id: "e-a" }),
          event(owner, conv, 5, { id: "e-z", kind: "ActionEvent" }),
          event(owner, conv, 20, { id: "e-c", kind: "ActionEvent" }),
          event(owner, conv, 30, { id: "e-d" }),
        ];
        await storage.events.append(evs);
        const asc = ["e-z", "e-a", "e-b", "e-c", "e-d"];
        const pagesAsc = await allPages(
          (after) =>
            storage.events.search(
              owner,
              { conversationIdEq: conv },
              { limit: 2, after: after as never },
              false,
            ) as never,
        );
        expect(pagesAsc.flatMap((p) => ids(p.items as EventRecord[]))).toStrictEqual(asc);
        expect(pagesAsc[0]?.next).toStrictEqual({ timestampUs: T0 * 1000 + 10, id: "e-a" });
        const pagesDesc = await allPages(
          (after) => storage.events.search(owner, {}, { limit: 2, after: after as never }, true) as never,
        );
        expect(pagesDesc.flatMap((p) => ids(p.items as EventRecord[]))).toStrictEqual([...asc].reverse());
        const kinds = await storage.events.search(
          owner,
          { kindEq: "ActionEvent" },
          { limit: 10, after: null },
          false,
        );
        expect(ids(kinds.items)).toStrictEqual(["e-z", "e-c"]);
        const window = {
          conversationIdEq: conv,
          timestampGteUs: T0 * 1000 + 10,
          timestampLtUs: T0 * 1000 + 30,
        };
        expect(
          ids((await storage.events.search(owner, window, { limit: 10, after: null }, false)).items),
        ).toStrictEqual(["e-a", "e-b", "e-c"]);
        expect(await storage.events.count(owner, window)).toBe(3);
        expect(await storage.events.count(owner, { conversationIdEq: conv, kindEq: "ActionEvent" })).toBe(2);
        await expect(storage.events.search(owner, {}, { limit: 0, after: null }, false)).rejects.toThrow(
          RangeError,
        );
      });

      it("keeps owners apart in search, count, getMany and delete", async () => {
        const alice = newOwner();
        const bob = newOwner();
        const conv = hex();
        const mine = event(alice, conv, 1);
        const theirs = event(bob, conv, 2);
        await storage.events.append([mine]);
        await storage.events.append([theirs]);
        expect(
          ids((await storage.events.search(alice, {}, { limit: 10, after: null }, false)).items),
        ).toStrictEqual([mine.id]);
        expect(await storage.events.count(bob, { conversationIdEq: conv })).toBe(1);
        expect(await storage.events.getMany([mine.id, theirs.id, "unknown"], alice)).toStrictEqual([mine]);
        expect(await storage.events.deleteConversation(conv, alice)).toBe(1);
        expect(await storage.events.count(alice, {})).toBe(0);
        expect(await storage.events.count(bob, {})).toBe(1);
      });
    });

    describe("startTasks", () => {
      it("round-trips, hides other owners' tasks and supports getMany", async () => {
        const owner = newOwner();
        const t = startTask(owner, at(1));
        const full = startTask(owner, at(2), {
          status: "READY",
          detail: "done",
          appConversationId: hex(),
          sandboxId: hex(),
          agentServerUrl: "http://127.0.0.1:41234",
          updatedAt: at(3),
        });
        const theirs = startTask(newOwner(), at(1));
        for (const x of [t, full, theirs]) await storage.startTasks.insert(x);
        expect(await storage.startTasks.get(t.id, owner)).toStrictEqual(t);
        expect(await storage.startTasks.get(full.id, owner)).toStrictEqual(full);
        expect(await storage.startTasks.get(t.id, newOwner())).toBeNull();
        expect(await storage.startTasks.get(hex(), owner)).toBeNull();
        expect(
          byId(await storage.startTasks.getMany([t.id, full.id, theirs.id, hex()], owner)),
        ).toStrictEqual(byId([t, full]));
        expect(await storage.startTasks.getMany([], owner)).toStrictEqual([]);
      });

      it("updates only the patched fields, setting nullable ones to null when asked", async () => {
        const owner = newOwner();
        const t = startTask(owner, at(1));
        await storage.startTasks.insert(t);
        expect(
          await storage.startTasks.update(t.id, { status: "WAITING_FOR_SANDBOX", detail: "starting" }),
        ).toBe(true);
        expect(await storage.startTasks.get(t.id, owner)).toStrictEqual({
          ...t,
          status: "WAITING_FOR_SANDBOX",
          detail: "starting",
        });
        const convId = hex();
        const sbxId = hex();
        const patch = {
          status: "READY" as const,
          detail: null,
          appConversationId: convId,
          sandboxId: sbxId,
          agentServerUrl: "http://127.0.0.1:5000",
          updatedAt: at(9),
        };
        expect(await storage.startTasks.update(t.id, patch)).toBe(true);
        expect(await storage.startTasks.get(t.id, owner)).toStrictEqual({ ...t, ...patch });
        expect(await storage.startTasks.update(t.id, { agentServerUrl: null, sandboxId: null })).toBe(true);
        expect(await storage.startTasks.get(t.id, owner)).toStrictEqual({
          ...t,
          ...patch,
          agentServerUrl: null,
          sandboxId: null,
        });
        expect(await storage.startTasks.update(t.id, {})).toBe(true);
        expect(await storage.startTasks.update(hex(), { status: "ERROR" })).toBe(false);
      });

      it("searches descending or ascending with exact cursors, ties broken by id in the same direction", async () => {
        const owner = newOwner();
        const tiedIds = sortedIds(2);
        const [t1, t2a, t2b, t3, t4] = [
          startTask(owner, at(1)),
          startTask(owner, at(2), { id: tiedIds[0] ?? "" }),
          startTask(owner, at(2), { id: tiedIds[1] ?? "" }),
          startTask(owner, at(3)),
          startTask(owner, at(4)),
        ] as [StartTaskRecord, StartTaskRecord, StartTaskRecord, StartTaskRecord, StartTaskRecord];
        for (const t of [t3, t1, t4, t2b, t2a]) await storage.startTasks.insert(t);
        await storage.startTasks.insert(startTask(newOwner(), at(2)));

        const desc = await allPages((after) =>
          storage.startTasks.search(owner, {}, { limit: 2, after }, false),
        );
        expect(desc).toStrictEqual([
          { items: [t4, t3], next: cursorOf(t3) },
          { items: [t2b, t2a], next: cursorOf(t2a) },
          { items: [t1], next: null },
        ]);
        const asc = await allPages((after) =>
          storage.startTasks.search(owner, {}, { limit: 2, after }, true),
        );
        expect(asc).toStrictEqual([
          { items: [t1, t2a], next: cursorOf(t2a) },
          { items: [t2b, t3], next: cursorOf(t3) },
          { items: [t4], next: null },
        ]);
        const exact = await storage.startTasks.search(owner, {}, { limit: 5, after: null }, true);
        expect(exact).toStrictEqual({ items: [t1, t2a, t2b, t3, t4], next: null });
        await expect(storage.startTasks.search(owner, {}, { limit: 0, after: null }, true)).rejects.toThrow(
          RangeError,
        );
      });

      it("filters by conversation id and createdAt lower bound, in search and count", async () => {
        const owner = newOwner();
        const conv = hex();
        const a = startTask(owner, at(1), { appConversationId: conv });
        const b = startTask(owner, at(2));
        const c = startTask(owner, at(3), { appConversationId: conv });
        const d = startTask(owner, at(4), { appConversationId: hex() });
        for (const t of [a, b, c, d]) await storage.startTasks.insert(t);
        await storage.startTasks.insert(startTask(newOwner(), at(3), { appConversationId: conv }));
        const page = { limit: 100, after: null };

        expect(
          (await storage.startTasks.search(owner, { conversationIdEq: conv }, page, false)).items,
        ).toStrictEqual([c, a]);
        expect(
          (await storage.startTasks.search(owner, { createdAtGte: at(2) }, page, true)).items,
        ).toStrictEqual([b, c, d]);
        const both = { conversationIdEq: conv, createdAtGte: at(2) };
        expect((await storage.startTasks.search(owner, both, page, false)).items).toStrictEqual([c]);
        expect(await storage.startTasks.count(owner, {})).toBe(4);
        expect(await storage.startTasks.count(owner, { conversationIdEq: conv })).toBe(2);
        expect(await storage.startTasks.count(owner, both)).toBe(1);
        expect(await storage.startTasks.count(newOwner(), {})).toBe(0);
      });

      it("lists unfinished tasks of every owner, oldest first", async () => {
        const statuses: StartTaskStatus[] = [
          "WORKING",
          "WAITING_FOR_SANDBOX",
          "PREPARING_REPOSITORY",
          "RUNNING_SETUP_SCRIPT",
          "SETTING_UP_GIT_HOOKS",
          "SETTING_UP_SKILLS",
          "STARTING_CONVERSATION",
          "READY",
          "ERROR",
        ];
        const tasks = statuses.map((status, i) => startTask(newOwner(), at(i), { status }));
        for (const t of [...tasks].reverse()) await storage.startTasks.insert(t);
        const mine = new Set(ids(tasks));
        const unfinished = (await storage.startTasks.listUnfinished()).filter((t) => mine.has(t.id));
        expect(unfinished).toStrictEqual(tasks.slice(0, 7));

        await storage.startTasks.update(tasks[0]?.id ?? "", { status: "READY" });
        await storage.startTasks.update(tasks[1]?.id ?? "", { status: "ERROR" });
        const after = (await storage.startTasks.listUnfinished()).filter((t) => mine.has(t.id));
        expect(ids(after)).toStrictEqual(ids(tasks.slice(2, 7)));
      });

      it("sandboxesInUse: the sandbox (else the planned one) of the owner's unfinished tasks", async () => {
        const owner = newOwner();
        const sb = (n: number) => `sandbox-in-use-${n}-${hex().slice(0, 8)}`;
        const [s1, s2, s3, s4] = [sb(1), sb(2), sb(3), sb(4)];
        const using = startTask(owner, at(1), { status: "PREPARING_REPOSITORY", sandboxId: s1 });
        const planned = startTask(owner, at(2), { status: "WORKING" });
        const done = startTask(owner, at(3), { status: "READY", sandboxId: s3 });
        const theirs = startTask(newOwner(), at(4), { status: "WORKING", sandboxId: s4 });
        await storage.startTasks.insert(using);
        await storage.startTasks.insert(planned, undefined, { sandboxId: s2 });
        await storage.startTasks.insert(done);
        await storage.startTasks.insert(theirs);
        expect((await storage.startTasks.sandboxesInUse(owner)).sort()).toStrictEqual([s1, s2].sort());
        await storage.startTasks.update(using.id, { status: "ERROR" });
        expect(await storage.startTasks.sandboxesInUse(owner)).toStrictEqual([s2]);
      });
    });

    describe("start task retention", () => {
      it("pruneFinished deletes READY and ERROR tasks last updated before the date, nothing unfinished", async () => {
        const owner = newOwner();
        const old = startTask(owner, at(1), { status: "READY", updatedAt: at(2) });
        const oldFailed = startTask(owner, at(1), { status: "ERROR", updatedAt: at(2) });
        const oldRunning = startTask(owner, at(1), { status: "WORKING", updatedAt: at(2) });
        const recent = startTask(owner, at(1), { status: "READY", updatedAt: new Date() });
        for (const t of [old, oldFailed, oldRunning, recent]) await storage.startTasks.insert(t);
        expect(await storage.startTasks.pruneFinished(at(3))).toBeGreaterThanOrEqual(2);
        expect(
          ids(
            await storage.startTasks.getMany([old.id, oldFailed.id, oldRunning.id, recent.id], owner),
          ).sort(),
        ).toEqual([oldRunning.id, recent.id].sort());
      });
    });

    describe("start task leases", () => {
      it("the lease owner renews and writes; another name cannot write; release makes it claimable", async () => {
        const owner = newOwner();
        const t = startTask(owner, at(1));
        const until = new Date(Date.now() + 60_000);
        await storage.startTasks.insert(t, { owner: "server-a", expiresAt: until });
        expect(await storage.startTasks.update(t.id, { status: "WAITING_FOR_SANDBOX" }, "server-a")).toBe(
          true,
        );
        expect(await storage.startTasks.update(t.id, { status: "ERROR" }, "server-b")).toBe(false);
        expect((await storage.startTasks.get(t.id, owner))?.status).toBe("WAITING_FOR_SANDBOX");
        expect(await storage.startTasks.renewLeases("server-a", [t.id, hex()], until)).toStrictEqual([t.id]);
        expect(await storage.startTasks.renewLeases("server-b", [t.id], until)).toStrictEqual([]);
        const claimedBefore = await storage.startTasks.claimExpired("server-b", new Date(), until, 1000);
        expect(claimedBefore.map((c) => c.task.id)).not.toContain(t.id);
        await storage.startTasks.releaseLeases("server-a", [t.id]);
        const claimed = await storage.startTasks.claimExpired("server-b", new Date(), until, 1000);
        const mine = claimed.find((c) => c.task.id === t.id);
        expect(mine?.task).toStrictEqual({ ...t, status: "WAITING_FOR_SANDBOX" });
        expect(mine?.attempts).toBe(1);
        expect(await storage.startTasks.update(t.id, { detail: "late" }, "server-a")).toBe(false);
        expect(await storage.startTasks.update(t.id, { detail: "mine" }, "server-b")).toBe(true);
      });

      it("an expired lease is claimed by exactly one of concurrent claimers, with the plan saved", async () => {
        const owner = newOwner();
        const t = startTask(owner, at(1));
        await storage.startTasks.insert(t, { owner: "dead", expiresAt: new Date(Date.now() - 1000) });
        expect(
          await storage.startTasks.update(t.id, { plan: { sandboxId: "s1", conversationId: hex() } }, "dead"),
        ).toBe(true);
        const until = new Date(Date.now() + 60_000);
        const results = await Promise.all(
          ["c1", "c2", "c3", "c4"].map((name) =>
            storage.startTasks.claimExpired(name, new Date(), until, 1000),
          ),
        );
        const winners = results.flatMap((r, i) => (r.some((c) => c.task.id === t.id) ? [i] : []));
        expect(winners).toHaveLength(1);
        const won = results[winners[0] ?? 0]?.find((c) => c.task.id === t.id);
        expect(won?.plan).toMatchObject({ sandboxId: "s1" });
        // Finished tasks are never claimed, whatever their lease.
        const done = startTask(owner, at(2), { status: "READY" });
        await storage.startTasks.insert(done);
        const later = await storage.startTasks.claimExpired("c5", new Date(), until, 1000);
        expect(later.map((c) => c.task.id)).not.toContain(done.id);
      });
    });

    describe("change log", () => {
      it("hands out increasing numbers, reads in order after a position, prunes by age", async () => {
        const owner = newOwner();
        const base = await storage.changes.head();
        const seqs = await storage.changes.append([
          { ownerId: owner, topic: "sandbox", key: "a", body: '{"n":1}' },
          { ownerId: owner, topic: "start-task", key: "b", body: '{"n":2}' },
        ]);
        const more = await Promise.all(
          [3, 4, 5].map((n) =>
            storage.changes.append([{ ownerId: owner, topic: "events", key: "c", body: `{"n":${n}}` }]),
          ),
        );
        const all = [...seqs, ...more.flat()];
        expect(all.every((n, i) => i === 0 || n > (all[i - 1] ?? 0))).toBe(true);
        expect(new Set(all).size).toBe(5);
        expect(seqs[0]).toBeGreaterThan(base);
        expect(await storage.changes.head()).toBe(Math.max(...all));
        const read = (await storage.changes.read(base, 100)).filter((c) => c.ownerId === owner);
        expect(read.map((c) => c.seq)).toStrictEqual(all);
        expect(read.map((c) => JSON.parse(c.body).n)).toStrictEqual([1, 2, 3, 4, 5]);
        expect(read[0]).toMatchObject({ topic: "sandbox", key: "a" });
        expect((await storage.changes.read(all[2] ?? 0, 1)).map((c) => c.seq)).toStrictEqual([all[3]]);

        expect(await storage.changes.prune(new Date(Date.now() - 60_000))).toBe(0);
        expect(await storage.changes.floor()).toBeLessThan(all[0] ?? 0);
        await new Promise((r) => setTimeout(r, 5));
        expect(await storage.changes.prune(new Date())).toBeGreaterThanOrEqual(5);
        expect(await storage.changes.floor()).toBeGreaterThanOrEqual(Math.max(...all));
        expect(await storage.changes.read(base, 100)).toStrictEqual([]);
        // Numbers are never handed out again after pruning.
        const [next] = await storage.changes.append([
          { ownerId: owner, topic: "sandbox", key: "d", body: "{}" },
        ]);
        expect(next).toBeGreaterThan(Math.max(...all));
      });

      it("prunes by size: all but the newest `keep` entries go, whatever their age", async () => {
        const owner = newOwner();
        const entry = (n: number) => ({
          ownerId: owner,
          topic: "sandbox" as const,
          key: "k",
          body: `{"n":${n}}`,
        });
        const seqs = await storage.changes.append([1, 2, 3, 4, 5].map(entry));
        const old = new Date(Date.now() - 3_600_000);
        expect(await storage.changes.prune(old, 2)).toBeGreaterThanOrEqual(3);
        expect(await storage.changes.floor()).toBe(seqs[2]);
        expect((await storage.changes.read(seqs[2] ?? 0, 100)).map((c) => c.seq)).toStrictEqual(
          seqs.slice(3),
        );
        expect(await storage.changes.prune(old, 2)).toBe(0);
      });
    });

    describe("durability", () => {
      it("keeps every kind of data across close and reopen", async () => {
        const first = await make();
        const owner = newOwner();
        const key = apiKey(owner, at(1));
        const sbx = sandbox(owner, at(2));
        const conv = conversation(owner, at(3));
        const task = startTask(owner, at(4), { appConversationId: conv.id });
        expect(await first.userData.compareAndSet(owner, 0, userData(1))).toBe(true);
        expect(await first.userData.compareAndSet(owner, 1, userData(2))).toBe(true);
        await first.apiKeys.insert(key);
        await first.apiKeys.revoke(key.id, at(5));
        await first.sandboxes.insert(sbx);
        await first.sandboxes.update(sbx.id, { status: "PAUSED", updatedAt: at(6) });
        await first.conversations.insert(conv);
        await first.conversations.addSubConversation(conv.id, "f".repeat(32), at(7));
        await first.startTasks.insert(task);
        await first.startTasks.update(task.id, { status: "READY", updatedAt: at(8) });
        const ev = event(owner, conv.id, 9);
        await first.events.append([ev]);
        await first.close();
        await first.close(); // idempotent

        const reopened = await open();
        await expect(reopened.ping()).resolves.toBeUndefined();
        expect(await reopened.userData.get(owner)).toStrictEqual({ version: 2, value: userData(2) });
        expect(await reopened.apiKeys.findByHash(key.hash)).toStrictEqual({ ...key, revokedAt: at(5) });
        expect(await reopened.sandboxes.get(sbx.id, owner)).toStrictEqual({
          ...sbx,
          status: "PAUSED",
          updatedAt: at(6),
        });
        expect(await reopened.conversations.get(conv.id, owner)).toStrictEqual({
          ...conv,
          subConversationIds: ["f".repeat(32)],
          updatedAt: at(7),
        });
        expect(await reopened.startTasks.get(task.id, owner)).toStrictEqual({
          ...task,
          status: "READY",
          updatedAt: at(8),
        });
        expect(await reopened.events.getMany([ev.id], owner)).toStrictEqual([ev]);
      });
    });
  });
}
