/**
 * The agent-server's StartConversationRequest, built as the reference builds it (its conversation service and the
 * SDK's agent presets): the agent with its tool set, prompt arguments and summarising condenser, the user's MCP
 * servers in the shape the agent's MCP client (fastmcp) reads, the skills of the repository, the confirmation
 * policy, the workspace, the initial message and the secrets.
 */
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { messageJson } from "../../codec/conversation-json.ts";
import { viaGateway } from "../../core/loopback-url.ts";
import type { AppConversationStartRequest } from "../../gen/workspace/v1/app_conversation_pb.js";
import { AgentType } from "../../gen/workspace/v1/app_conversation_pb.js";
import { parseMicroagent } from "../git/microagent-content.ts";
import type { ConversationConfig } from "../settings/settings-service.ts";

/** The SDK's default preset: terminal, file editor, task tracker and the browser tools. */
export const DEFAULT_TOOLS = ["terminal", "file_editor", "task_tracker", "browser_tool_set"] as const;
/** The SDK's planning preset: read and search the code, write only the plan. */
export const PLANNING_TOOLS = ["glob", "grep", "planning_file_editor"] as const;

/**
 * What the planning agent's prompt asks a plan to hold (the `plan_structure` argument of the SDK's planning
 * prompt template).
 */
const PLAN_STRUCTURE = [
  "Write the plan in PLAN.md with these sections, in this order:",
  "1. Goal: what the user wants, in a few sentences, and what is out of scope.",
  "2. Findings: the files, functions and behaviour that matter, with paths.",
  "3. Approach: the change, step by step, and the alternatives set aside with the reason.",
  "4. Checks: how to tell the change works (tests to add or run, commands, expected results).",
].join("\n");

/** A skill of the agent's context, in the SDK's shape. */
export interface SkillJson extends JsonObject {
  name: string;
  content: string;
  trigger: { type: "keyword"; keywords: string[] } | { type: "task"; triggers: string[] } | null;
  source: string | null;
}

type StoredMcp = NonNullable<ConversationConfig["mcpConfig"]>;

/**
 * The stored MCP servers (the settings' `{sse_servers, stdio_servers, shttp_servers}`) as fastmcp's configuration,
 * `{"mcpServers": {name: server}}`: remote servers with their transport and, when they have a key, the headers the
 * reference's MCP client sends; stdio servers under their names. Null when there is no server (the agent-server
 * fails a conversation whose configuration is non-empty but names no server).
 */
export function toMcpServers(stored: StoredMcp | null): JsonObject | null {
  if (stored === null) return null;
  const servers: JsonObject = {};
  const remote = (url: string, transport: "sse" | "http", apiKey: string | null): JsonObject => ({
    url,
    transport,
    ...(apiKey ? { headers: { Authorization: `Bearer ${apiKey}`, "X-Session-API-Key": apiKey } } : {}),
  });
  stored.sse_servers.forEach((s, i) => {
    servers[`sse_${i + 1}`] = remote(s.url, "sse", s.api_key);
  });
  stored.shttp_servers.forEach((s, i) => {
    servers[`shttp_${i + 1}`] = remote(s.url, "http", s.api_key);
  });
  for (const s of stored.stdio_servers) {
    let name = s.name;
    for (let n = 2; servers[name] !== undefined; n++) name = `${s.name}_${n}`;
    servers[name] = { command: s.command, args: [...s.args], env: { ...s.env } };
  }
  return Object.keys(servers).length === 0 ? null : { mcpServers: servers };
}

/** Largest part of a skill file read, and most skill files read, per conversation start. */
const SKILL_FILE_BYTES = 65_536;
const SKILL_FILES = 100;
/** All of them: under the agent-server's 1 MiB output chunk, so the command's answer is one piece. */
const SKILL_OUTPUT_BYTES = 900_000;

