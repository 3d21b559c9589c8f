// The built-in agent killed (kill -9) in the middle of a conversation and started again by its runtime on the same
// workspace (the process runtime, and the Docker runtime where the test image is available), with a scripted model:
// the conversation's events come back on the websocket (resend_all), nothing secret is on disk in clear, and a new
// message gets a model answer with the whole history and the model key.
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { BUILTIN_AGENT_COMMAND } from "../../agent/shared/builtin-agent.ts";
import { createDockerRuntime } from "../../src/adapters/runtimes/docker/docker-runtime.ts";
import { createProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime.ts";
import type { RuntimeHandle, RuntimeSpec, SandboxRuntime } from "../../src/ports/sandbox-runtime.ts";
import { killAgent } from "../helpers/agent-processes.ts";
import { dockerFromEnv, findDocker } from "../helpers/docker-env.ts";
import { type FakeLlm, startFakeLlm } from "../helpers/fake-llm.ts";

type Ev = { kind: string; id: string; key?: string; value?: unknown; [k: string]: unknown };

let llm: FakeLlm;
beforeAll(async () => {
  llm = await startFakeLlm();
  // Isolated process sandboxes reach the host's loopback only at allowed ports (a server's SANDBOX_HOST_PORTS):
  // the scripted model is on it.
  processRuntime.reachHost(llm.url);
  warmRuntime.reachHost(llm.url);
});
afterAll(async () => {
  await llm?.close();
});

async function until<T>(f: () => T | Promise<T>, ok: (v: T) => boolean, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await f();
    if (ok(v)) return v;
    if (Date.now() > deadline) throw new Error(`timed out: ${JSON.stringify(v).slice(0, 800)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

interface Target {
  runtime: SandboxRuntime;
  spec: RuntimeSpec;
  /** kill -9 of the agent process. */
  kill(handle: RuntimeHandle): Promise<void>;
  /** Everything the agent saved, as text. */
  saved(handle: RuntimeHandle): string;
  /** Awaited before the start. */
  ready?(): Promise<void>;
  /** Checks on the handle after the start and after the restart. */
  check?(handle: RuntimeHandle): void;
}

const started: { runtime: SandboxRuntime; handle: RuntimeHandle }[] = [];

function restartScenario(name: string, target: () => Target) {
  it(name, async () => {
    const { runtime, spec, kill, saved, ready, check } = target();
    await ready?.();
    const key = randomBytes(16).toString("hex");
    const sandboxId = randomBytes(8).toString("hex");
    let handle = await runtime.start({ sandboxId, spec, sessionApiKey: key });
    check?.(handle);
    started.push({ runtime, handle });
    expect(await runtime.waitHealthy(handle, 60_000)).toBe(true);
    const call = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(new URL(path, handle.agentUrl), {
        method,
        headers: { "x-session-api-key": key, "content-type": "application/json" },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      return { status: res.status, json: (await res.json()) as Record<string, unknown> };
    };
    const open = (id: string) => {
      const events: Ev[] = [];
      const ws = new WebSocket(
        `${handle.agentUrl.replace(/^http/, "ws").replace(/\/$/, "")}/sockets/events/${id}?resend_all=true&session_api_key=${key}`,
      );
      ws.on("message", (d) => events.push(JSON.parse(d.toString()) as Ev));
      return { ws, events, opened: new Promise<void>((r, j) => ws.once("open", () => r()).once("error", j)) };
    };

    llm.script(
      {
        content: "Noting it.",
        toolCalls: [{ name: "terminal", arguments: { command: "echo 7 > seven.txt" } }],
      },
      { content: "Done: seven.txt holds 7." },
    );
    const start = await call("POST", "/api/conversations", {
      agent: { kind: "Agent", llm: { model: "openai/fake", base_url: llm.url, api_key: "sk-restart-key" } },
      secrets: { DEPLOY_TOKEN: { kind: "StaticSecret", value: "tok-restart-secret" } },
      initial_message: { role: "user", content: [{ type: "text", text: "Write 7 to seven.txt" }] },
    });
    expect(start.status).toBe(200);
    const id = String(start.json.id);
    const first = open(id);
    await first.opened;
    await until(
      () => first.events,
      (es) => es.some((e) => e.key === "execution_status" && e.value === "finished"),
    );
    first.ws.close();
    await call("PATCH", `/api/conversations/${id}`, { title: "Seven" });
    const before = first.events.slice(1).map((e) => e.id);

    const onDisk = saved(handle);
    expect(onDisk).toContain("Write 7 to seven.txt");
    expect(onDisk).not.toContain("sk-restart-key");
    expect(onDisk).not.toContain("tok-restart-secret");

    await kill(handle);
    await until(
      () => runtime.inspect(handle),
      (s) => s === "error",
    );
    handle = await (runtime.restart as NonNullable<SandboxRuntime["restart"]>).call(runtime, handle, {
      sandboxId,
      spec,
      sessionApiKey: key,
    });
    started.push({ runtime, handle });
    check?.(handle);
    expect(await runtime.waitHealthy(handle, 60_000)).toBe(true);
    await expect(
      (runtime.restart as NonNullable<SandboxRuntime["restart"]>).call(runtime, handle, {
        sandboxId,
        spec,
        sessionApiKey: key,
      }),
    ).rejects.toThrow(/still running/);

    const info = await call("GET", `/api/conversations/${id}`);
    expect(info.json).toMatchObject({ title: "Seven", execution_status: "finished" });
    const second = open(id);
    await second.opened;
    await until(
      () => second.events.length,
      (n) => n > before.length,
    );
    expect(second.events[0]).toMatchObject({ key: "full_state" });
    expect(second.events.slice(1).map((e) => e.id)).toEqual(before);

    llm.script({ content: "Still here." });
    const asked = llm.requests.length;
    second.ws.send(JSON.stringify({ role: "user", content: [{ type: "text", text: "Still there?" }] }));
    await until(
      () => second.events.slice(before.length + 1),
      (es) => es.some((e) => e.key === "execution_status" && e.value === "finished"),
    );
    second.ws.close();
    expect(llm.requests.length).toBe(asked + 1);
    const request = llm.requests.at(-1);
    expect(request?.authorization).toBe("Bearer sk-restart-key");
    const history = JSON.stringify(request?.body.messages);
    for (const part of [
      "Write 7 to seven.txt",
      "echo 7 > seven.txt",
      "Done: seven.txt holds 7.",
      "Still there?",
    ])
      expect(history).toContain(part);
    // The conversation's secrets are back too: its commands get them (masked in the output).
    expect(JSON.stringify(request?.body.messages)).toContain("DEPLOY_TOKEN");
  }, 120_000);
}

const processRoot = mkdtempSync(join(tmpdir(), "builtin-agent-restart-"));
const nodeModules = fileURLToPath(new URL("../../node_modules", import.meta.url));
const processRuntime = createProcessRuntime({
  workspaceRoot: processRoot,
  stopGraceMs: 1000,
  readOnlyPaths: [nodeModules],
});
const stateText = (dir: string): string =>
  execFileSync("sh", ["-c", `cat "${dir}"/*/*`], { encoding: "utf8" });

const warmRoot = mkdtempSync(join(tmpdir(), "builtin-agent-restart-warm-"));
const warmRuntime = createProcessRuntime({
  workspaceRoot: warmRoot,
  stopGraceMs: 1000,
  readOnlyPaths: [nodeModules],
  warmAgents: 1,
});
const processTarget = (runtime: SandboxRuntime): Target => ({
  runtime,
  spec: { id: "process-test", command: [BUILTIN_AGENT_COMMAND], initialEnv: {}, workingDir: "" },
  async kill(handle) {
    killAgent(String(handle.data.workspace));
  },
  saved: (handle) => stateText(join(String(handle.data.workspace), ".openhands", "conversations")),
});

describe("built-in agent started again on the same workspace", () => {
  restartScenario("process runtime: kill -9 of the agent, restart, the conversation goes on", () =>
    processTarget(processRuntime),
  );
  restartScenario("process runtime, from a warm agent: the same, in the warm agent's folder", () => ({
    ...processTarget(warmRuntime),
    ready: () =>
      until(
        () => warmRuntime.warmReady(),
        (n) => n > 0,
      ).then(() => undefined),
    check(handle) {
      // Claimed from the pool: its folder is the warm agent's, and the restart keeps it and the sandbox id.
      expect(String(handle.data.workspace)).toMatch(/\/ws-[^/]+$/);
      expect(handle.data.sandboxId).toMatch(/^[0-9a-f]{16}$/);
    },
  }));
});

const docker = dockerFromEnv();
const found = await findDocker(docker);
const dockerSkip = typeof found === "string" ? found : null;
if (dockerSkip) console.log(`built-in agent restart on Docker skipped: ${dockerSkip}`);
const dockerRuntime = createDockerRuntime({
  docker,
  network: "host",
  labels: { "workspace.test-run": randomBytes(4).toString("hex") },
  stopTimeoutSeconds: 2,
});

describe.skipIf(dockerSkip !== null)(`docker${dockerSkip ? ` (skipped: ${dockerSkip})` : ""}`, () => {
  restartScenario(
    "Docker runtime: kill -9 of the container's agent, restart, the conversation goes on",
    () => ({
      runtime: dockerRuntime,
      spec: {
        id: typeof found === "string" ? "unused" : found.image,
        command: [],
        initialEnv: {},
        workingDir: "/workspace/project",
      },
      async kill(handle) {
        await docker.getContainer(String(handle.data.containerId)).kill({ signal: "SIGKILL" });
      },
      saved(handle) {
        // Read inside the container (its file system keeps the state across a restart).
        const container = String(handle.data.containerId);
        return execFileSync(
          "docker",
          ["exec", container, "sh", "-c", "cat /workspace/.openhands/conversations/*/*"],
          {
            encoding: "utf8",
          },
        );
      },
    }),
  );
});

