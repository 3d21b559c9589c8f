/**
 * The agent proxy (src/transports/agent-proxy) against the agent reached directly, in one run: a sandbox of the built-in agent on the
 * process runtime of the benchmark's service, its model a scripted fake server that answers at once
 * (test/helpers/fake-llm.ts, in this process). Every figure is measured both ways, alternated sample by sample or
 * round by round: through the service's own listener (`AGENT_SERVER`, the sandbox's session key on the agent's
 * routes and the events websocket, as the UI reaches it with a relative conversation_url), directly
 * (`AGENT_SERVER_DIRECT`, the agent's loopback URL, the same key), and through a bare relay process
 * (bench/servers/bare-agent-relay.ts: node:http piping and a ws relay, no checks): what any proxy hop costs on
 * the machine, so that the service's figure splits into the hop and what src/transports/agent-proxy adds to it.
 *
 * - message → first event: a user message POSTed to `/api/conversations/{id}/events` (`run: true`, the UI's send),
 *   timed to the first frame it brings on the conversation's open events websocket (the user's MessageEvent); and
 *   the same with the message sent on the websocket. Through the service this crosses both halves of the proxy (the
 *   HTTP forward with @fastify/reply-from, the websocket relay). Each side has its own conversation in the same
 *   agent, so that no socket receives another's events; the order of the sides rotates every sample.
 * - events streamed per second: a socket opened with `resend_all=true` on a conversation holding many stored
 *   events (user messages of ~1 KB, the size of a typical action or observation) counts frames until all arrived;
 *   events / (last frame − socket created), rounds alternated (the order rotating), the ratio the median of the
 *   per-round ratios.
 * - memory per idle socket: the service's RSS (its own process) before and after opening N idle sockets through it
 *   (each relayed to the agent, so the server holds two websockets per client socket), divided by N. The service
 *   is started with the per-user socket cap raised above N (`AGENT_SOCKETS_PER_USER` is per sandbox owner, so
 *   spreading the sockets over sandboxes would not help) and the per-sandbox call and per-socket message rates
 *   raised above what the latency loop sends, so the limiters stay on the path without refusing.
 */

import { join } from "node:path";
import WebSocket from "ws";
import { type FakeLlm, startFakeLlm } from "../../test/helpers/fake-llm.ts";
import { cpuSeconds, median, percentile } from "../lib/bench-util.ts";
import { START_BODY } from "../lib/conversation-starts.ts";
import {
  type Bench,
  compiled,
  fmt,
  idleRss,
  latencyCell,
  log,
  type Row,
  request,
  sleep,
} from "../lib/harness.ts";

const BENCH = "agent-proxy";
/** Text of each stored message of the streaming conversation (~1 KB events). */
const STORED_TEXT = "x".repeat(960);
/**
 * The pause after each latency turn (its last event): a user does not send the next message within milliseconds of
 * the agent's answer, and in that pause the service has applied the agent's webhooks for the turn (the
 * conversation's status, committed with a synchronous fsync on the service's event loop). The back-to-back row
 * sends without it.
 */
const PAUSE_MS = 50;

type SideName = "service" | "direct" | "relay";

interface Side {
  name: SideName;
  /** HTTP origin of the agent's routes on this side. */
  base: string;
  /** The conversation this side's latency samples use. */
  conversationId: string;
}

type Frame = { kind?: string; key?: string; value?: unknown; at: number };

/** An events websocket that keeps every frame with its arrival time. */
class EventSocket {
  readonly frames: Frame[] = [];
  readonly ws: WebSocket;
  #waiter: (() => void) | undefined;
  constructor(url: string) {
    this.ws = new WebSocket(url, { perMessageDeflate: false });
    this.ws.on("message", (d) => {
      const at = performance.now();
      this.frames.push({ ...(JSON.parse(d.toString()) as Omit<Frame, "at">), at });
      const w = this.#waiter;
      this.#waiter = undefined;
      w?.();
    });
  }
  opened(): Promise<void> {
    return opened(this.ws);
  }
  async until(predicate: (frames: Frame[]) => boolean, timeoutMs = 15_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!predicate(this.frames)) {
      if (Date.now() > deadline) throw new Error("the agent did not answer in time");
      await new Promise<void>((r) => {
        this.#waiter = r;
        setTimeout(r, 50).unref();
      });
    }
  }
}

