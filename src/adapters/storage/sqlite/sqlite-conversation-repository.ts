import type Database from "better-sqlite3";
import type { ConversationFilter, ConversationRepository } from "../../../ports/conversation-repository.ts";
import type { PageQuery } from "../../../ports/page.ts";
import { checkPageLimit, toKeysetPage } from "../keyset-page.ts";
import { attempt } from "./sqlite-errors.ts";
import { createCommitQueue, type QueuedWrite } from "./sqlite-group-commit.ts";
import {
  type ConversationRow,
  fromConversationRow,
  likeSubstring,
  toConversationRow,
} from "./sqlite-rows.ts";
import { createStatementCache, type SqliteQuery } from "./sqlite-statement-cache.ts";
import type { WalSync } from "./sqlite-wal-sync.ts";

const COLUMNS =
  "id, owner_id, sandbox_id, selected_repository, selected_branch, git_provider, title, conversation_trigger, " +
  "pr_number, llm_model, metrics, parent_conversation_id, sub_conversation_ids, created_at, updated_at";

/**
 * Builds the search (when `page` is given) or count query for conversations. Only the filters present appear in
 * the SQL, so each filter combination is its own statement whose plan is a range scan of
 * `(owner_id, created_at DESC, id DESC)` (the partial index when sub-conversations are excluded). Exported for
 * the query-plan test.
 */
export function buildConversationQuery(
  ownerId: string,
  filter: ConversationFilter,
  page: PageQuery | null,
): SqliteQuery {
  const where = ["owner_id = @ownerId"];
  const params: Record<string, string | number> = { ownerId };
  if (filter.includeSubConversations !== true) where.push("parent_conversation_id IS NULL");
  if (filter.sandboxIdEq !== undefined) {
    where.push("sandbox_id = @sandboxId");
    params.sandboxId = filter.sandboxIdEq;
  }
  if (filter.triggerEq !== undefined) {
    where.push("conversation_trigger = @trigger");
    params.trigger = filter.triggerEq;
  }
  if (filter.selectedRepositoryEq !== undefined) {
    where.push("selected_repository = @repository");
    params.repository = filter.selectedRepositoryEq;
  }
  if (filter.titleContains !== undefined) {
    where.push("title LIKE @title ESCAPE '\\'");
    params.title = likeSubstring(filter.titleContains);
  }
  if (filter.createdAtGte !== undefined) {
    where.push("created_at >= @createdAtGte");
    params.createdAtGte = filter.createdAtGte.getTime();
  }
  if (filter.createdAtLt !== undefined) {
    where.push("created_at < @createdAtLt");
    params.createdAtLt = filter.createdAtLt.getTime();
  }
  if (filter.updatedAtGte !== undefined) {
    where.push("updated_at >= @updatedAtGte");
    params.updatedAtGte = filter.updatedAtGte.getTime();
  }
  if (filter.updatedAtLt !== undefined) {
    where.push("updated_at < @updatedAtLt");
    params.updatedAtLt = filter.updatedAtLt.getTime();
  }
  if (page === null)
    return { sql: `SELECT count(*) AS n FROM conversations WHERE ${where.join(" AND ")}`, params };
  if (page.after !== null) {
    where.push("(created_at, id) < (@afterCreatedAt, @afterId)");
    params.afterCreatedAt = page.after.createdAt.getTime();
    params.afterId = page.after.id;
  }
  params.limit = page.limit + 1;
  return {
    sql:
      `SELECT ${COLUMNS} FROM conversations WHERE ${where.join(" AND ")} ` +
      "ORDER BY created_at DESC, id DESC LIMIT @limit",
    params,
  };
}

/** An update's statement parameters (see `update` below). */
interface UpdateParams {
  id: string;
  ownerId: string;
  setTitle: number;
  title: string | null;
  setModel: number;
  llmModel: string | null;
  setMetrics: number;
  metrics: string | null;
  updatedAt: number;
}

