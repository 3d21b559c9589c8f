import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { HttpAgentClient } from "../../src/adapters/agent-client/http-agent-client.ts";
import { spawnServer } from "../helpers/server-process.ts";
import { readConfig } from "../standin-agent-server/config.ts";
import { StandinServer } from "../standin-agent-server/server.ts";

// The stand-in for the OpenHands agent-server (test/standin-agent-server): the verdicts of the real server on the
// start request (cases A-E of the agent-server study), its key check, boot, bash and webhooks.

const KEY = "standin-key";
const MAIN = join(import.meta.dirname, "../standin-agent-server/main.ts");
const dirs: string[] = [];
const tempDir = (): string => {
  const d = mkdtempSync(join(tmpdir(), "standin-"));
  dirs.push(d);
  return d;
};
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

interface Running {
  url: string;
  server: StandinServer;
  dir: string;
}
const servers: StandinServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

async function startStandin(env: Record<string, string> = {}, closeAfterEach = true): Promise<Running> {
  const dir = tempDir();
  const config = readConfig({ OH_SESSION_API_KEYS_0: KEY, STANDIN_BOOT_DELAY_MS: "0", ...env }, dir);
  const server = new StandinServer(config);
  server.prepareState();
  const address = await server.listen("127.0.0.1", 0);
  if (closeAfterEach) servers.push(server);
  return { url: `http://127.0.0.1:${address.port}`, server, dir };
}

async function call(
  base: string,
  method: string,
  path: string,
  body?: unknown,
  key: string | null = KEY,
): Promise<{ status: number; body: unknown }> {
  const headers: Record<string, string> = {};
  if (key !== null) headers["X-Session-API-Key"] = key;
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`${base}${path}`, {
    method,
    headers,
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, body: text === "" ? null : (JSON.parse(text) as unknown) };
}

const hex = (): string => crypto.randomUUID().replaceAll("-", "");
/** The body the service builds for a default UI start (study case A). */
const startBody = (
  workingDir: string,
  extra: { llm?: Record<string, unknown>; agent?: Record<string, unknown> } = {},
) => ({
  agent: {
    kind: "Agent",
    llm: {
      model: "openai/gpt-4o",
      base_url: null,
      api_key: "sk-user-secret",
      usage_id: "agent",
      ...extra.llm,
    },
    agent_type: "default",
    ...extra.agent,
  },
  workspace: { kind: "LocalWorkspace", working_dir: workingDir },
  conversation_id: hex(),
  confirmation_policy: { kind: "NeverConfirm" },
  initial_message: {
    role: "user",
    content: [{ type: "text", text: "Hello there", cache_prompt: false }],
    run: true,
  },
});

