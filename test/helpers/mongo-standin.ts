/**
 * An in-process stand-in for the subset of the MongoDB driver's `Db`/`Collection` API that the Mongo storage
 * adapter uses, so that the adapter's code runs unchanged where no MongoDB server can run. Query matching,
 * sorting and update operators follow MongoDB semantics through `mingo`; unique indexes (and `_id`) are enforced
 * with the server's duplicate key error (a real `MongoServerError`, code 11000).
 *
 * Every call is recorded in {@link MongoStandinDb.calls} so that tests can check filters, sorts and write
 * options. Each operation yields to the event loop first, like a network round trip, so concurrent callers
 * interleave as they would against a server.
 */
import { find, Query, update } from "mingo";
import { MongoInvalidArgumentError, MongoServerError, ObjectId } from "mongodb";

/** A stored document. */
export type StandinDoc = Record<string, unknown>;

/** One recorded call on the stand-in. */
export interface StandinCall {
  collection: string;
  op:
    | "createIndex"
    | "insertOne"
    | "insertMany"
    | "findOneAndUpdate"
    | "findOne"
    | "find"
    | "updateOne"
    | "deleteOne"
    | "deleteMany"
    | "countDocuments"
    | "command";
  filter?: StandinDoc;
  update?: StandinDoc;
  options?: StandinDoc;
  sort?: StandinDoc;
  limit?: number;
}

/** An index declared with createIndex. */
export interface StandinIndex {
  name: string;
  key: Record<string, number>;
  unique: boolean;
}

const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

const clone = <T>(value: T): T => structuredClone(value);

function valueAt(doc: StandinDoc, path: string): unknown {
  let current: unknown = doc;
  for (const part of path.split(".")) {
    if (current === null || typeof current !== "object") return null;
    current = (current as StandinDoc)[part];
  }
  return current ?? null;
}

function indexKeyOf(doc: StandinDoc, index: StandinIndex): string {
  return JSON.stringify(
    Object.keys(index.key).map((field) => valueAt(doc, field)),
    (_key, value: unknown) => (value instanceof Date ? { $date: value.getTime() } : value),
  );
}

function isOperatorObject(value: unknown): boolean {
  return (
    typeof value === "object" &&
    value !== null &&
    !Array.isArray(value) &&
    !(value instanceof Date) &&
    Object.keys(value).some((k) => k.startsWith("$"))
  );
}

function defaultIndexName(key: Record<string, number>): string {
  return Object.entries(key)
    .map(([field, direction]) => `${field}_${direction}`)
    .join("_");
}

/** Cursor returned by {@link MongoStandinCollection.find}. */
export class MongoStandinCursor {
  readonly #collection: MongoStandinCollection;
  readonly #filter: StandinDoc;
  #sort: StandinDoc | undefined;
  #limit: number | undefined;

  constructor(collection: MongoStandinCollection, filter: StandinDoc) {
    this.#collection = collection;
    this.#filter = filter;
  }

  sort(spec: StandinDoc): this {
    this.#sort = clone(spec);
    return this;
  }

  limit(n: number): this {
    this.#limit = n;
    return this;
  }

