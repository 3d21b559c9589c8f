import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { afterAll, describe, expect, it } from "vitest";
import { errorSummary } from "../../src/adapters/agent-client/http-agent-client.ts";
import {
  agentStartRequest,
  parseSkillFiles,
  skillFilesCommand,
  toMcpServers,
  workHostsSkill,
} from "../../src/domain/conversations/agent-request.ts";
import type { ConversationConfig } from "../../src/domain/settings/settings-service.ts";
import {
  AgentType,
  AppConversationStartRequestSchema,
} from "../../src/gen/workspace/v1/app_conversation_pb.js";

const config = (over: Partial<ConversationConfig> = {}): ConversationConfig => ({
  llmModel: "anthropic/claude-sonnet-4-5",
  llmBaseUrl: null,
  llmApiKey: "sk-test",
  confirmationMode: false,
  securityAnalyzer: null,
  maxIterations: null,
  gitUserName: null,
  gitUserEmail: null,
  mcpConfig: null,
  providerTokens: {},
  ...over,
});

const build = (over: Partial<Parameters<typeof agentStartRequest>[0]> = {}) =>
  agentStartRequest({
    request: create(AppConversationStartRequestSchema, {}),
    conversationId: "a".repeat(32),
    model: "anthropic/claude-sonnet-4-5",
    config: config(),
    customSecrets: {},
    provider: null,
    workingDir: "/workspace/project",
    skills: [],
    ...over,
  }) as {
    agent: Record<string, unknown> & { tools: { name: string }[]; condenser: Record<string, unknown> };
    secrets: Record<string, unknown>;
  };

describe("the agent-server start request", () => {
  it("points a model on the server's loopback at the sandbox's host gateway; other URLs and sandboxes unchanged", () => {
    const llmOf = (base: string | null, hostGateway?: string) =>
      build({ config: config({ llmBaseUrl: base }), ...(hostGateway ? { hostGateway } : {}) }).agent.llm as {
        base_url: string | null;
      };
    expect(llmOf("http://localhost:11434", "host.docker.internal").base_url).toBe(
      "http://host.docker.internal:11434",
    );
    expect(llmOf("http://127.0.0.1:4000/v1", "10.213.0.1").base_url).toBe("http://10.213.0.1:4000/v1");
    expect(llmOf("http://[::1]:8080/v1/", "10.213.0.1").base_url).toBe("http://10.213.0.1:8080/v1/");
    expect(llmOf("https://models.example.com/v1", "10.213.0.1").base_url).toBe(
      "https://models.example.com/v1",
    );
    expect(llmOf("http://localhost:11434").base_url).toBe("http://localhost:11434");
    expect(llmOf(null, "10.213.0.1").base_url).toBeNull();
    // The condenser's model too.
    const { agent } = build({
      config: config({ llmBaseUrl: "http://localhost:11434" }),
      hostGateway: "10.213.0.1",
    });
    expect((agent.condenser.llm as { base_url: string }).base_url).toBe("http://10.213.0.1:11434");
  });

  it("gives the default agent the SDK's default tools, prompt arguments and summarising condenser", () => {
    const { agent } = build();
    expect(agent.tools.map((t) => t.name)).toEqual([
      "terminal",
      "file_editor",
      "task_tracker",
      "browser_tool_set",
    ]);
    expect(agent.system_prompt_kwargs).toEqual({ cli_mode: false });
    expect(agent.condenser).toMatchObject({
      kind: "LLMSummarizingCondenser",
      llm: { model: "anthropic/claude-sonnet-4-5", api_key: "sk-test", usage_id: "condenser" },
      max_size: 80,
      keep_first: 4,
    });
    // Nothing the SDK's Agent does not know (it drops extra keys; the LLM forbids them).
    expect(Object.keys(agent).sort()).toEqual(["condenser", "kind", "llm", "system_prompt_kwargs", "tools"]);
    expect(Object.keys(agent.llm as object).sort()).toEqual(["api_key", "base_url", "model", "usage_id"]);
  });

  it("gives a plan agent the planning tools, prompt and condenser", () => {
    const { agent } = build({
      request: create(AppConversationStartRequestSchema, { agentType: AgentType.PLAN }),
    });
    expect(agent.tools.map((t) => t.name)).toEqual(["glob", "grep", "planning_file_editor"]);
    expect(agent.system_prompt_filename).toBe("system_prompt_planning.j2");
    expect(Object.keys(agent.system_prompt_kwargs as object)).toEqual(["plan_structure"]);
    expect(agent.condenser).toMatchObject({
      max_size: 100,
      keep_first: 6,
      llm: { usage_id: "planning_condenser" },
    });
  });

  it("sends the conversation's provider token only, and the custom secrets, as static secrets", () => {
    const { secrets } = build({
      provider: "gitlab",
      customSecrets: { API: "v" },
      config: config({
        providerTokens: { github: { token: "gh", host: null }, gitlab: { token: "gl", host: null } },
      }),
    });
    expect(secrets).toEqual({
      API: { kind: "StaticSecret", value: "v" },
      GITLAB_TOKEN: { kind: "StaticSecret", value: "gl" },
    });
  });

  it("converts stored MCP servers to fastmcp's mcpServers, and sends none for an empty configuration", () => {
    expect(toMcpServers(null)).toBeNull();
    expect(toMcpServers({ sse_servers: [], stdio_servers: [], shttp_servers: [] })).toBeNull();
    expect(
      toMcpServers({
        sse_servers: [{ url: "https://a.example/sse", api_key: "k1" }],
        shttp_servers: [{ url: "https://b.example/mcp", api_key: null, timeout: 60 }],
        stdio_servers: [
          { name: "fetch", command: "uvx", args: ["mcp-server-fetch"], env: { TOKEN: "t" } },
          { name: "fetch", command: "npx", args: [], env: {} },
        ],
      }),
    ).toEqual({
      mcpServers: {
        sse_1: {
          url: "https://a.example/sse",
          transport: "sse",
          headers: { Authorization: "Bearer k1", "X-Session-API-Key": "k1" },
        },
        shttp_1: { url: "https://b.example/mcp", transport: "http" },
        fetch: { command: "uvx", args: ["mcp-server-fetch"], env: { TOKEN: "t" } },
        fetch_2: { command: "npx", args: [], env: {} },
      },
    });
    const { agent } = build({
      config: config({ mcpConfig: { sse_servers: [], stdio_servers: [], shttp_servers: [] } }),
    });
    expect("mcp_config" in agent).toBe(false);
  });

  it("puts skills and the message suffix in the agent's context", () => {
    const hosts = workHostsSkill([{ url: "http://127.0.0.1:40001", port: 40001 }]);
    const { agent } = build({
      request: create(AppConversationStartRequestSchema, { systemMessageSuffix: "Be brief." }),
      skills: hosts === null ? [] : [hosts],
    });
    expect(agent.agent_context).toMatchObject({
      system_message_suffix: "Be brief.",
      skills: [
        { name: "work_hosts", trigger: null, content: expect.stringContaining("http://127.0.0.1:40001") },
      ],
    });
  });
});

