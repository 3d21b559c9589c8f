import type Database from "better-sqlite3";

/** SQL text and its named parameters. */
export interface SqliteQuery {
  sql: string;
  params: Record<string, string | number>;
}

/** A statement taking one object of named parameters. */
export type NamedStatement = Database.Statement<[Record<string, string | number>], unknown>;

/**
 * Prepares each distinct SQL text once. Used for queries built from optional filters: their number of shapes is
 * small and fixed (one per filter combination), so the cache stays bounded.
 */
export function createStatementCache(db: Database.Database): (sql: string) => NamedStatement {
  const statements = new Map<string, NamedStatement>();
  return (sql) => {
    let statement = statements.get(sql);
    if (statement === undefined) {
      statement = db.prepare<Record<string, string | number>, unknown>(sql);
      statements.set(sql, statement);
    }
    return statement;
  };
}