describe("stand-in agent-server: keys and start validation", () => {
  let s: Running;
  beforeAll(async () => {
    s = await startStandin({}, false);
  });
  afterAll(async () => {
    await s.server.close();
  });

  it("answers /alive and /health without a key and /api only with the key (401 like the real dependency)", async () => {
    expect(await call(s.url, "GET", "/alive", undefined, null)).toEqual({
      status: 200,
      body: { status: "ok" },
    });
    expect(await call(s.url, "GET", "/health", undefined, null)).toEqual({ status: 200, body: "OK" });
    const body = startBody(join(s.dir, "p"));
    expect(await call(s.url, "POST", "/api/conversations", body, null)).toEqual({
      status: 401,
      body: { detail: "Unauthorized" },
    });
    expect((await call(s.url, "POST", "/api/conversations", body, "wrong")).status).toBe(401);
    expect((await call(s.url, "GET", "/__standin/requests", undefined, null)).status).toBe(401);
    expect(await call(s.url, "GET", "/api/nothing-here")).toEqual({
      status: 404,
      body: { detail: "Not Found" },
    });
  });

  it("case A: accepts the default start (201, ConversationInfo), then 200 for the same id", async () => {
    const body = startBody(join(s.dir, "project"));
    const first = await call(s.url, "POST", "/api/conversations", body);
    expect(first.status).toBe(201);
    const info = first.body as Record<string, unknown>;
    const id = body.conversation_id;
    // ConversationState.id is a plain UUID: pydantic prints it dashed.
    expect(info.id).toBe(
      `${id.slice(0, 8)}-${id.slice(8, 12)}-${id.slice(12, 16)}-${id.slice(16, 20)}-${id.slice(20)}`,
    );
    expect(info.execution_status).toBe("running");
    const agent = info.agent as Record<string, unknown>;
    expect(agent.kind).toBe("Agent");
    expect(agent).not.toHaveProperty("agent_type");
    expect(agent.tools).toEqual([]);
    expect((agent.llm as Record<string, unknown>).api_key).toBe("**********");
    expect((agent.llm as Record<string, unknown>).usage_id).toBe("agent");
    expect(Object.keys(info)).toEqual(
      expect.arrayContaining([
        "workspace",
        "metrics",
        "title",
        "created_at",
        "updated_at",
        "stats",
        "secret_registry",
      ]),
    );
    const again = await call(s.url, "POST", "/api/conversations", body);
    expect(again.status).toBe(200);
    expect((again.body as Record<string, unknown>).id).toBe(info.id);
    const batch = await call(s.url, "GET", `/api/conversations?ids=${id}&ids=${hex()}`);
    expect(batch.status).toBe(200);
    expect((batch.body as unknown[])[1]).toBeNull();
  });

  it("case B: model null is a 422 on agent.llm that echoes the input, API key included", async () => {
    const res = await call(
      s.url,
      "POST",
      "/api/conversations",
      startBody(join(s.dir, "p"), { llm: { model: null } }),
    );
    expect(res.status).toBe(422);
    expect(res.body).toEqual({
      detail: [
        {
          type: "value_error",
          loc: ["body", "agent", "llm"],
          msg: "Value error, model must be specified in LLM",
          input: { model: null, base_url: null, api_key: "sk-user-secret", usage_id: "agent" },
          ctx: { error: {} },
        },
      ],
    });
    const missing = await call(s.url, "POST", "/api/conversations", { agent: { llm: {} } });
    expect((missing.body as { detail: { loc: unknown[] }[] }).detail.map((d) => d.loc)).toEqual([
      ["body", "agent", "llm"],
      ["body", "workspace"],
    ]);
  });

  it("case C: an unknown LLM key is refused (extra forbidden); unknown agent keys are dropped", async () => {
    const res = await call(
      s.url,
      "POST",
      "/api/conversations",
      startBody(join(s.dir, "p"), { llm: { temperatur: 0.5 } }),
    );
    expect(res.status).toBe(422);
    expect(res.body).toEqual({
      detail: [
        {
          type: "extra_forbidden",
          loc: ["body", "agent", "llm", "temperatur"],
          msg: "Extra inputs are not permitted",
          input: 0.5,
        },
      ],
    });
    const ok = await call(
      s.url,
      "POST",
      "/api/conversations",
      startBody(join(s.dir, "p"), { agent: { security_analyzer: "llm" }, llm: { service_id: "x" } }),
    );
    expect(ok.status).toBe(201);
  });

  it("case D: MCP in the settings' {sse,stdio,shttp} shape is a 500 at conversation init, even empty", async () => {
    const mcp_config = { sse_servers: [], stdio_servers: [], shttp_servers: [] };
    const body = startBody(join(s.dir, "p"), { agent: { mcp_config } });
    const res = await call(s.url, "POST", "/api/conversations", body);
    expect(res).toEqual({
      status: 500,
      body: { detail: "Internal Server Error", exception: "No MCP servers defined in the config" },
    });
    // Nothing was registered.
    expect((await call(s.url, "GET", `/api/conversations/${body.conversation_id}`)).status).toBe(404);
    const empty = await call(
      s.url,
      "POST",
      "/api/conversations",
      startBody(join(s.dir, "p"), { agent: { mcp_config: { mcpServers: {} } } }),
    );
    expect(empty.status).toBe(500);
    const bad = await call(
      s.url,
      "POST",
      "/api/conversations",
      startBody(join(s.dir, "p"), { agent: { mcp_config: { mcpServers: { x: { name: "no url" } } } } }),
    );
    expect(bad.status).toBe(500);
    expect((bad.body as { exception: string }).exception).toMatch(/validation errors? for MCPConfig/);
  });

  it("case E: MCP in fastmcp's mcpServers shape (or servers at the root) is accepted", async () => {
    for (const mcp_config of [
      { mcpServers: { x: { url: "http://127.0.0.1:9/sse", transport: "sse", headers: { a: "b" } } } },
      { fetch: { command: "uvx", args: ["mcp-server-fetch"] } },
    ]) {
      const res = await call(
        s.url,
        "POST",
        "/api/conversations",
        startBody(join(s.dir, "p"), { agent: { mcp_config } }),
      );
      expect(res.status).toBe(201);
    }
  });

  it("applies the other model rules: tools, condenser, policy, secrets, max_iterations, message", async () => {
    const dir = join(s.dir, "p");
    const post = (body: unknown) => call(s.url, "POST", "/api/conversations", body);
    const preset = {
      tools: [
        { name: "terminal" },
        { name: "file_editor" },
        { name: "task_tracker" },
        { name: "browser_tool_set" },
      ],
      system_prompt_kwargs: { cli_mode: false },
      condenser: {
        kind: "LLMSummarizingCondenser",
        llm: { model: "m", usage_id: "condenser" },
        max_size: 80,
        keep_first: 4,
      },
    };
    expect((await post(startBody(dir, { agent: preset }))).status).toBe(201);
    const bad = async (body: unknown): Promise<{ type: string; loc: unknown[] }[]> => {
      const r = await post(body);
      expect(r.status).toBe(422);
      return (r.body as { detail: { type: string; loc: unknown[] }[] }).detail;
    };
    expect(
      await bad(
        startBody(dir, { agent: { condenser: { ...preset.condenser, max_size: 8, keep_first: 4 } } }),
      ),
    ).toMatchObject([
      { type: "value_error", loc: ["body", "agent", "condenser", "LLMSummarizingCondenser"] },
    ]);
    expect(await bad({ ...startBody(dir), max_iterations: 0 })).toMatchObject([
      { type: "greater_than_equal", loc: ["body", "max_iterations"] },
    ]);
    expect(await bad({ ...startBody(dir), confirmation_policy: { kind: "Sometimes" } })).toMatchObject([
      { type: "union_tag_invalid", loc: ["body", "confirmation_policy"] },
    ]);
    expect(
      await bad({ ...startBody(dir), workspace: { kind: "DockerWorkspace", working_dir: "/x" } }),
    ).toMatchObject([{ type: "literal_error", loc: ["body", "workspace", "kind"] }]);
    expect(await bad(startBody(dir, { agent: { kind: "Other" } }))).toMatchObject([
      { type: "literal_error", loc: ["body", "agent", "kind"] },
    ]);
    expect(await bad(startBody(dir, { agent: { tools: [{ name: " " }] } }))).toMatchObject([
      { type: "value_error", loc: ["body", "agent", "tools", 0, "name"] },
    ]);
    expect(await bad({ ...startBody(dir), secrets: { A: { kind: "StaticSecret" } } })).toMatchObject([
      { type: "missing", loc: ["body", "secrets", "A", "StaticSecret", "value"] },
    ]);
    expect(
      await bad({
        ...startBody(dir),
        initial_message: { role: "user", content: [{ type: "text", text: "x", extra: 1 }] },
      }),
    ).toMatchObject([
      // A smart union reports every member's errors, under the member's name.
      { type: "extra_forbidden", loc: ["body", "initial_message", "content", 0, "TextContent", "extra"] },
      { type: "literal_error", loc: ["body", "initial_message", "content", 0, "ImageContent", "type"] },
      { type: "missing", loc: ["body", "initial_message", "content", 0, "ImageContent", "image_urls"] },
    ]);
    const skill = { name: "repo", content: "Use pnpm.", trigger: null, source: "AGENTS.md" };
    expect((await post(startBody(dir, { agent: { agent_context: { skills: [skill] } } }))).status).toBe(201);
    expect(await bad(startBody(dir, { agent: { agent_context: { skills: [skill, skill] } } }))).toMatchObject(
      [{ type: "value_error", loc: ["body", "agent", "agent_context", "skills"] }],
    );
    expect(
      await bad(
        startBody(dir, { agent: { agent_context: { skills: [{ ...skill, trigger: { type: "word" } }] } } }),
      ),
    ).toMatchObject([
      { type: "union_tag_invalid", loc: ["body", "agent", "agent_context", "skills", 0, "trigger"] },
    ]);
    // A secret without `kind` breaks the discriminator itself (KeyError): the real server answers 500.
    expect(await post({ ...startBody(dir), secrets: { A: { value: "v" } } })).toEqual({
      status: 500,
      body: { detail: "Internal Server Error", exception: "'kind'" },
    });
    expect(await post(startBody(dir, { agent: { tools: [{ name: "no_such_tool" }] } }))).toEqual({
      status: 500,
      body: {
        detail: "Internal Server Error",
        exception: "\"ToolDefinition 'no_such_tool' is not registered\"",
      },
    });
    const ok = await post({
      ...startBody(dir),
      secrets: { GITHUB_TOKEN: { kind: "StaticSecret", value: "ghp_x" } },
    });
    expect(ok.status).toBe(201);
    const sources = (
      (ok.body as Record<string, Record<string, unknown>>).secret_registry as Record<string, unknown>
    ).secret_sources as Record<string, Record<string, unknown>>;
    expect(sources.GITHUB_TOKEN?.value).toBe("**********");
  });

  it("answers CORS like LocalhostCORSMiddleware: localhost origins only while no origin is configured", async () => {
    const preflight = (base: string, origin: string) =>
      fetch(`${base}/api/conversations`, {
        method: "OPTIONS",
        headers: {
          origin,
          "access-control-request-method": "POST",
          "access-control-request-headers": "x-session-api-key",
        },
      });
    const local = await preflight(s.url, "http://localhost:3001");
    expect(local.status).toBe(200);
    expect(local.headers.get("access-control-allow-origin")).toBe("http://localhost:3001");
    expect(local.headers.get("access-control-allow-headers")).toBe("x-session-api-key");
    expect((await preflight(s.url, "https://app.example.com")).status).toBe(400);
    const simple = await fetch(`${s.url}/alive`, { headers: { origin: "http://127.0.0.1:8080" } });
    expect(simple.headers.get("access-control-allow-origin")).toBe("http://127.0.0.1:8080");
    const listed = await startStandin({ OH_ALLOW_CORS_ORIGINS_0: "https://app.example.com" });
    expect((await preflight(listed.url, "https://app.example.com")).status).toBe(200);
    expect((await preflight(listed.url, "http://localhost:3001")).status).toBe(400);
  });

  it("refuses a batch of 100 ids like the real assert (500) and answers 99", async () => {
    const ids = Array.from({ length: 100 }, hex);
    const q = (n: number) =>
      ids
        .slice(0, n)
        .map((id) => `ids=${id}`)
        .join("&");
    expect((await call(s.url, "GET", `/api/conversations?${q(100)}`)).status).toBe(500);
    const ok = await call(s.url, "GET", `/api/conversations?${q(99)}`);
    expect(ok.status).toBe(200);
    expect(ok.body).toHaveLength(99);
    expect((await call(s.url, "GET", "/api/conversations?ids=nope")).status).toBe(422);
  });

  it("records every request with the key redacted at /__standin/requests", async () => {
    const marker = hex();
    await call(s.url, "POST", `/api/conversations/${marker}/events`, {
      content: [{ type: "text", text: "hi" }],
    });
    const res = await call(s.url, "GET", "/__standin/requests");
    const requests = (res.body as { requests: Record<string, unknown>[] }).requests;
    const mine = requests.find((r) => r.path === `/api/conversations/${marker}/events`);
    expect(mine).toMatchObject({
      method: "POST",
      query: {},
      body: { content: [{ type: "text", text: "hi" }] },
      status: 404,
      headers: { "x-session-api-key": "<redacted>" },
    });
    expect(JSON.stringify(requests)).not.toContain(KEY);
    expect(requests.some((r) => String(r.path).startsWith("/__standin"))).toBe(false);
  });
});

