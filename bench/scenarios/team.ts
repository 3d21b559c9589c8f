/**
 * A team on one server: N users (BENCH_TEAM_USERS, default 10), each with an API key of their own, signed in as the
 * web UI signs in (the session cookie) and holding a conversation with the built-in agent, all at once, through the
 * path the UI uses: the service's own origin (the agent proxy, src/transports/agent-proxy: the agent's REST routes with the sandbox's
 * key in X-Session-API-Key and the browser's cookie and Origin, and the events websocket with session_api_key in its
 * query). The service runs as `npm start` runs it (compiled, SQLite, the process runtime; no warm agents, so that
 * every agent process under it is a conversation's); the model is a scripted OpenAI-compatible server in its own
 * process (bench/servers/scripted-model.ts) that answers every message with a terminal call (`echo hi`) and, after
 * its observation, a final message, at once.
 *
 * Each user: their settings (the model), a V1 conversation started as the UI starts one (POST
 * /api/v1/app-conversations, the start task polled to READY, the conversation read back for its relative
 * conversation_url and session key), the events websocket opened through the service. For the baseline, a second
 * conversation in the same sandbox, reached at the agent's own URL (AGENT_SERVER_DIRECT: its address in the sandbox's
 * network, or on loopback) with the same key.
 *
 * - Rounds: every user sends a message, waits for its turn to finish (the agent's `execution_status` "finished":
 *   the user's MessageEvent, the terminal call, its observation, the answer), then sends the next, until the round's
 *   time is up; all users at the same time. Messages alternate between the chat box's send (a message on the
 *   websocket) and the REST send (POST /api/conversations/{id}/events with `run: true`). Rounds alternate between
 *   the conversations reached through the service and those reached directly (the baseline), ABAB. Two paces:
 *   paced, a user waiting ~BENCH_TEAM_PAUSE_MS (default 2 s; uniformly half to one and a half times it) after each
 *   turn, each user's first message of a round at a random point of one pause, a busy team whose agents answer
 *   at once (the latency target's load); and flat out, the next message the moment the turn finished (the most N
 *   users make: what the machine handles, its CPU saturated).
 * - Bursts: all users send a message in the same instant (a websocket send or a POST, alternately), the turns
 *   finish and the service drains before the next; 2 bursts a side per round, alternated.
 * - message → first event: from sending to the first frame the message brings on the user's open websocket.
 * - messages per second: turns finished in a round / the round's time (flat out: the messages handled).
 * - CPU per message: CPU time (from /proc) of the service's process, of every sandbox process of the active users
 *   and of the model, over a round and until the service has taken the round's webhooks (it is quiet again), per
 *   message. In the direct rounds the service still receives the agents' webhooks (events and conversation status):
 *   that is the service's cost of a message without the proxy.
 * - memory: the service's RSS (peak under the rounds, sampled every 100 ms) and each active agent's memory after
 *   the rounds (its Node process's private memory and PSS; PSS of all its sandbox's processes).
 * - idle: BENCH_TEAM_IDLE more users (default 50) each start a conversation and open its websocket through the
 *   service, and leave it idle. The service's RSS with their conversations started, before and after their sockets
 *   open (settled first: V8's memory reducer and src/server/idle-memory.ts give a load's memory back within ~20 s);
 *   the service's CPU a second while idle, with and without those sockets; each idle agent's memory; and the paced
 *   rounds again with the idle sockets open.
 */
