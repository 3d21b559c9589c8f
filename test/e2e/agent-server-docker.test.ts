import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createDockerRuntime,
  type DockerRuntime,
} from "../../src/adapters/runtimes/docker/docker-runtime.ts";
import { defaultSpecs } from "../../src/server/sandbox-specs.ts";
import { settle } from "../helpers/app-conversations.ts";
import { dockerFromEnv, findAgentServerImage } from "../helpers/docker-env.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";
import { uiAgentBase } from "../helpers/ui-urls.ts";

// Conversations through the whole service on the Docker runtime, with the default spec (the agent-server image,
// its command and environment) run against the stand-in of the real agent-server image (test/standin-agent-server,
// built offline by .ci/docker.sh): user openhands (10001) owning /workspace, state folders created at boot and
// fatal when they cannot be, the start request validated as strictly as the SDK's models, a few seconds of boot.
// Each test fails if a finding of the agent-server study (shared/research/agent-server-contract.md) comes back.
// Containers use --network host: nothing here talks to bridge addresses.

const docker = dockerFromEnv();
const found = await findAgentServerImage(docker);
const skipReason = typeof found === "string" ? found : null;
if (skipReason) console.log(`agent-server conversation tests skipped: ${skipReason}`);
const image = typeof found === "string" ? "unused" : found.image;

const runLabel = "workspace.test-run";
const runId = randomBytes(4).toString("hex");
const runtimes: DockerRuntime[] = [];
const makeRuntime = (user?: string): DockerRuntime => {
  const runtime = createDockerRuntime({
    docker,
    network: "host",
    labels: { [runLabel]: runId },
    stopTimeoutSeconds: 2,
    ...(user === undefined ? {} : { user }),
  });
  runtimes.push(runtime);
  return runtime;
};
const specs = () => defaultSpecs({ kind: "docker", image }, new Date());

interface Sandbox {
  id: string;
  status: string;
  session_api_key: string | null;
  exposed_urls: { name: string; url: string; port: number }[] | null;
}
interface Recorded {
  method: string;
  path: string;
  body: unknown;
  status: number | null;
}
interface StartBody {
  conversation_id: string;
  agent: {
    llm: Record<string, unknown>;
    tools: { name: string }[];
    condenser: { kind: string };
    system_prompt_kwargs: Record<string, unknown>;
    mcp_config?: { mcpServers: Record<string, Record<string, unknown>> };
    agent_context?: { skills?: { name: string; trigger: unknown }[] };
  };
  secrets: Record<string, { kind: string; value: string }>;
}

const message = (text: string) => ({ role: "user", content: [{ type: "text", text }] });

