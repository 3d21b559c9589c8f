/**
 * Every process sandbox in a network of its own (issue 38, item 1), through the service: two users' sandboxes
 * (bubblewrap as root, the built-in agent, started by the service) and what code in one of them can reach.
 * - its agent lives in its own network namespace, at its own address: nothing of it on the host's loopback;
 * - another user's agent, its abstract unix sockets, the host's loopback services (a test server, the service's
 *   gRPC port) are out of reach; a host port allowed to sandboxes (reachHost, as the webhook URL and
 *   SANDBOX_HOST_PORTS are) is reachable at the gateway;
 * - the outside works: an HTTP fetch and a `git clone` from a second host (a network namespace made by the test);
 * - a model the user set at a loopback address answers the agent, the user's settings unchanged; one at a port
 *   not allowed fails at once with a clear error.
 * Skipped, with the reason, where sandboxes do not get networks of their own (not root, no bubblewrap, no ip).
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readlinkSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime-types.ts";
import { gatewayOf } from "../helpers/agent-address.ts";
import { settle } from "../helpers/app-conversations.ts";
import { type FakeLlm, startFakeLlm } from "../helpers/fake-llm.ts";
import { makeNetNs, type NetNs } from "../helpers/netns.ts";
import { agentPid, bash, type Party, party, probe } from "../helpers/sandbox-parties.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";
import { until } from "../helpers/until.ts";

const root = mkdtempSync(join(tmpdir(), "sandbox-network-"));
const node = process.execPath;
let t: TestApp;
let skip: string | null = null;
let alice: Party;
let bob: Party;
let llm: FakeLlm;
/** Host loopback servers: one sandboxes may reach (allowed), one they may not (closed). */
let allowed: Server;
let closed: Server;
let allowedPort = 0;
let closedPort = 0;
let grpcPort = 0;

const portOf = (s: Server): number => {
  const a = s.address();
  return typeof a === "object" && a !== null ? a.port : 0;
};

const netnsOf = (pid: number | "self"): string => readlinkSync(`/proc/${pid}/ns/net`);

const listen = (handler: Parameters<typeof createServer>[1]): Promise<Server> =>
  new Promise((resolve) => {
    const s = createServer(handler);
    s.listen(0, "127.0.0.1", () => resolve(s));
  });

beforeAll(async () => {
  t = await startTestApp({ dir: root, sweepIntervalMs: 0 });
  const runtime = t.runtime as ProcessRuntime;
  if (runtime.network.mode !== "isolated")
    skip = `sandboxes share the host's network here: ${runtime.network.reason}`;
  if (skip !== null) {
    console.log(`sandbox network: skipped: ${skip}`);
    return;
  }
  allowed = await listen((_req, res) => res.end("host-service"));
  closed = await listen((_req, res) => res.end("secret"));
  allowedPort = portOf(allowed);
  closedPort = portOf(closed);
  runtime.reachHost(`http://127.0.0.1:${allowedPort}`);
  grpcPort = Number(t.grpcAddress.split(":").at(-1));
  llm = await startFakeLlm();
  runtime.reachHost(llm.url);
  alice = await party(t, "alice");
  bob = await party(t, "bob");
}, 90_000);

afterAll(async () => {
  await t?.close();
  await llm?.close();
  allowed?.close();
  closed?.close();
  rmSync(root, { recursive: true, force: true });
});

