import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import type { Db, Filter } from "mongodb";
import { StorageUnavailableError } from "../../../core/errors.ts";
import { type ChangeLog, sandboxChange } from "../../../ports/change-log.ts";
import {
  ACTIVE_STATUSES,
  type SandboxRecord,
  type SandboxRepository,
  type SandboxStatus,
  type TransitionOptions,
} from "../../../ports/sandbox-repository.ts";
import { checkPageLimit, toKeysetPage } from "../keyset-page.ts";
import { guarded, isDuplicateKeyError } from "./mongo-errors.ts";
import { COLLECTIONS } from "./mongo-indexes.ts";
import { keysetAfter, NEWEST_FIRST } from "./mongo-keyset.ts";
import { fromSandboxDoc, type SandboxDoc, toSandboxDoc } from "./mongo-mappers.ts";
import { DURABLE_WRITE } from "./mongo-write-concern.ts";

/** A per-owner lock: held by `holder` until released or until `expiresAt` (a holder that died). */
interface LockDoc {
  _id: string;
  holder: string;
  expiresAt: Date;
}

/** How long a lock outlives a holder that died without releasing it. */
const LOCK_LEASE_MS = 10_000;
/** How long a create or claim waits for the owner's lock before answering "storage unavailable". */
const LOCK_WAIT_MS = 15_000;
const OLDEST_FIRST = { createdAt: 1, _id: 1 } as const;

/**
 * The sandbox registry on MongoDB; listings use the `{ownerId: 1, createdAt: -1, _id: -1}` index.
 *
 * `create` and `claim` decide across several documents without multi-document transactions (which need a replica
 * set): each runs under a per-owner lock document in `sandbox_locks` (insert to take, delete to release, taken
 * over once its lease has expired), so two servers never decide for the same owner at once. Each eviction is a
 * compare-and-set on the record's status and on whether it has a handle, so that it is linearisable with
 * `setHandle` (which takes no lock): exactly one of the evicting caller and the starting caller sees the handle.
 */
