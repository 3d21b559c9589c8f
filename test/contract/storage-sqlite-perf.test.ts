// Performance sanity (not a benchmark): with 100,000 conversations of one user, a newest-first search page is an
// index range scan and stays fast however deep the page.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildConversationQuery } from "../../src/adapters/storage/sqlite/sqlite-conversation-repository.ts";
import { buildStartTaskQuery } from "../../src/adapters/storage/sqlite/sqlite-start-task-repository.ts";
import { createSqliteStorage, sqliteDatabaseOf } from "../../src/adapters/storage/sqlite/sqlite-storage.ts";
import { newHexId } from "../../src/core/ids.ts";
import type { ConversationFilter } from "../../src/ports/conversation-repository.ts";
import type { Cursor, PageQuery } from "../../src/ports/page.ts";
import type { Storage } from "../../src/ports/storage.ts";
import { SYNTHETIC_T0, syntheticConversation } from "../helpers/conversation-fixtures.ts";

const ROWS = 100_000;
const OWNER = "perf-owner";
const record = syntheticConversation;

describe("sqlite conversation search at 100,000 rows of one user", () => {
  const dir = mkdtempSync(join(tmpdir(), "storage-sqlite-perf-"));
  let storage: Storage;

  beforeAll(async () => {
    storage = createSqliteStorage({ path: join(dir, "perf.db") });
    const db = sqliteDatabaseOf(storage);
    const started = performance.now();
    const pending: Promise<void>[] = [];
    // One transaction for the bulk load: the adapter runs each insert's SQL synchronously when called.
    db.transaction(() => {
      for (let i = 0; i < ROWS; i++) pending.push(storage.conversations.insert(record(i, OWNER)));
      for (let i = 0; i < 5_000; i++)
        pending.push(storage.conversations.insert(record(i, `other-${i % 50}`)));
    })();
    await Promise.all(pending);
    console.log(
      `storage-sqlite-perf: loaded ${ROWS + 5_000} conversations in ${Math.round(performance.now() - started)} ms`,
    );
  }, 120_000);

  afterAll(async () => {
    await storage.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("plans every search shape as an index range scan without a sort step", () => {
    const db = sqliteDatabaseOf(storage);
    const after: Cursor = { createdAt: new Date(SYNTHETIC_T0 + 20_000_000), id: "8".repeat(32) };
    const pages: PageQuery[] = [
      { limit: 100, after: null },
      { limit: 100, after },
    ];
    const filters: ConversationFilter[] = [
      {},
      { includeSubConversations: true },
      { titleContains: "number 4" },
      { createdAtGte: new Date(SYNTHETIC_T0), createdAtLt: new Date(SYNTHETIC_T0 + 10_000_000) },
      {
        updatedAtGte: new Date(SYNTHETIC_T0),
        updatedAtLt: new Date(SYNTHETIC_T0 + 10_000_000),
        includeSubConversations: true,
      },
      { titleContains: "x", createdAtGte: new Date(SYNTHETIC_T0), updatedAtLt: new Date(SYNTHETIC_T0 + 1) },
      { triggerEq: "microagent_management", selectedRepositoryEq: "octo/repo" },
    ];
    for (const filter of filters) {
      for (const page of [...pages, null]) {
        const query = buildConversationQuery(OWNER, filter, page);
        const plan = db
          .prepare<Record<string, string | number>, { detail: string }>(`EXPLAIN QUERY PLAN ${query.sql}`)
          .all(query.params)
          .map((row) => row.detail);
        const context = `${JSON.stringify(filter)} ${page === null ? "count" : "search"}: ${plan.join(" | ")}`;
        expect(plan, context).toHaveLength(1);
        expect(plan[0], context).toMatch(
          /^SEARCH conversations USING (COVERING )?INDEX conversations_owner_created(_top)? \(owner_id=\?/,
        );
        expect(plan.join(" "), context).not.toMatch(/TEMP B-TREE|SCAN conversations(?! USING)/);
      }
    }
    for (const ascending of [false, true]) {
      for (const filter of [{}, { conversationIdEq: newHexId(), createdAtGte: new Date(SYNTHETIC_T0) }]) {
        const query = buildStartTaskQuery(OWNER, filter, { limit: 100, after }, ascending);
        const plan = db
          .prepare<Record<string, string | number>, { detail: string }>(`EXPLAIN QUERY PLAN ${query.sql}`)
          .all(query.params)
          .map((row) => row.detail)
          .join(" | ");
        expect(plan).toMatch(/^SEARCH start_tasks USING INDEX start_tasks_owner_\w+ \(owner_id=\?/);
        expect(plan).not.toMatch(/TEMP B-TREE/);
      }
    }
  });

  it("answers 200 searches of 100 items with p99 under 20 ms", async () => {
    for (let i = 0; i < 10; i++) await storage.conversations.search(OWNER, {}, { limit: 100, after: null }); // warm-up
    const timings: number[] = [];
    let after: Cursor | null = null;
    let seen = 0;
    for (let i = 0; i < 200; i++) {
      const filter: ConversationFilter = i % 4 === 3 ? { includeSubConversations: true } : {};
      const started = performance.now();
      const page = await storage.conversations.search(OWNER, filter, { limit: 100, after });
      timings.push(performance.now() - started);
      expect(page.items).toHaveLength(100);
      seen += page.items.length;
      after = page.next;
    }
    timings.sort((a, b) => a - b);
    const p50 = timings[Math.ceil(timings.length * 0.5) - 1] ?? Number.NaN;
    const p99 = timings[Math.ceil(timings.length * 0.99) - 1] ?? Number.NaN;
    console.log(
      `storage-sqlite-perf: ${seen} items in 200 searches, p50 ${p50.toFixed(2)} ms, p99 ${p99.toFixed(2)} ms`,
    );
    expect(p99).toBeLessThan(20);
  });
});
