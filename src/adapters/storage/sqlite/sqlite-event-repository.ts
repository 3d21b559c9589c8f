import type Database from "better-sqlite3";
import { type ChangeEntry, eventsChanges } from "../../../ports/change-log.ts";
import type {
  EventCursor,
  EventFilter,
  EventRecord,
  EventRepository,
} from "../../../ports/event-repository.ts";
import { checkPageLimit } from "../keyset-page.ts";
import { attempt } from "./sqlite-errors.ts";
import { createCommitQueue } from "./sqlite-group-commit.ts";
import { createStatementCache, type SqliteQuery } from "./sqlite-statement-cache.ts";
import type { WalSync } from "./sqlite-wal-sync.ts";

interface EventRow {
  conversation_id: string;
  id: string;
  owner_id: string;
  kind: string;
  ts: number;
  body: string;
}

const COLUMNS = "conversation_id, id, owner_id, kind, ts, body";

const fromRow = (r: EventRow): EventRecord => ({
  ownerId: r.owner_id,
  conversationId: r.conversation_id,
  id: r.id,
  kind: r.kind,
  timestampUs: r.ts,
  body: r.body,
});

interface QueuedAppend {
  events: readonly EventRecord[];
  resolve: (stored: EventRecord[]) => void;
  reject: (error: unknown) => void;
}

/**
 * Builds the search (when `page` is given) or count query. Only the filters present appear in the SQL, so each
 * filter combination is its own statement whose plan is a range scan of one of the owner-first indexes. Exported
 * for the query-plan test.
 */
export function buildEventQuery(
  ownerId: string,
  filter: EventFilter,
  page: { limit: number; after: EventCursor | null } | null,
  descending = false,
): SqliteQuery {
  const where = ["owner_id = @ownerId"];
  const params: Record<string, string | number> = { ownerId };
  if (filter.conversationIdEq !== undefined) {
    where.push("conversation_id = @conversationId");
    params.conversationId = filter.conversationIdEq;
  }
  if (filter.kindEq !== undefined) {
    where.push("kind = @kind");
    params.kind = filter.kindEq;
  }
  if (filter.timestampGteUs !== undefined) {
    where.push("ts >= @gte");
    params.gte = filter.timestampGteUs;
  }
  if (filter.timestampLtUs !== undefined) {
    where.push("ts < @lt");
    params.lt = filter.timestampLtUs;
  }
  if (page === null) return { sql: `SELECT count(*) AS n FROM events WHERE ${where.join(" AND ")}`, params };
  if (page.after !== null) {
    where.push(`(ts, id) ${descending ? "<" : ">"} (@afterTs, @afterId)`);
    params.afterTs = page.after.timestampUs;
    params.afterId = page.after.id;
  }
  params.limit = page.limit + 1;
  const dir = descending ? "DESC" : "ASC";
  return {
    sql: `SELECT ${COLUMNS} FROM events WHERE ${where.join(" AND ")} ORDER BY ts ${dir}, id ${dir} LIMIT @limit`,
    params,
  };
}

/** The event repository plus what the storage needs to close it. */
export interface SqliteEventRepository extends EventRepository {
  /** Commits the queued appends now (before closing the connection). */
  flush(): void;
}

/**
 * Events on SQLite, with group commit as for user data: the appends of one event-loop turn (or, while the WAL is
 * being synced, of that whole sync) are committed in one transaction under `synchronous = NORMAL`, and their
 * promises resolve once WalSync has fdatasynced the WAL (without a WalSync, under FULL). A failed commit rejects
 * every append of the batch and keeps none of them. Duplicates (same id in the same conversation) are skipped by
 * the unique index.
 */
export function createSqliteEventRepository(
  db: Database.Database,
  walSync: WalSync | null = null,
  logChanges: (entries: readonly ChangeEntry[]) => void = () => {},
): SqliteEventRepository {
  // Not for a conversation deleted lately (its tombstone): a webhook racing the delete leaves no orphan.
  const insert = db.prepare<EventRow>(
    `INSERT INTO events (${COLUMNS}) SELECT @conversation_id, @id, @owner_id, @kind, @ts, @body
     WHERE NOT EXISTS (SELECT 1 FROM conversation_tombstones WHERE id = @conversation_id)
     ON CONFLICT (id, conversation_id) DO NOTHING`,
  );
  const many = db.prepare<{ ids: string; ownerId: string }, EventRow>(
    `SELECT ${COLUMNS} FROM events WHERE id IN (SELECT value FROM json_each(@ids)) AND owner_id = @ownerId`,
  );
  const removeConversation = db.prepare<[string, string]>(
    "DELETE FROM events WHERE owner_id = ? AND conversation_id = ?",
  );
  const prepared = createStatementCache(db);

  /** Stores the events new to the store and logs them per conversation (in the caller's transaction). */
  const write = (events: readonly EventRecord[]): EventRecord[] => {
    const stored: EventRecord[] = [];
    for (const e of events) {
      const row = {
        conversation_id: e.conversationId,
        id: e.id,
        owner_id: e.ownerId,
        kind: e.kind,
        ts: e.timestampUs,
        body: e.body,
      };
      if (insert.run(row).changes === 1) stored.push(e);
    }
    if (stored.length > 0) logChanges(eventsChanges(stored));
    return stored;
  };
  const commitBatch = db.transaction((batch: QueuedAppend[]): EventRecord[][] =>
    batch.map((a) => write(a.events)),
  );

  const queue = createCommitQueue(db, walSync, commitBatch);

  return {
    append: (events) => {
      if (events.length === 0) return Promise.resolve([]);
      if (db.inTransaction) return attempt(() => write(events));
      return new Promise<EventRecord[]>((resolve, reject) => queue.push({ events, resolve, reject }));
    },
    search: (ownerId, filter, page, descending) =>
      attempt(() => {
        checkPageLimit(page.limit);
        const query = buildEventQuery(ownerId, filter, page, descending);
        const rows = (prepared(query.sql).all(query.params) as EventRow[]).map(fromRow);
        if (rows.length <= page.limit) return { items: rows, next: null };
        const items = rows.slice(0, page.limit);
        const last = items[items.length - 1] as EventRecord;
        return { items, next: { timestampUs: last.timestampUs, id: last.id } };
      }),
    count: (ownerId, filter) =>
      attempt(() => {
        const query = buildEventQuery(ownerId, filter, null);
        return (prepared(query.sql).get(query.params) as { n: number }).n;
      }),
    getMany: (ids, ownerId) =>
      attempt(() => (ids.length === 0 ? [] : many.all({ ids: JSON.stringify(ids), ownerId }).map(fromRow))),
    deleteConversation: (conversationId, ownerId) =>
      attempt(() => removeConversation.run(ownerId, conversationId).changes),
    flush: queue.flush,
  };
}
