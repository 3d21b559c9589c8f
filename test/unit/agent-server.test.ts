import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { createServer, type Server } from "node:http";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createAgentServer } from "../../agent/agent-server.ts";
import { parseProcStat, readProcStat } from "../../agent/shared/proc-tree.ts";

const KEY = "unit-test-key";
const workspace = mkdtempSync(join(tmpdir(), "agent-server-"));
mkdirSync(join(workspace, "sub"));
let server: Server;
let base: string;

const listen = async (s: Server): Promise<string> => {
  await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));
  const address = s.address();
  if (typeof address !== "object" || address === null) throw new Error("no address");
  return `http://127.0.0.1:${address.port}`;
};

const request = async (
  path: string,
  init: { method?: string; body?: string | Uint8Array; key?: string | null; url?: string } = {},
): Promise<{ status: number; json: unknown }> => {
  const headers: Record<string, string> = {};
  if (init.key !== null) headers["x-session-api-key"] = init.key ?? KEY;
  const res = await fetch(`${init.url ?? base}${path}`, {
    method: init.method ?? (init.body === undefined ? "GET" : "POST"),
    headers,
    ...(init.body === undefined ? {} : { body: init.body }),
  });
  expect(res.headers.get("content-type")).toBe("application/json");
  return { status: res.status, json: await res.json() };
};
const exec = (body: unknown) => request("/api/bash/execute_bash_command", { body: JSON.stringify(body) });

beforeAll(async () => {
  server = createAgentServer({ sessionApiKey: KEY, workspaceDir: workspace, maxOutputBytes: 1000 });
  base = await listen(server);
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  rmSync(workspace, { recursive: true, force: true });
});

describe("agent server: health and auth", () => {
  it("answers /alive and /health without a key", async () => {
    expect(await request("/alive", { key: null })).toEqual({ status: 200, json: { status: "ok" } });
    expect(await request("/health", { key: null })).toEqual({ status: 200, json: "OK" });
  });

  it("rejects a missing, wrong, or differently sized key with 401", async () => {
    for (const key of [null, "wrong", `${KEY}x`, ""]) {
      expect(await request("/api/conversations?ids=x", { key })).toEqual({
        status: 401,
        json: { detail: "Unauthorized" },
      });
    }
  });

  it("answers unknown routes 404 and wrong methods 405, as JSON", async () => {
    expect(await request("/nope")).toEqual({ status: 404, json: { detail: "Not Found" } });
    expect(await request("/api/bash/execute_bash_command")).toEqual({
      status: 405,
      json: { detail: "Method Not Allowed" },
    });
    expect((await request("/alive", { method: "POST", key: null })).status).toBe(405);
  });

  it("answers malformed HTTP with 400 JSON instead of crashing", async () => {
    const raw = await new Promise<string>((resolve, reject) => {
      const socket = connect(Number(new URL(base).port), "127.0.0.1");
      let data = "";
      socket.on("data", (chunk) => {
        data += chunk.toString();
      });
      socket.on("end", () => resolve(data));
      socket.on("error", reject);
      socket.write("GARBAGE / HTTP/1.1\r\nHost: x\r\n\r\n");
    });
    expect(raw).toMatch(/^HTTP\/1\.1 400/);
    expect(raw).toContain('{"detail":"Bad Request"}');
    expect((await request("/alive")).status).toBe(200);
  });
});

