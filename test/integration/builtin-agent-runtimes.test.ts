// The built-in agent holding a conversation inside real sandboxes (the process runtime, and the Docker runtime
// where the test image is available), with a scripted OpenAI-compatible model: events on the websocket and on the
// webhook (the service's event store), the file the agent wrote, confirmation, a model failure, a reconnect.
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { BUILTIN_AGENT_COMMAND } from "../../agent/shared/builtin-agent.ts";
import { createDockerRuntime } from "../../src/adapters/runtimes/docker/docker-runtime.ts";
import { createProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime.ts";
import type { RuntimeHandle, RuntimeSpec, SandboxRuntime } from "../../src/ports/sandbox-runtime.ts";
import { dockerFromEnv, findDocker } from "../helpers/docker-env.ts";
import { type FakeLlm, startFakeLlm } from "../helpers/fake-llm.ts";

type Ev = { kind: string; id: string; key?: string; value?: unknown; [k: string]: unknown };

let llm: FakeLlm;
let hook: Server;
let hookBase = "";
const hooked: { path: string; body: unknown }[] = [];

beforeAll(async () => {
  llm = await startFakeLlm();
  hook = createServer((req, res) => {
    let text = "";
    req.on("data", (c: Buffer) => {
      text += c.toString();
    });
    req.on("end", () => {
      hooked.push({ path: req.url ?? "", body: JSON.parse(text) });
      res.writeHead(200, { "content-type": "application/json" }).end('{"success":true}');
    });
  });
  await new Promise<void>((r) => hook.listen(0, "127.0.0.1", r));
  const address = hook.address();
  if (typeof address !== "object" || address === null) throw new Error("no address");
  hookBase = `http://127.0.0.1:${address.port}`;
  // Isolated process sandboxes reach the host's loopback only where allowed, as a server allows its webhook URL
  // (and SANDBOX_HOST_PORTS a model's): the model and the webhook receiver here are both on loopback.
  processRuntime.reachHost(hookBase);
  processRuntime.reachHost(llm.url);
});

afterAll(async () => {
  await llm?.close();
  hook?.closeAllConnections();
  await new Promise((r) => hook?.close(r));
});

async function until<T>(f: () => T | Promise<T>, ok: (v: T) => boolean, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await f();
    if (ok(v)) return v;
    if (Date.now() > deadline) throw new Error(`timed out: ${JSON.stringify(v).slice(0, 800)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const statusSeq = (events: Ev[]): string[] =>
  events.filter((e) => e.key === "execution_status").map((e) => String(e.value));

/** The conversation scenario, on a started sandbox running the built-in agent. */
function conversationScenario(name: string, setup: () => Promise<{ handle: RuntimeHandle; key: string }>) {
  describe(name, () => {
    let handle: RuntimeHandle;
    let key: string;
    const call = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(new URL(path, handle.agentUrl), {
        method,
        headers: { "x-session-api-key": key, "content-type": "application/json" },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      const text = await res.text();
      return { status: res.status, json: text ? (JSON.parse(text) as Record<string, unknown>) : null };
    };
    const open = (id: string, resend = true) => {
      const events: Ev[] = [];
      const ws = new WebSocket(
        `${handle.agentUrl.replace(/^http/, "ws").replace(/\/$/, "")}/sockets/events/${id}?${resend ? "resend_all=true&" : ""}session_api_key=${key}`,
      );
      ws.on("message", (d) => events.push(JSON.parse(d.toString()) as Ev));
      return { ws, events, opened: new Promise<void>((r, j) => ws.once("open", () => r()).once("error", j)) };
    };

    beforeAll(async () => {
      ({ handle, key } = await setup());
    }, 120_000);

    it("runs the model's tool calls in the sandbox and reports every event on the websocket and the webhook", async () => {
      const start = await call("POST", "/api/conversations", {
        agent: {
          kind: "Agent",
          llm: { model: "openai/fake", base_url: llm.url, api_key: "sk-x", num_retries: 0 },
        },
        secrets: { DEPLOY_TOKEN: { kind: "StaticSecret", value: "tok-123456" } },
      });
      expect(start.status).toBe(200);
      const id = String(start.json?.id);
      const workingDir = String((start.json?.workspace as { working_dir: string } | undefined)?.working_dir);
      const socket = open(id);
      await socket.opened;
      const file = `${workingDir}/from-agent.txt`;
      llm.script(
        {
          toolCalls: [
            { name: "file_editor", arguments: { command: "create", path: file, file_text: "one\n" } },
          ],
        },
        {
          toolCalls: [
            {
              name: "file_editor",
              arguments: { command: "str_replace", path: file, old_str: "one", new_str: "two" },
            },
          ],
        },
        {
          toolCalls: [{ name: "terminal", arguments: { command: "cat from-agent.txt; echo $DEPLOY_TOKEN" } }],
        },
        { content: "Done." },
      );
      await call("POST", `/api/conversations/${id}/events`, {
        role: "user",
        content: [{ type: "text", text: "write the file" }],
        run: true,
      });
      await until(
        () => statusSeq(socket.events),
        (s) => s.includes("finished"),
      );
      expect(socket.events.map((e) => e.kind)).toEqual([
        "ConversationStateUpdateEvent", // full_state
        "ConversationStateUpdateEvent", // idle
        "MessageEvent",
        "ConversationStateUpdateEvent", // running
        "ActionEvent",
        "ObservationEvent",
        "ActionEvent",
        "ObservationEvent",
        "ActionEvent",
        "ObservationEvent",
        "MessageEvent",
        "ConversationStateUpdateEvent", // finished
      ]);
      const output = socket.events[9]?.observation as { content: { text: string }[]; exit_code: number };
      expect(output.exit_code).toBe(0);
      expect(output.content[0]?.text).toMatch(/^two\n<secret-hidden>\n/);
      // The file is really in the sandbox's workspace.
      const cat = await call("POST", "/api/bash/execute_bash_command", { command: "cat from-agent.txt" });
      expect(cat.json).toMatchObject({ exit_code: 0, stdout: "two\n" });
      // The webhook got the same events in the same order.
      const stored = await until(
        () => hooked.filter((p) => p.path === `/hooks/events/${id}`).flatMap((p) => p.body as Ev[]),
        (es) => es.length === socket.events.length - 1,
      );
      expect(stored.map((e) => e.id)).toEqual(socket.events.slice(1).map((e) => e.id));
      const infos = hooked
        .filter((p) => p.path === "/hooks/conversations")
        .map((p) => p.body as { id: string; execution_status: string })
        .filter((i) => i.id === id);
      expect(infos.map((i) => i.execution_status)).toEqual(["idle", "running", "finished"]);

      // Reconnect: resend_all replays the same events.
      socket.ws.close();
      const again = open(id);
      await until(
        () => again.events.length,
        (n) => n >= socket.events.length,
      );
      expect(again.events.slice(1).map((e) => e.id)).toEqual(socket.events.slice(1).map((e) => e.id));
      again.ws.close();
    });

    it("asks before each action under AlwaysConfirm: a rejection runs nothing; a model failure is an error event", async () => {
      const start = await call("POST", "/api/conversations", {
        agent: { kind: "Agent", llm: { model: "fake", base_url: llm.url, api_key: "sk-x", num_retries: 0 } },
        confirmation_policy: { kind: "AlwaysConfirm" },
      });
      const id = String(start.json?.id);
      const socket = open(id);
      await socket.opened;
      llm.script({ toolCalls: [{ name: "terminal", arguments: { command: "touch rejected.txt" } }] });
      await call("POST", `/api/conversations/${id}/events`, {
        content: [{ type: "text", text: "go" }],
        run: true,
      });
      await until(
        () => statusSeq(socket.events),
        (s) => s.includes("waiting_for_confirmation"),
      );
      await call("POST", `/api/conversations/${id}/events/respond_to_confirmation`, {
        accept: false,
        reason: "no",
      });
      await until(
        () => socket.events.map((e) => e.kind),
        (k) => k.includes("UserRejectObservation"),
      );
      const ls = await call("POST", "/api/bash/execute_bash_command", { command: "ls rejected.txt" });
      expect(ls.json?.exit_code).not.toBe(0);

      llm.script({ status: 401, error: "bad key" });
      const mark = socket.events.length;
      socket.ws.send(JSON.stringify({ role: "user", content: [{ type: "text", text: "again" }] }));
      await until(
        () => statusSeq(socket.events.slice(mark)),
        (s) => s.includes("error"),
      );
      const error = socket.events.slice(mark).find((e) => e.kind === "ConversationErrorEvent");
      expect(String(error?.detail)).toMatch(/401/);
      // Still alive.
      expect((await call("GET", `/api/conversations/${id}`)).json).toMatchObject({
        execution_status: "error",
      });
      socket.ws.close();
    });
  });
}

// Process runtime (bubblewrap where it works, as the embedded default). Under bubblewrap a sandbox sees only the
// agent's folder of the checkout; the agent's conversation side also needs the packages `ws` and `openai`, so the
// repository's node_modules is handed in read-only here (the runtime's own list of agent files must include it for
// the server: see docs/builtin-agent.md).
const processRoot = mkdtempSync(join(tmpdir(), "builtin-agent-rt-"));
const nodeModules = fileURLToPath(new URL("../../node_modules", import.meta.url));
const processRuntime = createProcessRuntime({
  workspaceRoot: processRoot,
  stopGraceMs: 1000,
  readOnlyPaths: [nodeModules],
});
const started: { runtime: SandboxRuntime; handle: RuntimeHandle }[] = [];

async function startIn(
  runtime: SandboxRuntime,
  spec: RuntimeSpec,
): Promise<{ handle: RuntimeHandle; key: string }> {
  const key = randomBytes(16).toString("hex");
  const handle = await runtime.start({ sandboxId: randomBytes(8).toString("hex"), spec, sessionApiKey: key });
  started.push({ runtime, handle });
  expect(await runtime.waitHealthy(handle, 60_000)).toBe(true);
  return { handle, key };
}

const webhookEnv = () => ({ OH_WEBHOOKS_0_BASE_URL: `${hookBase}/hooks`, OH_WEBHOOKS_0_FLUSH_DELAY: "0.02" });

conversationScenario("built-in agent on the process runtime", () =>
  startIn(processRuntime, {
    id: "process-test",
    command: [BUILTIN_AGENT_COMMAND],
    initialEnv: webhookEnv(),
    workingDir: "",
  }),
);

const docker = dockerFromEnv();
const found = await findDocker(docker);
const dockerSkip = typeof found === "string" ? found : null;
if (dockerSkip) console.log(`built-in agent on Docker skipped: ${dockerSkip}`);
const dockerRuntime = createDockerRuntime({
  docker,
  network: "host",
  labels: { "workspace.test-run": randomBytes(4).toString("hex") },
  stopTimeoutSeconds: 2,
});
// On Docker's bridge the container's loopback is its own: the model and the webhook receiver on this machine's
// loopback are reached at host.docker.internal, where the runtime forwards the ports it was told to (as root).
const bridgeRuntime = createDockerRuntime({
  docker,
  network: "bridge",
  labels: { "workspace.test-run": randomBytes(4).toString("hex") },
  stopTimeoutSeconds: 2,
});
const bridgeSkip =
  process.getuid?.() !== 0 ? "not root: host loopback ports cannot be forwarded to containers" : null;

describe.skipIf(dockerSkip !== null)(`docker${dockerSkip ? ` (skipped: ${dockerSkip})` : ""}`, () => {
  conversationScenario("built-in agent on the Docker runtime (network host)", () =>
    startIn(dockerRuntime, {
      id: typeof found === "string" ? "unused" : found.image,
      command: [],
      initialEnv: webhookEnv(),
      workingDir: "/workspace/project",
    }),
  );
  describe.skipIf(bridgeSkip !== null)(`bridge${bridgeSkip ? ` (skipped: ${bridgeSkip})` : ""}`, () => {
    conversationScenario(
      "built-in agent on the Docker runtime (bridge), model and webhooks on the host's loopback",
      () => {
        bridgeRuntime.reachHost?.(hookBase);
        bridgeRuntime.reachHost?.(llm.url);
        return startIn(bridgeRuntime, {
          id: typeof found === "string" ? "unused" : found.image,
          command: [],
          initialEnv: webhookEnv(),
          workingDir: "/workspace/project",
        });
      },
    );
  });
});

afterAll(async () => {
  for (const { runtime, handle } of started) await runtime.remove(handle).catch(() => {});
  await processRuntime.close();
  if (!dockerSkip) await Promise.all([dockerRuntime.close(), bridgeRuntime.close()]);
  rmSync(processRoot, { recursive: true, force: true });
}, 60_000);