/** A queued update: answered whether it found the conversation. */
interface QueuedUpdate extends QueuedWrite<boolean> {
  params: UpdateParams;
}

/** The conversation repository plus what the storage needs to close it. */
export interface SqliteConversationRepository extends ConversationRepository {
  /** Commits the queued updates now (before closing the connection). */
  flush(): void;
}

/**
 * Conversations on SQLite. Search statements are prepared once per filter combination and cached.
 *
 * Updates (a title, the agent's model and metrics: each status change of a running conversation posts one) go
 * through the group commit, as user data and events do: those of one event-loop turn, or of one WAL sync, are
 * committed in one transaction under `synchronous = NORMAL`, in the order they were made (the last one's values
 * are stored), and each promise resolves once WalSync has fdatasynced the WAL on the thread pool, as durable as a
 * FULL commit, with the disk off the event loop. The other writes (insert, sub-conversations, delete) commit under
 * FULL when called; the queued updates are committed first, so that every write lands in the order it was made.
 * Inside a transaction of the caller's own, an update runs at once, in it.
 */
export function createSqliteConversationRepository(
  db: Database.Database,
  walSync: WalSync | null = null,
): SqliteConversationRepository {
  const insert = db.prepare<ConversationRow>(
    `INSERT INTO conversations (${COLUMNS}) VALUES (@id, @owner_id, @sandbox_id, @selected_repository,
       @selected_branch, @git_provider, @title, @conversation_trigger, @pr_number, @llm_model, @metrics,
       @parent_conversation_id, @sub_conversation_ids, @created_at, @updated_at)`,
  );
  const byId = db.prepare<[string, string], ConversationRow>(
    `SELECT ${COLUMNS} FROM conversations WHERE id = ? AND owner_id = ?`,
  );
  const many = db.prepare<{ ids: string; ownerId: string }, ConversationRow>(
    `SELECT ${COLUMNS} FROM conversations WHERE id IN (SELECT value FROM json_each(@ids)) AND owner_id = @ownerId`,
  );
  // Set semantics (like $addToSet): adding an id twice keeps one copy; one statement, so atomic.
  const addSub = db.prepare<{ parentId: string; childId: string; updatedAt: number }>(
    `UPDATE conversations SET
       sub_conversation_ids = CASE
         WHEN EXISTS (SELECT 1 FROM json_each(sub_conversation_ids) WHERE value = @childId)
         THEN sub_conversation_ids
         ELSE json_insert(sub_conversation_ids, '$[#]', @childId) END,
       updated_at = @updatedAt
     WHERE id = @parentId`,
  );
  const prepared = createStatementCache(db);
  const remove = db.prepare<[string, string]>("DELETE FROM conversations WHERE id = ? AND owner_id = ?");
  const dropTombstone = db.prepare<[string]>("DELETE FROM conversation_tombstones WHERE id = ?");
  const insertFresh = db.transaction((row: ConversationRow) => {
    dropTombstone.run(row.id);
    insert.run(row);
  });
  // What goes with a conversation: its sub-conversations (by parent, and those its list names), their events and
  // their finished start tasks; each id leaves a tombstone that refuses later events.
  const doomedOf = db.prepare<{ id: string; ownerId: string }, { id: string }>(
    `SELECT id FROM conversations WHERE owner_id = @ownerId AND (parent_conversation_id = @id OR id IN
       (SELECT value FROM json_each((SELECT sub_conversation_ids FROM conversations WHERE id = @id))))`,
  );
  const tombstone = db.prepare<{ id: string; ownerId: string; at: number }>(
    `INSERT INTO conversation_tombstones (id, owner_id, at) VALUES (@id, @ownerId, @at)
     ON CONFLICT (id) DO UPDATE SET at = @at`,
  );
  const removeEvents = db.prepare<[string, string]>(
    "DELETE FROM events WHERE owner_id = ? AND conversation_id = ?",
  );
  const removeFinishedTasks = db.prepare<{ id: string; ownerId: string }>(
    `DELETE FROM start_tasks WHERE owner_id = @ownerId AND status IN ('READY', 'ERROR')
       AND (app_conversation_id = @id OR json_extract(plan, '$.conversationId') = @id)`,
  );
  const pruneTombstones = db.prepare<[number]>("DELETE FROM conversation_tombstones WHERE at < ?");
  const removeAll = db.transaction((id: string, ownerId: string): boolean => {
    const doomed = [id, ...doomedOf.all({ id, ownerId }).map((r) => r.id)];
    const at = Date.now();
    let found = false;
    for (const cid of doomed) {
      tombstone.run({ id: cid, ownerId, at });
      removeEvents.run(ownerId, cid);
      removeFinishedTasks.run({ id: cid, ownerId });
      const gone = remove.run(cid, ownerId).changes === 1;
      if (cid === id) found = gone;
    }
    return found;
  });
  // Each field is set only when the patch names it (a flag per field), so one statement serves every patch.
  const update = db.prepare<UpdateParams>(
    `UPDATE conversations SET
       title = CASE WHEN @setTitle THEN @title ELSE title END,
       llm_model = CASE WHEN @setModel THEN @llmModel ELSE llm_model END,
       metrics = CASE WHEN @setMetrics THEN @metrics ELSE metrics END,
       updated_at = @updatedAt
     WHERE id = @id AND owner_id = @ownerId`,
  );
  const updates = createCommitQueue(
    db,
    walSync,
    db.transaction((batch: QueuedUpdate[]): boolean[] =>
      batch.map((u) => update.run(u.params).changes === 1),
    ),
  );

  return {
    insert: (record) =>
      attempt(() => {
        updates.flush();
        insertFresh(toConversationRow(record));
      }),
    get: (id, ownerId) =>
      attempt(() => {
        const row = byId.get(id, ownerId);
        return row ? fromConversationRow(row) : null;
      }),
    getMany: (ids, ownerId) =>
      attempt(() =>
        ids.length === 0 ? [] : many.all({ ids: JSON.stringify(ids), ownerId }).map(fromConversationRow),
      ),
    addSubConversation: (parentId, childId, updatedAt) =>
      attempt(() => {
        updates.flush();
        return addSub.run({ parentId, childId, updatedAt: updatedAt.getTime() }).changes === 1;
      }),
    search: (ownerId, filter, page) =>
      attempt(() => {
        checkPageLimit(page.limit);
        const query = buildConversationQuery(ownerId, filter, page);
        const rows = prepared(query.sql).all(query.params) as ConversationRow[];
        return toKeysetPage(rows.map(fromConversationRow), page.limit);
      }),
    count: (ownerId, filter) =>
      attempt(() => {
        const query = buildConversationQuery(ownerId, filter, null);
        return (prepared(query.sql).get(query.params) as { n: number }).n;
      }),
    update: (id, ownerId, patch) => {
      const params: UpdateParams = {
        id,
        ownerId,
        setTitle: patch.title === undefined ? 0 : 1,
        title: patch.title ?? null,
        setModel: patch.llmModel === undefined ? 0 : 1,
        llmModel: patch.llmModel ?? null,
        setMetrics: patch.metrics === undefined ? 0 : 1,
        // Serialized now: the caller may change the patch once this returns.
        metrics: patch.metrics === undefined || patch.metrics === null ? null : JSON.stringify(patch.metrics),
        updatedAt: patch.updatedAt.getTime(),
      };
      if (db.inTransaction) return attempt(() => update.run(params).changes === 1);
      return new Promise<boolean>((resolve, reject) => updates.push({ params, resolve, reject }));
    },
    delete: (id, ownerId) =>
      attempt(() => {
        updates.flush();
        return removeAll.immediate(id, ownerId);
      }),
    // One transaction per delete: none is ever left half-done here, only old tombstones go.
    finishDeletes: (_graceBefore, tombstonesBefore) =>
      attempt(() => ({ finished: 0, pruned: pruneTombstones.run(tombstonesBefore.getTime()).changes })),
    flush: updates.flush,
  };
}
