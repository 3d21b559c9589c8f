/**
 * How the terminal chat (chat.ts) gets to a conversation whose agent it can talk to: it starts one and follows its
 * start task, saying each step, or reads the one asked for; then resumes its sandbox when paused or stopped, or
 * waits for it to come up.
 */
import { existsSync } from "node:fs";
import { resolve as resolvePath } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { ApiError, type createApiClient } from "./api-client.ts";
import type { Json, Style } from "./chat-text.ts";

/** A conversation as the chat reads it (GET /api/v1/app-conversations). */
export interface AppConversation {
  id: string;
  sandbox_id: string;
  title: string | null;
  sandbox_status: string;
  execution_status: string | null;
  conversation_url: string | null;
  session_api_key: string | null;
}

interface StartTask {
  id: string;
  status: string;
  detail: string | null;
  app_conversation_id: string | null;
}

/** What a person reads for a start task's status. */
export const START_STEPS: Record<string, string> = {
  WORKING: "starting",
  WAITING_FOR_SANDBOX: "waiting for a sandbox",
  PREPARING_REPOSITORY: "preparing the repository",
  RUNNING_SETUP_SCRIPT: "running the repository's setup script",
  SETTING_UP_GIT_HOOKS: "setting up git hooks",
  SETTING_UP_SKILLS: "reading the repository's skills",
  STARTING_CONVERSATION: "starting the agent",
  READY: "ready",
};

/** What to do about a start that ended in ERROR, from its detail; null when the detail says it already. */
export function startHint(detail: string): string | null {
  if (/llm_model|LLM model/i.test(detail))
    return "Set a model first: npm run cli -- settings set llm_model=PROVIDER/MODEL llm_api_key=KEY (and llm_base_url=URL for a local or self-hosted model server).";
  if (/sandbox limit|limit reached/i.test(detail))
    return "Delete sandboxes you no longer need: npm run cli -- sandboxes list, then sandboxes delete ID.";
  if (/clone|repositor/i.test(detail))
    return "Check the repository (--repo): its name, that it exists, and a git provider token for a private one.";
  return null;
}

export type Api = ReturnType<typeof createApiClient>;
/** A line of the chat's own, in a style. */
export type Info = (text: string, style?: Style) => void;

/** What a new conversation starts with (chat's --repo, --branch, --message). */
export interface NewConversation {
  /** A new conversation's repository: `owner/name`, a URL, or a local path (absolute, or made absolute). */
  repo?: string | undefined;
  branch?: string | undefined;
  /** A new conversation's first message. */
  message?: string | undefined;
}

/** Starts a conversation and follows its start task: its id when READY, null (said why) on ERROR. */
export async function startConversation(o: NewConversation, api: Api, info: Info): Promise<string | null> {
  const body: Json = {};
  if (o.message !== undefined && o.message !== "")
    body.initial_message = { role: "user", content: [{ type: "text", text: o.message }] };
  if (o.repo !== undefined) {
    // A folder that exists here is named by its absolute path (the server clones local repositories by path).
    const local =
      !/^[\w.-]+\/[\w.-]+$/.test(o.repo) && !/^[a-z][a-z0-9+.-]*:/i.test(o.repo) && existsSync(o.repo);
    body.selected_repository = local ? resolvePath(o.repo) : o.repo;
  }
  if (o.branch !== undefined) body.selected_branch = o.branch;
  info(
    `Starting a conversation${typeof body.selected_repository === "string" ? ` on ${body.selected_repository}` : ""}…`,
  );
  let task = await api<StartTask>("POST", "/api/v1/app-conversations", body);
  let shown = "";
  for (;;) {
    if (task.status !== shown && task.status !== "READY" && task.status !== "ERROR") {
      shown = task.status;
      info(`  ${START_STEPS[task.status] ?? task.status.toLowerCase().replaceAll("_", " ")}`, "dim");
    }
    if (task.status === "READY" && task.app_conversation_id) return task.app_conversation_id;
    if (task.status === "ERROR") {
      info(`The conversation could not start: ${task.detail ?? "no reason given"}`, "red");
      const hint = startHint(task.detail ?? "");
      if (hint !== null) info(hint, "yellow");
      return null;
    }
    await sleep(300);
    const [next] = await api<(StartTask | null)[]>(
      "GET",
      `/api/v1/app-conversations/start-tasks?ids=${encodeURIComponent(task.id)}`,
    );
    if (next === null || next === undefined) throw new Error(`start task ${task.id} is gone`);
    task = next;
  }
}

/**
 * The conversation once its sandbox runs: a paused sandbox (or one stopped on an error) is resumed, a starting one
 * waited for (up to 2 minutes), saying so. Null (said why) when its sandbox is gone or does not come up.
 */
export async function ensureRunning(
  start: AppConversation,
  read: (id: string) => Promise<AppConversation | null>,
  api: Api,
  info: Info,
): Promise<AppConversation | null> {
  let c: AppConversation | null = start;
  const deadline = Date.now() + 120_000;
  const said = new Set<string>();
  const resumed = new Set<string>();
  for (;;) {
    if (c === null) {
      info(`error: conversation ${start.id} is gone`, "red");
      return null;
    }
    const status = c.sandbox_status;
    if (status === "RUNNING" && c.session_api_key && c.conversation_url) {
      if (resumed.size > 0) info("  its sandbox runs again", "dim");
      return c;
    }
    if (status === "MISSING") {
      info(
        `error: the sandbox of conversation ${c.id} is gone (deleted or lost); start a new conversation: npm run cli -- chat`,
        "red",
      );
      return null;
    }
    if ((status === "PAUSED" || status === "ERROR") && !resumed.has(status)) {
      resumed.add(status);
      info(
        status === "PAUSED"
          ? "Its sandbox is paused: resuming it…"
          : "Its sandbox stopped on an error: starting it again…",
        "yellow",
      );
      try {
        await api("POST", `/api/v1/sandboxes/${encodeURIComponent(c.sandbox_id)}/resume`);
      } catch (err) {
        if (!(err instanceof ApiError)) throw err;
        info(`error: the sandbox could not be resumed: ${err.message}`, "red");
        return null;
      }
    } else if (!said.has(status) && status !== "RUNNING" && !resumed.has(status)) {
      said.add(status);
      info(`Waiting for its sandbox (${status.toLowerCase()})…`, "dim");
    }
    if (Date.now() > deadline) {
      info(`error: the sandbox of conversation ${c.id} is still ${status} after 2 minutes`, "red");
      return null;
    }
    await sleep(500);
    c = await read(c.id);
  }
}
