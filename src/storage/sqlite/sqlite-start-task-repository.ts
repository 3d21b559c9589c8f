import type Database from "better-sqlite3";
import type { StartTaskFilter, StartTaskRepository } from "../../ports/conversation-repository.ts";
import type { PageQuery } from "../../ports/page.ts";
import { checkPageLimit, toKeysetPage } from "../keyset-page.ts";
import { attempt } from "./sqlite-errors.ts";
import { fromStartTaskRow, type StartTaskRow, toStartTaskRow } from "./sqlite-rows.ts";
import { createStatementCache, type SqliteQuery } from "./sqlite-statement-cache.ts";

const COLUMNS =
  "id, owner_id, status, detail, app_conversation_id, sandbox_id, agent_server_url, request, created_at, updated_at";

/**
 * Builds the start-task search (when `page` is given) or count query; descending pages walk the
 * `(owner_id, created_at DESC, id DESC)` index forwards, ascending ones backwards. Exported for plan tests.
 */
export function buildStartTaskQuery(
  ownerId: string,
  filter: StartTaskFilter,
  page: PageQuery | null,
  ascending: boolean,
): SqliteQuery {
  const where = ["owner_id = @ownerId"];
  const params: Record<string, string | number> = { ownerId };
  if (filter.conversationIdEq !== undefined) {
    where.push("app_conversation_id = @conversationId");
    params.conversationId = filter.conversationIdEq;
  }
  if (filter.createdAtGte !== undefined) {
    where.push("created_at >= @createdAtGte");
    params.createdAtGte = filter.createdAtGte.getTime();
  }
  if (page === null)
    return { sql: `SELECT count(*) AS n FROM start_tasks WHERE ${where.join(" AND ")}`, params };
  if (page.after !== null) {
    where.push(`(created_at, id) ${ascending ? ">" : "<"} (@afterCreatedAt, @afterId)`);
    params.afterCreatedAt = page.after.createdAt.getTime();
    params.afterId = page.after.id;
  }
  params.limit = page.limit + 1;
  const direction = ascending ? "ASC" : "DESC";
  return {
    sql:
      `SELECT ${COLUMNS} FROM start_tasks WHERE ${where.join(" AND ")} ` +
      `ORDER BY created_at ${direction}, id ${direction} LIMIT @limit`,
    params,
  };
}

interface UpdateParams {
  id: string;
  setStatus: number;
  status: string | null;
  setDetail: number;
  detail: string | null;
  setAppConversationId: number;
  appConversationId: string | null;
  setSandboxId: number;
  sandboxId: string | null;
  setAgentServerUrl: number;
  agentServerUrl: string | null;
  setUpdatedAt: number;
  updatedAt: number | null;
}

/** Start tasks on SQLite. */
export function createSqliteStartTaskRepository(db: Database.Database): StartTaskRepository {
  const insert = db.prepare<StartTaskRow>(
    `INSERT INTO start_tasks (${COLUMNS}) VALUES (@id, @owner_id, @status, @detail, @app_conversation_id,
       @sandbox_id, @agent_server_url, @request, @created_at, @updated_at)`,
  );
  const byId = db.prepare<[string, string], StartTaskRow>(
    `SELECT ${COLUMNS} FROM start_tasks WHERE id = ? AND owner_id = ?`,
  );
  const many = db.prepare<{ ids: string; ownerId: string }, StartTaskRow>(
    `SELECT ${COLUMNS} FROM start_tasks WHERE id IN (SELECT value FROM json_each(@ids)) AND owner_id = @ownerId`,
  );
  // A flag per field, because detail, appConversationId, sandboxId and agentServerUrl may be set to null.
  const update = db.prepare<UpdateParams>(
    `UPDATE start_tasks SET
       status = CASE WHEN @setStatus THEN @status ELSE status END,
       detail = CASE WHEN @setDetail THEN @detail ELSE detail END,
       app_conversation_id = CASE WHEN @setAppConversationId THEN @appConversationId ELSE app_conversation_id END,
       sandbox_id = CASE WHEN @setSandboxId THEN @sandboxId ELSE sandbox_id END,
       agent_server_url = CASE WHEN @setAgentServerUrl THEN @agentServerUrl ELSE agent_server_url END,
       updated_at = CASE WHEN @setUpdatedAt THEN @updatedAt ELSE updated_at END
     WHERE id = @id`,
  );
  // Same expression as the partial index start_tasks_unfinished, so the planner uses it.
  const unfinished = db.prepare<[], StartTaskRow>(
    `SELECT ${COLUMNS} FROM start_tasks WHERE status NOT IN ('READY', 'ERROR') ORDER BY created_at, id`,
  );
  const prepared = createStatementCache(db);

  return {
    insert: (record) =>
      attempt(() => {
        insert.run(toStartTaskRow(record));
      }),
    get: (id, ownerId) =>
      attempt(() => {
        const row = byId.get(id, ownerId);
        return row ? fromStartTaskRow(row) : null;
      }),
    getMany: (ids, ownerId) =>
      attempt(() =>
        ids.length === 0 ? [] : many.all({ ids: JSON.stringify(ids), ownerId }).map(fromStartTaskRow),
      ),
    update: (id, patch) =>
      attempt(() => {
        const result = update.run({
          id,
          setStatus: patch.status === undefined ? 0 : 1,
          status: patch.status ?? null,
          setDetail: patch.detail === undefined ? 0 : 1,
          detail: patch.detail ?? null,
          setAppConversationId: patch.appConversationId === undefined ? 0 : 1,
          appConversationId: patch.appConversationId ?? null,
          setSandboxId: patch.sandboxId === undefined ? 0 : 1,
          sandboxId: patch.sandboxId ?? null,
          setAgentServerUrl: patch.agentServerUrl === undefined ? 0 : 1,
          agentServerUrl: patch.agentServerUrl ?? null,
          setUpdatedAt: patch.updatedAt === undefined ? 0 : 1,
          updatedAt: patch.updatedAt?.getTime() ?? null,
        });
        return result.changes === 1;
      }),
    search: (ownerId, filter, page, ascending) =>
      attempt(() => {
        checkPageLimit(page.limit);
        const query = buildStartTaskQuery(ownerId, filter, page, ascending);
        const rows = prepared(query.sql).all(query.params) as StartTaskRow[];
        return toKeysetPage(rows.map(fromStartTaskRow), page.limit);
      }),
    count: (ownerId, filter) =>
      attempt(() => {
        const query = buildStartTaskQuery(ownerId, filter, null, false);
        return (prepared(query.sql).get(query.params) as { n: number }).n;
      }),
    listUnfinished: () => attempt(() => unfinished.all().map(fromStartTaskRow)),
  };
}
