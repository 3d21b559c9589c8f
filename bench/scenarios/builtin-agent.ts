/**
 * The built-in agent's conversation latencies and its idle memory, with a scripted fake model server that answers at
 * once (test/helpers/fake-llm.ts, in this process). The agent runs as a sandbox runs it: its own Node process
 * (`node agent/main.ts`), here without bubblewrap, talked to over loopback as the UI does (the events
 * websocket with the key in the query).
 *
 * - user message → first event: the time from sending a message on the websocket (as the UI's chat box does) to the
 *   first frame that comes back (the user's MessageEvent); the agent's answer (its MessageEvent, after one model
 *   call) is reported beside it.
 * - tool call → observation: the time from the fake model writing an answer with a terminal call (`echo`) to the
 *   ObservationEvent on the websocket (parsing the answer, the ActionEvent, running the command in the persistent
 *   shell).
 * - idle memory: PSS and RSS of a freshly started agent 2 s after it answered its health check (what a warm agent
 *   waiting in the pool costs; it loads no conversation code), the median of three agents; and of the agent that
 *   ran the conversations, idle afterwards (its loop, `ws` and `openai` loaded).
 * - memory after 200 turns: that agent's private memory once its 206 turns (the two latency runs) are over, 5 s
 *   idle (past its idle collection), against the idle warm agent's: a long conversation's working set stays bounded (≤ 2×; issue 37).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import WebSocket from "ws";
import { type FakeLlm, startFakeLlm } from "../../test/helpers/fake-llm.ts";
import { freePort, median, percentile, rssMiB } from "../lib/bench-util.ts";
import { type Bench, log, type Row } from "../lib/harness.ts";

const ROOT = resolve(import.meta.dirname, "..", "..");
const KEY = "bench-agent-key";
/**
 * Private memory of an idle agent before the conversation side existed (commit 0f54f31), measured on the benchmark
 * machine the same way: 32.0–32.8 MiB (PSS 35.4–36.5 MiB). The target is on private memory: PSS adds a share of the
 * Node binary's and libraries' pages that depends on how many other Node processes run on the machine (with the
 * machine quiet it read ~50 MiB for the same agent).
 */
const IDLE_PRIVATE_BEFORE_MIB = 32.8;

const fmt = (n: number, digits = 1): string => (Number.isFinite(n) ? n.toFixed(digits) : "—");
const cell = (values: number[]): string =>
  `${fmt(percentile(values, 50))} / ${fmt(percentile(values, 99))} ms`;

/**
 * Proportional set size of a process in MiB (its own pages plus its share of pages it shares, such as the Node
 * binary's code) and its private memory (pages only it has); NaN when it is gone.
 */
function memory(pid: number): { pss: number; private: number } {
  try {
    const text = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
    const kb = (field: string): number => Number(new RegExp(`^${field}:\\s+(\\d+) kB$`, "m").exec(text)?.[1]);
    return { pss: kb("Pss") / 1024, private: (kb("Private_Clean") + kb("Private_Dirty")) / 1024 };
  } catch {
    return { pss: Number.NaN, private: Number.NaN };
  }
}

interface Agent {
  child: ChildProcess;
  base: string;
  workspace: string;
  stop(): Promise<void>;
}

async function startAgent(): Promise<Agent> {
  const port = await freePort();
  const workspace = mkdtempSync(join(tmpdir(), "bench-agent-"));
  const child = spawn(process.execPath, [join(ROOT, "agent", "main.ts")], {
    cwd: workspace,
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      LANG: "C.UTF-8",
      HOME: workspace,
      PORT: String(port),
      SESSION_API_KEY: KEY,
      WORKSPACE_DIR: workspace,
    },
    stdio: ["ignore", "ignore", "inherit"],
  });
  const base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 15_000;
  for (;;) {
    try {
      if ((await fetch(`${base}/alive`)).ok) break;
    } catch {
      // not yet
    }
    if (Date.now() > deadline) throw new Error("the agent did not start");
    await new Promise((r) => setTimeout(r, 20));
  }
  return {
    child,
    base,
    workspace,
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once("exit", r));
        child.kill("SIGTERM");
        await exited;
      }
      rmSync(workspace, { recursive: true, force: true });
    },
  };
}

type Frame = { kind: string; key?: string; value?: unknown; source?: string; at: number };

/** The page's websocket: every frame with its arrival time. */
class Socket {
  readonly frames: Frame[] = [];
  readonly ws: WebSocket;
  #waiter: (() => void) | undefined;
  constructor(url: string) {
    this.ws = new WebSocket(url);
    this.ws.on("message", (d) => {
      const at = performance.now();
      this.frames.push({ ...(JSON.parse(d.toString()) as Omit<Frame, "at">), at });
      this.#waiter?.();
    });
  }
  opened(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.ws.once("open", () => resolve());
      this.ws.once("error", reject);
    });
  }
  async until(predicate: (frames: Frame[]) => boolean, timeoutMs = 10_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!predicate(this.frames)) {
      if (Date.now() > deadline) throw new Error("the agent did not answer in time");
      await new Promise<void>((r) => {
        this.#waiter = r;
        setTimeout(r, 50);
      });
    }
  }
}

async function idleFreshAgents(n: number): Promise<{ pss: number[]; private: number[]; rss: number[] }> {
  const pss: number[] = [];
  const own: number[] = [];
  const rss: number[] = [];
  for (let i = 0; i < n; i++) {
    const agent = await startAgent();
    try {
      await new Promise((r) => setTimeout(r, 2000));
      const m = memory(agent.child.pid as number);
      pss.push(m.pss);
      own.push(m.private);
      rss.push(rssMiB(agent.child.pid as number));
    } finally {
      await agent.stop();
    }
  }
  return { pss, private: own, rss };
}