describe("process sandboxes each in a network of their own (issue 38)", () => {
  it("an agent listens inside its own namespace, at its sandbox's address, not on the host's loopback", async (ctx) => {
    if (skip !== null) return ctx.skip(skip);
    for (const p of [alice, bob]) expect(p.agent).toMatch(/^http:\/\/10\.213\.\d+\.\d+:8000$/);
    expect(alice.agent).not.toBe(bob.agent);
    const [a, b] = [netnsOf(agentPid(alice)), netnsOf(agentPid(bob))];
    expect(a).not.toBe(netnsOf("self"));
    expect(b).not.toBe(netnsOf("self"));
    expect(a).not.toBe(b);
    // The service reaches it (health and calls), from the host, at that address.
    expect((await fetch(`${alice.agent}/alive`)).status).toBe(200);
  });

  it("one user's sandbox cannot reach another's agent, nor its own gateway's other ports", async (ctx) => {
    if (skip !== null) return ctx.skip(skip);
    const target = new URL(alice.agent);
    expect(await probe(bob, target.hostname, target.port)).not.toBe("connected");
    // Its own agent, as a control: reachable inside its namespace.
    expect(await probe(alice, "127.0.0.1", 8000)).toBe("connected");
    // The other's agent is not at the gateway either (the gateway is the host).
    expect(await probe(bob, gatewayOf(bob.agent), 8000)).not.toBe("connected");
    // The victim is unharmed.
    expect((await bash(alice, "echo still-mine")).stdout).toBe("still-mine\n");
  }, 60_000);

  it("abstract unix sockets are the sandbox's own", async (ctx) => {
    if (skip !== null) return ctx.skip(skip);
    const name = `aws-test-${Math.random().toString(36).slice(2)}`;
    const server = `require("net").createServer((c) => c.end("hello")).listen("\\0${name}"); setTimeout(() => process.exit(), 15000);`;
    expect((await bash(alice, `${node} -e '${server}' >/dev/null 2>&1 & echo started`)).stdout).toBe(
      "started\n",
    );
    const client = `require("net").connect("\\0${name}").on("data", (d) => { console.log(String(d)); process.exit(); }).on("error", (e) => { console.log(e.code); process.exit(); });`;
    await until(
      async () => (await bash(alice, `${node} -e '${client}'`)).stdout,
      (out) => out === "hello\n",
    );
    expect((await bash(bob, `${node} -e '${client}'`)).stdout).toBe("ECONNREFUSED\n");
  }, 60_000);

  it("the host's loopback is closed but for the ports allowed to sandboxes, reached at their gateway", async (ctx) => {
    if (skip !== null) return ctx.skip(skip);
    const gw = gatewayOf(bob.agent);
    // A host service on loopback: not at the gateway, not at the sandbox's own loopback.
    expect(await probe(bob, gw, closedPort)).toBe("ECONNREFUSED");
    expect(await probe(bob, "127.0.0.1", closedPort)).toBe("ECONNREFUSED");
    // The service's own gRPC port is not open to sandboxes either.
    if (grpcPort > 0) expect(await probe(bob, gw, grpcPort)).toBe("ECONNREFUSED");
    // An allowed port answers at the gateway.
    const fetched = await bash(
      bob,
      `${node} -e 'fetch("http://${gw}:${allowedPort}/").then(async (r) => console.log(await r.text()))'`,
    );
    expect(fetched.stdout).toBe("host-service\n");
  }, 60_000);

  describe("the outside, from a second host", () => {
    let remote: NetNs | null = null;
    let servers: ChildProcess[] = [];
    let why: string | null = null;

    beforeAll(async () => {
      if (skip !== null) return;
      const made = makeNetNs();
      if ("reason" in made) {
        why = made.reason;
        return;
      }
      remote = made;
      const repo = join(root, "remote-git", "project.git");
      const work = join(root, "remote-work");
      mkdirSync(work, { recursive: true });
      const git = (cwd: string, ...args: string[]) =>
        execFileSync("git", ["-c", "user.email=t@e", "-c", "user.name=t", ...args], { cwd, stdio: "pipe" });
      git(work, "init", "-q", "-b", "main");
      execFileSync("sh", ["-c", "echo remote-readme > README.md"], { cwd: work });
      git(work, "add", ".");
      git(work, "commit", "-q", "-m", "first");
      git(root, "clone", "-q", "--bare", work, repo);
      const http = `require("http").createServer((q, s) => s.end("from-the-outside")).listen(8080, "${made.address}")`;
      servers = [
        spawn("ip", ["netns", "exec", made.name, node, "-e", http], { stdio: "ignore" }),
        spawn(
          "ip",
          [
            "netns",
            "exec",
            made.name,
            "git",
            "daemon",
            "--reuseaddr",
            "--export-all",
            `--base-path=${join(root, "remote-git")}`,
            `--listen=${made.address}`,
            "--port=9418",
          ],
          { stdio: "ignore" },
        ),
      ];
    }, 30_000);

    afterAll(() => {
      for (const s of servers) s.kill("SIGKILL");
      remote?.remove();
    });

    it("fetches over HTTP and clones a git repository from another host", async (ctx) => {
      if (skip !== null) return ctx.skip(skip);
      if (why !== null || remote === null) return ctx.skip(`no second host: ${why}`);
      const address = remote.address;
      const fetched = await until(
        async () =>
          (
            await bash(
              bob,
              `${node} -e 'fetch("http://${address}:8080/").then(async (r) => console.log(await r.text()), (e) => console.log(e.cause?.code ?? e.message))'`,
            )
          ).stdout,
        (out) => out === "from-the-outside\n",
        10_000,
      );
      expect(fetched).toBe("from-the-outside\n");
      const cloned = await until(
        async () =>
          await bash(bob, `git clone -q git://${address}/project.git cloned 2>&1 && cat cloned/README.md`),
        (r) => r.exit_code === 0,
        10_000,
      );
      expect(cloned.stdout).toBe("remote-readme\n");
    }, 60_000);
  });

  it("a model on the host's loopback answers the agent with the user's settings unchanged; one not allowed fails at once", async (ctx) => {
    if (skip !== null) return ctx.skip(skip);
    llm.script({ content: "Hello from the model on loopback." });
    const saved = await call(t.url, alice.key, "POST", "/api/settings", {
      llm_model: "openai/fake-model",
      llm_base_url: llm.url,
      llm_api_key: "sk-loopback",
    });
    expect(saved.status).toBe(200);
    const started = await call(t.url, alice.key, "POST", "/api/v1/app-conversations", {
      initial_message: { role: "user", content: [{ type: "text", text: "hi" }] },
    });
    expect(started.status).toBe(200);
    const task = await settle(alice.key, (started.body as { id: string }).id, 30_000, t);
    expect(task.status).toBe("READY");
    await llm.waitForRequests(1, 20_000);
    expect(llm.requests.at(-1)?.authorization).toBe("Bearer sk-loopback");
    const id = task.app_conversation_id ?? "";
    const answered = await until(
      async () =>
        (
          (await call(t.url, alice.key, "GET", `/api/v1/events/search?conversation_id__eq=${id}&limit=100`))
            .body as {
            items: { kind: string; source?: string }[];
          }
        ).items,
      (items) => items.some((e) => e.kind === "MessageEvent" && e.source === "agent"),
      20_000,
    );
    expect(answered.some((e) => e.kind === "MessageEvent" && e.source === "agent")).toBe(true);

    // bob's model at a loopback port no one allowed: the conversation reports an error, without waiting out a
    // timeout.
    const saved2 = await call(t.url, bob.key, "POST", "/api/settings", {
      llm_model: "openai/fake-model",
      llm_base_url: `http://127.0.0.1:${closedPort}/v1`,
      llm_api_key: "sk-closed",
    });
    expect(saved2.status).toBe(200);
    const t0 = Date.now();
    const started2 = await call(t.url, bob.key, "POST", "/api/v1/app-conversations", {
      initial_message: { role: "user", content: [{ type: "text", text: "hi" }] },
    });
    expect(started2.status).toBe(200);
    const task2 = await settle(bob.key, (started2.body as { id: string }).id, 30_000, t);
    const errors = await until(
      async () =>
        (
          (
            await call(
              t.url,
              bob.key,
              "GET",
              `/api/v1/events/search?conversation_id__eq=${task2.app_conversation_id ?? ""}&limit=100`,
            )
          ).body as { items: { kind: string }[] }
        ).items.filter((e) => e.kind === "ConversationErrorEvent"),
      (items) => items.length > 0,
      20_000,
    );
    expect(errors.length).toBeGreaterThan(0);
    expect(Date.now() - t0).toBeLessThan(15_000);
  }, 90_000);
});