  async toArray(): Promise<StandinDoc[]> {
    await tick();
    const call: StandinCall = {
      collection: this.#collection.collectionName,
      op: "find",
      filter: this.#filter,
    };
    if (this.#sort !== undefined) call.sort = this.#sort;
    if (this.#limit !== undefined) call.limit = this.#limit;
    this.#collection.db.calls.push(call);
    let cursor = find<StandinDoc>(this.#collection.documents, this.#filter);
    if (this.#sort !== undefined) cursor = cursor.sort(this.#sort);
    // As in MongoDB, limit 0 means no limit.
    if (this.#limit !== undefined && this.#limit !== 0) cursor = cursor.limit(Math.abs(this.#limit));
    return cursor.all().map(clone);
  }
}

/** Stand-in for the driver's `Collection`. */
export class MongoStandinCollection {
  readonly db: MongoStandinDb;
  readonly collectionName: string;
  /** The stored documents, in insertion (natural) order. Tests may read, not write. */
  readonly documents: StandinDoc[] = [];
  readonly #indexes = new Map<string, StandinIndex>([
    ["_id_", { name: "_id_", key: { _id: 1 }, unique: true }],
  ]);

  constructor(db: MongoStandinDb, name: string) {
    this.db = db;
    this.collectionName = name;
  }

  /** The indexes declared so far, `_id_` included. */
  indexes(): StandinIndex[] {
    return [...this.#indexes.values()].map(clone);
  }

  async createIndex(
    key: Record<string, number>,
    options: { name?: string; unique?: boolean } = {},
  ): Promise<string> {
    await tick();
    this.#record({ op: "createIndex", filter: clone(key), options: clone(options) });
    const index: StandinIndex = {
      name: options.name ?? defaultIndexName(key),
      key: clone(key),
      unique: options.unique === true,
    };
    const existing = this.#indexes.get(index.name);
    if (existing !== undefined) {
      if (JSON.stringify(existing) === JSON.stringify(index)) return index.name;
      throw new MongoServerError({
        message: `An existing index has the same name as the requested index: ${index.name}`,
        code: 86,
        codeName: "IndexKeySpecsConflict",
      });
    }
    if (index.unique) {
      const seen = new Set<string>();
      for (const doc of this.documents) {
        const k = indexKeyOf(doc, index);
        if (seen.has(k)) throw this.#duplicate(index, doc);
        seen.add(k);
      }
    }
    this.#indexes.set(index.name, index);
    return index.name;
  }

  async insertOne(
    doc: StandinDoc,
    options: StandinDoc = {},
  ): Promise<{ acknowledged: true; insertedId: unknown }> {
    await tick();
    this.#record({ op: "insertOne", options: clone(options) });
    const stored = clone(doc);
    if (stored._id === undefined) stored._id = new ObjectId();
    this.#checkUnique(stored, undefined);
    this.documents.push(stored);
    return { acknowledged: true, insertedId: stored._id };
  }

  /** Ordered: stops at the first failure, keeping the documents inserted before it (the driver's default). */
  async insertMany(
    docs: StandinDoc[],
    options: StandinDoc = {},
  ): Promise<{ acknowledged: true; insertedCount: number }> {
    await tick();
    this.#record({ op: "insertMany", options: clone(options) });
    for (const doc of docs) {
      const stored = clone(doc);
      if (stored._id === undefined) stored._id = new ObjectId();
      this.#checkUnique(stored, undefined);
      this.documents.push(stored);
    }
    return { acknowledged: true, insertedCount: docs.length };
  }

  /** Atomic (no other call runs between the match and the write); returns the document before or after. */
  async findOneAndUpdate(
    filter: StandinDoc,
    modifier: StandinDoc,
    options: StandinDoc = {},
  ): Promise<StandinDoc | null> {
    await tick();
    this.#record({
      op: "findOneAndUpdate",
      filter: clone(filter),
      update: clone(modifier),
      options: clone(options),
    });
    const query = new Query<StandinDoc>(filter, {});
    const position = this.documents.findIndex((d) => query.test(d));
    const current = this.documents[position];
    if (current === undefined) {
      if (options.upsert !== true) return null;
      const created = this.#upsert(filter, modifier);
      return options.returnDocument === "after" ? clone(created) : null;
    }
    const next = clone(current);
    update(next, clone(modifier));
    this.#checkUnique(next, position);
    this.documents[position] = next;
    return clone(options.returnDocument === "after" ? next : current);
  }

  async findOne(filter: StandinDoc = {}): Promise<StandinDoc | null> {
    await tick();
    this.#record({ op: "findOne", filter: clone(filter) });
    const query = new Query<StandinDoc>(filter, {});
    const doc = this.documents.find((d) => query.test(d));
    return doc === undefined ? null : clone(doc);
  }

  find(filter: StandinDoc = {}): MongoStandinCursor {
    return new MongoStandinCursor(this, clone(filter));
  }

  async updateOne(
    filter: StandinDoc,
    modifier: StandinDoc,
    options: StandinDoc = {},
  ): Promise<{
    acknowledged: true;
    matchedCount: number;
    modifiedCount: number;
    upsertedCount: 0;
    upsertedId: null;
  }> {
    await tick();
    this.#record({
      op: "updateOne",
      filter: clone(filter),
      update: clone(modifier),
      options: clone(options),
    });
    const keys = Object.keys(modifier);
    if (keys.length === 0 || keys.some((k) => !k.startsWith("$"))) {
      throw new MongoInvalidArgumentError("Update document requires atomic operators");
    }
    const query = new Query<StandinDoc>(filter, {});
    const position = this.documents.findIndex((d) => query.test(d));
    const current = this.documents[position];
    if (current === undefined && options.upsert === true) {
      this.#upsert(filter, modifier);
      return { acknowledged: true, matchedCount: 0, modifiedCount: 0, upsertedCount: 0, upsertedId: null };
    }
    if (current === undefined) {
      return { acknowledged: true, matchedCount: 0, modifiedCount: 0, upsertedCount: 0, upsertedId: null };
    }
    const next = clone(current);
    const changed = update(next, clone(modifier));
    if (JSON.stringify(next._id) !== JSON.stringify(current._id)) {
      throw new MongoServerError({
        message: "Performing an update on the path '_id' would modify the immutable field '_id'",
        code: 66,
        codeName: "ImmutableField",
      });
    }
    this.#checkUnique(next, position);
    this.documents[position] = next;
    return {
      acknowledged: true,
      matchedCount: 1,
      modifiedCount: changed.length > 0 ? 1 : 0,
      upsertedCount: 0,
      upsertedId: null,
    };
  }

