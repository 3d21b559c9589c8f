import type Database from "better-sqlite3";
import type { ApiKeyRepository } from "../../../ports/api-key-repository.ts";
import { attempt } from "./sqlite-errors.ts";
import { type ApiKeyRow, fromApiKeyRow, toApiKeyRow } from "./sqlite-rows.ts";

const COLUMNS = "id, user_id, hash, label, created_at, revoked_at";

/** API keys on SQLite; `hash` is unique (a duplicate insert rejects with the SQLite constraint error). */
export function createSqliteApiKeyRepository(db: Database.Database): ApiKeyRepository {
  const insert = db.prepare<ApiKeyRow>(
    `INSERT INTO api_keys (${COLUMNS}) VALUES (@id, @user_id, @hash, @label, @created_at, @revoked_at)`,
  );
  const byHash = db.prepare<[string], ApiKeyRow>(`SELECT ${COLUMNS} FROM api_keys WHERE hash = ?`);
  const listAll = db.prepare<[], ApiKeyRow>(`SELECT ${COLUMNS} FROM api_keys ORDER BY created_at, id`);
  const listOfUser = db.prepare<[string], ApiKeyRow>(
    `SELECT ${COLUMNS} FROM api_keys WHERE user_id = ? ORDER BY created_at, id`,
  );
  const revoke = db.prepare<{ id: string; at: number }>(
    "UPDATE api_keys SET revoked_at = @at WHERE id = @id AND revoked_at IS NULL",
  );
  const count = db.prepare<[], { n: number }>("SELECT count(*) AS n FROM api_keys");

  return {
    insert: (record) =>
      attempt(() => {
        insert.run(toApiKeyRow(record));
      }),
    findByHash: (hash) =>
      attempt(() => {
        const row = byHash.get(hash);
        return row ? fromApiKeyRow(row) : null;
      }),
    list: (userId) =>
      attempt(() => (userId === undefined ? listAll.all() : listOfUser.all(userId)).map(fromApiKeyRow)),
    revoke: (id, at) => attempt(() => revoke.run({ id, at: at.getTime() }).changes === 1),
    count: () => attempt(() => count.get()?.n ?? 0),
  };
}
