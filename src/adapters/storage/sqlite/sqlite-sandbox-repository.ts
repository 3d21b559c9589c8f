import type Database from "better-sqlite3";
import { type ChangeEntry, sandboxChange } from "../../../ports/change-log.ts";
import {
  ACTIVE_STATUSES,
  type SandboxRecord,
  type SandboxRepository,
} from "../../../ports/sandbox-repository.ts";
import { checkPageLimit, toKeysetPage } from "../keyset-page.ts";
import { attempt } from "./sqlite-errors.ts";
import { fromSandboxRow, type SandboxRow, toSandboxRow } from "./sqlite-rows.ts";

const COLUMNS =
  "id, owner_id, spec_id, runtime, handle, session_api_key, status, created_at, updated_at, deleting";
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

/**
 * The sandbox registry on SQLite; listings walk the `(owner_id, created_at DESC, id DESC)` index. Every status
 * change is logged (`logChanges`, the change log's synchronous insert) in the transaction that makes it.
 */
export function createSqliteSandboxRepository(
  db: Database.Database,
  logChanges: (entries: readonly ChangeEntry[]) => void,
): SandboxRepository {
  const logged = (records: readonly SandboxRecord[]): void => {
    if (records.length > 0) logChanges(records.map(sandboxChange));
  };
  const insert = db.prepare<SandboxRow>(
    `INSERT INTO sandboxes (${COLUMNS})
     VALUES (@id, @owner_id, @spec_id, @runtime, @handle, @session_api_key, @status, @created_at, @updated_at,
       @deleting)`,
  );
  const byId = db.prepare<[string], SandboxRow>(`SELECT ${COLUMNS} FROM sandboxes WHERE id = ?`);
  const byIdAndOwner = db.prepare<[string, string], SandboxRow>(
    `SELECT ${COLUMNS} FROM sandboxes WHERE id = ? AND owner_id = ?`,
  );
  const many = db.prepare<{ ids: string; ownerId: string }, SandboxRow>(
    `SELECT ${COLUMNS} FROM sandboxes WHERE id IN (SELECT value FROM json_each(@ids)) AND owner_id = @ownerId`,
  );
  const update = db.prepare<UpdateParams, SandboxRow>(
    `UPDATE sandboxes SET
       handle = CASE WHEN @setHandle THEN @handle ELSE handle END,
       status = CASE WHEN @setStatus THEN @status ELSE status END,
       updated_at = CASE WHEN @setUpdatedAt THEN @updatedAt ELSE updated_at END
     WHERE id = @id RETURNING ${COLUMNS}`,
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
  const remove = db.prepare<[string], SandboxRow>(`DELETE FROM sandboxes WHERE id = ? RETURNING ${COLUMNS}`);
  const countOfOwner = db.prepare<[string], { n: number }>(
    "SELECT count(*) AS n FROM sandboxes WHERE owner_id = ?",
  );
  const active = JSON.stringify(ACTIVE_STATUSES);
  /** The owner's records holding a slot, oldest first (the eviction order). */
  const activeOfOwner = db.prepare<{ ownerId: string; except: string }, SandboxRow>(
    `SELECT ${COLUMNS} FROM sandboxes
     WHERE owner_id = @ownerId AND id != @except AND status IN (SELECT value FROM json_each('${active}'))
     ORDER BY created_at ASC, id ASC`,
  );
  const setStatus = db.prepare<{ id: string; status: string; updatedAt: number }>(
    "UPDATE sandboxes SET status = @status, updated_at = @updatedAt WHERE id = @id",
  );
  const setHandle = db.prepare<{ id: string; handle: string; updatedAt: number }, SandboxRow>(
    `UPDATE sandboxes SET handle = @handle, updated_at = @updatedAt WHERE id = @id RETURNING ${COLUMNS}`,
  );
  const transition = db.prepare<
    { id: string; from: string; to: string; updatedAt: number; ifUpdatedAt: number | null; deleting: number },
    SandboxRow
  >(
    `UPDATE sandboxes SET status = @to, updated_at = @updatedAt, deleting = max(deleting, @deleting)
     WHERE id = @id AND status IN (SELECT value FROM json_each(@from))
       AND (@ifUpdatedAt IS NULL OR updated_at = @ifUpdatedAt)
     RETURNING ${COLUMNS}`,
  );

  /**
   * The oldest RUNNING slot holders beyond `keep` (other than `except` and the protected), or `busy` when too few
   * may be evicted (starting or protected records hold the slots).
   */
  const toEvict = (
    ownerId: string,
    except: string,
    keep: number,
    protect: readonly string[] = [],
  ): SandboxRow[] | { busy: true; holders: number } => {
    const holders = activeOfOwner.all({ ownerId, except });
    const need = holders.length - keep;
    if (need <= 0) return [];
    const evictable = holders.filter((row) => row.status === "RUNNING" && !protect.includes(row.id));
    return evictable.length < need ? { busy: true, holders: holders.length } : evictable.slice(0, need);
  };
  /** Sets PAUSED the rows `toEvict` chose; returns them as they were. */
  const evict = (evicted: readonly SandboxRow[], updatedAt: number): SandboxRecord[] => {
    for (const row of evicted) setStatus.run({ id: row.id, status: "PAUSED", updatedAt });
    logged(
      evicted.map((row) => ({ ...fromSandboxRow(row), status: "PAUSED", updatedAt: new Date(updatedAt) })),
    );
    return evicted.map(fromSandboxRow);
  };
  // IMMEDIATE: the write lock is taken before the first read, so another process's create/claim waits for it.
  const create = db.transaction(
    (record: SandboxRecord, maxPerUser: number, maxRunning: number, protect?: readonly string[]) => {
      const count = countOfOwner.get(record.ownerId)?.n ?? 0;
      if (count >= maxPerUser) return { created: false as const, count };
      const chosen = toEvict(record.ownerId, record.id, maxRunning - 1, protect);
      if (!Array.isArray(chosen))
        return { created: false as const, busy: true as const, holders: chosen.holders };
      const evicted = evict(chosen, record.updatedAt.getTime());
      insert.run(toSandboxRow({ ...record, status: "STARTING" }));
      logged([{ ...record, status: "STARTING" }]);
      return { created: true as const, evicted };
    },
  );
  const claim = db.transaction(
    (id: string, ownerId: string, maxRunning: number, updatedAt: Date, protect?: readonly string[]) => {
      const row = byIdAndOwner.get(id, ownerId);
      if (row === undefined) return null;
      const record = fromSandboxRow(row);
      if (ACTIVE_STATUSES.includes(record.status)) return { record, claimed: false, evicted: [] };
      const chosen = toEvict(ownerId, id, maxRunning - 1, protect);
      if (!Array.isArray(chosen)) return { record, claimed: false, evicted: [], busy: true as const };
      const evicted = evict(chosen, updatedAt.getTime());
      setStatus.run({ id, status: "STARTING", updatedAt: updatedAt.getTime() });
      const claimed = { ...record, status: "STARTING" as const, updatedAt };
      logged([claimed]);
      return { record: claimed, claimed: true, evicted };
    },
  );
  const transitionLogged = db.transaction((params: Parameters<typeof transition.get>[0]) => {
    const row = transition.get(params);
    if (row !== undefined) logged([fromSandboxRow(row)]);
    return row !== undefined;
  });
  const updateLogged = db.transaction((params: UpdateParams) => {
    const row = update.get(params);
    if (row !== undefined && params.setStatus === 1) logged([fromSandboxRow(row)]);
    return row !== undefined;
  });
  const removeLogged = db.transaction((id: string) => {
    const row = remove.get(id);
    // A record set MISSING before its removal was logged then.
    if (row !== undefined && row.status !== "MISSING")
      logged([{ ...fromSandboxRow(row), status: "MISSING", updatedAt: new Date() }]);
    return row !== undefined;
  });

  return {
    insert: (record) =>
      attempt(() => {
        insert.run(toSandboxRow(record));
      }),
    create: (record, limits) =>
      attempt(() =>
        create.immediate(record, limits.maxPerUser, Math.max(1, limits.maxRunning), limits.protect),
      ),
    claim: (id, ownerId, maxRunning, updatedAt, protect) =>
      attempt(() => claim.immediate(id, ownerId, Math.max(1, maxRunning), updatedAt, protect)),
    setHandle: (id, handle, updatedAt) =>
      attempt(() => {
        const row = setHandle.get({ id, handle: JSON.stringify(handle), updatedAt: updatedAt.getTime() });
        return row === undefined ? null : fromSandboxRow(row);
      }),
    transition: (id, from, to, updatedAt, options) =>
      attempt(() =>
        transitionLogged({
          id,
          from: JSON.stringify(from),
          to,
          updatedAt: updatedAt.getTime(),
          ifUpdatedAt: options?.ifUpdatedAt?.getTime() ?? null,
          deleting: options?.deleting === true ? 1 : 0,
        }),
      ),
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
      attempt(() =>
        updateLogged({
          id,
          setHandle: patch.handle === undefined ? 0 : 1,
          handle: patch.handle === undefined ? null : JSON.stringify(patch.handle),
          setStatus: patch.status === undefined ? 0 : 1,
          status: patch.status ?? null,
          setUpdatedAt: patch.updatedAt === undefined ? 0 : 1,
          updatedAt: patch.updatedAt?.getTime() ?? null,
        }),
      ),
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
    delete: (id) => attempt(() => removeLogged(id)),
  };
}