describe("repository skills", () => {
  const dir = mkdtempSync(join(tmpdir(), "aws-skills-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("lists a repository's skill files in one command and reads them as the SDK does", () => {
    mkdirSync(join(dir, ".openhands/skills/sub"), { recursive: true });
    mkdirSync(join(dir, ".openhands/microagents"), { recursive: true });
    writeFileSync(join(dir, "agents.md"), "Run the tests with make test.\n");
    writeFileSync(
      join(dir, ".openhands/skills/sub/deploy.md"),
      "---\ntriggers: [deploy]\n---\nUse the staging host.",
    );
    writeFileSync(
      join(dir, ".openhands/skills/fix.md"),
      "---\nname: fix-issue\ninputs:\n  - name: N\n    description: issue number\n---\nFix issue {{ N }}.",
    );
    writeFileSync(join(dir, ".openhands/skills/README.md"), "not a skill");
    writeFileSync(join(dir, ".openhands/skills/broken.md"), "---\ntriggers: 3\n---\nx");
    writeFileSync(join(dir, ".openhands/microagents/deploy.md"), "older deploy notes");
    writeFileSync(join(dir, ".openhands/microagents/repo.md"), "Always active.");
    const stdout = execFileSync("/bin/sh", ["-c", skillFilesCommand()], { cwd: dir, encoding: "utf8" });
    const skipped: string[] = [];
    const skills = parseSkillFiles(stdout, (path) => skipped.push(path));
    expect(skipped).toEqual([".openhands/skills/broken.md"]);
    expect(skills).toEqual([
      { name: "agents", content: "Run the tests with make test.\n", trigger: null, source: "agents.md" },
      {
        name: "fix-issue",
        content: "Fix issue {{ N }}.",
        trigger: { type: "task", triggers: ["/fix-issue"] },
        source: ".openhands/skills/fix.md",
        inputs: [{ name: "N", description: "issue number" }],
      },
      // .openhands/skills wins over .openhands/microagents for the same name.
      {
        name: "deploy",
        content: "Use the staging host.",
        trigger: { type: "keyword", keywords: ["deploy"] },
        source: ".openhands/skills/sub/deploy.md",
      },
      { name: "repo", content: "Always active.", trigger: null, source: ".openhands/microagents/repo.md" },
    ]);
  });

  it("finds nothing in a folder without skills", () => {
    const empty = mkdtempSync(join(dir, "empty-"));
    expect(
      parseSkillFiles(execFileSync("/bin/sh", ["-c", skillFilesCommand()], { cwd: empty, encoding: "utf8" })),
    ).toEqual([]);
  });
});

describe("agent error answers", () => {
  it("keep a FastAPI 422's locations and messages, never its echoed input", () => {
    const body = JSON.stringify({
      detail: [
        {
          type: "value_error",
          loc: ["body", "agent", "llm"],
          msg: "Value error, model must be specified in LLM",
          input: { model: null, api_key: "sk-leak" },
        },
      ],
    });
    const s = errorSummary(body);
    expect(s).toBe("body.agent.llm: Value error, model must be specified in LLM");
    expect(s).not.toContain("sk-leak");
  });

  it("keep a 500's detail and exception", () => {
    expect(
      errorSummary(
        JSON.stringify({
          detail: "Internal Server Error",
          exception: "No MCP servers defined in the config",
        }),
      ),
    ).toBe("Internal Server Error: No MCP servers defined in the config");
    expect(errorSummary("<html>bad gateway</html>")).toBe("<html>bad gateway</html>");
  });
});
