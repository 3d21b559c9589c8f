// The model of the team benchmark: an OpenAI-compatible chat-completions server (POST /v1/chat/completions) that
// answers at once from the request alone, so that any number of conversations share it without a script per
// conversation. A request whose last message is a tool result gets the final message ("done"); any other gets a
// terminal call (`echo hi`). So every user message is one turn of two model calls: the call, its observation, the
// answer. The answers are shaped as test/helpers/fake-llm.ts writes them. Prints {port, pid} as one JSON line.
import { createServer } from "node:http";

let counter = 0;

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (c: Buffer) => chunks.push(c));
  req.on("end", () => {
    if (req.method !== "POST" || !/\/chat\/completions$/.test(req.url ?? "")) {
      res.writeHead(404, { "content-type": "application/json" }).end('{"error":{"message":"not found"}}');
      return;
    }
    const body = JSON.parse(Buffer.concat(chunks).toString()) as {
      model?: string;
      messages?: { role: string }[];
    };
    counter++;
    const afterTool = body.messages?.at(-1)?.role === "tool";
    const message = afterTool
      ? { role: "assistant", content: "done" }
      : {
          role: "assistant",
          content: null,
          tool_calls: [
            {
              id: `call_${counter}`,
              type: "function",
              function: { name: "terminal", arguments: JSON.stringify({ command: "echo hi" }) },
            },
          ],
        };
    res.writeHead(200, { "content-type": "application/json" }).end(
      JSON.stringify({
        id: `chatcmpl-team-${counter}`,
        object: "chat.completion",
        created: Math.floor(Date.now() / 1000),
        model: body.model ?? "scripted",
        choices: [{ index: 0, message, finish_reason: afterTool ? "stop" : "tool_calls" }],
        usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
      }),
    );
  });
});

server.keepAliveTimeout = 60_000;
server.listen(0, "127.0.0.1", () => {
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  process.stdout.write(`${JSON.stringify({ port, pid: process.pid })}\n`);
});
process.on("SIGTERM", () => process.exit(0));