describe.skipIf(dockerSkip !== null)(
  `docker memory limit${dockerSkip ? ` (skipped: ${dockerSkip})` : ""}`,
  () => {
    it("a container killed by its memory limit is an error, and the runtime says why", async () => {
      const small = createDockerRuntime({
        docker,
        network: "host",
        labels: { "workspace.test-run": randomBytes(4).toString("hex") },
        stopTimeoutSeconds: 1,
        memoryBytes: 64 * 1024 * 1024,
      });
      const handle = await small.start({
        sandboxId: randomBytes(8).toString("hex"),
        spec: {
          id: typeof found === "string" ? "unused" : found.image,
          // The container's main process itself outgrows the limit.
          command: ["/usr/local/bin/node", "-e", "const a = []; for (;;) a.push(Buffer.alloc(1 << 20, 1));"],
          initialEnv: {},
          workingDir: "/workspace/project",
        },
        sessionApiKey: "k",
      });
      try {
        await until(
          () => small.inspect(handle),
          (s) => s === "error",
        );
        expect(small.failureReason?.(handle)).toMatch(/memory limit \(67108864 bytes\)/);
      } finally {
        await small.remove(handle);
        await small.close();
      }
    }, 60_000);
  },
);

afterAll(async () => {
  for (const { runtime, handle } of started) await runtime.remove(handle).catch(() => {});
  await processRuntime.close();
  await warmRuntime.close();
  rmSync(warmRoot, { recursive: true, force: true });
  if (!dockerSkip) await dockerRuntime.close();
  rmSync(processRoot, { recursive: true, force: true });
}, 60_000);