export function createMongoSandboxRepository(db: Db, changes?: ChangeLog): SandboxRepository {
  const coll = db.collection<SandboxDoc>(COLLECTIONS.sandboxes);
  /** Logs status changes once written (MongoDB has no transaction here: see createMongoChangeLog). */
  const logged = async (records: readonly SandboxRecord[]): Promise<void> => {
    if (records.length > 0) await changes?.append(records.map(sandboxChange));
  };
  const locks = db.collection<LockDoc>(COLLECTIONS.sandboxLocks);

  const withOwnerLock = async <T>(ownerId: string, work: () => Promise<T>): Promise<T> => {
    const holder = randomUUID();
    const deadline = Date.now() + LOCK_WAIT_MS;
    for (let attempt = 0; ; attempt++) {
      try {
        await locks.insertOne(
          { _id: ownerId, holder, expiresAt: new Date(Date.now() + LOCK_LEASE_MS) },
          DURABLE_WRITE,
        );
        break;
      } catch (error: unknown) {
        if (!isDuplicateKeyError(error)) throw error;
      }
      await locks.deleteOne({ _id: ownerId, expiresAt: { $lt: new Date() } }, DURABLE_WRITE);
      if (Date.now() > deadline)
        throw new StorageUnavailableError(new Error(`the sandbox lock of ${ownerId} stayed taken`));
      await sleep(Math.min(50, 1 + attempt) * (0.5 + Math.random()));
    }
    try {
      return await work();
    } finally {
      await locks.deleteOne({ _id: ownerId, holder }, DURABLE_WRITE).catch(() => undefined);
    }
  };

  const hasHandle = (doc: SandboxDoc): boolean => Object.keys(doc.handle ?? {}).length > 0;

  /**
   * The owner's oldest RUNNING slot holders beyond `keep` (other than `except` and the protected), or `busy` when
   * too few may be evicted (starting or protected records hold the slots). Called under the owner's lock: no other
   * call moves a record into a slot meanwhile.
   */
  const toEvict = async (
    ownerId: string,
    except: string,
    keep: number,
    protect: readonly string[] = [],
  ): Promise<SandboxDoc[] | { busy: true; holders: number }> => {
    const holders = await coll
      .find({ ownerId, _id: { $ne: except }, status: { $in: [...ACTIVE_STATUSES] } })
      .sort(OLDEST_FIRST)
      .toArray();
    const need = holders.length - keep;
    if (need <= 0) return [];
    const evictable = holders.filter((doc) => doc.status === "RUNNING" && !protect.includes(doc._id));
    return evictable.length < need ? { busy: true, holders: holders.length } : evictable.slice(0, need);
  };
  /** Sets PAUSED the records `toEvict` chose (still RUNNING); returns them as they were. */
  const evict = async (chosen: readonly SandboxDoc[], updatedAt: Date) => {
    const evicted: SandboxRecord[] = [];
    for (let doc of chosen) {
      for (;;) {
        const filter: Filter<SandboxDoc> = hasHandle(doc)
          ? { _id: doc._id, status: doc.status }
          : { _id: doc._id, status: doc.status, handle: {} };
        const result = await coll.updateOne(filter, { $set: { status: "PAUSED", updatedAt } }, DURABLE_WRITE);
        if (result.matchedCount === 1) {
          evicted.push(fromSandboxDoc(doc));
          await logged([{ ...fromSandboxDoc(doc), status: "PAUSED", updatedAt }]);
          break;
        }
        const now = await coll.findOne({ _id: doc._id });
        // No longer holds a slot (or, starting again, may not be evicted).
        if (now === null || now.status !== "RUNNING") break;
        doc = now;
      }
    }
    return evicted;
  };

  const transition = async (
    id: string,
    from: readonly SandboxStatus[],
    to: SandboxStatus,
    updatedAt: Date,
    options?: TransitionOptions,
  ): Promise<boolean> => {
    const after = await coll.findOneAndUpdate(
      {
        _id: id,
        status: { $in: [...from] },
        ...(options?.ifUpdatedAt === undefined ? {} : { updatedAt: options.ifUpdatedAt }),
      },
      { $set: { status: to, updatedAt, ...(options?.deleting === true ? { deleting: true as const } : {}) } },
      { ...DURABLE_WRITE, returnDocument: "after" },
    );
    if (after !== null) await logged([fromSandboxDoc(after)]);
    return after !== null;
  };

  return {
    create: (record, limits) =>
      guarded(() =>
        withOwnerLock(record.ownerId, async () => {
          const count = await coll.countDocuments({ ownerId: record.ownerId });
          if (count >= limits.maxPerUser) return { created: false as const, count };
          const keep = Math.max(1, limits.maxRunning) - 1;
          const chosen = await toEvict(record.ownerId, record.id, keep, limits.protect);
          if (!Array.isArray(chosen))
            return { created: false as const, busy: true as const, holders: chosen.holders };
          await coll.insertOne(toSandboxDoc({ ...record, status: "STARTING" }), DURABLE_WRITE);
          await logged([{ ...record, status: "STARTING" }]);
          try {
            return { created: true as const, evicted: await evict(chosen, record.updatedAt) };
          } catch (error: unknown) {
            await coll.deleteOne({ _id: record.id }, DURABLE_WRITE).catch(() => undefined);
            throw error;
          }
        }),
      ),
    claim: (id, ownerId, maxRunning, updatedAt, protect) =>
      guarded(() =>
        withOwnerLock(ownerId, async () => {
          for (let attempt = 0; ; attempt++) {
            if (attempt === 20)
              throw new StorageUnavailableError(new Error(`the status of sandbox ${id} kept changing`));
            const doc = await coll.findOne({ _id: id, ownerId });
            if (doc === null) return null;
            const record = fromSandboxDoc(doc);
            if (ACTIVE_STATUSES.includes(record.status)) return { record, claimed: false, evicted: [] };
            const chosen = await toEvict(ownerId, id, Math.max(1, maxRunning) - 1, protect);
            if (!Array.isArray(chosen)) return { record, claimed: false, evicted: [], busy: true as const };
            const evicted = await evict(chosen, updatedAt);
            if (await transition(id, [record.status], "STARTING", updatedAt))
              return {
                record: { ...record, status: "STARTING" as const, updatedAt },
                claimed: true,
                evicted,
              };
            if (evicted.length > 0) return { record, claimed: false, evicted }; // changed meanwhile: report it
          }
        }),
      ),
    setHandle: (id, handle, updatedAt) =>
      guarded(async () => {
        const starting = await coll.updateOne(
          { _id: id, status: "STARTING" },
          { $set: { handle, updatedAt } },
          DURABLE_WRITE,
        );
        if (starting.matchedCount === 0) {
          const any = await coll.updateOne({ _id: id }, { $set: { handle, updatedAt } }, DURABLE_WRITE);
          if (any.matchedCount === 0) return null;
        }
        const doc = await coll.findOne({ _id: id });
        if (doc === null) return null;
        // The status this write saw: STARTING when the conditional write matched, whatever followed it.
        return fromSandboxDoc(starting.matchedCount === 1 ? { ...doc, status: "STARTING" } : doc);
      }),
    transition: (id, from, to, updatedAt, options) =>
      guarded(() => transition(id, from, to, updatedAt, options)),
    insert: (record) =>
      guarded(async () => {
        await coll.insertOne(toSandboxDoc(record), DURABLE_WRITE);
      }),
    get: (id, ownerId) =>
      guarded(async () => {
        const doc = await coll.findOne(ownerId === undefined ? { _id: id } : { _id: id, ownerId });
        return doc === null ? null : fromSandboxDoc(doc);
      }),
    getMany: (ids, ownerId) =>
      guarded(async () => {
        if (ids.length === 0) return [];
        const docs = await coll.find({ _id: { $in: [...ids] }, ownerId }).toArray();
        return docs.map(fromSandboxDoc);
      }),
    update: (id, patch) =>
      guarded(async () => {
        const set: Partial<Pick<SandboxDoc, "handle" | "status" | "updatedAt">> = {};
        if (patch.handle !== undefined) set.handle = patch.handle;
        if (patch.status !== undefined) set.status = patch.status;
        if (patch.updatedAt !== undefined) set.updatedAt = patch.updatedAt;
        if (Object.keys(set).length === 0)
          return (await coll.countDocuments({ _id: id }, { limit: 1 })) === 1;
        const result = await coll.updateOne({ _id: id }, { $set: set }, DURABLE_WRITE);
        return result.matchedCount === 1;
      }),
    list: (ownerId, page) =>
      guarded(async () => {
        checkPageLimit(page.limit);
        const filter: Filter<SandboxDoc> =
          page.after === null ? { ownerId } : { ownerId, ...keysetAfter(page.after, false) };
        const docs = await coll
          .find(filter)
          .sort(NEWEST_FIRST)
          .limit(page.limit + 1)
          .toArray();
        return toKeysetPage(docs.map(fromSandboxDoc), page.limit);
      }),
    listAll: (ownerId) =>
      guarded(async () => {
        const docs = await coll
          .find(ownerId === undefined ? {} : { ownerId })
          .sort(NEWEST_FIRST)
          .toArray();
        return docs.map(fromSandboxDoc);
      }),
    delete: (id) =>
      guarded(async () => {
        const doc = await coll.findOne({ _id: id });
        const result = await coll.deleteOne({ _id: id }, DURABLE_WRITE);
        // A record set MISSING before its removal was logged then.
        if (doc !== null && doc.status !== "MISSING" && result.deletedCount === 1)
          await logged([{ ...fromSandboxDoc(doc), status: "MISSING", updatedAt: new Date() }]);
        return result.deletedCount === 1;
      }),
  };
}