describe("agent server: bad input", () => {
  it("rejects invalid JSON with 422 json_invalid", async () => {
    const res = await request("/api/bash/execute_bash_command", { body: "{bad" });
    expect(res.status).toBe(422);
    expect(res.json).toMatchObject({ detail: [{ type: "json_invalid", loc: ["body", 0] }] });
  });

  it("rejects an empty body and non-object bodies with 422", async () => {
    expect(await request("/api/conversations", { method: "POST", body: "" })).toMatchObject({
      status: 422,
      json: { detail: [{ type: "missing", loc: ["body"] }] },
    });
    for (const body of ["[]", "null", "42", '"text"']) {
      expect(await request("/api/bash/execute_bash_command", { body })).toMatchObject({
        status: 422,
        json: { detail: [{ type: "model_attributes_type", loc: ["body"] }] },
      });
    }
  });

  it("reports every wrong field of a command at once", async () => {
    const res = await exec({ command: 42, cwd: false, timeout: "soon" });
    expect(res.status).toBe(422);
    const detail = (res.json as { detail: { type: string; loc: unknown[] }[] }).detail;
    expect(detail.map((d) => [d.type, d.loc])).toEqual([
      ["string_type", ["body", "command"]],
      ["string_type", ["body", "cwd"]],
      ["float_type", ["body", "timeout"]],
    ]);
  });

  it("requires a command and a timeout in (0, 600]", async () => {
    expect(await exec({})).toMatchObject({
      status: 422,
      json: { detail: [{ type: "missing", loc: ["body", "command"] }] },
    });
    expect(await exec({ command: "true", timeout: 0 })).toMatchObject({
      status: 422,
      json: { detail: [{ type: "greater_than", loc: ["body", "timeout"] }] },
    });
    expect(await exec({ command: "true", timeout: 601 })).toMatchObject({
      status: 422,
      json: { detail: [{ type: "less_than_equal", loc: ["body", "timeout"], ctx: { le: 600 } }] },
    });
  });

  it("rejects a cwd outside the workspace or missing", async () => {
    for (const cwd of ["..", "/etc", "sub/../../x"]) {
      expect(await exec({ command: "pwd", cwd })).toMatchObject({
        status: 422,
        json: {
          detail: [
            {
              type: "value_error",
              loc: ["body", "cwd"],
              msg: "Value error, cwd must be inside the workspace",
            },
          ],
        },
      });
    }
    expect(await exec({ command: "pwd", cwd: "missing" })).toMatchObject({
      status: 422,
      json: { detail: [{ type: "value_error", loc: ["body", "cwd"] }] },
    });
  });

  it("answers 413 to bodies over 1 MiB, by header or by size, and keeps serving", async () => {
    const big = JSON.stringify({ command: "true", pad: "x".repeat(1024 * 1024) });
    expect(await request("/api/bash/execute_bash_command", { body: big })).toMatchObject({ status: 413 });
    // Chunked (no content-length): the limit applies while reading.
    const chunked = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < 20; i++) controller.enqueue(new Uint8Array(100 * 1024).fill(32));
        controller.close();
      },
    });
    const res = await fetch(`${base}/api/conversations`, {
      method: "POST",
      headers: { "x-session-api-key": KEY },
      body: chunked,
      duplex: "half",
    } as RequestInit);
    expect(res.status).toBe(413);
    expect((await request("/alive")).status).toBe(200);
  });

  it("rejects a conversation id that is not a UUID", async () => {
    expect(
      await request("/api/conversations", { body: JSON.stringify({ conversation_id: "nope" }) }),
    ).toMatchObject({
      status: 422,
      json: { detail: [{ type: "uuid_parsing", loc: ["body", "conversation_id"] }] },
    });
  });

  it("requires ids when listing conversations", async () => {
    expect(await request("/api/conversations")).toMatchObject({
      status: 422,
      json: { detail: [{ type: "missing", loc: ["query", "ids"] }] },
    });
  });
});

