// Conversations through the REST API: search over many stored rows, and start→READY without repository.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { percentile, ROOT } from "../lib/bench-util.ts";
import { START_BODY, timeConversationStarts } from "../lib/conversation-starts.ts";
import { type Bench, fmt, latencyCell, log, type Row, request } from "../lib/harness.ts";

const CONVERSATION_ROWS = 100_000;

export async function conversationBenchmarks(bench: Bench): Promise<Row[]> {
  const rows: Row[] = [];
  const CONVERSATION_STARTS = bench.quick ? 5 : 20;
  const implemented = existsSync(join(ROOT, "src", "services", "conversations"));
  log(`[conversations] starting a service with ${fmt(CONVERSATION_ROWS)} stored conversations`);
  const service = await bench.startService("service-conversations", [
    "--conversations",
    String(CONVERSATION_ROWS),
  ]);
  const { key } = service.info;
  const base = `http://127.0.0.1:${service.info.port}`;
  try {
    const probe = await request(base, key, "GET", "/api/v1/app-conversations/search?limit=100");
    if (probe.status !== 200) {
      log(`[conversations] search: not available (${probe.status})`);
      rows.push({
        bench: "conversations",
        what: `conversation search over ${fmt(CONVERSATION_ROWS)} stored rows, p99`,
        ours: "not available",
        baseline: "—",
        ratio: "—",
        target: "≤ 20 ms p99",
        pass: null,
      });
    } else {
      log("[conversations] search × 200 pages of 100 (10 warm-up)");
      for (let i = 0; i < 10; i++)
        await request(base, key, "GET", "/api/v1/app-conversations/search?limit=100");
      const timings: number[] = [];
      let pageId: string | null = null;
      for (let i = 0; i < 200; i++) {
        const query: string = `/api/v1/app-conversations/search?limit=100${i % 4 === 3 ? "&include_sub_conversations=true" : ""}${pageId ? `&page_id=${encodeURIComponent(pageId)}` : ""}`;
        const t0 = performance.now();
        const res = await request(base, key, "GET", query);
        timings.push(performance.now() - t0);
        if (res.status !== 200) throw new Error(`search: ${res.status} ${res.text}`);
        pageId = (res.json as { next_page_id?: string | null }).next_page_id ?? null;
      }
      log(`[conversations] search p50/p99 ${latencyCell(timings)}`);
      rows.push({
        bench: "conversations",
        what: `conversation search via REST over ${fmt(CONVERSATION_ROWS)} stored rows (pages of 100), p50 / p99`,
        ours: latencyCell(timings),
        baseline: "—",
        ratio: "—",
        target: "≤ 20 ms p99",
        pass: percentile(timings, 99) <= 20,
        data: timings,
      });
    }

    const startRow: Row = {
      bench: "conversations",
      what: "conversation start→READY without repository, p50 / p99",
      ours: "not available",
      baseline: "—",
      ratio: "—",
      target: "≤ 300 ms p50",
      pass: null,
    };
    if (implemented) {
      const first = await request(base, key, "POST", "/api/v1/app-conversations", START_BODY);
      if (first.status === 200) {
        // The first start is the warm-up.
        const timings = (await timeConversationStarts(base, key, CONVERSATION_STARTS + 1, 30_000)).slice(1);
        log(`[conversations] start→READY p50/p99 ${latencyCell(timings)}`);
        Object.assign(startRow, {
          what: `conversation start→READY without repository, p50 / p99 (n=${CONVERSATION_STARTS})`,
          ours: latencyCell(timings),
          pass: percentile(timings, 50) <= 300,
          data: timings,
        });
      } else {
        startRow.ours = `not available (${first.status})`;
      }
    }
    rows.push(startRow);
  } finally {
    await bench.stop(service);
  }
  return rows;
}
