// Query plans of the event searches: every filter combination, search and count, in both orders, is a range scan of
// one owner-first index with no sort step (the basis of the events search p99 in `npm run bench`).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildEventQuery } from "../../src/adapters/storage/sqlite/sqlite-event-repository.ts";
import { createSqliteStorage, sqliteDatabaseOf } from "../../src/adapters/storage/sqlite/sqlite-storage.ts";
import { newHexId } from "../../src/core/ids.ts";
import type { EventCursor, EventFilter } from "../../src/ports/event-repository.ts";
import type { Storage } from "../../src/ports/storage.ts";

const T0 = Date.UTC(2025, 10, 28) * 1000;

describe("sqlite event search plans", () => {
  const dir = mkdtempSync(join(tmpdir(), "storage-sqlite-events-"));
  let storage: Storage;
  const conversations = Array.from({ length: 20 }, () => newHexId());

  beforeAll(async () => {
    storage = createSqliteStorage({ path: join(dir, "events.db") });
    const db = sqliteDatabaseOf(storage);
    const pending: Promise<unknown>[] = [];
    db.transaction(() => {
      for (let i = 0; i < 20_000; i++) {
        const conversationId = conversations[i % conversations.length] as string;
        pending.push(
          storage.events.append([
            {
              ownerId: `owner-${i % 4}`,
              conversationId,
              id: `e${i}`,
              kind: ["MessageEvent", "ActionEvent", "ObservationEvent"][i % 3] as string,
              timestampUs: T0 + i * 1000,
              body: "{}",
            },
          ]),
        );
      }
    })();
    await Promise.all(pending);
    db.pragma("optimize");
  }, 60_000);

  afterAll(async () => {
    await storage.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("plans every filter combination as an index range scan without a sort step", () => {
    const db = sqliteDatabaseOf(storage);
    const after: EventCursor = { timestampUs: T0 + 5_000_000, id: "e5000" };
    const filters: EventFilter[] = [];
    for (const conversation of [undefined, conversations[0]])
      for (const kind of [undefined, "ActionEvent"])
        for (const range of [{}, { timestampGteUs: T0, timestampLtUs: T0 + 9_000_000 }])
          filters.push({
            ...(conversation === undefined ? {} : { conversationIdEq: conversation }),
            ...(kind === undefined ? {} : { kindEq: kind }),
            ...range,
          });
    for (const filter of filters) {
      for (const page of [{ limit: 100, after: null }, { limit: 100, after }, null]) {
        for (const descending of [false, true]) {
          const query = buildEventQuery("owner-1", filter, page, descending);
          const plan = db
            .prepare<Record<string, string | number>, { detail: string }>(`EXPLAIN QUERY PLAN ${query.sql}`)
            .all(query.params)
            .map((row) => row.detail);
          const context = `${JSON.stringify(filter)} ${page === null ? "count" : "search"}: ${plan.join(" | ")}`;
          expect(plan, context).toHaveLength(1);
          expect(plan[0], context).toMatch(
            /^SEARCH events USING (COVERING )?INDEX events_owner_\w+ \(owner_id=\?/,
          );
          expect(plan.join(" "), context).not.toMatch(/TEMP B-TREE/);
        }
      }
    }
  });
});