describe("agent server: conversations", () => {
  it("creates a conversation with a given id (dashed or not), idempotently, keeping secret names only", async () => {
    const id = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9";
    const body = {
      conversation_id: id,
      // A model server that refuses connections: the initial message runs the agent, which fails at once.
      agent: { llm: { model: "m", api_key: "sk-secret", base_url: "http://127.0.0.1:9/v1", num_retries: 0 } },
      secrets: { GITHUB_TOKEN: "ghp_secret" },
      initial_message: { role: "user", content: [{ type: "text", text: "hi" }] },
    };
    const created = await request("/api/conversations", { body: JSON.stringify(body) });
    expect(created.status).toBe(200);
    expect(created.json).toMatchObject({
      id: id.replaceAll("-", ""),
      execution_status: "idle",
      agent: { llm: { model: "m", api_key: "**********" } },
      secret_names: ["GITHUB_TOKEN"],
      initial_message: body.initial_message,
    });
    expect(JSON.stringify(created.json)).not.toContain('secret"');
    expect(JSON.stringify(created.json)).not.toContain("ghp_secret");
    const again = await request("/api/conversations", {
      body: JSON.stringify({ conversation_id: id.replaceAll("-", "") }),
    });
    // The same conversation (its status and update time move on as the agent runs the initial message).
    const stable = (j: unknown) => ({ ...(j as object), execution_status: "-", updated_at: "-" });
    expect(stable(again.json)).toEqual(stable(created.json));
    const one = await request(`/api/conversations/${id}`);
    expect(one.status).toBe(200);
    expect(stable(one.json)).toEqual(stable(created.json));
    expect((await request(`/api/conversations/${"1".repeat(32)}`)).status).toBe(404);
  });

  it("lists conversations aligned with the ids, null for unknown or malformed ones", async () => {
    const a = (await request("/api/conversations", { body: "{}" })).json as { id: string };
    const res = await request(`/api/conversations?ids=${a.id}&ids=${"2".repeat(32)}&ids=junk&ids=${a.id}`);
    expect(res.status).toBe(200);
    const list = res.json as ({ id: string } | null)[];
    expect(list.map((c) => c?.id ?? null)).toEqual([a.id, null, null, a.id]);
  });
});

describe("agent server: webhooks", () => {
  it("posts the conversation with its key over node:http, retrying a failed post, and events in batches", async () => {
    const posts: { path: string; key: string | undefined; body: unknown }[] = [];
    let failFirst = true;
    const receiver = createServer((req, res) => {
      let text = "";
      req.on("data", (c: Buffer) => {
        text += c.toString();
      });
      req.on("end", () => {
        posts.push({
          path: req.url ?? "",
          key: req.headers["x-session-api-key"] as string,
          body: JSON.parse(text),
        });
        if (failFirst) {
          failFirst = false;
          res.writeHead(500).end();
        } else res.writeHead(200, { "content-type": "application/json" }).end("{}");
      });
    });
    const hookBase = await listen(receiver);
    const agent = createAgentServer({
      sessionApiKey: KEY,
      workspaceDir: workspace,
      webhook: { baseUrl: `${hookBase}/api/v1/webhooks/sbx/`, retryDelayMs: 10, flushDelayMs: 10 },
    });
    const url = await listen(agent);
    try {
      const created = await request("/api/conversations", {
        url,
        body: JSON.stringify({ initial_message: { role: "user", content: [{ type: "text", text: "hi" }] } }),
      });
      const id = (created.json as { id: string }).id;
      const conversations = () => posts.filter((p) => p.path === "/api/v1/webhooks/sbx/conversations");
      for (
        let i = 0;
        i < 300 && (conversations().length < 2 || !posts.some((p) => p.path.includes("/events/")));
        i++
      )
        await new Promise((r) => setTimeout(r, 10));
      expect(posts[0]?.path).toBe("/api/v1/webhooks/sbx/conversations"); // sent at once, answered 500
      // and retried with the same body (later posts report the agent's status changes: it has no model here)
      const idle = () =>
        conversations().filter((p) => (p.body as { execution_status?: string }).execution_status === "idle");
      for (let i = 0; i < 300 && idle().length < 2; i++) await new Promise((r) => setTimeout(r, 10));
      expect(idle().length).toBe(2);
      expect(idle()[1]?.key).toBe(KEY);
      expect(idle()[1]?.body).toEqual(idle()[0]?.body);
      expect(idle()[1]?.body).toMatchObject({ id });
      const events = posts.find((p) => p.path === `/api/v1/webhooks/sbx/events/${id}`);
      expect(Array.isArray(events?.body)).toBe(true);
    } finally {
      agent.closeAllConnections();
      await new Promise((resolve) => agent.close(resolve));
      receiver.closeAllConnections();
      await new Promise((resolve) => receiver.close(resolve));
    }
  });
});