/**
 * A POSIX shell command, run in the repository's folder, that prints its skill files as the reference loads them
 * (`.cursorrules`, `agents.md`, `agent.md` at the root; every `*.md` but READMEs under `.openhands/skills` and
 * `.openhands/microagents`), each as NUL, its path, NUL, then its first {@link SKILL_FILE_BYTES} bytes, at most
 * {@link SKILL_OUTPUT_BYTES} in all. One call for every file (the reference makes one per file).
 */
export function skillFilesCommand(): string {
  return [
    `{`,
    `for f in .cursorrules agents.md agent.md; do`,
    `  if [ -f "$f" ]; then printf '\\0%s\\0' "$f"; head -c ${SKILL_FILE_BYTES} "$f"; fi`,
    `done`,
    `for d in .openhands/skills .openhands/microagents; do`,
    `  [ -d "$d" ] || continue`,
    `  find "$d" -type f -name '*.md' 2>/dev/null | grep -v 'README.md' | sort | head -n ${SKILL_FILES} |`,
    `    while IFS= read -r f; do printf '\\0%s\\0' "$f"; head -c ${SKILL_FILE_BYTES} "$f"; done`,
    `done`,
    `} | head -c ${SKILL_OUTPUT_BYTES}`,
    `exit 0`,
  ].join("\n");
}

/** The names the SDK gives other agents' instruction files. */
const THIRD_PARTY_NAMES: Record<string, string> = {
  ".cursorrules": "cursorrules",
  "agents.md": "agents",
  "agent.md": "agents",
};

/**
 * The skills in the output of {@link skillFilesCommand}, as the SDK loads them: other agents' files whole and
 * always active; others named by their file name (or their front matter's `name`), with a keyword trigger for
 * `triggers`, a task trigger for `inputs`, always active otherwise. A file that cannot be read is left out (the
 * reference logs it and goes on); the root files win over `.openhands/skills`, which wins over
 * `.openhands/microagents`, name by name.
 */
export function parseSkillFiles(stdout: string, onSkip?: (path: string, why: string) => void): SkillJson[] {
  const parts = stdout.split("\0");
  const byName = new Map<string, SkillJson>();
  for (let i = 1; i + 1 < parts.length; i += 2) {
    const path = parts[i] ?? "";
    const text = parts[i + 1] ?? "";
    if (text.trim() === "") continue;
    const skill = toSkill(path, text, onSkip);
    if (skill !== null && !byName.has(skill.name)) byName.set(skill.name, skill);
  }
  return [...byName.values()];
}

function toSkill(path: string, text: string, onSkip?: (path: string, why: string) => void): SkillJson | null {
  const third = THIRD_PARTY_NAMES[path.toLowerCase()];
  if (third !== undefined) return { name: third, content: text, trigger: null, source: path };
  let parsed: ReturnType<typeof parseMicroagent>;
  try {
    parsed = parseMicroagent(path, text);
  } catch (err) {
    onSkip?.(path, err instanceof Error ? err.message : String(err));
    return null;
  }
  const file = path.split("/").at(-1) ?? path;
  const name = parsed.name ?? file.replace(/\.md$/, "");
  const skill: SkillJson = { name, content: parsed.content, trigger: null, source: path };
  if (parsed.inputs !== undefined) {
    const inputs = parsed.inputs.filter(
      (i): i is { name: string; description: string } =>
        typeof i === "object" &&
        i !== null &&
        typeof (i as { name?: unknown }).name === "string" &&
        typeof (i as { description?: unknown }).description === "string",
    );
    if (inputs.length !== parsed.inputs.length) {
      onSkip?.(path, "every input needs a name and a description");
      return null;
    }
    const triggers = parsed.triggers.includes(`/${name}`)
      ? parsed.triggers
      : [...parsed.triggers, `/${name}`];
    skill.trigger = { type: "task", triggers };
    skill.inputs = inputs.map((i) => ({ name: i.name, description: i.description }));
  } else if (parsed.triggers.length > 0) skill.trigger = { type: "keyword", keywords: parsed.triggers };
  return skill;
}

