import type Database from "better-sqlite3";

/**
 * Schema migrations, in order: migration i brings the database to version i + 1, recorded in
 * `PRAGMA user_version`. Append new migrations; never edit shipped ones.
 *
 * Dates are integer milliseconds since the epoch; JSON-valued fields are TEXT holding JSON. The keyset listings
 * (createdAt desc, id desc) each have an index starting with the owner so that a page is an index range scan.
 */
export const SQLITE_MIGRATIONS: readonly string[] = [
  `
  CREATE TABLE IF NOT EXISTS user_data (
    user_id TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    value TEXT NOT NULL
  ) STRICT;

  CREATE TABLE IF NOT EXISTS api_keys (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    hash TEXT NOT NULL UNIQUE,
    label TEXT,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
  ) STRICT;
  CREATE INDEX IF NOT EXISTS api_keys_user_created ON api_keys (user_id, created_at, id);
  CREATE INDEX IF NOT EXISTS api_keys_created ON api_keys (created_at, id);

  CREATE TABLE IF NOT EXISTS sandboxes (
    id TEXT PRIMARY KEY,
    owner_id TEXT NOT NULL,
    spec_id TEXT NOT NULL,
    runtime TEXT NOT NULL,
    handle TEXT NOT NULL,
    session_api_key TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
  ) STRICT;
  CREATE INDEX IF NOT EXISTS sandboxes_owner_created ON sandboxes (owner_id, created_at DESC, id DESC);
  CREATE INDEX IF NOT EXISTS sandboxes_created ON sandboxes (created_at DESC, id DESC);

  CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    owner_id TEXT NOT NULL,
    sandbox_id TEXT NOT NULL,
    selected_repository TEXT,
    selected_branch TEXT,
    git_provider TEXT,
    title TEXT,
    conversation_trigger TEXT,
    pr_number TEXT NOT NULL,
    llm_model TEXT,
    metrics TEXT,
    parent_conversation_id TEXT,
    sub_conversation_ids TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
  ) STRICT;
  CREATE INDEX IF NOT EXISTS conversations_owner_created
    ON conversations (owner_id, created_at DESC, id DESC);
  -- The default search excludes sub-conversations: a partial index keeps that listing a pure range scan even
  -- for users with many sub-conversations.
  CREATE INDEX IF NOT EXISTS conversations_owner_created_top
    ON conversations (owner_id, created_at DESC, id DESC) WHERE parent_conversation_id IS NULL;

  CREATE TABLE IF NOT EXISTS start_tasks (
    id TEXT PRIMARY KEY,
    owner_id TEXT NOT NULL,
    status TEXT NOT NULL,
    detail TEXT,
    app_conversation_id TEXT,
    sandbox_id TEXT,
    agent_server_url TEXT,
    request TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
  ) STRICT;
  CREATE INDEX IF NOT EXISTS start_tasks_owner_created ON start_tasks (owner_id, created_at DESC, id DESC);
  CREATE INDEX IF NOT EXISTS start_tasks_owner_conversation
    ON start_tasks (owner_id, app_conversation_id, created_at DESC, id DESC);
  CREATE INDEX IF NOT EXISTS start_tasks_unfinished
    ON start_tasks (created_at, id) WHERE status NOT IN ('READY', 'ERROR');
  `,
  `
  -- One row per server process, rewritten by the readiness check to prove that the database accepts writes.
  CREATE TABLE IF NOT EXISTS heartbeats (
    server_id TEXT PRIMARY KEY,
    at INTEGER NOT NULL
  ) STRICT;

  -- Sandbox first: an owner-first index would be narrower than the listing indexes and win their counts.
  CREATE INDEX IF NOT EXISTS conversations_sandbox_owner ON conversations (sandbox_id, owner_id);

  -- Events as the agent servers report them: the JSON text as received, plus the columns searches use (ts in
  -- microseconds). Every search starts with the owner; each filter combination is a range scan of one index.
  CREATE TABLE IF NOT EXISTS events (
    conversation_id TEXT NOT NULL,
    id TEXT NOT NULL,
    owner_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    ts INTEGER NOT NULL,
    body TEXT NOT NULL
  ) STRICT;
  CREATE UNIQUE INDEX IF NOT EXISTS events_id_conversation ON events (id, conversation_id);
  CREATE INDEX IF NOT EXISTS events_owner_conversation_ts ON events (owner_id, conversation_id, ts, id);
  CREATE INDEX IF NOT EXISTS events_owner_conversation_kind_ts
    ON events (owner_id, conversation_id, kind, ts, id);
  CREATE INDEX IF NOT EXISTS events_owner_ts ON events (owner_id, ts, id);
  CREATE INDEX IF NOT EXISTS events_owner_kind_ts ON events (owner_id, kind, ts, id);
  `,
  `
  -- The change log watchers follow on every server sharing this file (see ports/change-log.ts). AUTOINCREMENT:
  -- a sequence number is never handed out twice, even after the newest entries were pruned.
  CREATE TABLE IF NOT EXISTS changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    owner_id TEXT NOT NULL,
    topic TEXT NOT NULL,
    key TEXT NOT NULL,
    body TEXT NOT NULL,
    at INTEGER NOT NULL
  ) STRICT;
  CREATE INDEX IF NOT EXISTS changes_at ON changes (at);

  -- Start tasks are leased by the server running them; another server resumes one whose lease expired from the
  -- step it had reached, with the ids it had planned (plan, JSON).
  ALTER TABLE start_tasks ADD COLUMN lease_owner TEXT;
  ALTER TABLE start_tasks ADD COLUMN lease_expires_at INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE start_tasks ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE start_tasks ADD COLUMN plan TEXT;
  CREATE INDEX IF NOT EXISTS start_tasks_unfinished_lease
    ON start_tasks (lease_expires_at) WHERE status NOT IN ('READY', 'ERROR');
  CREATE INDEX IF NOT EXISTS start_tasks_owner_planned_conversation
    ON start_tasks (owner_id, json_extract(plan, '$.conversationId'), created_at DESC, id DESC);
  `,
  `
  -- 1 while a delete removes the sandbox (status MISSING): the sweep finishes a delete its server did not.
  ALTER TABLE sandboxes ADD COLUMN deleting INTEGER NOT NULL DEFAULT 0;

  -- Conversations deleted lately: events reported for them afterwards are refused, and a delete cut short is
  -- finished by the sweep. Kept for a while, then pruned.
  CREATE TABLE IF NOT EXISTS conversation_tombstones (
    id TEXT PRIMARY KEY,
    owner_id TEXT NOT NULL,
    at INTEGER NOT NULL
  ) STRICT;
  CREATE INDEX IF NOT EXISTS conversation_tombstones_at ON conversation_tombstones (at);

  -- Sub-conversations are deleted with their parent; finished start tasks are pruned by age.
  CREATE INDEX IF NOT EXISTS conversations_parent ON conversations (parent_conversation_id)
    WHERE parent_conversation_id IS NOT NULL;
  CREATE INDEX IF NOT EXISTS start_tasks_finished_updated
    ON start_tasks (updated_at) WHERE status IN ('READY', 'ERROR');
  `,
];

/** The schema version this build writes. */
export const SQLITE_SCHEMA_VERSION = SQLITE_MIGRATIONS.length;

/**
 * Brings the schema up to {@link SQLITE_SCHEMA_VERSION} in one immediate transaction (so two processes opening
 * the same file do not race).
 *
 * @throws Error when the file was written by a newer build (a higher schema version), rather than guessing.
 */
export function migrateSqliteSchema(db: Database.Database): void {
  db.transaction(() => {
    const current = Number(db.pragma("user_version", { simple: true }));
    if (current > SQLITE_SCHEMA_VERSION) {
      throw new Error(
        `SQLite schema version ${current} is newer than this build supports (${SQLITE_SCHEMA_VERSION})`,
      );
    }
    for (let v = current; v < SQLITE_SCHEMA_VERSION; v++) db.exec(SQLITE_MIGRATIONS[v] ?? "");
    if (current !== SQLITE_SCHEMA_VERSION) db.pragma(`user_version = ${SQLITE_SCHEMA_VERSION}`);
  }).immediate();
}