describe("agent server: webhook order", () => {
  it("posts a conversation's events one batch at a time, in order, however slow the receiver", async () => {
    const batches: { id: string; timestamp: string }[][] = [];
    let inFlight = 0;
    let maxInFlight = 0;
    const receiver = createServer((req, res) => {
      let text = "";
      req.on("data", (c: Buffer) => {
        text += c.toString();
      });
      req.on("end", () => {
        if (!(req.url ?? "").includes("/events/")) {
          res.writeHead(200, { "content-type": "application/json" }).end("{}");
          return;
        }
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        batches.push(JSON.parse(text));
        // The first answers slowest: without one post at a time, a later batch would land first.
        const delay = batches.length === 1 ? 300 : 20;
        setTimeout(() => {
          inFlight--;
          res.writeHead(200, { "content-type": "application/json" }).end("{}");
        }, delay);
      });
    });
    const hookBase = await listen(receiver);
    const agent = createAgentServer({
      sessionApiKey: KEY,
      workspaceDir: workspace,
      webhook: { baseUrl: `${hookBase}/hooks/`, bufferSize: 1, flushDelayMs: 5, retryDelayMs: 10 },
    });
    const url = await listen(agent);
    try {
      const created = await request("/api/conversations", {
        url,
        body: JSON.stringify({ initial_message: { role: "user", content: [{ type: "text", text: "hi" }] } }),
      });
      const id = (created.json as { id: string }).id;
      // Until the posts stop coming (the conversation has no model: it settles at once).
      for (let seen = -1, i = 0; i < 100 && seen !== batches.flat().length; i++) {
        seen = batches.flat().length;
        await new Promise((r) => setTimeout(r, 500));
      }
      const stored = await request(`/api/conversations/${id}/events/search?limit=100`, {
        url,
        method: "GET",
      });
      const expected = (stored.json as { items: { id: string }[] }).items.map((e) => e.id);
      expect(expected.length).toBeGreaterThan(2);
      expect(batches.length).toBeGreaterThan(1);
      expect(maxInFlight).toBe(1);
      expect(batches.flat().map((e) => e.id)).toEqual(expected);
    } finally {
      agent.closeAllConnections();
      await new Promise((resolve) => agent.close(resolve));
      receiver.closeAllConnections();
      await new Promise((resolve) => receiver.close(resolve));
    }
  });
});