describe("stand-in agent-server: conversation calls, bash and the service's client", () => {
  it("runs, pauses, renames, titles, lists events and deletes like the real routes", async () => {
    const s = await startStandin();
    const body = startBody(join(s.dir, "p"));
    const id = body.conversation_id;
    expect((await call(s.url, "POST", "/api/conversations", body)).status).toBe(201);
    expect(await call(s.url, "POST", `/api/conversations/${id}/run`)).toMatchObject({ status: 409 });
    expect(await call(s.url, "POST", `/api/conversations/${id}/pause`)).toEqual({
      status: 200,
      body: { success: true },
    });
    expect((await call(s.url, "GET", `/api/conversations/${id}`)).body).toMatchObject({
      execution_status: "paused",
    });
    expect((await call(s.url, "POST", `/api/conversations/${id}/run`)).status).toBe(200);
    expect(await call(s.url, "PATCH", `/api/conversations/${id}`, { title: "  Renamed  " })).toEqual({
      status: 200,
      body: { success: true },
    });
    expect((await call(s.url, "PATCH", `/api/conversations/${id}`, { title: "" })).status).toBe(422);
    expect((await call(s.url, "GET", `/api/conversations/${id}`)).body).toMatchObject({ title: "Renamed" });
    expect(await call(s.url, "POST", `/api/conversations/${id}/generate_title`, { max_length: 5 })).toEqual({
      status: 200,
      body: { title: "He..." },
    });
    const events = await call(s.url, "GET", `/api/conversations/${id}/events/search?limit=100`);
    const kinds = (events.body as { items: { kind: string; source: string }[] }).items.map((e) => e.kind);
    expect(kinds.slice(0, 3)).toEqual(["SystemPromptEvent", "ConversationStateUpdateEvent", "MessageEvent"]);
    expect((await call(s.url, "GET", `/api/conversations/${id}/events/search?limit=101`)).status).toBe(500);
    expect(
      (
        await call(s.url, "POST", `/api/conversations/${id}/events/respond_to_confirmation`, {
          accept: false,
        })
      ).status,
    ).toBe(200);
    expect(await call(s.url, "GET", "/api/vscode/url")).toEqual({
      status: 200,
      body: { url: `http://localhost:8001/?tkn=${KEY}&folder=workspace` },
    });
    expect(await call(s.url, "DELETE", `/api/conversations/${id}`)).toEqual({
      status: 200,
      body: { success: true },
    });
    expect((await call(s.url, "DELETE", `/api/conversations/${id}`)).status).toBe(400);
    expect((await call(s.url, "GET", `/api/conversations/${id}`)).status).toBe(404);
  });

  it("executes bash commands with /bin/sh, writes event files, and times out with exit code -1", async () => {
    const s = await startStandin();
    const cwd = tempDir();
    const out = await call(s.url, "POST", "/api/bash/execute_bash_command", {
      command: "pwd; echo err >&2; exit 7",
      cwd,
    });
    expect(out.status).toBe(200);
    expect(out.body).toMatchObject({
      kind: "BashOutput",
      exit_code: 7,
      stdout: `${cwd}\n`,
      stderr: "err\n",
      order: 0,
    });
    const files = readdirSync(join(s.dir, "workspace/bash_events"));
    expect(files.some((f) => /^\d{14}_BashCommand_[0-9a-f]{32}$/.test(f))).toBe(true);
    expect(files.some((f) => /^\d{14}_BashOutput_[0-9a-f]{32}_[0-9a-f]{32}$/.test(f))).toBe(true);
    const slow = await call(s.url, "POST", "/api/bash/execute_bash_command", {
      command: "sleep 5",
      timeout: 1,
    });
    expect(slow.body).toMatchObject({ exit_code: -1 });
    expect((await call(s.url, "POST", "/api/bash/execute_bash_command", {})).status).toBe(422);
  });

  it("uploads and downloads files at absolute paths like file_router.py", async () => {
    const s = await startStandin();
    const target = join(tempDir(), "sub", "note.txt");
    const form = new FormData();
    form.append("file", new Blob(["hello file"]), "note.txt");
    const up = await fetch(`${s.url}/api/file/upload/${encodeURIComponent(target)}`, {
      method: "POST",
      headers: { "X-Session-API-Key": KEY },
      body: form,
    });
    expect(up.status).toBe(200);
    expect(await up.json()).toEqual({ success: true });
    const down = await fetch(`${s.url}/api/file/download/${encodeURIComponent(target)}`, {
      headers: { "X-Session-API-Key": KEY },
    });
    expect(down.status).toBe(200);
    expect(down.headers.get("content-type")).toBe("application/octet-stream");
    expect(await down.text()).toBe("hello file");
    const relative = await fetch(`${s.url}/api/file/upload/relative.txt`, {
      method: "POST",
      headers: { "X-Session-API-Key": KEY },
      body: form,
    });
    expect(relative.status).toBe(500);
    expect(await relative.json()).toEqual({
      detail: "Internal Server Error",
      exception: "500: Failed to upload file: 400: Path must be absolute",
    });
    expect((await call(s.url, "POST", `/api/file/upload/${encodeURIComponent(target)}`, {})).status).toBe(
      422,
    );
    expect(await call(s.url, "GET", `/api/file/download/${encodeURIComponent(`${target}.missing`)}`)).toEqual(
      {
        status: 404,
        body: { detail: "File not found" },
      },
    );
  });

  it("fails a command with 500 when the bash events folder cannot be written", async () => {
    const blocker = join(tempDir(), "file");
    writeFileSync(blocker, "x");
    const s = await startStandin({ OH_BASH_EVENTS_DIR: join(blocker, "bash_events") });
    const res = await call(s.url, "POST", "/api/bash/execute_bash_command", { command: "true" });
    expect(res.status).toBe(500);
    expect(res.body).toMatchObject({ detail: "Internal Server Error" });
  });

  it("speaks the service's HttpAgentClient calls", async () => {
    const s = await startStandin();
    const client = new HttpAgentClient();
    const agent = { url: s.url, sessionApiKey: KEY };
    const body = startBody(join(s.dir, "p"));
    const info = await client.startConversation(agent, body);
    expect(info.executionStatus).toBe("running");
    const [got, none] = await client.getConversations(agent, [body.conversation_id, hex()], 5000);
    expect(got?.id).toBe(info.id);
    expect(none).toBeNull();
    expect(await client.generateTitle(agent, body.conversation_id, 50, 5000)).toBe("Hello there");
    expect(await client.executeCommand(agent, { command: "echo ok" })).toEqual({
      exitCode: 0,
      stdout: "ok\n",
      stderr: "",
    });
    await expect(
      client.startConversation(agent, startBody(join(s.dir, "p"), { llm: { model: "" } })),
    ).rejects.toMatchObject({ status: 422 });
  });
});