const opened = (ws: WebSocket): Promise<void> =>
  new Promise((resolve, reject) => {
    ws.once("open", () => resolve());
    ws.once("error", reject);
    ws.once("unexpected-response", (_req, res) => reject(new Error(`websocket refused: ${res.statusCode}`)));
  });
const closed = (ws: WebSocket): Promise<void> =>
  ws.readyState === WebSocket.CLOSED ? Promise.resolve() : new Promise((r) => ws.once("close", () => r()));

/** The websocket URL of a conversation's events on an HTTP origin. */
const socketUrl = (base: string, conversationId: string, key: string, resendAll: boolean): string =>
  `${base.replace(/^http/, "ws")}/sockets/events/${conversationId}?session_api_key=${key}${resendAll ? "&resend_all=true" : ""}`;

/**
 * Starts a conversation without repository through the REST API (the UI's start), in `sandboxId` when given, and
 * waits for READY: its id and sandbox.
 */
async function startConversation(
  base: string,
  key: string,
  sandboxId?: string,
): Promise<{ id: string; sandboxId: string }> {
  const body =
    sandboxId === undefined
      ? START_BODY
      : JSON.stringify({ ...(JSON.parse(START_BODY) as object), sandbox_id: sandboxId });
  const res = await request(base, key, "POST", "/api/v1/app-conversations", body);
  if (res.status !== 200) throw new Error(`conversation start: ${res.status} ${res.text}`);
  type Task = {
    id: string;
    status: string;
    detail?: string | null;
    app_conversation_id?: string | null;
    sandbox_id?: string | null;
  };
  let task = res.json as Task;
  const deadline = Date.now() + 60_000;
  while (task.status !== "READY" && task.status !== "ERROR" && Date.now() < deadline) {
    await sleep(10);
    const got = await request(base, key, "GET", `/api/v1/app-conversations/start-tasks?ids=${task.id}`);
    task = (got.json as (Task | null)[])[0] ?? task;
  }
  if (task.status !== "READY" || !task.app_conversation_id || !task.sandbox_id)
    throw new Error(`conversation start ended ${task.status}: ${task.detail}`);
  const [conversation] = (
    await request(base, key, "GET", `/api/v1/app-conversations?ids=${task.app_conversation_id}`)
  ).json as ({ conversation_url: string | null } | null)[];
  const url = conversation?.conversation_url ?? "";
  const m = /\/api\/conversations\/([^/?]+)$/.exec(url);
  if (m === null) throw new Error(`unexpected conversation_url: ${url}`);
  return { id: m[1] as string, sandboxId: task.sandbox_id };
}

/** One agent call with the sandbox's key (on either side). */
async function agentCall(base: string, key: string, method: string, path: string, body?: unknown) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: {
      "x-session-api-key": key,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return JSON.parse(text) as unknown;
}

const userMessage = (text: string, run: boolean) => ({
  role: "user",
  content: [{ type: "text", text }],
  run,
});

/** Heap used + external memory of the service (its /metrics, Node's default metrics), in MiB. */
async function heapAndExternalMiB(base: string, key: string): Promise<number> {
  const text = (await request(base, key, "GET", "/metrics")).text;
  const read = (name: string): number => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1]);
  return (read("nodejs_heap_size_used_bytes") + read("nodejs_external_memory_bytes")) / 1024 / 1024;
}