describe("agent server: commands", () => {
  it("runs in the workspace or a cwd inside it, with exit code and both streams", async () => {
    expect((await exec({ command: "pwd; echo e >&2; exit 7" })).json).toEqual({
      exit_code: 7,
      stdout: `${workspace}\n`,
      stderr: "e\n",
    });
    expect((await exec({ command: "pwd", cwd: "sub" })).json).toMatchObject({
      stdout: `${join(workspace, "sub")}\n`,
    });
    expect((await exec({ command: "pwd", cwd: join(workspace, "sub") })).json).toMatchObject({
      exit_code: 0,
    });
  });

  it("reports death by signal as 128 + signal number", async () => {
    expect((await exec({ command: "kill -KILL $$" })).json).toMatchObject({ exit_code: 137 });
  });

  it("kills the whole command tree on timeout", async () => {
    const pidFile = join(workspace, "bg.pid");
    const t0 = Date.now();
    const res = await exec({ command: `sleep 60 & echo $! > ${pidFile}; wait`, timeout: 0.3 });
    expect(Date.now() - t0).toBeLessThan(3000);
    expect(res.json).toMatchObject({ exit_code: -1, stderr: "[command timed out after 0.3 seconds]" });
    const pid = Number(readFileSync(pidFile, "utf8"));
    await new Promise((r) => setTimeout(r, 50));
    expect(["Z", undefined]).toContain(readProcStat(pid)?.state);
  });

  it("answers when the shell exits even if a background job keeps its output open", async () => {
    const t0 = Date.now();
    const res = await exec({ command: "sleep 3 & echo started" });
    expect(res.json).toEqual({ exit_code: 0, stdout: "started\n", stderr: "" });
    expect(Date.now() - t0).toBeLessThan(2000);
  });

  it("caps each output stream and says how much was dropped", async () => {
    const res = (
      await exec({ command: "head -c 5000 /dev/zero | tr '\\0' a; head -c 1500 /dev/zero | tr '\\0' b >&2" })
    ).json as { stdout: string; stderr: string };
    expect(res.stdout).toBe(`${"a".repeat(1000)}\n[output truncated: 4000 more bytes]`);
    expect(res.stderr).toBe(`${"b".repeat(1000)}\n[output truncated: 500 more bytes]`);
  });

  it("uses the configured shell and environment", async () => {
    const other = createAgentServer({
      sessionApiKey: KEY,
      workspaceDir: workspace,
      shell: "/bin/sh",
      commandEnv: { PATH: "/usr/bin:/bin", ONLY_THIS: "yes" },
    });
    const url = await listen(other);
    try {
      const res = await request("/api/bash/execute_bash_command", {
        url,
        // biome-ignore lint/suspicious/noTemplateCurlyInString: shell parameter expansion, not a template
        body: JSON.stringify({ command: "echo $ONLY_THIS $HOME; echo ${BASH_VERSION:-no-bash}" }),
      });
      expect(res.json).toMatchObject({ exit_code: 0, stdout: "yes\nno-bash\n" });
    } finally {
      other.closeAllConnections();
      other.close();
    }
  });

  it("kills running commands when the server closes", async () => {
    const other = createAgentServer({ sessionApiKey: KEY, workspaceDir: workspace });
    const url = await listen(other);
    const pidFile = join(workspace, "close.pid");
    const pending = fetch(`${url}/api/bash/execute_bash_command`, {
      method: "POST",
      headers: { "x-session-api-key": KEY },
      body: JSON.stringify({ command: `echo $$ > ${pidFile}; exec sleep 60` }),
    }).catch(() => null);
    for (let i = 0; i < 200 && !existsSync(pidFile); i++) await new Promise((r) => setTimeout(r, 5));
    await new Promise((r) => setTimeout(r, 20));
    const pid = Number(readFileSync(pidFile, "utf8"));
    other.close();
    other.closeAllConnections();
    await pending;
    await new Promise((r) => setTimeout(r, 50));
    expect(["Z", undefined]).toContain(readProcStat(pid)?.state);
  });
});

describe("agent server: connections one client can hold (issue 38, F4)", () => {
  /** A raw TCP connection to `url`'s port; resolves its close with how long it stayed open. */
  const raw = (url: string) => {
    const socket = connect(Number(new URL(url).port), "127.0.0.1");
    socket.on("error", () => {});
    socket.resume();
    const opened = Date.now();
    const closed = new Promise<number>((resolve) => socket.once("close", () => resolve(Date.now() - opened)));
    const connected = new Promise<void>((resolve) => socket.once("connect", resolve).once("close", resolve));
    return { socket, closed, connected };
  };
  const open = (s: Server) =>
    new Promise<number>((resolve, reject) => s.getConnections((e, n) => (e ? reject(e) : resolve(n))));

  it("holds at most maxConnections: 600 idle sockets keep /alive answering, the longest idle making room", async () => {
    const other = createAgentServer({
      sessionApiKey: KEY,
      workspaceDir: workspace,
      connections: { maxConnections: 50 },
    });
    const url = await listen(other);
    try {
      const idle = Array.from({ length: 600 }, () => raw(url));
      await Promise.all(idle.map((c) => c.connected));
      await new Promise((r) => setTimeout(r, 100));
      expect(await open(other)).toBeLessThanOrEqual(50);
      for (let i = 0; i < 5; i++) {
        const alive = await fetch(`${url}/alive`, { signal: AbortSignal.timeout(2000) });
        expect(alive.status, `probe ${i}`).toBe(200);
      }
      // The oldest ones were closed to make room; the server holds no more than its cap.
      expect(
        await Promise.race([idle[0]?.closed, new Promise((r) => setTimeout(() => r(-1), 500))]),
      ).not.toBe(-1);
      expect(await open(other)).toBeLessThanOrEqual(50);
      for (const c of idle) c.socket.destroy();
    } finally {
      other.closeAllConnections();
      other.close();
    }
  });

  it("closes a connection that sends no request within the header timeout, and one idle past the idle timeout; never one with a request in flight", async () => {
    const other = createAgentServer({
      sessionApiKey: KEY,
      workspaceDir: workspace,
      connections: { headersTimeoutMs: 300, idleTimeoutMs: 300 },
    });
    const url = await listen(other);
    try {
      // Nothing sent, half a request head, and a finished request on a kept-alive connection.
      const silent = raw(url);
      const half = raw(url);
      half.socket.write("GET /alive HTTP/1.1\r\nhost: x\r\n");
      const used = raw(url);
      used.socket.write("GET /alive HTTP/1.1\r\nhost: x\r\n\r\n");
      for (const c of [silent, half, used]) {
        const ms = await Promise.race([c.closed, new Promise<number>((r) => setTimeout(() => r(-1), 5000))]);
        expect(ms).toBeGreaterThanOrEqual(250);
        expect(ms).toBeLessThan(3000);
      }
      // A command running longer than both timeouts keeps its connection and is answered.
      const res = await request("/api/bash/execute_bash_command", {
        url,
        body: JSON.stringify({ command: "sleep 1; echo done" }),
      });
      expect(res.json).toMatchObject({ exit_code: 0, stdout: "done\n" });
    } finally {
      other.closeAllConnections();
      other.close();
    }
  });
});

