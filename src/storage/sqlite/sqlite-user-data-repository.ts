import type Database from "better-sqlite3";
import type { UserData, UserDataRepository, Versioned } from "../../ports/user-data-repository.ts";
import { attempt } from "./sqlite-errors.ts";

interface UserDataRow {
  version: number;
  value: string;
}

/**
 * User data on SQLite: one row per user, the document as JSON text, compare-and-set on `version`.
 * Each write is a single autocommitted statement, durable on return with `synchronous = FULL`.
 */
export function createSqliteUserDataRepository(db: Database.Database): UserDataRepository {
  const select = db.prepare<[string], UserDataRow>("SELECT version, value FROM user_data WHERE user_id = ?");
  const insert = db.prepare<{ userId: string; value: string }>(
    "INSERT INTO user_data (user_id, version, value) VALUES (@userId, 1, @value) ON CONFLICT (user_id) DO NOTHING",
  );
  const update = db.prepare<{ userId: string; expected: number; value: string }>(
    "UPDATE user_data SET value = @value, version = version + 1 WHERE user_id = @userId AND version = @expected",
  );

  return {
    get: (userId) =>
      attempt((): Versioned<UserData> | null => {
        const row = select.get(userId);
        return row ? { version: row.version, value: JSON.parse(row.value) as UserData } : null;
      }),
    compareAndSet: (userId, expectedVersion, next) =>
      attempt(() => {
        const value = JSON.stringify(next);
        const result =
          expectedVersion === 0
            ? insert.run({ userId, value })
            : update.run({ userId, expected: expectedVersion, value });
        return result.changes === 1;
      }),
  };
}
