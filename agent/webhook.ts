/**
 * The agent server's webhook: conversations and their events posted to the service (the agent server's
 * OH_WEBHOOKS_0_* settings), batched per conversation and retried.
 */
import type { Json } from "./json.ts";

/**
 * The agent server's webhook, as the reference agent server has it: events are buffered per conversation and
 * posted as a JSON array to `<baseUrl>/events/<conversation id>` when `bufferSize` are waiting or `flushDelayMs`
 * after the first one; conversation info is posted to `<baseUrl>/conversations` at once. Every post carries the
 * session key in X-Session-API-Key and is retried `retries` times, `retryDelayMs` apart; events that still fail are
 * kept for the next post.
 */
export interface WebhookOptions {
  baseUrl: string;
  /** Default 5. */
  bufferSize?: number;
  /** Default 500 ms (the reference agent server waits 30 s; the built-in agent has few events and no LLM). */
  flushDelayMs?: number;
  /** Default 3. */
  retries?: number;
  /** Default 1000 ms. */
  retryDelayMs?: number;
}

/**
 * One POST of a JSON body through node:http(s), answering the status (the body is read and dropped); rejects on a
 * transport error or after 30 s. Not fetch: its first use loads undici, ~50 ms of the agent's event loop (the
 * first webhook is sent while the conversation start is being answered) and ~10 MiB in every sandbox.
 */
function postJson(url: string, headers: Record<string, string>, body: string): Promise<number> {
  const target = new URL(url);
  const { request } =
    target.protocol === "https:"
      ? process.getBuiltinModule("node:https")
      : process.getBuiltinModule("node:http");
  return new Promise((resolve, reject) => {
    const req = request(
      target,
      {
        method: "POST",
        headers: { ...headers, "content-length": String(Buffer.byteLength(body)) },
        timeout: 30_000,
      },
      (res) => {
        res.resume();
        res.once("end", () => resolve(res.statusCode ?? 0));
        res.once("error", reject);
      },
    );
    req.once("timeout", () => req.destroy(new Error("no answer within 30 s")));
    req.once("error", reject);
    req.end(body);
  });
}

/** The webhook sender (see {@link WebhookOptions}). */
export type Webhook = ReturnType<typeof createWebhook>;
export function createWebhook(o: WebhookOptions, sessionApiKey: string) {
  const base = o.baseUrl.replace(/\/+$/, "");
  const bufferSize = o.bufferSize ?? 5;
  const flushDelayMs = o.flushDelayMs ?? 500;
  const retries = o.retries ?? 3;
  const retryDelayMs = o.retryDelayMs ?? 1000;
  const queues = new Map<string, { events: Json[]; timer: NodeJS.Timeout | undefined; posting: boolean }>();
  const headers = { "content-type": "application/json", "x-session-api-key": sessionApiKey };

  /** Posts `body` (JSON text, fixed when the post is made: a retry sends what was true then). */
  async function post(url: string, body: string): Promise<boolean> {
    for (let attempt = 0; attempt <= retries; attempt++) {
      try {
        const status = await postJson(url, headers, body);
        if (status >= 200 && status < 300) return true;
        process.emitWarning(`webhook ${url} answered ${status}`);
        // Refused for what it is (too large, malformed): sending it again, alone or with later events, cannot
        // succeed and would hold back every later event of the conversation. Dropped.
        if (status >= 400 && status < 500 && status !== 401 && status !== 408 && status !== 429) return true;
      } catch (e: unknown) {
        process.emitWarning(`webhook ${url} failed: ${e instanceof Error ? e.message : String(e)}`);
      }
      if (attempt < retries) await new Promise((r) => setTimeout(r, retryDelayMs).unref());
    }
    return false;
  }

  /**
   * Posts the conversation's waiting events: one post in flight per conversation, so that they arrive in order;
   * what comes while one is in flight goes right after it (the post was its batching window).
   */
  function flush(conversationId: string): void {
    const q = queues.get(conversationId);
    if (q === undefined || q.events.length === 0) return;
    clearTimeout(q.timer);
    q.timer = undefined;
    if (q.posting) return;
    const batch = q.events.splice(0);
    q.posting = true;
    void post(`${base}/events/${conversationId}`, JSON.stringify(batch)).then((ok) => {
      q.posting = false;
      // Kept for the next post, in order, as the reference does.
      if (!ok) q.events.unshift(...batch);
      else flush(conversationId);
    });
  }

  return {
    event(conversationId: string, event: Json): void {
      let q = queues.get(conversationId);
      if (q === undefined) {
        q = { events: [], timer: undefined, posting: false };
        queues.set(conversationId, q);
      }
      q.events.push(event);
      if (q.events.length >= bufferSize) flush(conversationId);
      else q.timer ??= setTimeout(() => flush(conversationId), flushDelayMs).unref();
    },
    conversation(info: Json): void {
      void post(`${base}/conversations`, JSON.stringify(info));
    },
    flushAll(): void {
      for (const id of queues.keys()) flush(id);
    },
  };
}