describe("agent server: file routes and symlinks (issue 38, F9)", () => {
  const outside = mkdtempSync(join(tmpdir(), "agent-server-outside-"));
  afterAll(() => rmSync(outside, { recursive: true, force: true }));
  const upload = (path: string) => {
    const form = new FormData();
    form.set("file", new Blob(["planted"]), "x");
    return fetch(`${base}/api/file/upload/${encodeURIComponent(path)}`, {
      method: "POST",
      headers: { "x-session-api-key": KEY },
      body: form,
    });
  };

  it("refuses an upload to a dangling symlink (final or on the way) and to a symlink to a file inside; writes nothing", async () => {
    symlinkSync(join(outside, "created-through-link"), join(workspace, "dangling"));
    symlinkSync(join(outside, "missing-dir"), join(workspace, "dangling-dir"));
    writeFileSync(join(workspace, "inside.txt"), "kept");
    symlinkSync(join(workspace, "inside.txt"), join(workspace, "to-inside"));
    for (const path of [
      join(workspace, "dangling"),
      "/workspace/dangling",
      join(workspace, "dangling-dir", "file"),
      join(workspace, "to-inside"),
    ]) {
      const r = await upload(path);
      expect(r.status, path).toBe(400);
    }
    expect(existsSync(join(outside, "created-through-link"))).toBe(false);
    expect(existsSync(join(outside, "missing-dir"))).toBe(false);
    expect(readFileSync(join(workspace, "inside.txt"), "utf8")).toBe("kept");
    // The diff route does not read through a final symlink either.
    const diff = await request(`/api/git/diff/${encodeURIComponent(join(workspace, "to-inside"))}`);
    expect(diff.status).toBe(400);
    // A plain upload still works.
    expect((await upload(join(workspace, "plain.txt"))).status).toBe(200);
    expect(readFileSync(join(workspace, "plain.txt"), "utf8")).toBe("planted");
  });
});

describe("agent helpers: /proc parsing", () => {
  it("splits after the last parenthesis, so command names may contain spaces and parentheses", () => {
    const rest = Array.from({ length: 50 }, (_, i) => String(i + 3));
    rest[0] = "Z"; // state
    rest[1] = "77"; // ppid
    rest[2] = "1234"; // pgrp
    rest[19] = "987654"; // starttime
    rest[49] = "768"; // exit status: exit code 3
    expect(parseProcStat(1234, `1234 (evil) (name ) x) ${rest.join(" ")}\n`)).toEqual({
      pid: 1234,
      state: "Z",
      ppid: 77,
      pgrp: 1234,
      startTime: 987654,
      exitStatus: 768,
    });
    expect(parseProcStat(1, "garbage")).toBeNull();
  });

  it("reads this process", () => {
    const self = readProcStat(process.pid);
    expect(self).toMatchObject({ pid: process.pid, ppid: process.ppid, exitStatus: 0 });
    expect(self?.startTime).toBeGreaterThan(0);
  });
});
