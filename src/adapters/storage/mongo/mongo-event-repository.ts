import type { Db, Filter } from "mongodb";
import { type ChangeLog, eventsChanges } from "../../../ports/change-log.ts";
import type {
  EventCursor,
  EventFilter,
  EventRecord,
  EventRepository,
} from "../../../ports/event-repository.ts";
import { checkPageLimit } from "../keyset-page.ts";
import { guarded, isDuplicateKeyError } from "./mongo-errors.ts";
import { COLLECTIONS } from "./mongo-indexes.ts";
import { DURABLE_WRITE } from "./mongo-write-concern.ts";

/** `events` document: `_id` is "<conversationId>:<eventId>", so an event is stored once per conversation. */
export interface EventDoc {
  _id: string;
  eventId: string;
  conversationId: string;
  ownerId: string;
  kind: string;
  /** Microseconds since the epoch. */
  ts: number;
  /** The event as received, JSON text (opaque to storage; its keys may hold "." or "$"). */
  body: string;
}

const toDoc = (e: EventRecord): EventDoc => ({
  _id: `${e.conversationId}:${e.id}`,
  eventId: e.id,
  conversationId: e.conversationId,
  ownerId: e.ownerId,
  kind: e.kind,
  ts: e.timestampUs,
  body: e.body,
});

const fromDoc = (d: EventDoc): EventRecord => ({
  ownerId: d.ownerId,
  conversationId: d.conversationId,
  id: d.eventId,
  kind: d.kind,
  timestampUs: d.ts,
  body: d.body,
});

/** The MongoDB filter of an event search/count: owner equality first, then the filters given. */
export function toEventFilter(ownerId: string, filter: EventFilter): Filter<EventDoc> {
  const f: Filter<EventDoc> = { ownerId };
  if (filter.conversationIdEq !== undefined) f.conversationId = filter.conversationIdEq;
  if (filter.kindEq !== undefined) f.kind = filter.kindEq;
  if (filter.timestampGteUs !== undefined || filter.timestampLtUs !== undefined) {
    const ts: { $gte?: number; $lt?: number } = {};
    if (filter.timestampGteUs !== undefined) ts.$gte = filter.timestampGteUs;
    if (filter.timestampLtUs !== undefined) ts.$lt = filter.timestampLtUs;
    f.ts = ts;
  }
  return f;
}

function after(cursor: EventCursor, descending: boolean): Filter<EventDoc> {
  const op = descending ? "$lt" : "$gt";
  return {
    $or: [{ ts: { [op]: cursor.timestampUs } }, { ts: cursor.timestampUs, eventId: { [op]: cursor.id } }],
  } as Filter<EventDoc>;
}

/**
 * Events on MongoDB. Each event is one journaled, majority-acknowledged insert; a duplicate key (the event was
 * stored before, e.g. by a webhook retry) is skipped. A failure part-way rejects the append; what was stored stays,
 * so the sender's retry stores the rest without duplicates.
 */
/** Events on MongoDB; new events are logged per conversation (`changes`) once stored. */
export function createMongoEventRepository(db: Db, changes?: ChangeLog): EventRepository {
  const coll = db.collection<EventDoc>(COLLECTIONS.events);
  const tombstones = db.collection<{ _id: string }>(COLLECTIONS.conversationTombstones);
  /**
   * Takes back the events just stored for conversations deleted lately. Checked after the insert: a delete writes
   * its tombstone before it deletes the events, so either it deletes these or this sees its tombstone.
   */
  const refuseDeleted = async (stored: EventRecord[]): Promise<EventRecord[]> => {
    const conversations = [...new Set(stored.map((e) => e.conversationId))];
    const dead = await tombstones.find({ _id: { $in: conversations } }).toArray();
    if (dead.length === 0) return stored;
    const deadIds = new Set(dead.map((d) => d._id));
    const refused = stored.filter((e) => deadIds.has(e.conversationId));
    await coll.deleteMany({ _id: { $in: refused.map((e) => toDoc(e)._id) } }, DURABLE_WRITE);
    return stored.filter((e) => !deadIds.has(e.conversationId));
  };
  return {
    append: (events) =>
      guarded(async () => {
        let stored: EventRecord[] = [];
        for (const e of events) {
          try {
            await coll.insertOne(toDoc(e), DURABLE_WRITE);
            stored.push(e);
          } catch (error: unknown) {
            if (!isDuplicateKeyError(error)) throw error;
          }
        }
        if (stored.length > 0) stored = await refuseDeleted(stored);
        if (stored.length > 0) await changes?.append(eventsChanges(stored));
        return stored;
      }),
    search: (ownerId, filter, page, descending) =>
      guarded(async () => {
        checkPageLimit(page.limit);
        const base = toEventFilter(ownerId, filter);
        const query = page.after === null ? base : { $and: [base, after(page.after, descending)] };
        const dir = descending ? -1 : 1;
        const docs = await coll
          .find(query as Filter<EventDoc>)
          .sort({ ts: dir, eventId: dir })
          .limit(page.limit + 1)
          .toArray();
        const rows = docs.map(fromDoc);
        if (rows.length <= page.limit) return { items: rows, next: null };
        const items = rows.slice(0, page.limit);
        const last = items[items.length - 1] as EventRecord;
        return { items, next: { timestampUs: last.timestampUs, id: last.id } };
      }),
    count: (ownerId, filter) => guarded(() => coll.countDocuments(toEventFilter(ownerId, filter))),
    getMany: (ids, ownerId) =>
      guarded(async () => {
        if (ids.length === 0) return [];
        const docs = await coll.find({ eventId: { $in: [...ids] }, ownerId }).toArray();
        return docs.map(fromDoc);
      }),
    deleteConversation: (conversationId, ownerId) =>
      guarded(async () => (await coll.deleteMany({ ownerId, conversationId }, DURABLE_WRITE)).deletedCount),
  };
}