/** Runs the scenario; `samples` conversations turns per latency (the first 3 are the warm-up). */
export async function builtinAgentBenchmarks(bench: Bench): Promise<Row[]> {
  const samples = bench.quick ? 20 : 100;
  const rows: Row[] = [];
  log("[builtin-agent] idle memory of 3 fresh agents");
  const fresh = await idleFreshAgents(3);
  const idlePss = median(fresh.pss);
  const idlePrivate = median(fresh.private);

  const llm: FakeLlm = await startFakeLlm();
  const agent = await startAgent();
  try {
    const started = await fetch(`${agent.base}/api/conversations`, {
      method: "POST",
      headers: { "x-session-api-key": KEY, "content-type": "application/json" },
      body: JSON.stringify({
        agent: { kind: "Agent", llm: { model: "openai/bench", base_url: llm.url, api_key: "sk-bench" } },
        workspace: { kind: "LocalWorkspace", working_dir: agent.workspace },
      }),
    });
    const id = ((await started.json()) as { id: string }).id;
    const socket = new Socket(
      `${agent.base.replace("http", "ws")}/sockets/events/${id}?resend_all=true&session_api_key=${KEY}`,
    );
    await socket.opened();
    const finished = (after: number) => (f: Frame[]) =>
      f.slice(after).some((e) => e.key === "execution_status" && e.value === "finished");
    const send = (text: string): void =>
      socket.ws.send(JSON.stringify({ role: "user", content: [{ type: "text", text }] }));

    log(`[builtin-agent] message → first event × ${samples}`);
    const firstEvent: number[] = [];
    const answer: number[] = [];
    for (let i = 0; i < samples + 3; i++) {
      llm.script({ content: "ok" });
      const mark = socket.frames.length;
      const t0 = performance.now();
      send(`message ${i}`);
      await socket.until(finished(mark));
      const frames = socket.frames.slice(mark);
      const first = frames[0];
      const reply = frames.find((e) => e.kind === "MessageEvent" && e.source === "agent");
      if (first === undefined || reply === undefined) throw new Error("no events for a message");
      if (i >= 3) {
        firstEvent.push(first.at - t0);
        answer.push(reply.at - t0);
      }
    }

    log(`[builtin-agent] tool call → observation × ${samples}`);
    const observation: number[] = [];
    for (let i = 0; i < samples + 3; i++) {
      llm.script(
        { toolCalls: [{ name: "terminal", arguments: { command: `echo sample-${i}` } }] },
        { content: "done" },
      );
      const answered = llm.answeredAt.length;
      const mark = socket.frames.length;
      send(`tool ${i}`);
      await socket.until(finished(mark));
      const obs = socket.frames.slice(mark).find((e) => e.kind === "ObservationEvent");
      const sentAt = llm.answeredAt[answered];
      if (obs === undefined || sentAt === undefined) throw new Error("no observation for a tool call");
      if (i >= 3) observation.push(obs.at - sentAt);
    }
    socket.ws.close();
    await new Promise((r) => setTimeout(r, 5000)); // past the agent's idle collection (IDLE_COLLECT_MS, 4 s)
    const used = memory(agent.child.pid as number);
    const usedPss = used.pss;
    const turns = 2 * samples + 6;
    const usedRss = rssMiB(agent.child.pid as number);

    rows.push(
      {
        bench: "builtin-agent",
        what: `built-in agent: user message on the websocket → first event back, p50 / p99 (n=${samples}; fake model answering at once)`,
        ours: cell(firstEvent),
        baseline: `agent's answer after one model call: ${cell(answer)}`,
        ratio: "—",
        target: "≤ 50 ms p50",
        pass: percentile(firstEvent, 50) <= 50,
        data: { firstEvent, answer },
      },
      {
        bench: "builtin-agent",
        what: `built-in agent: the model's answer with a terminal call → its ObservationEvent on the websocket, p50 / p99 (n=${samples})`,
        ours: cell(observation),
        baseline: "—",
        ratio: "—",
        target: "≤ 100 ms p50",
        pass: percentile(observation, 50) <= 100,
        data: observation,
      },
      {
        bench: "builtin-agent",
        what: "built-in agent: idle warm agent (no conversation yet), private memory (PSS; RSS), median of 3, 2 s after start",
        ours: `${fmt(idlePrivate)} MiB (${fmt(idlePss)}; ${fmt(median(fresh.rss))} MiB)`,
        baseline: `after ${turns} turns: ${fmt(usedPss)} MiB (${fmt(usedRss)} MiB), conversation code loaded`,
        ratio: "—",
        target: `≤ ${IDLE_PRIVATE_BEFORE_MIB} MiB private (the agent before its conversation side, measured here)`,
        pass: idlePrivate <= IDLE_PRIVATE_BEFORE_MIB,
        data: { fresh, used: { pss: usedPss, rss: usedRss } },
      },
      {
        bench: "builtin-agent",
        what: `built-in agent: private memory after ${turns} turns (half of them a terminal call), idle 5 s after, against the idle warm agent`,
        ours: `${fmt(used.private)} MiB (PSS ${fmt(usedPss)} MiB)`,
        baseline: `${fmt(idlePrivate)} MiB idle`,
        ratio: `${fmt(used.private / idlePrivate, 2)}×`,
        target: "≤ 2× idle",
        pass: used.private <= 2 * idlePrivate,
        data: { turns, private: used.private, pss: usedPss, idlePrivate },
      },
    );
  } finally {
    await agent.stop();
    await llm.close();
  }
  return rows;
}
