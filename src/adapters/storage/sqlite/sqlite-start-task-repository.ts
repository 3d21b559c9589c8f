import type Database from "better-sqlite3";
import { type ChangeEntry, startTaskChange } from "../../../ports/change-log.ts";
import type {
  ClaimedStartTask,
  StartTaskFilter,
  StartTaskPlan,
  StartTaskRepository,
} from "../../../ports/conversation-repository.ts";
import type { PageQuery } from "../../../ports/page.ts";
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
  setPlan: number;
  plan: string | null;
  leaseOwner: string | null;
}

/**
 * Start tasks on SQLite. Every visible change of a task is logged (`logChanges`, the change log's synchronous
 * insert) in the transaction that makes it; lease and plan writes are not visible.
 */
export function createSqliteStartTaskRepository(
  db: Database.Database,
  logChanges: (entries: readonly ChangeEntry[]) => void,
): StartTaskRepository {
  const insert = db.prepare<
    StartTaskRow & { lease_owner: string | null; lease_expires_at: number; plan: string | null }
  >(
    `INSERT INTO start_tasks (${COLUMNS}, lease_owner, lease_expires_at, plan) VALUES (@id, @owner_id, @status,
       @detail, @app_conversation_id, @sandbox_id, @agent_server_url, @request, @created_at, @updated_at,
       @lease_owner, @lease_expires_at, @plan)`,
  );
  // Same expression as the index start_tasks_owner_planned_conversation.
  const pending = db.prepare<[string, string], StartTaskRow>(
    `SELECT ${COLUMNS} FROM start_tasks WHERE owner_id = ? AND json_extract(plan, '$.conversationId') = ?
       AND status <> 'READY' ORDER BY created_at DESC, id DESC LIMIT 1`,
  );
  const byId = db.prepare<[string, string], StartTaskRow>(
    `SELECT ${COLUMNS} FROM start_tasks WHERE id = ? AND owner_id = ?`,
  );
  const many = db.prepare<{ ids: string; ownerId: string }, StartTaskRow>(
    `SELECT ${COLUMNS} FROM start_tasks WHERE id IN (SELECT value FROM json_each(@ids)) AND owner_id = @ownerId`,
  );
  // A flag per field, because detail, appConversationId, sandboxId and agentServerUrl may be set to null.
  const update = db.prepare<UpdateParams, StartTaskRow>(
    `UPDATE start_tasks SET
       status = CASE WHEN @setStatus THEN @status ELSE status END,
       detail = CASE WHEN @setDetail THEN @detail ELSE detail END,
       app_conversation_id = CASE WHEN @setAppConversationId THEN @appConversationId ELSE app_conversation_id END,
       sandbox_id = CASE WHEN @setSandboxId THEN @sandboxId ELSE sandbox_id END,
       agent_server_url = CASE WHEN @setAgentServerUrl THEN @agentServerUrl ELSE agent_server_url END,
       updated_at = CASE WHEN @setUpdatedAt THEN @updatedAt ELSE updated_at END,
       plan = CASE WHEN @setPlan THEN @plan ELSE plan END
     WHERE id = @id AND (@leaseOwner IS NULL OR lease_owner = @leaseOwner) RETURNING ${COLUMNS}`,
  );
  const insertLogged = db.transaction(
    (row: StartTaskRow & { lease_owner: string | null; lease_expires_at: number; plan: string | null }) => {
      insert.run(row);
      logChanges([startTaskChange(fromStartTaskRow(row))]);
    },
  );
  const updateLogged = db.transaction((params: UpdateParams, visible: boolean) => {
    const row = update.get(params);
    if (row !== undefined && visible) logChanges([startTaskChange(fromStartTaskRow(row))]);
    return row !== undefined;
  });
  const UNFINISHED = "status NOT IN ('READY', 'ERROR')";
  const pruneFinished = db.prepare<[number]>(
    "DELETE FROM start_tasks WHERE status IN ('READY', 'ERROR') AND updated_at < ?",
  );
  const renew = db.prepare<{ owner: string; ids: string; expiresAt: number }, { id: string }>(
    `UPDATE start_tasks SET lease_expires_at = @expiresAt
     WHERE id IN (SELECT value FROM json_each(@ids)) AND lease_owner = @owner AND ${UNFINISHED} RETURNING id`,
  );
  const release = db.prepare<{ owner: string; ids: string }>(
    `UPDATE start_tasks SET lease_expires_at = 0
     WHERE id IN (SELECT value FROM json_each(@ids)) AND lease_owner = @owner`,
  );
  // One statement: SQLite runs one writer at a time, so two servers never claim the same task.
  const claim = db.prepare<
    { owner: string; now: number; expiresAt: number; limit: number },
    StartTaskRow & { plan: string | null; attempts: number }
  >(
    `UPDATE start_tasks SET lease_owner = @owner, lease_expires_at = @expiresAt, attempts = attempts + 1
     WHERE id IN (SELECT id FROM start_tasks WHERE ${UNFINISHED} AND lease_expires_at < @now
                  ORDER BY lease_expires_at LIMIT @limit)
     RETURNING ${COLUMNS}, plan, attempts`,
  );
  // Same expression as the partial index start_tasks_unfinished, so the planner uses it.
  const unfinished = db.prepare<[], StartTaskRow>(
    `SELECT ${COLUMNS} FROM start_tasks WHERE status NOT IN ('READY', 'ERROR') ORDER BY created_at, id`,
  );
  const inUse = db.prepare<[string], { sandbox_id: string | null; planned: string | null }>(
    `SELECT sandbox_id, json_extract(plan, '$.sandboxId') AS planned FROM start_tasks
     WHERE owner_id = ? AND status NOT IN ('READY', 'ERROR')`,
  );
  const prepared = createStatementCache(db);

  return {
    insert: (record, lease, plan) =>
      attempt(() => {
        insertLogged({
          ...toStartTaskRow(record),
          lease_owner: lease?.owner ?? null,
          lease_expires_at: lease?.expiresAt.getTime() ?? 0,
          plan: plan === undefined ? null : JSON.stringify(plan),
        });
      }),
    findPending: (ownerId, conversationId) =>
      attempt(() => {
        const row = pending.get(ownerId, conversationId);
        return row === undefined ? null : fromStartTaskRow(row);
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
    update: (id, patch, leaseOwner) =>
      attempt(() => {
        const { plan: _plan, ...visible } = patch;
        return updateLogged(
          {
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
            setPlan: patch.plan === undefined ? 0 : 1,
            plan: patch.plan === undefined ? null : JSON.stringify(patch.plan),
            leaseOwner: leaseOwner ?? null,
          },
          Object.keys(visible).some((k) => k !== "updatedAt"),
        );
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
    sandboxesInUse: (ownerId) =>
      attempt(() =>
        inUse.all(ownerId).flatMap((r) => {
          const id = r.sandbox_id ?? r.planned;
          return typeof id === "string" ? [id] : [];
        }),
      ),
    pruneFinished: (before) => attempt(() => pruneFinished.run(before.getTime()).changes),
    renewLeases: (owner, ids, expiresAt) =>
      attempt(() =>
        ids.length === 0
          ? []
          : renew.all({ owner, ids: JSON.stringify(ids), expiresAt: expiresAt.getTime() }).map((r) => r.id),
      ),
    releaseLeases: (owner, ids) =>
      attempt(() => {
        if (ids.length > 0) release.run({ owner, ids: JSON.stringify(ids) });
      }),
    claimExpired: (owner, now, expiresAt, limit) =>
      attempt(() =>
        claim.all({ owner, now: now.getTime(), expiresAt: expiresAt.getTime(), limit }).map(
          (row): ClaimedStartTask => ({
            task: fromStartTaskRow(row),
            plan: row.plan === null ? {} : (JSON.parse(row.plan) as StartTaskPlan),
            attempts: row.attempts,
          }),
        ),
      ),
  };
}
