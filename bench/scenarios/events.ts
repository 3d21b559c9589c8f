// Events: webhook ingest against a bare Fastify + SQLite endpoint, and search and count over many stored events.
import { join } from "node:path";
import { median, percentile, runLoad, type ServerChild } from "../lib/bench-util.ts";
import { START_BODY } from "../lib/conversation-starts.ts";
import {
  type Bench,
  compiled,
  fmt,
  latencyCell,
  log,
  type Row,
  ratioRow,
  request,
  type Side,
  sleep,
} from "../lib/harness.ts";
import { benchEventConversation, EVENTS_PER_CONVERSATION } from "../servers/fixture.ts";

const EVENT_SEARCHES = 200;

/**
 * Events: webhook ingest (every event durable before the answer) against a bare Fastify + better-sqlite3 endpoint
 * committing each request with synchronous = FULL on the same schema, then searches over STORED_EVENTS stored
 * events against the same bare server running the same SQL on the service's file.
 */
export async function eventBenchmarks(bench: Bench): Promise<Row[]> {
  const rows: Row[] = [];
  const STORED_EVENTS = bench.quick ? 100_000 : 1_000_000;
  log("[events] starting a service and a conversation (its sandbox reports through the webhook)");
  const service = await bench.startService("service-events");
  const { key } = service.info;
  const base = `http://127.0.0.1:${service.info.port}`;
  let bare: ServerChild<{ port: number; pid: number }> | null = null;
  try {
    const task = (await request(base, key, "POST", "/api/v1/app-conversations", START_BODY)).json as {
      id: string;
    };
    let ready: { status: string; app_conversation_id: string; sandbox_id: string } | undefined;
    for (let i = 0; i < 3000 && ready?.status !== "READY"; i++) {
      await sleep(10);
      ready = (
        (await request(base, key, "GET", `/api/v1/app-conversations/start-tasks?ids=${task.id}`))
          .json as (typeof ready)[]
      )[0];
    }
    if (ready?.status !== "READY") throw new Error(`events: conversation start ended ${ready?.status}`);
    const sandbox = (
      (await request(base, key, "GET", `/api/v1/sandboxes?id=${ready.sandbox_id}`)).json as {
        session_api_key: string;
      }[]
    )[0];
    const sandboxKey = sandbox?.session_api_key ?? "";
    bare = await bench.start<{ port: number; pid: number }>({
      name: "bare-events",
      command: process.execPath,
      args: [compiled("bare-events"), join(bench.work, "bare-events.sqlite")],
      logPath: join(bench.work, "bare-events.log"),
    });
    const conversation = ready.app_conversation_id;
    const ours = `${base}/api/v1/webhooks/${ready.sandbox_id}/events/${conversation}`;
    const baseline = `http://127.0.0.1:${bare.info.port}/events/${conversation}`;
    for (const batch of [1, 5]) {
      const side = (pid: number, url: string, headers: Record<string, string>): Side => ({
        pid,
        load: (durationS) =>
          runLoad("events-load.ts", { url, headers, batch, connections: bench.connections, durationS }),
      });
      const alt = await bench.alternate(
        `events ingest ×${batch}`,
        side(service.pid, ours, { "x-session-api-key": sandboxKey }),
        side(bare.pid, baseline, {}),
        "req/s",
      );
      const row = ratioRow(
        "events",
        `webhook event ingest, ${batch} event${batch > 1 ? "s" : ""} per POST (durable before the answer), events/s`,
        alt,
        "bare Fastify + SQLite, FULL commit per request",
        0,
        "req/s",
      );
      const eventsPerS = median(alt.ours.map((r) => r.rps)) * batch;
      const failed = alt.ours.reduce((n, r) => n + r.failed, 0);
      rows.push({
        ...row,
        ours: `${fmt(eventsPerS)} events/s; ${row.ours}`,
        baseline: `${fmt(median(alt.baseline.map((r) => r.rps)) * batch)} events/s; ${row.baseline}`,
        target: "≥ 5,000 events/s",
        pass: failed === 0 && eventsPerS >= 5000,
      });
    }
    const counted = (
      await request(base, key, "GET", `/api/v1/events/count?conversation_id__eq=${conversation}`)
    ).json as number;
    log(`[events] ${fmt(counted)} events stored in the benchmark conversation`);
  } finally {
    await bench.stop(bare as ServerChild<unknown> | null);
    await bench.stop(service);
  }

  log(`[events] starting a service with ${fmt(STORED_EVENTS)} stored events`);
  const loaded = await bench.startService("service-events-search", ["--events", String(STORED_EVENTS)]);
  const lbase = `http://127.0.0.1:${loaded.info.port}`;
  bare = null;
  try {
    bare = await bench.start<{ port: number; pid: number }>({
      name: "bare-events-search",
      command: process.execPath,
      args: [compiled("bare-events"), join(loaded.info.dir, "workspace.sqlite")],
      logPath: join(bench.work, "bare-events-search.log"),
    });
    const bbase = `http://127.0.0.1:${bare.info.port}`;
    const conversations = STORED_EVENTS / EVENTS_PER_CONVERSATION;
    const queries = Array.from({ length: EVENT_SEARCHES + 10 }, (_, i) => {
      const c = benchEventConversation((i * 7919) % conversations);
      return i % 3 === 0
        ? `conversation_id__eq=${c}`
        : i % 3 === 1
          ? `conversation_id__eq=${c}&kind__eq=ActionEvent`
          : "";
    });
    const time = async (url: (q: string) => string, auth: string) => {
      const timings: number[] = [];
      for (const [i, q] of queries.entries()) {
        const t0 = performance.now();
        const res = await request(url(q), auth, "GET", "");
        if (i >= 10) timings.push(performance.now() - t0); // the first 10 are the warm-up
        if (res.status !== 200 || (res.json as { items: unknown[] }).items.length !== 100)
          throw new Error(`events search ${q}: ${res.status} ${res.text.slice(0, 200)}`);
      }
      return timings;
    };
    log(`[events] search × ${EVENT_SEARCHES} (pages of 100) on ours and on the baseline`);
    const oursT = await time((q) => `${lbase}/api/v1/events/search?limit=100&${q}`, loaded.info.key);
    const baseT = await time((q) => `${bbase}/search?${q}`, "");
    log(`[events] search p50/p99 ours ${latencyCell(oursT)} · baseline ${latencyCell(baseT)}`);
    rows.push({
      bench: "events",
      what: `events search via REST over ${fmt(STORED_EVENTS)} stored events (by conversation, conversation+kind, all; pages of 100), p50 / p99`,
      ours: latencyCell(oursT),
      baseline: `${latencyCell(baseT)} (bare Fastify + SQLite, same SQL)`,
      ratio: `p99 ${fmt(percentile(oursT, 99) / percentile(baseT, 99), 2)}× the baseline's`,
      target: "≤ 20 ms p99",
      pass: percentile(oursT, 99) <= 20,
      data: { ours: oursT, baseline: baseT },
    });
    const countT: number[] = [];
    for (let i = 0; i < EVENT_SEARCHES + 10; i++) {
      const c = benchEventConversation((i * 7919) % conversations);
      const t0 = performance.now();
      const res = await request(
        lbase,
        loaded.info.key,
        "GET",
        `/api/v1/events/count?conversation_id__eq=${c}`,
      );
      if (i >= 10) countT.push(performance.now() - t0);
      if (res.json !== EVENTS_PER_CONVERSATION) throw new Error(`events count: ${res.text}`);
    }
    log(`[events] count p50/p99 ${latencyCell(countT)}`);
    rows.push({
      bench: "events",
      what: `events count of a conversation (the UI's call) over ${fmt(STORED_EVENTS)} stored events, p50 / p99`,
      ours: latencyCell(countT),
      baseline: "—",
      ratio: "—",
      target: "≤ 20 ms p99",
      pass: percentile(countT, 99) <= 20,
      data: countT,
    });
  } finally {
    await bench.stop(bare as ServerChild<unknown> | null);
    await bench.stop(loaded);
  }
  return rows;
}
