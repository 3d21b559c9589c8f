/**
 * A scripted OpenAI-compatible chat-completions server for agent tests: each POST to `/v1/chat/completions` (or
 * `/chat/completions`) takes the next scripted reply: a tool call, a final message, or an error status. Requests
 * are recorded (body and authorization) so tests can check what the agent sent.
 */
import { createServer, type Server } from "node:http";

export type FakeReply =
  | { content?: string; toolCalls?: { name: string; arguments: unknown; id?: string }[]; delayMs?: number }
  | { status: number; error?: string; delayMs?: number }
  /** Never answers (for timeouts and pause during a call). */
  | { hang: true };

export interface FakeRequest {
  body: {
    model: string;
    messages: { role: string; content: unknown; tool_calls?: unknown[]; tool_call_id?: string }[];
    tools?: { function: { name: string } }[];
  };
  authorization: string | undefined;
}

export interface FakeLlm {
  /** The base URL to give as `base_url` (ends in /v1). */
  url: string;
  requests: FakeRequest[];
  /** performance.now() when each answer (a completion or an error status) was written, in order. */
  answeredAt: number[];
  /** Appends replies to the script. */
  script(...replies: FakeReply[]): void;
  /** Resolves once `n` requests have arrived. */
  waitForRequests(n: number, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

export async function startFakeLlm(): Promise<FakeLlm> {
  const queue: FakeReply[] = [];
  const requests: FakeRequest[] = [];
  const answeredAt: number[] = [];
  const waiters: (() => void)[] = [];
  let counter = 0;
  const server: Server = createServer((req, res) => {
    let text = "";
    req.on("data", (c: Buffer) => {
      text += c.toString();
    });
    req.on("end", () => {
      if (req.method !== "POST" || !/\/chat\/completions$/.test(req.url ?? "")) {
        res.writeHead(404, { "content-type": "application/json" }).end('{"error":{"message":"not found"}}');
        return;
      }
      requests.push({ body: JSON.parse(text), authorization: req.headers.authorization });
      for (const w of waiters.splice(0)) w();
      const reply = queue.shift() ?? { content: "(no scripted reply left)" };
      if ("hang" in reply) return;
      const send = (): void => {
        if ("status" in reply) {
          res
            .writeHead(reply.status, { "content-type": "application/json" })
            .end(
              JSON.stringify({ error: { message: reply.error ?? `scripted ${reply.status}`, type: "fake" } }),
            );
          answeredAt.push(performance.now());
          return;
        }
        counter++;
        const toolCalls = (reply.toolCalls ?? []).map((c, i) => ({
          id: c.id ?? `call_${counter}_${i}`,
          type: "function",
          function: {
            name: c.name,
            arguments: typeof c.arguments === "string" ? c.arguments : JSON.stringify(c.arguments),
          },
        }));
        res.writeHead(200, { "content-type": "application/json" }).end(
          JSON.stringify({
            id: `chatcmpl-fake-${counter}`,
            object: "chat.completion",
            created: Math.floor(Date.now() / 1000),
            model: requests.at(-1)?.body.model ?? "fake",
            choices: [
              {
                index: 0,
                message: {
                  role: "assistant",
                  content: reply.content ?? null,
                  ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
                },
                finish_reason: toolCalls.length > 0 ? "tool_calls" : "stop",
              },
            ],
            usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
          }),
        );
        answeredAt.push(performance.now());
      };
      if (reply.delayMs) setTimeout(send, reply.delayMs);
      else send();
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const address = server.address();
  if (typeof address !== "object" || address === null) throw new Error("no address");
  return {
    url: `http://127.0.0.1:${address.port}/v1`,
    requests,
    answeredAt,
    script: (...replies) => {
      queue.push(...replies);
    },
    waitForRequests: async (n, timeoutMs = 10_000) => {
      const deadline = Date.now() + timeoutMs;
      while (requests.length < n) {
        if (Date.now() > deadline) throw new Error(`fake LLM: ${requests.length} of ${n} requests arrived`);
        await new Promise<void>((r) => {
          waiters.push(r);
          setTimeout(r, 50);
        });
      }
    },
    close: async () => {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}