  async deleteOne(
    filter: StandinDoc,
    options: StandinDoc = {},
  ): Promise<{ acknowledged: true; deletedCount: number }> {
    await tick();
    this.#record({ op: "deleteOne", filter: clone(filter), options: clone(options) });
    const query = new Query<StandinDoc>(filter, {});
    const position = this.documents.findIndex((d) => query.test(d));
    if (position < 0) return { acknowledged: true, deletedCount: 0 };
    this.documents.splice(position, 1);
    return { acknowledged: true, deletedCount: 1 };
  }

  async deleteMany(
    filter: StandinDoc,
    options: StandinDoc = {},
  ): Promise<{ acknowledged: true; deletedCount: number }> {
    await tick();
    this.#record({ op: "deleteMany", filter: clone(filter), options: clone(options) });
    const query = new Query<StandinDoc>(filter, {});
    const before = this.documents.length;
    for (let i = this.documents.length - 1; i >= 0; i--) {
      const doc = this.documents[i];
      if (doc !== undefined && query.test(doc)) this.documents.splice(i, 1);
    }
    return { acknowledged: true, deletedCount: before - this.documents.length };
  }

  async countDocuments(
    filter: StandinDoc = {},
    options: { limit?: number; skip?: number } = {},
  ): Promise<number> {
    await tick();
    this.#record({ op: "countDocuments", filter: clone(filter), options: clone(options) });
    const query = new Query<StandinDoc>(filter, {});
    const matched = Math.max(0, this.documents.filter((d) => query.test(d)).length - (options.skip ?? 0));
    return options.limit !== undefined && options.limit > 0 ? Math.min(matched, options.limit) : matched;
  }

  /** Inserts what an upsert creates, as the server does: the filter's plain equality fields, then the update. */
  #upsert(filter: StandinDoc, modifier: StandinDoc): StandinDoc {
    const created: StandinDoc = {};
    for (const [k, v] of Object.entries(filter))
      if (!k.startsWith("$") && !isOperatorObject(v)) created[k] = clone(v);
    update(created, clone(modifier));
    if (created._id === undefined) created._id = new ObjectId();
    this.#checkUnique(created, undefined);
    this.documents.push(created);
    return created;
  }

  #record(call: Omit<StandinCall, "collection">): void {
    this.db.calls.push({ collection: this.collectionName, ...call });
  }

  #checkUnique(doc: StandinDoc, ignorePosition: number | undefined): void {
    for (const index of this.#indexes.values()) {
      if (!index.unique) continue;
      const key = indexKeyOf(doc, index);
      const clash = this.documents.find(
        (other, i) => i !== ignorePosition && indexKeyOf(other, index) === key,
      );
      if (clash !== undefined) throw this.#duplicate(index, doc);
    }
  }

  #duplicate(index: StandinIndex, doc: StandinDoc): MongoServerError {
    const keyValue = Object.fromEntries(Object.keys(index.key).map((field) => [field, valueAt(doc, field)]));
    return new MongoServerError({
      message:
        `E11000 duplicate key error collection: ${this.db.databaseName}.${this.collectionName} ` +
        `index: ${index.name} dup key: ${JSON.stringify(keyValue)}`,
      code: 11000,
      codeName: "DuplicateKey",
      keyPattern: clone(index.key),
      keyValue,
    });
  }
}

/** Stand-in for the driver's `Db`; pass it to the adapter as `standin as unknown as Db`. */
export class MongoStandinDb {
  readonly databaseName: string;
  /** Every call made, in order. */
  readonly calls: StandinCall[] = [];
  readonly #collections = new Map<string, MongoStandinCollection>();

  constructor(name = "standin") {
    this.databaseName = name;
  }

  /** The collection (created on first use; the same object on every call, so it can be spied on). */
  collection(name: string): MongoStandinCollection {
    let collection = this.#collections.get(name);
    if (collection === undefined) {
      collection = new MongoStandinCollection(this, name);
      this.#collections.set(name, collection);
    }
    return collection;
  }

  /** Names of the collections used so far. */
  collectionNames(): string[] {
    return [...this.#collections.keys()];
  }

  async command(command: StandinDoc): Promise<StandinDoc> {
    await tick();
    this.calls.push({ collection: "$cmd", op: "command", filter: clone(command) });
    if (command.ping === 1) return { ok: 1 };
    throw new MongoServerError({
      message: `no such command: '${Object.keys(command)[0] ?? ""}'`,
      code: 59,
      codeName: "CommandNotFound",
    });
  }

  async dropDatabase(): Promise<boolean> {
    await tick();
    this.#collections.clear();
    return true;
  }
}

/** A fresh, empty stand-in database. */
export function createMongoStandin(name?: string): MongoStandinDb {
  return new MongoStandinDb(name);
}