import { readdirSync, readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import WebSocket from "ws";
import { createSqliteStorage } from "../../src/adapters/storage/sqlite/sqlite-storage.ts";
import { ApiKeyService } from "../../src/domain/keys/api-key-service.ts";
import { Browser } from "../../test/helpers/browser.ts";
import { cpuSeconds, median, percentile, rssMiB, type ServerChild } from "../lib/bench-util.ts";
import {
  type Bench,
  compiled,
  fmt,
  idleRss,
  latencyCell,
  log,
  type Row,
  type ServiceInfo,
  sleep,
} from "../lib/harness.ts";

const BENCH = "team";
const MODEL = "openai/team";
/** The message → first event target at 10 users (issue 37). */
const P99_TARGET_MS = 100;

/** A whole number from the environment, else the default. */
function envCount(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === "") return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a whole number, not ${raw}`);
  return n;
}

type Frame = {
  kind?: string | undefined;
  key?: string | undefined;
  value?: unknown;
  source?: string | undefined;
  at: number;
};

/** An events websocket that keeps every frame's kind and arrival time. */
class EventSocket {
  readonly frames: Frame[] = [];
  readonly ws: WebSocket;
  #waiters: (() => void)[] = [];
  constructor(url: string, headers: Record<string, string>) {
    this.ws = new WebSocket(url, { perMessageDeflate: false, headers });
    this.ws.on("message", (d) => {
      const at = performance.now();
      const e = JSON.parse(d.toString()) as Omit<Frame, "at">;
      this.frames.push({ kind: e.kind, key: e.key, value: e.value, source: e.source, at });
      for (const w of this.#waiters.splice(0)) w();
    });
  }
  opened(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.ws.once("open", () => resolve());
      this.ws.once("error", reject);
      this.ws.once("unexpected-response", (_req, res) =>
        reject(new Error(`websocket refused: ${res.statusCode}`)),
      );
    });
  }
  /** The first frame from index `from` on that satisfies `test`, waiting for it. */
  async next(from: number, test: (f: Frame) => boolean, timeoutMs = 30_000): Promise<Frame> {
    const deadline = Date.now() + timeoutMs;
    let i = from;
    for (;;) {
      for (; i < this.frames.length; i++) if (test(this.frames[i] as Frame)) return this.frames[i] as Frame;
      if (Date.now() > deadline) throw new Error("the agent did not answer in time");
      await new Promise<void>((r) => {
        this.#waiters.push(r);
        setTimeout(r, 100).unref();
      });
    }
  }
  close(): Promise<void> {
    if (this.ws.readyState === WebSocket.CLOSED) return Promise.resolve();
    return new Promise((r) => {
      this.ws.once("close", () => r());
      this.ws.close();
    });
  }
}

const finished = (f: Frame): boolean => f.key === "execution_status" && f.value === "finished";

/** One conversation as a side of the benchmark reaches it. */
interface Reached {
  id: string;
  /** Origin of the agent's routes on this side (the service's, or the agent's own). */
  base: string;
  /** Headers of its agent calls (the key; through the service also the browser's cookie and Origin). */
  headers: Record<string, string>;
  socket: EventSocket;
}

type SideName = "service" | "direct";

interface User {
  name: string;
  browser: Browser;
  sandboxId: string;
  /** Messages sent so far (alternating socket and POST). */
  sent: number;
  service: Reached;
  direct: Reached;
}

/** Signs in a new user with their own key, as the sign-in page does, and stores their model settings. */
async function signedIn(serviceBase: string, key: string, modelUrl: string): Promise<Browser> {
  const browser = new Browser(serviceBase);
  await browser.signIn(key);
  const saved = await browser.request("POST", "/api/settings", {
    llm_model: MODEL,
    llm_base_url: modelUrl,
    llm_api_key: "sk-team",
  });
  if (saved.status !== 200) throw new Error(`settings: ${saved.status} ${saved.text}`);
  return browser;
}

/**
 * The UI's start of a V1 conversation (in `sandboxId` when given): the start task polled to READY, then the
 * conversation read back. Its id, sandbox, relative conversation_url and session key.
 */
async function startConversation(
  b: Browser,
  sandboxId?: string,
): Promise<{ id: string; sandboxId: string; url: string; key: string }> {
  const res = await b.request(
    "POST",
    "/api/v1/app-conversations",
    sandboxId === undefined ? {} : { sandbox_id: sandboxId },
  );
  if (res.status !== 200) throw new Error(`conversation start: ${res.status} ${res.text}`);
  type Task = { id: string; status: string; detail?: string | null; app_conversation_id?: string | null };
  let task = res.body as Task;
  const deadline = Date.now() + 120_000;
  while (task.status !== "READY" && task.status !== "ERROR" && Date.now() < deadline) {
    await sleep(50);
    const got = await b.request("GET", `/api/v1/app-conversations/start-tasks?ids=${task.id}`);
    task = (got.body as (Task | null)[])[0] ?? task;
  }
  if (task.status !== "READY" || !task.app_conversation_id)
    throw new Error(`conversation start ended ${task.status}: ${task.detail}`);
  const [c] = (await b.request("GET", `/api/v1/app-conversations?ids=${task.app_conversation_id}`)).body as ({
    sandbox_id: string;
    conversation_url: string | null;
    session_api_key: string | null;
  } | null)[];
  const m = /\/api\/conversations\/([^/?]+)$/.exec(c?.conversation_url ?? "");
  if (c === null || c === undefined || m === null || !c.session_api_key)
    throw new Error(`unexpected conversation: ${JSON.stringify(c)}`);
  return {
    id: m[1] as string,
    sandboxId: c.sandbox_id,
    url: c.conversation_url ?? "",
    key: c.session_api_key,
  };
}

/**
 * The events websocket of a conversation as the UI opens it: on the origin of its (relative) conversation_url,
 * with resend_all and the key in the query, the page's Origin and cookie.
 */
async function openSocket(b: Browser, url: string, id: string, key: string): Promise<EventSocket> {
  const origin = new URL(url, b.base).origin.replace(/^http/, "ws");
  const cookie = b.cookieHeader();
  const s = new EventSocket(
    `${origin}/sockets/events/${id}?resend_all=true&session_api_key=${encodeURIComponent(key)}`,
    { origin: b.origin, ...(cookie === undefined ? {} : { cookie }) },
  );
  await s.opened();
  return s;
}

/** The UI's page for one user: signed in, a conversation through the service, and the baseline's direct one. */
async function setUpUser(serviceBase: string, name: string, key: string, modelUrl: string): Promise<User> {
  const browser = await signedIn(serviceBase, key, modelUrl);
  const first = await startConversation(browser);
  const socket = await openSocket(browser, first.url, first.id, first.key);
  const [sandbox] = (await browser.request("GET", `/api/v1/sandboxes?id=${first.sandboxId}`)).body as {
    exposed_urls: { name: string; url: string }[] | null;
  }[];
  const direct = sandbox?.exposed_urls?.find((u) => u.name === "AGENT_SERVER_DIRECT")?.url;
  if (direct === undefined) throw new Error(`no AGENT_SERVER_DIRECT: ${JSON.stringify(sandbox)}`);
  const directBase = direct.replace(/\/+$/, "");
  const second = await startConversation(browser, first.sandboxId);
  const directSocket = new EventSocket(
    `${directBase.replace(/^http/, "ws")}/sockets/events/${second.id}?resend_all=true&session_api_key=${encodeURIComponent(second.key)}`,
    {},
  );
  await directSocket.opened();
  const cookie = browser.cookieHeader() ?? "";
  return {
    name,
    browser,
    sandboxId: first.sandboxId,
    sent: 0,
    service: {
      id: first.id,
      base: new URL(first.url, serviceBase).origin,
      headers: { "x-session-api-key": first.key, cookie, origin: browser.origin },
      socket,
    },
    direct: {
      id: second.id,
      base: directBase,
      headers: { "x-session-api-key": second.key },
      socket: directSocket,
    },
  };
}

/**
 * One turn: the message sent (on the websocket, or POSTed), timed to the first frame it brings; then waits for the
 * turn's end.
 */
async function turn(c: Reached, how: "socket" | "post", text: string): Promise<number> {
  const mark = c.socket.frames.length;
  const t0 = performance.now();
  let answered: Promise<unknown> = Promise.resolve();
  if (how === "socket") c.socket.ws.send(JSON.stringify({ role: "user", content: [{ type: "text", text }] }));
  else
    answered = fetch(`${c.base}/api/conversations/${c.id}/events`, {
      method: "POST",
      headers: { ...c.headers, "content-type": "application/json" },
      body: JSON.stringify({ role: "user", content: [{ type: "text", text }], run: true }),
    }).then(async (res) => {
      const body = await res.text();
      if (res.status !== 200) throw new Error(`POST events: ${res.status} ${body}`);
    });
  const first = await c.socket.next(mark, () => true);
  await answered;
  await c.socket.next(mark, finished);
  return first.at - t0;
}

/** /proc of every process: its parent, and its command line. */
function processTable(): Map<number, { ppid: number; argv: string[] }> {
  const out = new Map<number, { ppid: number; argv: string[] }>();
  for (const name of readdirSync("/proc")) {
    const pid = Number(name);
    if (!Number.isInteger(pid)) continue;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean);
      out.set(pid, { ppid, argv });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** A sandbox's processes: every descendant of one child of the service, and its agent's Node process. */
interface SandboxProcesses {
  pids: number[];
  agent: number | null;
  /** The command lines, joined (to find a sandbox by its workspace folder). */
  text: string;
}

/** The process sandboxes under the service (each child of its process is one sandbox's launcher). */
function sandboxesUnder(servicePid: number): SandboxProcesses[] {
  const table = processTable();
  const children = new Map<number, number[]>();
  for (const [pid, p] of table) children.set(p.ppid, [...(children.get(p.ppid) ?? []), pid]);
  const out: SandboxProcesses[] = [];
  for (const top of children.get(servicePid) ?? []) {
    const pids: number[] = [];
    const stack = [top];
    while (stack.length > 0) {
      const pid = stack.pop() as number;
      pids.push(pid);
      stack.push(...(children.get(pid) ?? []));
    }
    const agent =
      pids.find((pid) => {
        const argv = table.get(pid)?.argv ?? [];
        return /(^|\/)node$/.test(argv[0] ?? "") && argv.some((a) => a.includes("agent/main"));
      }) ?? null;
    out.push({ pids, agent, text: pids.map((p) => table.get(p)?.argv.join(" ") ?? "").join("\n") });
  }
  return out;
}

/** The sandboxes of these ids (found by their workspace folder on their launcher's command line). */
function sandboxesOf(servicePid: number, ids: readonly string[]): SandboxProcesses[] {
  const all = sandboxesUnder(servicePid);
  return ids.map((id) => {
    const s = all.find((p) => p.text.includes(`/${id}`));
    if (s === undefined) throw new Error(`no processes of sandbox ${id} under the service`);
    return s;
  });
}

/** CPU seconds of processes and of their children they have waited for (utime, stime, cutime, cstime). */
function treeCpuSeconds(pids: readonly number[]): number {
  let total = 0;
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      total += (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) / 100;
    } catch {
      // gone: its time is in its parent's cutime once waited for
    }
  }
  return total;
}

/** Private memory, PSS and RSS of a process in MiB (smaps_rollup); NaN when it is gone. */
function memoryOf(pid: number): { private: number; pss: number; rss: number } {
  try {
    const text = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
    const kb = (field: string): number => Number(new RegExp(`^${field}:\\s+(\\d+) kB$`, "m").exec(text)?.[1]);
    return {
      private: (kb("Private_Clean") + kb("Private_Dirty")) / 1024,
      pss: kb("Pss") / 1024,
      rss: kb("Rss") / 1024,
    };
  } catch {
    return { private: Number.NaN, pss: Number.NaN, rss: Number.NaN };
  }
}

/** Median memory of the sandboxes' agents, and the median PSS of each sandbox's processes together. */
function agentMemory(sandboxes: readonly SandboxProcesses[]): {
  private: number;
  pss: number;
  rss: number;
  sandboxPss: number;
} {
  const agents = sandboxes.map((s) => (s.agent === null ? memoryOf(-1) : memoryOf(s.agent)));
  return {
    private: median(agents.map((m) => m.private)),
    pss: median(agents.map((m) => m.pss)),
    rss: median(agents.map((m) => m.rss)),
    sandboxPss: median(sandboxes.map((s) => s.pids.reduce((n, pid) => n + (memoryOf(pid).pss || 0), 0))),
  };
}

/** Heap used + external memory of the service (its /metrics), in MiB. */
async function heapAndExternalMiB(b: Browser): Promise<number> {
  const text = (await b.request("GET", "/metrics")).text;
  const read = (name: string): number => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1]);
  return (read("nodejs_heap_size_used_bytes") + read("nodejs_external_memory_bytes")) / 1024 / 1024;
}

/** Waits until the service's RSS holds still (within 0.25 MiB over 2 s), after `firstMs`; its RSS then. */
async function settledRss(pid: number, firstMs: number): Promise<number> {
  await sleep(firstMs);
  let last = await idleRss(pid, 2000);
  for (let i = 0; i < 8; i++) {
    const now = await idleRss(pid, 2000);
    if (Math.abs(now - last) < 0.25) return now;
    last = now;
  }
  return last;
}

/** What one round measured on one side. */
interface Round {
  side: SideName;
  messages: number;
  perSecond: number;
  latency: number[];
  socket: number[];
  post: number[];
  /** CPU a message, in µs: the service's process, the active users' sandboxes, the model. */
  serviceCpuUs: number;
  agentsCpuUs: number;
  modelCpuUs: number;
  /** The machine's load average (1 min) at the round's end. */
  load: number;
  /** How long the service was busy after the round's last turn (see drained). */
  drainMs: number;
}

type Sides = Record<SideName, Round[]>;

export async function teamBenchmarks(bench: Bench): Promise<Row[]> {
  const users = envCount("BENCH_TEAM_USERS", bench.quick ? 3 : 10);
  const idleCount = envCount("BENCH_TEAM_IDLE", bench.quick ? 5 : 50);
  const pauseMs = envCount("BENCH_TEAM_PAUSE_MS", 2000);
  if (users < 1) throw new Error("BENCH_TEAM_USERS must be at least 1");
  const rows: Row[] = [];
  const model = await bench.start<{ port: number; pid: number }>({
    name: "scripted-model",
    command: process.execPath,
    args: [compiled("scripted-model")],
    logPath: join(bench.work, "scripted-model.log"),
  });
  const modelUrl = `http://127.0.0.1:${model.info.port}/v1`;
  let svc: ServerChild<ServiceInfo> | null = null;
  const sockets: EventSocket[] = [];
  try {
    // The model is on the host's loopback: sandboxes with networks of their own reach only the ports allowed.
    svc = await bench.startService("service-team", [
      "--warm-agents",
      "0",
      "--sandbox-host-ports",
      String(model.info.port),
    ]);
    const service = svc;
    const serviceBase = `http://127.0.0.1:${service.info.port}`;

    // Each user's key, as `npm run cli -- keys create --user NAME` makes it (the same service, on the store).
    const storage = createSqliteStorage({ path: join(service.info.dir, "workspace.sqlite") });
    const keys = new ApiKeyService(storage.apiKeys);
    const issue = async (prefix: string, n: number) =>
      Promise.all(
        Array.from({ length: n }, async (_, i) => {
          const name = `${prefix}-${i + 1}`;
          return { name, key: (await keys.issue(name, "team benchmark")).key };
        }),
      );
    const activeKeys = await issue("team", users);
    const idleKeys = await issue("idle", idleCount);
    await storage.close();

    log(`[${BENCH}] ${users} users: sign-in, settings, a conversation each (and its direct baseline twin)`);
    const team: User[] = [];
    for (const { name, key } of activeKeys) team.push(await setUpUser(serviceBase, name, key, modelUrl));
    for (const u of team) sockets.push(u.service.socket, u.direct.socket);
    const activeSandboxes = sandboxesOf(
      service.pid,
      team.map((u) => u.sandboxId),
    );
    const activePids = () => activeSandboxes.flatMap((s) => s.pids);

    /**
     * Waits until the service is quiet (at most 5% of a core over 500 ms; 30 s at most): the agents' webhooks of a
     * round are in. A turn ends before its webhooks reach the service, and flat out the direct rounds' turns outpace
     * the service's ingest of them: the next round must not pay for them, and the round's CPU must hold them.
     * Returns how long it waited.
     */
    const drained = async (): Promise<number> => {
      const t0 = performance.now();
      for (let last = cpuSeconds(service.pid); performance.now() - t0 < 30_000; ) {
        await sleep(500);
        const now = cpuSeconds(service.pid);
        if (now - last <= 0.025) break;
        last = now;
      }
      return performance.now() - t0;
    };

    /**
     * One round: every user's turns on `side`, all at once, for `seconds`; after each turn a user waits `pauseMs`
     * on average (uniformly 0.5-1.5 times it), or sends the next message at once when it is 0. Paced, each user
     * first waits a random part of one pause, as independent people are spread over their own cycles: were they
     * all to send their first message in the same millisecond, a quarter of a round's messages would be that
     * burst (the burst row measures it on its own).
     */
    const round = async (side: SideName, seconds: number, pauseMs: number): Promise<Round> => {
      const service0 = cpuSeconds(service.pid);
      const agents0 = treeCpuSeconds(activePids());
      const model0 = cpuSeconds(model.pid);
      const t0 = performance.now();
      const deadline = t0 + seconds * 1000;
      const out = { socket: [] as number[], post: [] as number[], latency: [] as number[] };
      await Promise.all(
        team.map(async (u) => {
          if (pauseMs > 0) await sleep(pauseMs * Math.random());
          while (performance.now() < deadline) {
            const how = u.sent % 2 === 0 ? "socket" : "post";
            u.sent++;
            const ms = await turn(u[side], how, `${u.name}: message ${u.sent} (${how})`);
            out[how].push(ms);
            out.latency.push(ms);
            if (pauseMs > 0) await sleep(pauseMs * (0.5 + Math.random()));
          }
        }),
      );
      const elapsedS = (performance.now() - t0) / 1000;
      const drainMs = await drained();
      const n = out.latency.length;
      const perMessage = (seconds: number) => (seconds * 1e6) / Math.max(1, n);
      return {
        side,
        messages: n,
        perSecond: n / elapsedS,
        drainMs,
        ...out,
        serviceCpuUs: perMessage(cpuSeconds(service.pid) - service0),
        agentsCpuUs: perMessage(treeCpuSeconds(activePids()) - agents0),
        modelCpuUs: perMessage(cpuSeconds(model.pid) - model0),
        load: loadavg()[0] ?? Number.NaN,
      };
    };

    /** Warm-up, then the run's rounds, the sides alternating (the order swapped every round). */
    const alternate = async (label: string, seconds: number, pauseMs: number): Promise<Sides> => {
      log(`[${BENCH}] ${label}: warm-up (${bench.warmupS} s a side)`);
      await round("service", bench.warmupS, pauseMs);
      await round("direct", bench.warmupS, pauseMs);
      const out: Sides = { service: [], direct: [] };
      for (let r = 0; r < bench.rounds; r++) {
        const order: SideName[] = r % 2 === 0 ? ["service", "direct"] : ["direct", "service"];
        for (const side of order) out[side].push(await round(side, seconds, pauseMs));
        const [a, b] = [out.service.at(-1) as Round, out.direct.at(-1) as Round];
        log(
          `[${BENCH}] ${label} round ${r + 1}/${bench.rounds} (load average ${fmt(a.load, 1)}): through the service ${fmt(a.perSecond, 1)} messages/s, first event ${latencyCell(a.latency)}, CPU a message: service ${fmt(a.serviceCpuUs)} µs, sandboxes ${fmt(a.agentsCpuUs)} µs, drained in ${fmt(a.drainMs)} ms · direct ${fmt(b.perSecond, 1)} messages/s, ${latencyCell(b.latency)}, service ${fmt(b.serviceCpuUs)} µs, sandboxes ${fmt(b.agentsCpuUs)} µs, drained in ${fmt(b.drainMs)} ms`,
        );
      }
      return out;
    };

    /**
     * Bursts: every user sends a message in the same instant on `side` (a websocket send, then a POST, the next
     * time), the turns finish and the service drains before the next; the first events' latencies.
     */
    const bursts = async (side: SideName, count: number): Promise<number[]> => {
      const out: number[] = [];
      for (let b = 0; b < count; b++) {
        const how = b % 2 === 0 ? "socket" : "post";
        const sent = team.map((u) => {
          u.sent++;
          return turn(u[side], how, `${u.name}: message ${u.sent} (${how}, a burst)`);
        });
        out.push(...(await Promise.all(sent)));
        await drained();
      }
      return out;
    };

    const rssPeak = { value: rssMiB(service.pid) };
    const sampler = setInterval(() => {
      rssPeak.value = Math.max(rssPeak.value, rssMiB(service.pid));
    }, 100);
    // Paced rounds last twice as long: a user sends a message about every pauseMs, so a round holds fewer.
    const pacedS = 2 * bench.roundS;
    let paced: Sides;
    let flatOut: Sides;
    const burst: Record<SideName, number[]> = { service: [], direct: [] };
    try {
      paced = await alternate(`${users} users, ~${pauseMs} ms between turns`, pacedS, pauseMs);
      flatOut = await alternate(`${users} users, no pause`, bench.roundS, 0);
      for (let r = 0; r < bench.rounds; r++) {
        const order: SideName[] = r % 2 === 0 ? ["service", "direct"] : ["direct", "service"];
        for (const side of order) burst[side].push(...(await bursts(side, 2)));
      }
      log(
        `[${BENCH}] ${users} users in the same instant, ${2 * bench.rounds} bursts a side: through the service ${latencyCell(burst.service)}, direct ${latencyCell(burst.direct)}`,
      );
    } finally {
      clearInterval(sampler);
    }
    await sleep(2000);
    const rssAfterRounds = rssMiB(service.pid);
    const activeMemory = agentMemory(activeSandboxes);
    log(
      `[${BENCH}] service RSS peak ${fmt(rssPeak.value, 1)} MiB, ${fmt(rssAfterRounds, 1)} MiB 2 s after; an agent: private ${fmt(activeMemory.private, 1)} MiB, PSS ${fmt(activeMemory.pss, 1)} MiB (its sandbox's processes ${fmt(activeMemory.sandboxPss, 1)} MiB)`,
    );

    // Idle conversations: started, then their sockets opened through the service.
    let idle: {
      rssBeforeStarts: number;
      rssStarted: number;
      rssSockets: number;
      heapStarted: number;
      heapSockets: number;
      cpuWithout: number;
      cpuWith: number;
      memory: ReturnType<typeof agentMemory>;
      rounds: Sides;
    } | null = null;
    if (idleCount > 0) {
      const settleMs = bench.quick ? 3_000 : 25_000;
      const rssBeforeStarts = await settledRss(service.pid, settleMs);
      log(`[${BENCH}] ${idleCount} idle users: sign-in, settings, a conversation each`);
      const idleUsers: { browser: Browser; c: Awaited<ReturnType<typeof startConversation>> }[] = [];
      for (let i = 0; i < idleKeys.length; i += 5)
        idleUsers.push(
          ...(await Promise.all(
            idleKeys.slice(i, i + 5).map(async ({ key }) => {
              const browser = await signedIn(serviceBase, key, modelUrl);
              return { browser, c: await startConversation(browser) };
            }),
          )),
        );
      const admin = team[0]?.browser as Browser;
      const rssStarted = await settledRss(service.pid, settleMs);
      const heapStarted = await heapAndExternalMiB(admin);
      /** The service's CPU while idle, ms a second: the median of four 5 s windows (a collection lands in one). */
      const cpuIdle = async (): Promise<number> => {
        const windows: number[] = [];
        for (let i = 0; i < 4; i++) {
          const c0 = cpuSeconds(service.pid);
          await sleep(5_000);
          windows.push(((cpuSeconds(service.pid) - c0) * 1000) / 5);
        }
        return median(windows);
      };
      const cpuWithout = await cpuIdle();
      log(`[${BENCH}] opening ${idleCount} idle websockets through the service`);
      for (const u of idleUsers) {
        const s = await openSocket(u.browser, u.c.url, u.c.id, u.c.key);
        sockets.push(s);
        await s.next(0, () => true);
      }
      await sleep(3000);
      const rssSockets = await idleRss(service.pid, 2000);
      const heapSockets = await heapAndExternalMiB(admin);
      // The idle CPU once the collections after the opening are over, as before the opening.
      await settledRss(service.pid, settleMs);
      const cpuWith = await cpuIdle();
      const memory = agentMemory(
        sandboxesOf(
          service.pid,
          idleUsers.map((u) => u.c.sandboxId),
        ),
      );
      log(
        `[${BENCH}] service RSS ${fmt(rssBeforeStarts, 1)} → ${fmt(rssStarted, 1)} MiB with ${idleCount} idle conversations → ${fmt(rssSockets, 1)} MiB with their sockets; idle CPU ${fmt(cpuWithout, 1)} → ${fmt(cpuWith, 1)} ms a second; an idle agent: private ${fmt(memory.private, 1)} MiB, PSS ${fmt(memory.pss, 1)} MiB`,
      );
      const rounds = await alternate(
        `${users} users, ~${pauseMs} ms between turns, ${idleCount} idle sockets open`,
        pacedS,
        pauseMs,
      );
      idle = {
        rssBeforeStarts,
        rssStarted,
        rssSockets,
        heapStarted,
        heapSockets,
        cpuWithout,
        cpuWith,
        memory,
        rounds,
      };
    }

    const all = (rounds: Round[], pick: (r: Round) => number[]) => rounds.flatMap(pick);
    const p = (values: number[], q: number) => percentile(values, q);
    const diff = (a: number, b: number) => `${a - b >= 0 ? "+" : "−"}${fmt(Math.abs(a - b), 1)} ms`;
    const med = (rounds: Round[], pick: (r: Round) => number) => median(rounds.map(pick));
    const rate = (rounds: Round[]) =>
      `${fmt(
        med(rounds, (r) => r.perSecond),
        1,
      )} messages/s`;
    const loads = (sides: Sides) => {
      const l = [...sides.service, ...sides.direct].map((r) => r.load);
      return `load average ${fmt(Math.min(...l), 1)}-${fmt(Math.max(...l), 1)}`;
    };
    const latencyRow = (rounds: Sides, what: string, target: boolean): Row => {
      const s = all(rounds.service, (r) => r.latency);
      const d = all(rounds.direct, (r) => r.latency);
      const pass = target && users === 10 ? p(s, 99) <= P99_TARGET_MS : null;
      return {
        bench: BENCH,
        what: `${what} (n=${fmt(s.length)} a side; ${loads(rounds)})`,
        ours: `${latencyCell(s)} through the service (websocket sends ${latencyCell(all(rounds.service, (r) => r.socket))}; POSTs ${latencyCell(all(rounds.service, (r) => r.post))}); ${rate(rounds.service)}`,
        baseline: `${latencyCell(d)} direct (websocket ${latencyCell(all(rounds.direct, (r) => r.socket))}; POSTs ${latencyCell(all(rounds.direct, (r) => r.post))}); ${rate(rounds.direct)}`,
        ratio: `p50 ${diff(p(s, 50), p(d, 50))}, p99 ${diff(p(s, 99), p(d, 99))}`,
        target: target ? `p99 ≤ ${P99_TARGET_MS} ms at 10 users` : "reported",
        pass,
        data: rounds,
      };
    };
    const ratios = (rounds: Sides) =>
      rounds.service.map((r, i) => r.perSecond / (rounds.direct[i] as Round).perSecond);
    const cpuCell = (rounds: Round[]) =>
      `service ${fmt(med(rounds, (r) => r.serviceCpuUs))} µs (sandboxes ${fmt(med(rounds, (r) => r.agentsCpuUs))} µs, model ${fmt(med(rounds, (r) => r.modelCpuUs))} µs)`;
    const flatLatency = all(flatOut.service, (r) => r.latency);
    const flatDirect = all(flatOut.direct, (r) => r.latency);
    rows.push(
      latencyRow(
        paced,
        `team: ${users} users at once, each sending a message ~${fmt(pauseMs / 1000, 1)} s after the agent finished the last (a terminal call and an answer; built-in agent, process runtime): message → its first event on the user's websocket, p50 / p99`,
        true,
      ),
      {
        bench: BENCH,
        what: `team: messages handled per second, ${users} users at once, each sending the next message the moment the agent finished the last (${bench.rounds} rounds of ${bench.roundS} s a side, alternated; ${loads(flatOut)}); message → first event beside it`,
        ours: `${rate(flatOut.service)} through the service (first event ${latencyCell(flatLatency)})`,
        baseline: `${rate(flatOut.direct)} direct (${latencyCell(flatDirect)}; the service took ${fmt(med(flatOut.direct, (r) => r.drainMs) / 1000, 1)} s more to take their webhooks, ${fmt(med(flatOut.service, (r) => r.drainMs) / 1000, 1)} s through it)`,
        ratio: `${fmt(median(ratios(flatOut)), 2)}×`,
        target: "reported",
        pass: null,
        data: { rounds: flatOut, ratios: ratios(flatOut) },
      },
      {
        bench: BENCH,
        what: `team: ${users} users sending a message in the same instant (${2 * bench.rounds} bursts a side, websocket sends and POSTs alternately, each after the last finished): message → first event, p50 / max`,
        ours: `${fmt(p(burst.service, 50), 1)} / ${fmt(Math.max(...burst.service), 1)} ms through the service`,
        baseline: `${fmt(p(burst.direct, 50), 1)} / ${fmt(Math.max(...burst.direct), 1)} ms direct`,
        ratio: `p50 ${diff(p(burst.service, 50), p(burst.direct, 50))}, max ${diff(Math.max(...burst.service), Math.max(...burst.direct))}`,
        target: "reported",
        pass: null,
        data: burst,
      },
      {
        bench: BENCH,
        what: `team: CPU a message (from /proc) of the service's process, paced and flat out; beside it the users' sandboxes and the model`,
        ours: `paced: ${cpuCell(paced.service)}; flat out: ${cpuCell(flatOut.service)}`,
        baseline: `direct (the service gets the agents' webhooks only): paced ${cpuCell(paced.direct)}; flat out ${cpuCell(flatOut.direct)}`,
        ratio: `paced ${fmt(med(paced.service, (r) => r.serviceCpuUs) / med(paced.direct, (r) => r.serviceCpuUs), 2)}×, flat out ${fmt(med(flatOut.service, (r) => r.serviceCpuUs) / med(flatOut.direct, (r) => r.serviceCpuUs), 2)}×`,
        target: "reported",
        pass: null,
      },
      {
        bench: BENCH,
        what: `team: memory with ${users} users at once: the service's RSS (peak under the rounds; 2 s after), an agent after its turns (median)`,
        ours: `service ${fmt(rssPeak.value, 1)} MiB peak (${fmt(rssAfterRounds, 1)} MiB after)`,
        baseline: `an agent: ${fmt(activeMemory.private, 1)} MiB private, ${fmt(activeMemory.pss, 1)} MiB PSS, ${fmt(activeMemory.rss, 1)} MiB RSS (its sandbox's processes: ${fmt(activeMemory.sandboxPss, 1)} MiB PSS)`,
        ratio: "—",
        target: "reported",
        pass: null,
        data: { rssPeak: rssPeak.value, rssAfterRounds, activeMemory },
      },
    );
    if (idle !== null) {
      const perSocketKiB = ((idle.rssSockets - idle.rssStarted) * 1024) / idleCount;
      const heapPerSocketKiB = ((idle.heapSockets - idle.heapStarted) * 1024) / idleCount;
      const perConversationKiB = ((idle.rssStarted - idle.rssBeforeStarts) * 1024) / idleCount;
      rows.push(
        {
          bench: BENCH,
          what: `team: ${idleCount} idle conversations, each with its websocket open through the service: the service's RSS a socket (heap + external), RSS a conversation before its socket, its CPU while idle; an idle agent's memory`,
          ours: `${fmt(perSocketKiB, 1)} KiB a socket (${fmt(heapPerSocketKiB, 1)} KiB); ${fmt(perConversationKiB, 1)} KiB a conversation; idle CPU ${fmt(idle.cpuWith, 1)} ms a second (${fmt(idle.cpuWithout, 1)} without the sockets)`,
          baseline: `an idle agent: ${fmt(idle.memory.private, 1)} MiB private, ${fmt(idle.memory.pss, 1)} MiB PSS, ${fmt(idle.memory.rss, 1)} MiB RSS (its sandbox's processes: ${fmt(idle.memory.sandboxPss, 1)} MiB PSS)`,
          ratio: "—",
          target: "reported",
          pass: null,
          data: { ...idle, rounds: undefined },
        },
        latencyRow(
          idle.rounds,
          `team: the paced row's ${users} users with the ${idleCount} idle sockets open, message → first event, p50 / p99`,
          false,
        ),
      );
    }
  } finally {
    await Promise.all(sockets.map((s) => s.close().catch(() => {})));
    await bench.stop(svc as ServerChild<unknown> | null);
    await bench.stop(model as ServerChild<unknown>);
  }
  return rows;
}