export async function agentProxyBenchmarks(bench: Bench): Promise<Row[]> {
  const samples = bench.quick ? 40 : 200;
  const warmup = 5;
  const storedEvents = bench.quick ? 2_000 : 10_000;
  const streamRounds = bench.quick ? 3 : 20;
  const streamWarmup = bench.quick ? 1 : 3;
  const idleSockets = bench.quick ? 50 : 200;
  const rows: Row[] = [];
  const llm: FakeLlm = await startFakeLlm();
  const svc = await bench
    .startService("service-agent-proxy", [
      "--warm-agents",
      "0",
      "--sandbox-host-ports",
      new URL(llm.url).port,
      "--agent-proxy-limits",
      JSON.stringify({
        socketsPerUser: 4 * idleSockets,
        callsPerSecond: 100_000,
        messagesPerSecond: 100_000,
      }),
    ])
    .catch(async (err: unknown) => {
      await llm.close();
      throw err;
    });
  let relay: Awaited<ReturnType<typeof bench.start<{ port: number }>>> | null = null;
  const sockets: WebSocket[] = [];
  try {
    const serviceBase = `http://127.0.0.1:${svc.info.port}`;
    const userKey = svc.info.key;
    const stored = await request(
      serviceBase,
      userKey,
      "POST",
      "/api/settings",
      JSON.stringify({ llm_model: "openai/bench", llm_base_url: llm.url, llm_api_key: "sk-bench" }),
    );
    if (stored.status !== 200) throw new Error(`settings: ${stored.status} ${stored.text}`);

    log(`[${BENCH}] starting a sandbox of the built-in agent and five conversations in it`);
    const first = await startConversation(serviceBase, userKey);
    const [sandbox] = (await request(serviceBase, userKey, "GET", `/api/v1/sandboxes?id=${first.sandboxId}`))
      .json as {
      session_api_key: string | null;
      exposed_urls: { name: string; url: string }[] | null;
    }[];
    const key = sandbox?.session_api_key ?? "";
    const urls = new Map((sandbox?.exposed_urls ?? []).map((u) => [u.name, u.url]));
    const direct = urls.get("AGENT_SERVER_DIRECT");
    const proxied = urls.get("AGENT_SERVER");
    if (!key || direct === undefined || proxied === undefined)
      throw new Error(`the sandbox has no key or agent URLs: ${JSON.stringify(sandbox)}`);
    // AGENT_SERVER is "/" (the service's own origin) unless PUBLIC_URL names another.
    const throughService = new URL(proxied, serviceBase).origin;
    const directBase = direct.replace(/\/+$/, "");
    relay = await bench.start<{ port: number }>({
      name: "bare-agent-relay",
      command: process.execPath,
      args: [compiled("bare-agent-relay"), directBase],
      logPath: join(bench.work, "bare-agent-relay.log"),
    });
    const relayBase = `http://127.0.0.1:${relay.info.port}`;
    const second = await startConversation(serviceBase, userKey, first.sandboxId);
    const third = await startConversation(serviceBase, userKey, first.sandboxId);
    const streaming = await startConversation(serviceBase, userKey, first.sandboxId);
    const idle = await startConversation(serviceBase, userKey, first.sandboxId);
    const sides: Side[] = [
      { name: "service", base: throughService, conversationId: first.id },
      { name: "direct", base: directBase, conversationId: second.id },
      { name: "relay", base: relayBase, conversationId: third.id },
    ];
    const baseOf = (name: SideName): string => (sides.find((s) => s.name === name) as Side).base;
    /** The sides in the order of sample `i` (rotating, so that each comes first, second and last alike). */
    const rotation = <T>(list: readonly T[], i: number): T[] => [
      ...list.slice(i % list.length),
      ...list.slice(0, i % list.length),
    ];

    // 1. message → first event.
    const socketOf = new Map<Side, EventSocket>();
    for (const side of sides) {
      const s = new EventSocket(socketUrl(side.base, side.conversationId, key, true));
      await s.opened();
      socketOf.set(side, s);
    }
    const finished = (after: number) => (f: Frame[]) =>
      f.slice(after).some((e) => e.key === "execution_status" && e.value === "finished");
    const firstAfter = (after: number) => (f: Frame[]) => f.length > after;
    /**
     * One turn: the message sent (POST or on the socket), timed to its first frame; then waits for the turn's end
     * and `pauseMs` more.
     */
    const turn = async (
      side: Side,
      how: "post" | "socket",
      text: string,
      pauseMs: number,
    ): Promise<number> => {
      const socket = socketOf.get(side) as EventSocket;
      const mark = socket.frames.length;
      const t0 = performance.now();
      let answered: Promise<unknown> = Promise.resolve();
      if (how === "post")
        answered = agentCall(
          side.base,
          key,
          "POST",
          `/api/conversations/${side.conversationId}/events`,
          userMessage(text, true),
        );
      else socket.ws.send(JSON.stringify({ role: "user", content: [{ type: "text", text }] }));
      await socket.until(firstAfter(mark));
      const ms = (socket.frames[mark] as Frame).at - t0;
      await answered;
      await socket.until(finished(mark));
      if (pauseMs > 0) await sleep(pauseMs);
      return ms;
    };
    log(
      `[${BENCH}] message → first event × ${samples} per side and way (${warmup} warm-up), rotating sides, ${PAUSE_MS} ms after each turn`,
    );
    const perSide = (): Record<SideName, number[]> => ({ service: [], direct: [], relay: [] });
    const latency = { post: perSide(), socket: perSide(), burst: perSide() };
    for (let i = 0; i < samples + warmup; i++)
      for (const how of ["post", "socket"] as const)
        for (const side of rotation(sides, i)) {
          const ms = await turn(side, how, `message ${i} (${how})`, PAUSE_MS);
          if (i >= warmup) latency[how][side.name].push(ms);
        }
    log(`[${BENCH}] the same POSTs back to back (each sent when the turn before it finished) × ${samples}`);
    for (let i = 0; i < samples + warmup; i++)
      for (const side of rotation(sides, i)) {
        const ms = await turn(side, "post", `message ${i} (back to back)`, 0);
        if (i >= warmup) latency.burst[side.name].push(ms);
      }
    for (const s of socketOf.values()) {
      s.ws.close();
      await closed(s.ws);
    }
    for (const how of ["post", "socket", "burst"] as const)
      log(
        `[${BENCH}] ${how}: through the service ${latencyCell(latency[how].service)} · direct ${latencyCell(latency[how].direct)} · bare relay ${latencyCell(latency[how].relay)}`,
      );

    // 2. events streamed per second through one socket (resend_all on a conversation with many events).
    log(`[${BENCH}] storing ${fmt(storedEvents)} events in a conversation (directly)`);
    const path = `/api/conversations/${streaming.id}/events`;
    for (let i = 0; i < storedEvents; i += 16)
      await Promise.all(
        Array.from({ length: Math.min(16, storedEvents - i) }, (_, j) =>
          agentCall(directBase, key, "POST", path, userMessage(`${i + j} ${STORED_TEXT}`, false)),
        ),
      );
    const count = (await agentCall(directBase, key, "GET", `${path}/count`)) as number;
    // The state first, then every stored event.
    const expected = count + 1;
    /** Frames lost by the socket of one round (rounds that did not get every frame within 20 s). */
    const losses: string[] = [];
    type Streamed = { ms: number; eventsPerS: number; bytes: number; cpuUs: number } | { lost: string };
    /** The process that relays a side's frames (none for direct). */
    const relayPid = (side: SideName): number | null =>
      side === "service" ? svc.pid : side === "relay" ? (relay?.pid ?? null) : null;
    const stream = async (side: SideName): Promise<Streamed> => {
      const pid = relayPid(side);
      const cpu0 = pid === null ? 0 : cpuSeconds(pid);
      const t0 = performance.now();
      const ws = new WebSocket(socketUrl(baseOf(side), streaming.id, key, true), {
        perMessageDeflate: false,
      });
      const frames: Buffer[] = [];
      let bytes = 0;
      let last = t0;
      const all = await new Promise<boolean>((resolve, reject) => {
        const timer = setTimeout(() => resolve(false), 20_000);
        ws.on("message", (d: Buffer) => {
          frames.push(d);
          bytes += d.length;
          if (frames.length === expected) {
            last = performance.now();
            clearTimeout(timer);
            resolve(true);
          }
        });
        ws.once("error", reject);
        ws.once("close", () => {
          clearTimeout(timer);
          resolve(false);
        });
      });
      ws.removeAllListeners("close");
      ws.close();
      await closed(ws);
      if (!all) {
        const lost = describeLoss(frames, storedEvents, expected);
        log(`[${BENCH}] ${side}: frames lost: ${lost}`);
        return { lost: `${side}: ${lost}` };
      }
      // CPU of the relaying process per event (less disturbed by other work on the machine than events/s).
      const cpuUs = pid === null ? Number.NaN : ((cpuSeconds(pid) - cpu0) * 1e6) / count;
      return { ms: last - t0, eventsPerS: (count / (last - t0)) * 1000, bytes, cpuUs };
    };
    log(
      `[${BENCH}] resend_all of ${fmt(count)} events × ${streamRounds} rounds per side (${streamWarmup} warm-up), rotating sides`,
    );
    const names: SideName[] = ["service", "direct", "relay"];
    for (let i = 0; i < streamWarmup; i++) for (const side of names) await stream(side);
    const streamed = {
      ...perSide(),
      ratios: [] as number[],
      relayRatios: [] as number[],
      serviceCpuUs: [] as number[],
      relayCpuUs: [] as number[],
    };
    let frameBytes = 0;
    for (let round = 0; round < streamRounds; round++) {
      const got = new Map<SideName, Streamed>();
      for (const side of rotation(names, round)) got.set(side, await stream(side));
      const results = names.map((n) => got.get(n) as Streamed);
      const lost = results.filter((r): r is { lost: string } => "lost" in r);
      if (lost.length > 0) {
        losses.push(...lost.map((r) => r.lost));
        continue;
      }
      type Done = { ms: number; eventsPerS: number; bytes: number; cpuUs: number };
      const [a, b, c] = results as [Done, Done, Done];
      frameBytes = a.bytes;
      streamed.service.push(a.eventsPerS);
      streamed.direct.push(b.eventsPerS);
      streamed.relay.push(c.eventsPerS);
      streamed.ratios.push(a.eventsPerS / b.eventsPerS);
      streamed.relayRatios.push(c.eventsPerS / b.eventsPerS);
      streamed.serviceCpuUs.push(a.cpuUs);
      streamed.relayCpuUs.push(c.cpuUs);
      log(
        `[${BENCH}] round ${round + 1}/${streamRounds}: service ${fmt(a.eventsPerS)} events/s · direct ${fmt(b.eventsPerS)} · bare relay ${fmt(c.eventsPerS)} · ratio ${fmt(a.eventsPerS / b.eventsPerS, 3)} (relay ${fmt(c.eventsPerS / b.eventsPerS, 3)}) · CPU an event: service ${fmt(a.cpuUs, 1)} µs, relay ${fmt(c.cpuUs, 1)} µs`,
      );
    }

    // 3. memory per idle socket through the service.
    log(`[${BENCH}] ${idleSockets} idle sockets through the service: its RSS before and after`);
    await agentCall(
      directBase,
      key,
      "POST",
      `/api/conversations/${idle.id}/events`,
      userMessage("hi", false),
    );
    const openIdle = async (n: number): Promise<WebSocket[]> => {
      const out: WebSocket[] = [];
      for (let i = 0; i < n; i += 20) {
        const batch = Array.from(
          { length: Math.min(20, n - i) },
          () => new WebSocket(socketUrl(throughService, idle.id, key, true), { perMessageDeflate: false }),
        );
        await Promise.all(batch.map(opened));
        out.push(...batch);
      }
      return out;
    };
    const closeAll = async (list: WebSocket[]): Promise<void> => {
      for (const ws of list) ws.close();
      await Promise.all(list.map(closed));
    };
    // Warm-up: the path's code compiled. Then the service is left idle until its RSS holds still: after a load V8's
    // memory reducer and the release after load (src/server/idle-memory.ts, sampled every 10 s) give memory back
    // within ~20 s, which would otherwise land between the two readings.
    await closeAll(await openIdle(20));
    await sleep(bench.quick ? 5_000 : 25_000);
    for (let i = 0, last = await idleRss(svc.pid, 2000); i < 8; i++) {
      const now = await idleRss(svc.pid, 2000);
      if (Math.abs(now - last) < 0.25) break;
      last = now;
    }
    const rssBefore = await idleRss(svc.pid, 2000);
    const heapBefore = await heapAndExternalMiB(serviceBase, userKey);
    sockets.push(...(await openIdle(idleSockets)));
    await sleep(3000);
    const rssAfter = await idleRss(svc.pid, 2000);
    const heapAfter = await heapAndExternalMiB(serviceBase, userKey);
    const perSocketKiB = ((rssAfter - rssBefore) * 1024) / idleSockets;
    const heapPerSocketKiB = ((heapAfter - heapBefore) * 1024) / idleSockets;
    log(
      `[${BENCH}] RSS ${fmt(rssBefore, 1)} → ${fmt(rssAfter, 1)} MiB (${fmt(perSocketKiB, 1)} KiB a socket); heap+external ${fmt(heapBefore, 1)} → ${fmt(heapAfter, 1)} MiB (${fmt(heapPerSocketKiB, 1)} KiB)`,
    );
    await closeAll(sockets.splice(0));

    const p = (values: number[], q: number) => percentile(values, q);
    const diff = (a: number, b: number) => `${a - b >= 0 ? "+" : "−"}${fmt(Math.abs(a - b), 2)} ms`;
    const latencyRow = (how: "post" | "socket" | "burst", what: string, target: boolean): Row => {
      const l = latency[how];
      const over = p(l.service, 50) - p(l.direct, 50);
      return {
        bench: BENCH,
        what,
        ours: `${latencyCell(l.service)} through the service`,
        baseline: `${latencyCell(l.direct)} direct (AGENT_SERVER_DIRECT); ${latencyCell(l.relay)} through a bare relay process`,
        ratio: `p50 ${diff(p(l.service, 50), p(l.direct, 50))} (bare relay ${diff(p(l.relay, 50), p(l.direct, 50))}), p99 ${diff(p(l.service, 99), p(l.direct, 99))}`,
        target: target ? "p50 ≤ direct + 2 ms" : "reported",
        pass: target ? over <= 2 : null,
        data: l,
      };
    };
    const ratio = median(streamed.ratios);
    rows.push(
      latencyRow(
        "post",
        `agent proxy: user message POSTed to /api/conversations/{id}/events → its first event on the open websocket, p50 / p99 (n=${samples} a side, sides rotated, ${PAUSE_MS} ms between turns; built-in agent, process runtime)`,
        true,
      ),
      latencyRow(
        "socket",
        `agent proxy: user message sent on the websocket → its first event back, p50 / p99 (n=${samples} a side)`,
        true,
      ),
      latencyRow(
        "burst",
        "agent proxy: the POST row's messages sent back to back (each the moment the turn before finished, as the agent's status webhooks reach the service), p50 / p99",
        false,
      ),
      {
        bench: BENCH,
        what: `agent proxy: events streamed through one websocket (resend_all of ${fmt(count)} stored events of ~${fmt(frameBytes / expected / 1024, 1)} KiB), ${streamRounds} rounds a side, rotated`,
        ours: `${fmt(median(streamed.service))} events/s through the service (${fmt(median(streamed.serviceCpuUs), 1)} µs of its CPU an event)`,
        baseline: `${fmt(median(streamed.direct))} events/s direct; ${fmt(median(streamed.relay))} events/s through a bare relay process (${fmt(median(streamed.relayRatios), 2)}× direct; ${fmt(median(streamed.relayCpuUs), 1)} µs CPU an event)`,
        ratio: `${fmt(ratio, 2)}×${losses.length > 0 ? ` (**${losses.length} socket(s) lost frames**: ${losses.join("; ")})` : ""}`,
        target: "≥ 0.8× direct, every frame",
        pass: ratio >= 0.8 && losses.length === 0,
        data: { ...streamed, losses },
      },
      {
        bench: BENCH,
        what: `agent proxy: server memory per idle open websocket through the service (${idleSockets} sockets, RSS of the server process before and after; heap + external beside it)`,
        ours: `${fmt(perSocketKiB, 1)} KiB a socket (RSS ${fmt(rssBefore, 1)} → ${fmt(rssAfter, 1)} MiB)`,
        baseline: `heap + external: ${fmt(heapPerSocketKiB, 1)} KiB a socket`,
        ratio: "—",
        target: "≤ 64 KiB a socket",
        pass: perSocketKiB <= 64,
        data: { rssBefore, rssAfter, heapBefore, heapAfter, idleSockets },
      },
    );
  } finally {
    for (const ws of sockets) ws.terminate();
    await bench.stop(relay);
    await bench.stop(svc);
    await llm.close();
  }
  return rows;
}

/**
 * Which frames a resend_all socket missed: the state snapshot (first) and the stored messages, whose text starts
 * with their index.
 */
function describeLoss(frames: readonly Buffer[], stored: number, expected: number): string {
  const seen = new Set<number>();
  let state = false;
  for (const f of frames) {
    const text = f.toString();
    if (text.includes('"key":"full_state"')) state = true;
    const m = /"text":"(\d+) x/.exec(text);
    if (m !== null) seen.add(Number(m[1]));
  }
  const missing: number[] = [];
  for (let i = 0; i < stored; i++) if (!seen.has(i)) missing.push(i);
  const ranges: string[] = [];
  for (let i = 0; i < missing.length; ) {
    let j = i;
    while (j + 1 < missing.length && (missing[j + 1] as number) === (missing[j] as number) + 1) j++;
    ranges.push(i === j ? `${missing[i]}` : `${missing[i]}-${missing[j]}`);
    i = j + 1;
  }
  return `${frames.length} of ${expected} frames${state ? "" : ", no full_state"}${missing.length > 0 ? `, stored messages missing: ${ranges.slice(0, 5).join(", ")}${ranges.length > 5 ? ", …" : ""}` : ""}`;
}
