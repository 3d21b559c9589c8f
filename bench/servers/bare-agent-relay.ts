// Baseline of the agent-proxy benchmark: the least a proxy in its own process does between a client and one agent.
// HTTP requests are piped to the agent with node:http (keep-alive, headers as they came, host rewritten), and
// websocket upgrades are relayed message by message with ws (the agent's side first; its messages that arrive
// before the client's side is open are kept and sent first). No key check, no limits, no logging, no metrics.
// Argument: the agent's origin (http://127.0.0.1:<port>). Prints {port, pid} as one JSON line.
import { Agent, createServer, request } from "node:http";
import WebSocket, { WebSocketServer } from "ws";

const target = new URL(process.argv[2] ?? "http://127.0.0.1:1");
const agent = new Agent({ keepAlive: true });
const sockets = new WebSocketServer({ noServer: true, perMessageDeflate: false, clientTracking: false });

const server = createServer((req, res) => {
  const upstream = request(
    {
      host: target.hostname,
      port: target.port,
      path: req.url,
      method: req.method,
      headers: { ...req.headers, host: target.host },
      agent,
    },
    (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    },
  );
  upstream.on("error", () => res.destroy());
  req.pipe(upstream);
});

server.on("upgrade", (req, socket, head) => {
  const upstream = new WebSocket(`ws://${target.host}${req.url ?? "/"}`, { perMessageDeflate: false });
  const early: [WebSocket.RawData, boolean][] = [];
  const keep = (data: WebSocket.RawData, isBinary: boolean) => early.push([data, isBinary]);
  upstream.on("message", keep);
  upstream.once("error", () => socket.destroy());
  upstream.once("open", () => {
    sockets.handleUpgrade(req, socket, head, (client) => {
      upstream.off("message", keep);
      for (const [data, isBinary] of early) client.send(data, { binary: isBinary });
      upstream.on("message", (data, isBinary) => client.send(data, { binary: isBinary }));
      client.on("message", (data, isBinary) => upstream.send(data, { binary: isBinary }));
      client.on("close", () => upstream.close());
      upstream.on("close", () => client.close());
      client.on("error", () => upstream.terminate());
      upstream.on("error", () => client.terminate());
    });
  });
});

server.listen(0, "127.0.0.1", () => {
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  process.stdout.write(`${JSON.stringify({ port, pid: process.pid })}\n`);
});
process.on("SIGTERM", () => process.exit(0));
