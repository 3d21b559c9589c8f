import type Database from "better-sqlite3";
import type { SandboxRepository } from "../../ports/sandbox-repository.ts";
import { checkPageLimit, toKeysetPage } from "../keyset-page.ts";
import { attempt } from "./sqlite-errors.ts";
import { fromSandboxRow, type SandboxRow, toSandboxRow } from "./sqlite-rows.ts";

const COLUMNS = "id, owner_id, spec_id, runtime, handle, session_api_key, status, created_at, updated_at";
const NEWEST_FIRST = "ORDER BY created_at DESC, id DESC";

interface UpdateParams {
  id: string;
  setHandle: number;
  handle: string | null;
  setStatus: number;
  status: string | null;
  setUpdatedAt: number;
  updatedAt: number | null;
}

/** The sandbox registry on SQLite; listings walk the `(owner_id, created_at DESC, id DESC)` index. */
export function createSqliteSandboxRepository(db: Database.Database): SandboxRepository {
  const insert = db.prepare<SandboxRow>(
    `INSERT INTO sandboxes (${COLUMNS})
     VALUES (@id, @owner_id, @spec_id, @runtime, @handle, @session_api_key, @status, @created_at, @updated_at)`,
  );
  const byId = db.prepare<[string], SandboxRow>(`SELECT ${COLUMNS} FROM sandboxes WHERE id = ?`);
  const byIdAndOwner = db.prepare<[string, string], SandboxRow>(
    `SELECT ${COLUMNS} FROM sandboxes WHERE id = ? AND owner_id = ?`,
  );
  const many = db.prepare<{ ids: string; ownerId: string }, SandboxRow>(
    `SELECT ${COLUMNS} FROM sandboxes WHERE id IN (SELECT value FROM json_each(@ids)) AND owner_id = @ownerId`,
  );
  const update = db.prepare<UpdateParams>(
    `UPDATE sandboxes SET
       handle = CASE WHEN @setHandle THEN @handle ELSE handle END,
       status = CASE WHEN @setStatus THEN @status ELSE status END,
       updated_at = CASE WHEN @setUpdatedAt THEN @updatedAt ELSE updated_at END
     WHERE id = @id`,
  );
  const firstPage = db.prepare<{ ownerId: string; limit: number }, SandboxRow>(
    `SELECT ${COLUMNS} FROM sandboxes WHERE owner_id = @ownerId ${NEWEST_FIRST} LIMIT @limit`,
  );
  const nextPage = db.prepare<
    { ownerId: string; limit: number; afterCreatedAt: number; afterId: string },
    SandboxRow
  >(
    `SELECT ${COLUMNS} FROM sandboxes
     WHERE owner_id = @ownerId AND (created_at, id) < (@afterCreatedAt, @afterId) ${NEWEST_FIRST} LIMIT @limit`,
  );
  const allOfOwner = db.prepare<[string], SandboxRow>(
    `SELECT ${COLUMNS} FROM sandboxes WHERE owner_id = ? ${NEWEST_FIRST}`,
  );
  const all = db.prepare<[], SandboxRow>(`SELECT ${COLUMNS} FROM sandboxes ${NEWEST_FIRST}`);
  const remove = db.prepare<[string]>("DELETE FROM sandboxes WHERE id = ?");

  return {
    insert: (record) =>
      attempt(() => {
        insert.run(toSandboxRow(record));
      }),
    get: (id, ownerId) =>
      attempt(() => {
        const row = ownerId === undefined ? byId.get(id) : byIdAndOwner.get(id, ownerId);
        return row ? fromSandboxRow(row) : null;
      }),
    getMany: (ids, ownerId) =>
      attempt(() =>
        ids.length === 0 ? [] : many.all({ ids: JSON.stringify(ids), ownerId }).map(fromSandboxRow),
      ),
    update: (id, patch) =>
      attempt(() => {
        const result = update.run({
          id,
          setHandle: patch.handle === undefined ? 0 : 1,
          handle: patch.handle === undefined ? null : JSON.stringify(patch.handle),
          setStatus: patch.status === undefined ? 0 : 1,
          status: patch.status ?? null,
          setUpdatedAt: patch.updatedAt === undefined ? 0 : 1,
          updatedAt: patch.updatedAt?.getTime() ?? null,
        });
        return result.changes === 1;
      }),
    list: (ownerId, page) =>
      attempt(() => {
        checkPageLimit(page.limit);
        const limit = page.limit + 1;
        const rows =
          page.after === null
            ? firstPage.all({ ownerId, limit })
            : nextPage.all({
                ownerId,
                limit,
                afterCreatedAt: page.after.createdAt.getTime(),
                afterId: page.after.id,
              });
        return toKeysetPage(rows.map(fromSandboxRow), page.limit);
      }),
    listAll: (ownerId) =>
      attempt(() => (ownerId === undefined ? all.all() : allOfOwner.all(ownerId)).map(fromSandboxRow)),
    delete: (id) => attempt(() => remove.run(id).changes === 1),
  };
}
