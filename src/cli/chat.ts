/**
 * `npm run cli -- chat [conversation id]`: a conversation in the terminal (docs/chat.md). It needs only the
 * service's URL and the user's API key: it starts a conversation (or reads one) with the user's key, then talks to
 * the conversation's agent through the same URL with the conversation's session key, as the OpenHands UI does
 * (docs/agent-proxy.md): the events websocket with `resend_all` (the history, then each new event), a user message
 * as a JSON message on it, and the agent's routes `pause`, `run` and `events/respond_to_confirmation`. The same
 * calls work with the built-in agent and the OpenHands agent-server, on either runtime.
 *
 * The events are rendered by chat-render.ts (or printed one JSON line each with --json, the chat's own lines then
 * going to stderr). Input is read with node:readline: a line is a message; a line ending in `\` goes on to the
 * next, and lines between two `"""` lines are one message. Ctrl-C pauses a running agent, a second one leaves;
 * `/exit` and end of input leave (when the input is not a terminal, after the agent's turn ends).
 *
 * This module reads the options and gets to the conversation (chat-start.ts); chat-session.ts is the attached
 * conversation.
 */
import { createApiClient } from "./api-client.ts";
import { ChatSession } from "./chat-session.ts";
import { type AppConversation, ensureRunning, startConversation } from "./chat-start.ts";
import { paint, type Style } from "./chat-text.ts";

export interface ChatOptions {
  /** The service's URL. */
  url: string;
  /** The user's API key. */
  key: string;
  /** Attach to this conversation; without it a new one is started. */
  conversationId?: string | undefined;
  /** Every event as one JSON line on stdout; the chat's own lines on stderr. */
  json?: boolean;
  /** A new conversation's repository: `owner/name`, a URL, or a local path (absolute, or made absolute). */
  repo?: string | undefined;
  branch?: string | undefined;
  /** A new conversation's first message. */
  message?: string | undefined;
  input?: NodeJS.ReadableStream & { isTTY?: boolean };
  output?: NodeJS.WritableStream & { isTTY?: boolean };
  errorOutput?: NodeJS.WritableStream;
  env?: NodeJS.ProcessEnv;
}

export async function runChat(o: ChatOptions): Promise<number> {
  const input = o.input ?? process.stdin;
  const output = o.output ?? process.stdout;
  const errorOutput = o.errorOutput ?? process.stderr;
  const env = o.env ?? process.env;
  const json = o.json === true;
  const tty = output.isTTY === true && !json;
  const color = tty && (env.NO_COLOR ?? "") === "";
  const info = (text: string, style?: Style) =>
    (json ? errorOutput : output).write(`${style ? paint(color, style, text) : text}\n`);
  const api = createApiClient(o.url, o.key);
  const read = async (id: string): Promise<AppConversation | null> =>
    (
      await api<(AppConversation | null)[]>("GET", `/api/v1/app-conversations?ids=${encodeURIComponent(id)}`)
    )[0] ?? null;

  let conversation: AppConversation;
  let started = false;
  if (o.conversationId !== undefined) {
    const found = await read(o.conversationId);
    if (found === null) {
      info(`error: there is no conversation ${o.conversationId} (of yours) on ${o.url}`, "red");
      return 1;
    }
    conversation = found;
  } else {
    const id = await startConversation(o, api, info);
    if (id === null) return 1;
    const found = await read(id);
    if (found === null) throw new Error(`conversation ${id} is not there after its start`);
    conversation = found;
    started = true;
  }
  const ready = await ensureRunning(conversation, read, api, info);
  if (ready === null) return 1;
  const session = new ChatSession({
    serviceUrl: o.url,
    conversation: ready,
    started,
    firstMessage: o.message ?? null,
    json,
    tty,
    color,
    input,
    output,
    errorOutput,
    read,
    resume: (c, say) => ensureRunning(c, read, api, say),
  });
  return session.run();
}