describe.skipIf(skipReason !== null)(
  `conversations on the agent-server image${skipReason ? ` (skipped: ${skipReason})` : ""}`,
  () => {
    let t: TestApp;
    let key = "";
    const api = async (method: string, path: string, body?: unknown, k = key) =>
      call(t.url, k, method, path, body);
    const sandbox = async (id: string): Promise<Sandbox> => {
      const s = ((await api("GET", `/api/v1/sandboxes?id=${id}`)).body as Sandbox[])[0] as Sandbox;
      expect(s.status, JSON.stringify(s)).toBe("RUNNING");
      return s;
    };
    /** What the stand-in recorded (a test-only route the service does not forward): at the agent's own port. */
    const agentRequests = async (s: Sandbox): Promise<Recorded[]> => {
      const agent = s.exposed_urls?.find((u) => u.name === "AGENT_SERVER_DIRECT")?.url ?? "";
      expect(agent).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      const r = await fetch(`${agent}/__standin/requests`, {
        headers: { "x-session-api-key": s.session_api_key ?? "" },
      });
      return ((await r.json()) as { requests: Recorded[] }).requests;
    };
    const startReady = async (body: Record<string, unknown>) => {
      const task = (await api("POST", "/api/v1/app-conversations", body)).body as { id: string };
      const done = await settle(key, task.id, 90_000, t);
      expect(done.status, done.detail ?? "").toBe("READY");
      return done as typeof done & { sandbox_id: string; app_conversation_id: string };
    };

    beforeAll(async () => {
      t = await startTestApp({ runtime: makeRuntime(), specs: specs(), sweepIntervalMs: 0 });
      key = await t.keyFor("alice");
      const stored = await api("POST", "/api/settings", {
        llm_model: "anthropic/claude-sonnet-4-5",
        llm_api_key: "sk-alice-0123456789",
        mcp_config: {
          sse_servers: [{ url: "https://mcp.example.com/sse", api_key: "mcp-key-0123456789" }],
          stdio_servers: [{ name: "fetch", command: "uvx", args: ["mcp-server-fetch"], env: {} }],
          shttp_servers: [],
        },
      });
      expect(stored.status, JSON.stringify(stored.body)).toBe(200);
      expect(
        (await api("POST", "/api/secrets", { name: "DEPLOY_TOKEN", value: "deploy-0123456789" })).status,
      ).toBe(201);
    }, 60_000);

    afterAll(async () => {
      await t?.close();
      await Promise.all(runtimes.map((r) => r.removeAll()));
    });

    let first: { sandbox_id: string; app_conversation_id: string };

    it("starts a conversation to READY on the image's own user, with the reference's ports and start request", async () => {
      first = await startReady({ initial_message: message("Add a health check endpoint") });
      const s = await sandbox(first.sandbox_id);
      expect(s.status).toBe("RUNNING");
      // Every port the reference publishes, each on its own loopback port; VS Code with its key and folder. The
      // agent is reached through this service's own origin ("/"), its published loopback port beside it.
      expect(s.exposed_urls?.map((u) => u.name)).toEqual([
        "AGENT_SERVER",
        "AGENT_SERVER_DIRECT",
        "VSCODE",
        "WORKER_1",
        "WORKER_2",
      ]);
      // The proxied entry's port is the one its URL reaches (this service's); the direct one, the agent's.
      const agentPort = s.exposed_urls?.[1]?.port;
      expect(s.exposed_urls?.slice(0, 2)).toEqual([
        { name: "AGENT_SERVER", url: "/", port: Number(new URL(t.url).port) },
        { name: "AGENT_SERVER_DIRECT", url: `http://127.0.0.1:${agentPort}`, port: agentPort },
      ]);
      expect(s.session_api_key).toMatch(new RegExp(`^sbx_${s.id}_[0-9A-Za-z]{43}$`));
      // The agent, VS Code and both workers each on a loopback port of their own.
      expect(new Set(s.exposed_urls?.slice(1).map((u) => u.port)).size).toBe(4);
      expect(s.exposed_urls?.find((u) => u.name === "VSCODE")?.url).toMatch(
        new RegExp(`^http://127\\.0\\.0\\.1:\\d+/\\?tkn=${s.session_api_key}&folder=/workspace/project$`),
      );
      const [container] = await docker.listContainers({
        filters: { label: [`workspace.sandbox.id=${s.id}`] },
      });
      const info = await docker.getContainer(container?.Id ?? "").inspect();
      // The image's own user (F1), the agent on loopback only (F5a), VS Code on its own port.
      expect(info.Config.User).toBe("openhands");
      expect(info.Config.Cmd).toEqual(["--host", "127.0.0.1", "--port", String(agentPort)]);
      expect(info.Config.Env).toContain(
        `OH_VSCODE_PORT=${s.exposed_urls?.find((u) => u.name === "VSCODE")?.port}`,
      );

      const requests = await agentRequests(s);
      const start = requests.find((r) => r.method === "POST" && r.path === "/api/conversations");
      expect(start?.status).toBe(201);
      const body = start?.body as StartBody;
      // The default tool set, prompt arguments and condenser (F3).
      expect(body.agent.tools.map((x) => x.name)).toEqual([
        "terminal",
        "file_editor",
        "task_tracker",
        "browser_tool_set",
      ]);
      expect(body.agent.system_prompt_kwargs).toEqual({ cli_mode: false });
      expect(body.agent.condenser.kind).toBe("LLMSummarizingCondenser");
      // The stored MCP servers in fastmcp's shape, with the stored key, not the mask (F2).
      expect(body.agent.mcp_config?.mcpServers).toEqual({
        sse_1: {
          url: "https://mcp.example.com/sse",
          transport: "sse",
          headers: { Authorization: "Bearer mcp-key-0123456789", "X-Session-API-Key": "mcp-key-0123456789" },
        },
        fetch: { command: "uvx", args: ["mcp-server-fetch"], env: {} },
      });
      expect(body.secrets.DEPLOY_TOKEN).toEqual({ kind: "StaticSecret", value: "deploy-0123456789" });
      expect(body.agent.agent_context?.skills?.map((x) => x.name)).toEqual(["work_hosts"]);
      // The agent's events reach the service through the webhook.
      const deadline = Date.now() + 30_000;
      let count = 0;
      while (count === 0 && Date.now() < deadline) {
        count = (await api("GET", `/api/v1/events/count?conversation_id__eq=${first.app_conversation_id}`))
          .body as number;
        if (count === 0) await new Promise((r) => setTimeout(r, 100));
      }
      expect(count).toBeGreaterThan(0);
    }, 120_000);

    it("loads the repository's skills into a conversation started in the same sandbox", async () => {
      const s = await sandbox(first.sandbox_id);
      // The command runs as the UI reaches the agent: at the host of conversation_url (this service's origin).
      const [conversation] = (await api("GET", `/api/v1/app-conversations?ids=${first.app_conversation_id}`))
        .body as { conversation_url: string | null; session_api_key: string | null }[];
      expect(conversation?.conversation_url).toBe(`/api/conversations/${first.app_conversation_id}`);
      expect(conversation?.session_api_key).toBe(s.session_api_key);
      const agent = uiAgentBase(conversation?.conversation_url, t.url);
      const write = await fetch(`${agent}/api/bash/execute_bash_command`, {
        method: "POST",
        headers: { "x-session-api-key": s.session_api_key ?? "", "content-type": "application/json" },
        body: JSON.stringify({
          command:
            "mkdir -p .openhands/skills && printf -- '---\\ntriggers: [deploy]\\n---\\nDeploy with make ship.\\n' > .openhands/skills/deploy.md && echo 'Run make test.' > agents.md",
          cwd: "/workspace/project",
        }),
      });
      expect(write.status).toBe(200);
      expect(((await write.json()) as { exit_code: number }).exit_code).toBe(0);
      const second = await startReady({ sandbox_id: first.sandbox_id, initial_message: message("Ship it") });
      const start = (await agentRequests(s))
        .filter((r) => r.method === "POST" && r.path === "/api/conversations")
        .find((r) => (r.body as StartBody).conversation_id === second.app_conversation_id);
      expect(start?.status).toBe(201);
      const skills = (start?.body as StartBody | undefined)?.agent.agent_context?.skills ?? [];
      expect(skills.map((x) => [x.name, x.trigger])).toEqual([
        ["work_hosts", null],
        ["agents", null],
        ["deploy", { type: "keyword", keywords: ["deploy"] }],
      ]);
    }, 120_000);

    it("renames and deletes on the agent too (a conversation left there would keep running)", async () => {
      const s = await sandbox(first.sandbox_id);
      const id = first.app_conversation_id;
      expect((await api("PATCH", `/api/v1/app-conversations/${id}`, { title: "Health check" })).status).toBe(
        200,
      );
      // The sandbox stays: the skills conversation still uses it.
      expect((await api("DELETE", `/api/conversations/${id}`)).body).toBe(true);
      const requests = await agentRequests(s);
      expect(
        requests.find((r) => r.method === "PATCH" && r.path === `/api/conversations/${id}`)?.body,
      ).toEqual({
        title: "Health check",
      });
      expect(
        requests.find((r) => r.method === "DELETE" && r.path === `/api/conversations/${id}`)?.status,
      ).toBe(200);
    }, 60_000);

    it("without a model ends in ERROR saying what to set, before any container starts (F4)", async () => {
      const bob = await t.keyFor("bob");
      const task = (await api("POST", "/api/v1/app-conversations", {}, bob)).body as { id: string };
      const done = await settle(bob, task.id, 30_000, t);
      expect(done.status).toBe("ERROR");
      expect(done.detail).toMatch(/No LLM model is set.*llm_model/);
      expect(
        ((await api("GET", "/api/v1/sandboxes/search", undefined, bob)).body as { items: unknown[] }).items,
      ).toEqual([]);
    }, 60_000);
  },
);

describe.skipIf(skipReason !== null)("the agent-server image as another user (SANDBOX_DOCKER_USER)", () => {
  it("hands that user /workspace and the state folders: the agent boots and runs commands", async () => {
    const runtime = makeRuntime("1000:1000");
    const sessionApiKey = "other-user-key-0123";
    const [spec] = specs();
    if (spec === undefined) throw new Error("no default spec");
    const handle = await runtime.start({ sandboxId: `as${runId}`, spec, sessionApiKey });
    try {
      expect(await runtime.waitHealthy(handle, 60_000)).toBe(true);
      const r = await fetch(`${handle.agentUrl}/api/bash/execute_bash_command`, {
        method: "POST",
        headers: { "x-session-api-key": sessionApiKey, "content-type": "application/json" },
        body: JSON.stringify({
          command: "id -u; ls -d /workspace/conversations /workspace/bash_events; touch x",
        }),
      });
      const out = (await r.json()) as { exit_code: number; stdout: string };
      expect(out.exit_code).toBe(0);
      expect(out.stdout).toBe("1000\n/workspace/bash_events\n/workspace/conversations\n");
    } finally {
      await runtime.remove(handle);
    }
  }, 90_000);
});
