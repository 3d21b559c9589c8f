// The Mongo adapter's own logic that the contract suite over the stand-in cannot prove: error mapping, index
// declarations and their fit to the queries, write concern, document shapes.
import {
  type Db,
  MongoNetworkError,
  MongoNetworkTimeoutError,
  MongoNotConnectedError,
  MongoServerError,
  MongoServerSelectionError,
  MongoTopologyClosedError,
} from "mongodb";
import { describe, expect, it, vi } from "vitest";
import {
  escapeRegExp,
  toConversationFilter,
} from "../../src/adapters/storage/mongo/mongo-conversation-repository.ts";
import { COLLECTIONS, MONGO_INDEXES } from "../../src/adapters/storage/mongo/mongo-indexes.ts";
import {
  createMongoStorage,
  createMongoStorageFromDb,
} from "../../src/adapters/storage/mongo/mongo-storage.ts";
import { StorageUnavailableError } from "../../src/core/errors.ts";
import type { Storage } from "../../src/ports/storage.ts";
import { conversationRecord } from "../helpers/conversation-fixtures.ts";
import { createMongoStandin, type MongoStandinDb, type StandinDoc } from "../helpers/mongo-standin.ts";

/**
 * `instanceof StorageUnavailableError` cannot be used: ConnectError's Symbol.hasInstance answers for every subclass
 * by ConnectError's own rules (false for a renamed subclass). Compare prototypes instead.
 */
const isStorageUnavailable = (error: unknown): boolean =>
  error instanceof Error && Object.getPrototypeOf(error) === StorageUnavailableError.prototype;

const emptyUserData = { settings: null, providerTokens: {}, customSecrets: {} };
const T = new Date("2025-01-01T00:00:00.000Z");

async function standinStorage(): Promise<{ standin: MongoStandinDb; storage: Storage }> {
  const standin = createMongoStandin();
  const storage = await createMongoStorageFromDb(standin as unknown as Db);
  return { standin, storage };
}