/** A skill telling the agent where applications it starts can be reached (the sandbox's worker ports). */
export function workHostsSkill(workers: readonly { url: string; port: number }[]): SkillJson | null {
  if (workers.length === 0) return null;
  const lines = workers.map((w) => `* ${w.url} (port ${w.port})`);
  return {
    name: "work_hosts",
    content: [
      "Web applications you start can be opened by the user at these addresses, each served from the port shown:",
      ...lines,
    ].join("\n"),
    trigger: null,
    source: null,
  };
}

/** Everything the start request is built from. */
export interface AgentStartInput {
  request: AppConversationStartRequest;
  conversationId: string;
  /** The model: the request's (or its parent's), else the settings'. */
  model: string;
  config: ConversationConfig;
  customSecrets: Record<string, string>;
  /** The provider whose token the conversation gets (the one it cloned with), or null. */
  provider: string | null;
  workingDir: string;
  skills: SkillJson[];
  /** The host as the sandbox reaches it (RuntimeHandle.hostGateway), where its loopback is its own. */
  hostGateway?: string | undefined;
}

/**
 * The StartConversationRequest (see the module comment). Secrets: the custom secrets, and the token of the
 * conversation's git provider as `<PROVIDER>_TOKEN`, each a static secret (the reference's, without a URL where
 * the sandbox could look a token up).
 */
export function agentStartRequest(input: AgentStartInput): Record<string, unknown> {
  const { request: r, config } = input;
  // A model on the server's loopback (an Ollama at localhost:11434) is on the sandbox's host gateway.
  const baseUrl =
    config.llmBaseUrl !== null && input.hostGateway
      ? viaGateway(config.llmBaseUrl, input.hostGateway)
      : config.llmBaseUrl;
  const llm = (usageId: string): JsonObject => ({
    model: input.model,
    base_url: baseUrl,
    api_key: config.llmApiKey,
    usage_id: usageId,
  });
  const plan = r.agentType === AgentType.PLAN;
  const agent: JsonObject = {
    kind: "Agent",
    llm: llm("agent"),
    tools: (plan ? PLANNING_TOOLS : DEFAULT_TOOLS).map((name) => ({ name, params: {} })),
    ...(plan
      ? {
          system_prompt_filename: "system_prompt_planning.j2",
          system_prompt_kwargs: { plan_structure: PLAN_STRUCTURE },
        }
      : { system_prompt_kwargs: { cli_mode: false } }),
    condenser: {
      kind: "LLMSummarizingCondenser",
      llm: llm(plan ? "planning_condenser" : "condenser"),
      max_size: plan ? 100 : 80,
      keep_first: plan ? 6 : 4,
    },
  };
  const context: JsonObject = {};
  if (r.systemMessageSuffix !== undefined) context.system_message_suffix = r.systemMessageSuffix;
  if (input.skills.length > 0) context.skills = input.skills as JsonValue[];
  if (Object.keys(context).length > 0) agent.agent_context = context;
  const mcp = toMcpServers(config.mcpConfig);
  if (mcp !== null) agent.mcp_config = mcp;

  const secrets: JsonObject = {};
  for (const [name, value] of Object.entries(input.customSecrets))
    secrets[name] = { kind: "StaticSecret", value };
  const token = input.provider === null ? undefined : config.providerTokens[input.provider];
  if (input.provider !== null && token !== undefined)
    secrets[`${input.provider.toUpperCase()}_TOKEN`] = { kind: "StaticSecret", value: token.token };

  const body: Record<string, unknown> = {
    conversation_id: input.conversationId,
    agent,
    workspace: { kind: "LocalWorkspace", working_dir: input.workingDir },
    confirmation_policy: { kind: config.confirmationMode ? "AlwaysConfirm" : "NeverConfirm" },
    initial_message: r.initialMessage ? messageJson(r.initialMessage) : null,
    secrets,
  };
  if (config.maxIterations !== null) body.max_iterations = config.maxIterations;
  return body;
}
