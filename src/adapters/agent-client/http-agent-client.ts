import {
  AgentCallError,
  type AgentClient,
  type AgentCommand,
  type AgentCommandResult,
  type AgentConversationInfo,
  type AgentEndpoint,
} from "../../ports/agent-client.ts";

/** Extra time the HTTP call to run a command gets beyond the command's own timeout. */
const COMMAND_MARGIN_MS = 15_000;
/** Agent default timeout of a command (seconds), when none is given. */
const AGENT_DEFAULT_TIMEOUT_S = 60;
/** Ids per GET /api/conversations?ids=… (the agent-server refuses 100 or more). */
const MAX_IDS_PER_GET = 99;

/**
 * What an agent's error answer says, without what it echoes of the request: FastAPI's validation items give their
 * location and message (never their `input`, which holds the request's keys and tokens), other answers their
 * `detail` and `exception`; anything else is cut to 300 characters. The caller redacts the secrets it knows.
 */
export function errorSummary(text: string): string {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return text.slice(0, 300);
  }
  const detail = (body as { detail?: unknown } | null)?.detail;
  if (Array.isArray(detail)) {
    const items = detail.slice(0, 5).map((d: { loc?: unknown; msg?: unknown }) => {
      const loc = Array.isArray(d?.loc) ? d.loc.map(String).join(".") : "";
      return `${loc}${loc ? ": " : ""}${typeof d?.msg === "string" ? d.msg : "invalid"}`;
    });
    return `${items.join("; ")}${detail.length > 5 ? ` (and ${detail.length - 5} more)` : ""}`.slice(0, 1000);
  }
  const exception = (body as { exception?: unknown }).exception;
  const parts = [detail, exception].filter((p): p is string => typeof p === "string" && p !== "");
  return parts.length > 0 ? parts.join(": ").slice(0, 500) : "(no detail)";
}

export interface HttpAgentClientOptions {
  /** Timeout of POST /api/conversations (default 60 s). */
  startTimeoutMs?: number;
}

/** The agent server's HTTP API over fetch (keep-alive connections are pooled per agent). */
export class HttpAgentClient implements AgentClient {
  readonly #startTimeoutMs: number;

  constructor(options: HttpAgentClientOptions = {}) {
    this.#startTimeoutMs = options.startTimeoutMs ?? 60_000;
  }

  async executeCommand(
    agent: AgentEndpoint,
    command: AgentCommand,
    signal?: AbortSignal,
  ): Promise<AgentCommandResult> {
    const timeoutMs = (command.timeoutSeconds ?? AGENT_DEFAULT_TIMEOUT_S) * 1000 + COMMAND_MARGIN_MS;
    const body: Record<string, unknown> = { command: command.command };
    if (command.cwd !== undefined) body.cwd = command.cwd;
    if (command.timeoutSeconds !== undefined) body.timeout = command.timeoutSeconds;
    const out = await this.#call(agent, "POST", "/api/bash/execute_bash_command", body, timeoutMs, signal);
    const r = (out ?? {}) as Record<string, unknown>;
    if (typeof r.exit_code !== "number")
      throw new AgentCallError("the agent answered a command without an exit code", 200);
    return {
      exitCode: r.exit_code,
      stdout: typeof r.stdout === "string" ? r.stdout : "",
      stderr: typeof r.stderr === "string" ? r.stderr : "",
    };
  }

  async startConversation(
    agent: AgentEndpoint,
    request: Record<string, unknown>,
    signal?: AbortSignal,
  ): Promise<AgentConversationInfo> {
    const out = await this.#call(agent, "POST", "/api/conversations", request, this.#startTimeoutMs, signal);
    const info = toInfo(out);
    if (info === null) throw new AgentCallError("the agent answered without a conversation id", 200);
    return info;
  }

  async getConversations(
    agent: AgentEndpoint,
    ids: readonly string[],
    timeoutMs: number,
  ): Promise<(AgentConversationInfo | null)[]> {
    // The agent-server asserts fewer than 100 ids a call (500 otherwise).
    const chunks: string[][] = [];
    for (let i = 0; i < ids.length; i += MAX_IDS_PER_GET) chunks.push(ids.slice(i, i + MAX_IDS_PER_GET));
    const answers = await Promise.all(
      chunks.map(async (chunk) => {
        const query = new URLSearchParams(chunk.map((id): [string, string] => ["ids", id]));
        const out = await this.#call(agent, "GET", `/api/conversations?${query}`, undefined, timeoutMs);
        if (!Array.isArray(out) || out.length !== chunk.length)
          throw new AgentCallError("the agent answered a batch get without a list of as many items", 200);
        return out.map(toInfo);
      }),
    );
    return answers.flat();
  }

  async deleteConversation(agent: AgentEndpoint, conversationId: string, timeoutMs: number): Promise<void> {
    await this.#call(
      agent,
      "DELETE",
      `/api/conversations/${encodeURIComponent(conversationId)}`,
      undefined,
      timeoutMs,
    );
  }

  async updateConversationTitle(
    agent: AgentEndpoint,
    conversationId: string,
    title: string,
    timeoutMs: number,
  ): Promise<void> {
    const path = `/api/conversations/${encodeURIComponent(conversationId)}`;
    await this.#call(agent, "PATCH", path, { title }, timeoutMs);
  }

  async generateTitle(
    agent: AgentEndpoint,
    conversationId: string,
    maxLength: number,
    timeoutMs: number,
  ): Promise<string | null> {
    const path = `/api/conversations/${encodeURIComponent(conversationId)}/generate_title`;
    const out = await this.#call(agent, "POST", path, { max_length: maxLength }, timeoutMs);
    const title = (out as { title?: unknown } | null)?.title;
    return typeof title === "string" && title.trim() !== "" ? title : null;
  }

  async #call(
    agent: AgentEndpoint,
    method: "GET" | "POST" | "PATCH" | "DELETE",
    path: string,
    body: unknown,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<unknown> {
    const timeout = AbortSignal.timeout(timeoutMs);
    const combined = signal === undefined ? timeout : AbortSignal.any([signal, timeout]);
    let res: Response;
    try {
      res = await fetch(`${agent.url.replace(/\/+$/, "")}${path}`, {
        method,
        headers: {
          "x-session-api-key": agent.sessionApiKey,
          ...(body === undefined ? {} : { "content-type": "application/json" }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: combined,
      });
    } catch (err) {
      const reason = timeout.aborted
        ? `no answer within ${Math.round(timeoutMs / 1000)} s`
        : signal?.aborted
          ? "the call was cancelled"
          : "it could not be reached";
      throw new AgentCallError(
        `${method} ${path.split("?")[0]} on the agent server failed: ${reason}`,
        null,
        {
          cause: err,
        },
      );
    }
    const text = await res.text().catch(() => "");
    if (!res.ok) {
      throw new AgentCallError(
        `${method} ${path.split("?")[0]} on the agent server answered ${res.status}: ${errorSummary(text)}`,
        res.status,
      );
    }
    try {
      return JSON.parse(text) as unknown;
    } catch (err) {
      throw new AgentCallError(
        `${method} ${path.split("?")[0]} on the agent server answered non-JSON`,
        res.status,
        {
          cause: err,
        },
      );
    }
  }
}

function toInfo(value: unknown): AgentConversationInfo | null {
  if (typeof value !== "object" || value === null) return null;
  const v = value as Record<string, unknown>;
  if (typeof v.id !== "string") return null;
  // The SDK calls it execution_status (agent_status in older agent servers).
  const status = v.execution_status ?? v.agent_status;
  return { id: v.id, executionStatus: typeof status === "string" ? status.toLowerCase() : null };
}