describe("stand-in agent-server: events websocket", () => {
  it("streams a full state, the stored events, new events, and takes messages like sockets.py", async () => {
    const s = await startStandin();
    const body = startBody(join(s.dir, "p"));
    await call(s.url, "POST", "/api/conversations", body);
    const wsUrl = s.url.replace("http:", "ws:");
    const ws = new WebSocket(
      `${wsUrl}/sockets/events/${body.conversation_id}?resend_all=true&session_api_key=${KEY}`,
    );
    const got: Record<string, unknown>[] = [];
    ws.addEventListener("message", (e) => got.push(JSON.parse(String(e.data)) as Record<string, unknown>));
    await new Promise((resolve, reject) => {
      ws.addEventListener("open", resolve);
      ws.addEventListener("error", reject);
    });
    const until = async (predicate: () => boolean): Promise<void> => {
      const end = Date.now() + 5000;
      while (!predicate()) {
        if (Date.now() > end) throw new Error(`timed out; got ${JSON.stringify(got.map((e) => e.kind))}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    await until(() => got.length >= 5);
    expect(got[0]).toMatchObject({ kind: "ConversationStateUpdateEvent", key: "full_state" });
    expect(got.slice(1, 4).map((e) => e.kind)).toEqual([
      "SystemPromptEvent",
      "ConversationStateUpdateEvent",
      "MessageEvent",
    ]);
    ws.send(JSON.stringify({ role: "user", content: [{ type: "text", text: "via the socket" }] }));
    await until(() => got.some((e) => JSON.stringify(e).includes("via the socket")));
    await call(s.url, "POST", `/api/conversations/${body.conversation_id}/pause`);
    await until(() => got.some((e) => e.key === "execution_status" && e.value === "paused"));
    ws.close();

    const requests = (await call(s.url, "GET", "/__standin/requests")).body as {
      requests: Record<string, unknown>[];
    };
    const upgrade = requests.requests.find((r) => String(r.path).startsWith("/sockets/"));
    expect(upgrade).toMatchObject({
      status: 101,
      query: { session_api_key: ["<redacted>"], resend_all: ["true"] },
    });

    const refused = new WebSocket(`${wsUrl}/sockets/events/${body.conversation_id}?session_api_key=wrong`);
    await new Promise((resolve) => refused.addEventListener("error", resolve));
    const unknown = new WebSocket(`${wsUrl}/sockets/events/${hex()}?session_api_key=${KEY}`);
    const code = await new Promise((resolve) => unknown.addEventListener("close", (e) => resolve(e.code)));
    expect(code).toBe(4004);
  });
});

describe("stand-in agent-server: webhooks", () => {
  let receiver: Server;
  let receiverUrl = "";
  const received: { path: string; key: string | undefined; body: unknown }[] = [];
  let failEvents = 0;
  beforeAll(async () => {
    receiver = createServer((req: IncomingMessage, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const key = req.headers["x-session-api-key"];
        received.push({
          path: req.url ?? "",
          key: typeof key === "string" ? key : undefined,
          body: JSON.parse(Buffer.concat(chunks).toString()),
        });
        const fail = (req.url ?? "").includes("/events/") && failEvents > 0;
        if (fail) failEvents--;
        res.writeHead(fail ? 503 : 200, { "content-type": "application/json" }).end('{"success":true}');
      });
    });
    await new Promise<void>((r) => receiver.listen(0, "127.0.0.1", r));
    receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/api/v1/webhooks/sb1`;
  });
  afterAll(async () => {
    await new Promise((r) => receiver.close(r));
  });
  const until = async (predicate: () => boolean, ms = 5000): Promise<void> => {
    const end = Date.now() + ms;
    while (!predicate()) {
      if (Date.now() > end) throw new Error("timed out waiting");
      await new Promise((r) => setTimeout(r, 20));
    }
  };

  it("posts ConversationInfo inline and event batches with the session key", async () => {
    received.length = 0;
    failEvents = 0;
    const s = await startStandin({
      OH_WEBHOOKS_0_BASE_URL: receiverUrl,
      OH_WEBHOOKS_0_FLUSH_DELAY: "0.2",
      OH_WEBHOOKS_0_RETRY_DELAY: "0",
    });
    const body = startBody(join(s.dir, "p"));
    const started = await call(s.url, "POST", "/api/conversations", body);
    expect(started.status).toBe(201);
    // The conversation info is posted before the start answers.
    const info = received.find((r) => r.path === "/api/v1/webhooks/sb1/conversations");
    expect(info).toMatchObject({
      key: KEY,
      body: { id: (started.body as { id: string }).id, execution_status: "running" },
    });
    await until(() => received.some((r) => r.path.startsWith("/api/v1/webhooks/sb1/events/")));
    const batch = received.find((r) => r.path === `/api/v1/webhooks/sb1/events/${body.conversation_id}`);
    expect(batch?.key).toBe(KEY);
    const events = batch?.body as Record<string, unknown>[];
    expect(Array.isArray(events)).toBe(true);
    expect(events.map((e) => e.kind)).toEqual([
      "SystemPromptEvent",
      "ConversationStateUpdateEvent",
      "MessageEvent",
      "ConversationStateUpdateEvent",
    ]);
    for (const e of events) {
      expect(typeof e.id).toBe("string");
      expect(e.timestamp).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}$/);
      expect(["agent", "user", "environment"]).toContain(e.source);
    }
    expect(events[2]).toMatchObject({
      source: "user",
      llm_message: { role: "user", content: body.initial_message.content },
    });
    await call(s.url, "DELETE", `/api/conversations/${body.conversation_id}`);
    expect(received.filter((r) => r.path.endsWith("/conversations"))).toHaveLength(2);
  });

  it("retries a refused batch, then re-queues it with the next one", async () => {
    received.length = 0;
    failEvents = 2;
    const s = await startStandin({
      OH_WEBHOOKS_0_BASE_URL: receiverUrl,
      OH_WEBHOOKS_0_EVENT_BUFFER_SIZE: "2",
      OH_WEBHOOKS_0_NUM_RETRIES: "1",
      OH_WEBHOOKS_0_RETRY_DELAY: "0",
      OH_WEBHOOKS_0_FLUSH_DELAY: "30",
    });
    const body = { ...startBody(join(s.dir, "p")), initial_message: null };
    await call(s.url, "POST", "/api/conversations", body);
    // Two events (system prompt, full state) fill the buffer: both attempts answer 503.
    await until(() => received.filter((r) => r.path.includes("/events/")).length === 2);
    const events = (n: number) => received.filter((r) => r.path.includes("/events/"))[n]?.body as unknown[];
    expect(events(0)).toHaveLength(2);
    expect(events(1)).toEqual(events(0));
    // The next event goes out with the two re-queued ones.
    await call(s.url, "POST", `/api/conversations/${body.conversation_id}/events`, {
      content: [{ type: "text", text: "more" }],
      run: true,
    });
    await until(() => received.filter((r) => r.path.includes("/events/")).length === 3);
    // The message fills the buffer again: the batch is the two re-queued events, then the message.
    expect(events(2)).toHaveLength(3);
    expect(events(2).slice(0, 2)).toEqual(events(0));
    expect(events(2)[2]).toMatchObject({ kind: "MessageEvent" });
    const attempts = (await call(s.url, "GET", "/__standin/webhooks")).body as {
      attempts: { status: number }[];
    };
    expect(attempts.attempts.map((a) => a.status)).toEqual(expect.arrayContaining([503, 503, 200]));
  });
});

describe("stand-in agent-server: boot (child process)", () => {
  const runMain = (env: Record<string, string>, args: string[]) =>
    spawnServer({ entry: MAIN, args, env: { PATH: process.env.PATH ?? "", ...env }, cwd: tempDir() });
  const freePort = async (): Promise<number> => {
    const srv = createServer();
    await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
    const port = (srv.address() as AddressInfo).port;
    await new Promise((r) => srv.close(r));
    return port;
  };

  it("exits with status 3 when the conversations folder cannot be created", async () => {
    const blocker = join(tempDir(), "file");
    writeFileSync(blocker, "x");
    const run = runMain(
      { STANDIN_BOOT_DELAY_MS: "0", OH_CONVERSATIONS_PATH: join(blocker, "conversations") },
      ["--host", "127.0.0.1", "--port", String(await freePort())],
    );
    expect(await run.exited()).toBe(3);
    expect(run.output()).toContain("Application startup failed");
  });

  it("listens only after the boot delay, on --host/--port, and creates its state folder", async () => {
    const port = await freePort();
    const run = runMain({ STANDIN_BOOT_DELAY_MS: "1200", OH_SESSION_API_KEYS_0: KEY }, [
      "--host",
      "127.0.0.1",
      "--port",
      String(port),
    ]);
    try {
      const started = Date.now();
      await new Promise((r) => setTimeout(r, 300));
      await expect(fetch(`http://127.0.0.1:${port}/alive`)).rejects.toThrow();
      let alive = false;
      while (!alive && Date.now() - started < 10_000) {
        alive = await fetch(`http://127.0.0.1:${port}/alive`).then(
          (r) => r.ok,
          () => false,
        );
        if (!alive) await new Promise((r) => setTimeout(r, 50));
      }
      expect(alive).toBe(true);
      expect(Date.now() - started).toBeGreaterThanOrEqual(1200);
      expect(run.output()).toContain(`Starting OpenHands Agent Server on 127.0.0.1:${port}`);
    } finally {
      await run.stop();
    }
  });

  it("refuses a bad --port like argparse (status 2)", async () => {
    const run = runMain({ STANDIN_BOOT_DELAY_MS: "0" }, ["--port", "eighty"]);
    expect(await run.exited()).toBe(2);
    expect(run.output()).toContain("argument --port: invalid int value: 'eighty'");
  });
});