describe("createMongoStorage", () => {
  it("rejects quickly with StorageUnavailableError when no server is reachable", async () => {
    const started = Date.now();
    let thrown: unknown;
    try {
      await createMongoStorage({
        uri: "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=200&connectTimeoutMS=200",
        dbName: "unused",
      });
    } catch (error: unknown) {
      thrown = error;
    }
    expect(thrown).toSatisfy(isStorageUnavailable);
    expect((thrown as Error).cause).toBeInstanceOf(MongoServerSelectionError);
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it("keeps a malformed URI as the driver's configuration error", async () => {
    await expect(createMongoStorage({ uri: "not-a-mongodb-uri" })).rejects.not.toSatisfy(
      isStorageUnavailable,
    );
  });
});

describe("error mapping", () => {
  const unavailable: [string, () => Error][] = [
    ["MongoNetworkError", () => new MongoNetworkError("connection reset")],
    ["MongoNetworkTimeoutError", () => new MongoNetworkTimeoutError("timed out")],
    [
      "MongoServerSelectionError",
      // The driver does not export TopologyDescription at run time; the reason is only stored.
      () =>
        new MongoServerSelectionError(
          "no primary",
          {} as ConstructorParameters<typeof MongoServerSelectionError>[1],
        ),
    ],
    ["MongoNotConnectedError", () => new MongoNotConnectedError("not connected")],
    ["MongoTopologyClosedError", () => new MongoTopologyClosedError()],
    ["NotWritablePrimary", () => new MongoServerError({ message: "not primary", code: 10107 })],
    ["PrimarySteppedDown", () => new MongoServerError({ message: "stepped down", code: 189 })],
  ];

  it.each(unavailable)(
    "maps %s on reads and writes to StorageUnavailableError with the cause kept",
    async (_, make) => {
      const { standin, storage } = await standinStorage();
      const error = make();
      vi.spyOn(standin.collection(COLLECTIONS.userData), "findOne").mockRejectedValueOnce(error);
      const read = await storage.userData.get("u").catch((e: unknown) => e);
      expect(read).toSatisfy(isStorageUnavailable);
      expect((read as Error).cause).toBe(error);

      vi.spyOn(standin.collection(COLLECTIONS.sandboxes), "insertOne").mockRejectedValueOnce(make());
      await expect(
        storage.sandboxes.insert({
          id: "s",
          ownerId: "o",
          specId: "x",
          runtime: "process",
          handle: {},
          sessionApiKey: "k",
          status: "RUNNING",
          createdAt: T,
          updatedAt: T,
        }),
      ).rejects.toSatisfy(isStorageUnavailable);

      vi.spyOn(standin.collection(COLLECTIONS.conversations), "find").mockImplementationOnce(() => {
        throw make();
      });
      await expect(storage.conversations.search("o", {}, { limit: 10, after: null })).rejects.toSatisfy(
        isStorageUnavailable,
      );

      vi.spyOn(standin, "command").mockRejectedValueOnce(make());
      await expect(storage.ping()).rejects.toSatisfy(isStorageUnavailable);
    },
  );

  it("keeps other errors unchanged", async () => {
    const { standin, storage } = await standinStorage();
    const badValue = new MongoServerError({ message: "bad value", code: 2 });
    vi.spyOn(standin.collection(COLLECTIONS.apiKeys), "findOne").mockRejectedValueOnce(badValue);
    await expect(storage.apiKeys.findByHash("h")).rejects.toBe(badValue);
    const plain = new Error("boom");
    vi.spyOn(standin.collection(COLLECTIONS.startTasks), "countDocuments").mockRejectedValueOnce(plain);
    await expect(storage.startTasks.count("o", {})).rejects.toBe(plain);
  });

  it("compareAndSet turns only a duplicate key on create into false", async () => {
    const { standin, storage } = await standinStorage();
    expect(await storage.userData.compareAndSet("u", 0, emptyUserData)).toBe(true);
    expect(await storage.userData.compareAndSet("u", 0, emptyUserData)).toBe(false);
    const other = new MongoServerError({ message: "document too large", code: 10334 });
    vi.spyOn(standin.collection(COLLECTIONS.userData), "insertOne").mockRejectedValueOnce(other);
    await expect(storage.userData.compareAndSet("v", 0, emptyUserData)).rejects.toBe(other);
    vi.spyOn(standin.collection(COLLECTIONS.userData), "insertOne").mockRejectedValueOnce(
      new MongoNetworkError("x"),
    );
    await expect(storage.userData.compareAndSet("v", 0, emptyUserData)).rejects.toSatisfy(
      isStorageUnavailable,
    );
  });

  it("fails to start with StorageUnavailableError when index creation cannot reach the server", async () => {
    const standin = createMongoStandin();
    vi.spyOn(standin.collection(COLLECTIONS.apiKeys), "createIndex").mockRejectedValue(
      new MongoNetworkError("x"),
    );
    await expect(createMongoStorageFromDb(standin as unknown as Db)).rejects.toSatisfy(isStorageUnavailable);
  });
});

describe("indexes", () => {
  it("declares every index at start, the api key hash unique", async () => {
    const standin = createMongoStandin();
    const spies = Object.values(COLLECTIONS).map((name) => vi.spyOn(standin.collection(name), "createIndex"));
    await createMongoStorageFromDb(standin as unknown as Db);
    expect(spies.reduce((n, spy) => n + spy.mock.calls.length, 0)).toBe(MONGO_INDEXES.length);
    const declared = Object.values(COLLECTIONS).flatMap((name) =>
      standin
        .collection(name)
        .indexes()
        .filter((i) => i.name !== "_id_")
        .map((i) => ({ collection: name, ...i })),
    );
    expect(declared).toHaveLength(MONGO_INDEXES.length);
    expect(declared).toContainEqual({
      collection: "api_keys",
      name: "hash_unique",
      key: { hash: 1 },
      unique: true,
    });
    expect(declared).toContainEqual({
      collection: "conversations",
      name: "owner_created",
      key: { ownerId: 1, createdAt: -1, _id: -1 },
      unique: false,
    });
    // Creating them again (a second server instance starting) is harmless.
    await expect(createMongoStorageFromDb(standin as unknown as Db)).resolves.toBeDefined();
  });

  it("serves every sorted listing from an index: filter equalities, then the sort, as an index prefix", async () => {
    const { standin, storage } = await standinStorage();
    const after = { createdAt: T, id: "x" };
    const page = { limit: 10, after: null };
    await storage.sandboxes.list("o", page);
    await storage.sandboxes.list("o", { limit: 10, after });
    await storage.sandboxes.listAll("o");
    await storage.sandboxes.listAll();
    await storage.apiKeys.list("o");
    await storage.apiKeys.list();
    await storage.conversations.search("o", {}, page);
    await storage.conversations.search(
      "o",
      { includeSubConversations: true, titleContains: "x" },
      { limit: 5, after },
    );
    await storage.conversations.search("o", { createdAtGte: T, updatedAtLt: T }, page);
    await storage.startTasks.search("o", {}, page, false);
    await storage.startTasks.search("o", {}, { limit: 5, after }, true);
    await storage.startTasks.search("o", { conversationIdEq: "c", createdAtGte: T }, page, true);

    const sorted = standin.calls.filter((c) => c.op === "find" && c.sort !== undefined);
    expect(sorted).toHaveLength(12);
    for (const call of sorted) {
      const filter = call.filter ?? {};
      const equalities = Object.keys(filter).filter((k) => !k.startsWith("$") && isEquality(filter[k]));
      const sort = Object.entries(call.sort ?? {});
      const served = MONGO_INDEXES.some(
        (index) =>
          index.collection === call.collection && isPrefixFor(Object.entries(index.key), equalities, sort),
      );
      expect(served, `${call.collection} ${JSON.stringify(filter)} sort ${JSON.stringify(call.sort)}`).toBe(
        true,
      );
    }

    // listUnfinished filters on status with $nin: an index on status keeps finished tasks out of the scan.
    await storage.startTasks.listUnfinished();
    const unfinished = standin.calls.at(-1);
    expect(unfinished?.filter).toStrictEqual({ status: { $nin: ["READY", "ERROR"] } });
    expect(
      MONGO_INDEXES.some((i) => i.collection === "start_tasks" && Object.keys(i.key)[0] === "status"),
    ).toBe(true);
  });
});

function isEquality(value: unknown): boolean {
  if (value === null || typeof value !== "object" || value instanceof Date) return true;
  return !Object.keys(value).some((k) => k.startsWith("$"));
}

/** The index starts with exactly the equality fields (any order), then the sort keys (all same or all reversed). */
function isPrefixFor(key: [string, unknown][], equalities: string[], sort: [string, unknown][]): boolean {
  const head = key.slice(0, equalities.length).map(([field]) => field);
  if (head.length !== equalities.length || !equalities.every((f) => head.includes(f))) return false;
  const rest = key.slice(equalities.length, equalities.length + sort.length);
  if (rest.length !== sort.length) return false;
  const same = rest.every(([f, d], i) => f === sort[i]?.[0] && d === sort[i]?.[1]);
  const reversed = rest.every(([f, d], i) => f === sort[i]?.[0] && d === -Number(sort[i]?.[1]));
  return same || reversed;
}

describe("writes", () => {
  it("every write passes writeConcern { w: 'majority', journal: true }", async () => {
    const { standin, storage } = await standinStorage();
    await storage.userData.compareAndSet("u", 0, emptyUserData);
    await storage.userData.compareAndSet("u", 1, emptyUserData);
    await storage.apiKeys.insert({
      id: "k",
      userId: "u",
      hash: "h",
      label: null,
      createdAt: T,
      revokedAt: null,
    });
    await storage.apiKeys.revoke("k", T);
    const sbx = {
      id: "s",
      ownerId: "u",
      specId: "x",
      runtime: "process",
      handle: {},
      sessionApiKey: "k",
      status: "RUNNING" as const,
      createdAt: T,
      updatedAt: T,
    };
    await storage.sandboxes.insert(sbx);
    await storage.sandboxes.update("s", { status: "PAUSED" });
    await storage.sandboxes.delete("s");
    await storage.conversations.insert(
      conversationRecord({ id: "c", ownerId: "u", sandboxId: "s", createdAt: T }),
    );
    await storage.conversations.addSubConversation("c", "d", T);
    await storage.startTasks.insert({
      id: "t",
      ownerId: "u",
      status: "WORKING",
      detail: null,
      appConversationId: null,
      sandboxId: null,
      agentServerUrl: null,
      request: {},
      createdAt: T,
      updatedAt: T,
    });
    await storage.startTasks.update("t", { status: "READY" });

    const writes = standin.calls.filter((c) =>
      ["insertOne", "insertMany", "updateOne", "findOneAndUpdate", "deleteOne"].includes(c.op),
    );
    // 11 writes of the records, the conversation insert's drop of a tombstone of its id, and the change log's
    // counter and entries for the delete, the task insert and the task update (3 × 2).
    expect(writes).toHaveLength(18);
    for (const write of writes) {
      expect(write.options?.writeConcern, `${write.collection}.${write.op}`).toStrictEqual({
        w: "majority",
        journal: true,
      });
    }
  });

  it("stores dates as Date objects, the user data value as JSON text, and appends sub-conversations atomically", async () => {
    const { standin, storage } = await standinStorage();
    await storage.userData.compareAndSet("u", 0, {
      settings: { a: 1 },
      providerTokens: {},
      customSecrets: {},
    });
    const userDoc = standin.collection(COLLECTIONS.userData).documents[0] as StandinDoc;
    expect(userDoc).toStrictEqual({
      _id: "u",
      version: 1,
      value: JSON.stringify({ settings: { a: 1 }, providerTokens: {}, customSecrets: {} }),
    });
    await storage.apiKeys.insert({
      id: "k",
      userId: "u",
      hash: "h",
      label: null,
      createdAt: T,
      revokedAt: null,
    });
    const keyDoc = standin.collection(COLLECTIONS.apiKeys).documents[0] as StandinDoc;
    expect(keyDoc.createdAt).toBeInstanceOf(Date);
    expect(keyDoc._id).toBe("k");

    await storage.conversations.addSubConversation("p", "c", T);
    const update = standin.calls.at(-1);
    expect(update?.op).toBe("updateOne");
    expect(update?.update).toStrictEqual({ $addToSet: { subConversationIds: "c" }, $set: { updatedAt: T } });
  });

  it("close() closes the given client once", async () => {
    const client = { close: vi.fn(async () => undefined) };
    const storage = await createMongoStorageFromDb(createMongoStandin() as unknown as Db, client);
    await storage.close();
    await storage.close();
    expect(client.close).toHaveBeenCalledTimes(1);
  });
});

describe("conversation filter", () => {
  it("escapes the title so that it matches literally and case-insensitively", () => {
    for (const text of ["a.b", "x*", "(y)", "[z]", "1+1", "a?b", "^s$", "p|q", "{2}", "back\\slash"]) {
      const re = new RegExp(escapeRegExp(text), "i");
      expect(re.test(`--${text.toUpperCase()}--`), text).toBe(true);
      expect(re.test("--unrelated--"), text).toBe(false);
    }
    expect(toConversationFilter("o", { titleContains: "a.b" })).toStrictEqual({
      ownerId: "o",
      parentConversationId: null,
      title: { $regex: "a\\.b", $options: "i" },
    });
  });

  it("uses equality on ownerId and parentConversationId, and ranges for dates", () => {
    const gte = new Date(1);
    const lt = new Date(2);
    expect(
      toConversationFilter("o", {
        includeSubConversations: true,
        createdAtGte: gte,
        createdAtLt: lt,
        updatedAtGte: gte,
      }),
    ).toStrictEqual({ ownerId: "o", createdAt: { $gte: gte, $lt: lt }, updatedAt: { $gte: gte } });
  });
});
