/**
 * A hostile user against the built-in agent's newer surfaces, on the embedded default (process runtime, built-in
 * agent, bubblewrap where it runs) with a model stand-in: two users, alice and bob, each with a conversation in a
 * sandbox of their own. Whatever one tries against the other's saved conversations, sandbox, agent routes and
 * events websocket fails; what a sandbox's own user writes into its conversation store cannot break its agent nor
 * reach another user's conversation; concurrent resumes of a sandbox whose agent ended start one agent.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import type { ProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime-types.ts";
import { findSandboxProcesses } from "../../src/adapters/runtimes/process/sandbox-processes.ts";
import { directAgentUrl } from "../helpers/agent-address.ts";
import { agentProcesses, killAgent } from "../helpers/agent-processes.ts";
import { type FakeLlm, startFakeLlm } from "../helpers/fake-llm.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";
import { uiAgentBase } from "../helpers/ui-urls.ts";
import { until } from "../helpers/until.ts";

type AppConversation = {
  id: string;
  conversation_url: string | null;
  session_api_key: string | null;
  sandbox_id: string;
};
interface Party {
  user: string;
  key: string;
  conv: AppConversation;
  /** The conversation id as the agent names its folder (32 hex). */
  hex: string;
  /** Where the UI reaches the agent: the host of conversation_url (relative: this service's own origin). */
  via: string;
  /**
   * The agent's own URL (the sandbox's AGENT_SERVER_DIRECT: its loopback port, or its address in a network of its
   * own), which a browser on this machine could reach.
   */
  agent: string;
  sandboxKey: string;
  workspace: string;
}

let t: TestApp;
let llm: FakeLlm;
let isolated = false;
const root = mkdtempSync(join(tmpdir(), "hostile-new-surfaces-"));
let alice: Party;
let bob: Party;

const conversation = async (key: string, id: string): Promise<AppConversation> =>
  (
    (await call(t.url, key, "GET", `/api/v1/app-conversations?ids=${id}`)).body as AppConversation[]
  )[0] as AppConversation;
const sandboxStatus = async (key: string, id: string): Promise<string> =>
  ((await call(t.url, key, "GET", `/api/v1/sandboxes?id=${id}`)).body as { status: string }[])[0]?.status ??
  "none";
/** The sandbox's AGENT_SERVER_DIRECT URL: the agent's own loopback port, or its address in a network of its own. */
async function directUrl(key: string, id: string): Promise<string> {
  const [s] = (await call(t.url, key, "GET", `/api/v1/sandboxes?id=${id}`)).body as {
    exposed_urls: { name: string; url: string }[] | null;
  }[];
  const url = s?.exposed_urls?.find((u) => u.name === "AGENT_SERVER_DIRECT")?.url;
  expect(url).toMatch(directAgentUrl((t.runtime as ProcessRuntime).network));
  return url ?? "";
}

async function party(user: string, secret: string): Promise<Party> {
  const key = await t.keyFor(user);
  const saved = await call(t.url, key, "POST", "/api/settings", {
    llm_model: "openai/fake-model",
    llm_base_url: llm.url,
    llm_api_key: secret,
  });
  expect(saved.status).toBe(200);
  const created = await call(t.url, key, "POST", "/api/v1/app-conversations", {
    initial_message: { role: "user", content: [{ type: "text", text: `Hello from ${user}` }] },
  });
  expect(created.status).toBe(200);
  const taskId = (created.body as { id: string }).id;
  const tasks = await until(
    async () =>
      (await call(t.url, key, "GET", `/api/v1/app-conversations/start-tasks?ids=${taskId}`)).body as {
        status: string;
        app_conversation_id: string | null;
      }[],
    (b) => b[0]?.status === "READY" || b[0]?.status === "ERROR",
  );
  expect(tasks[0]?.status).toBe("READY");
  const id = tasks[0]?.app_conversation_id ?? "";
  const conv = await until(
    () => conversation(key, id),
    (c) => c.conversation_url !== null,
  );
  expect(conv.conversation_url).toBe(`/api/conversations/${id}`);
  const agent = await directUrl(key, conv.sandbox_id);
  const record = await t.storage.sandboxes.get(conv.sandbox_id);
  const workspace = String(
    (record?.handle as { data?: { workspace?: string } } | undefined)?.data?.workspace ?? "",
  );
  return {
    user,
    key,
    conv,
    hex: id.replaceAll("-", ""),
    via: uiAgentBase(conv.conversation_url, t.url),
    agent,
    sandboxKey: conv.session_api_key ?? "",
    workspace: workspace || join(root, "sandboxes", conv.sandbox_id),
  };
}

/**
 * The agent's URLs and key as the service gives them now (a restarted agent listens on another port, or at its
 * sandbox's address again).
 */
async function refresh(p: Party, c: AppConversation): Promise<void> {
  p.via = uiAgentBase(c.conversation_url, t.url);
  p.agent = await directUrl(p.key, c.sandbox_id);
  p.sandboxKey = c.session_api_key ?? p.sandboxKey;
}

/** Runs a command in the party's sandbox, as the UI reaches its agent (through the service, with the key). */
async function bash(p: Party, command: string): Promise<{ exit_code: number; stdout: string }> {
  const res = await fetch(`${p.via}/api/bash/execute_bash_command`, {
    method: "POST",
    headers: { "x-session-api-key": p.sandboxKey, "content-type": "application/json" },
    body: JSON.stringify({ command, timeout: 30 }),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as { exit_code: number; stdout: string };
}

/** Kills the party's agent, waits for ERROR, resumes, and waits for RUNNING with the agent answering again. */
async function restart(p: Party): Promise<void> {
  killAgent(p.workspace);
  await until(
    () => sandboxStatus(p.key, p.conv.sandbox_id),
    (s) => s === "ERROR",
  );
  expect((await call(t.url, p.key, "POST", `/api/v1/sandboxes/${p.conv.sandbox_id}/resume`)).status).toBe(
    200,
  );
  await until(
    () => sandboxStatus(p.key, p.conv.sandbox_id),
    (s) => s === "RUNNING",
  );
}

beforeAll(async () => {
  llm = await startFakeLlm();
  t = await startTestApp({ dir: root, sweepIntervalMs: 0 });
  // The model stand-in is on the host's loopback: allowed to sandboxes with networks of their own.
  t.runtime.reachHost?.(llm.url);
  isolated = (t.runtime as ProcessRuntime).isolation.mode === "bwrap";
  if (!isolated)
    console.log("hostile new surfaces: sandboxes run without bubblewrap here; cross-sandbox checks skipped");
  alice = await party("alice", "sk-alice-secret-model-key");
  bob = await party("bob", "sk-bob-secret-model-key");
}, 90_000);

afterAll(async () => {
  await t?.close();
  await llm?.close();
  rmSync(root, { recursive: true, force: true });
});

describe("saved conversations", () => {
  it("one sandbox cannot read another's; no secret is on disk in clear; the folder is private", async () => {
    const stateDir = join(alice.workspace, ".openhands", "conversations");
    expect(readdirSync(stateDir).sort()).toEqual([".gitignore", alice.hex].sort());
    expect(statSync(stateDir).mode & 0o077).toBe(0);
    const files = readdirSync(join(stateDir, alice.hex));
    const onDisk = files.map((f) => readFileSync(join(stateDir, alice.hex, f), "utf8")).join("\n");
    expect(onDisk).toContain("Hello from alice");
    expect(onDisk).not.toContain("sk-alice-secret-model-key");
    for (const f of files) expect(statSync(join(stateDir, alice.hex, f)).mode & 0o077).toBe(0);
    if (!isolated) return;
    // From bob's sandbox, alice's saved conversation (by its host path) is not there at all.
    const seen = await bash(
      bob,
      `ls ${stateDir} 2>&1; cat ${join(stateDir, alice.hex, "start.json")} 2>&1; cat ${join(stateDir, alice.hex, "events.jsonl")} 2>&1`,
    );
    expect(seen.stdout).not.toContain("Hello from alice");
    expect(seen.stdout).not.toContain("sealed");
    expect(seen.stdout.match(/No such file or directory/g)).toHaveLength(3);
  });

  it("what the sandbox's own user writes there cannot break its agent on reload nor post to another user's conversation", async () => {
    const dir = "$HOME/.openhands/conversations";
    const f = "f".repeat(32);
    const e = "e".repeat(32);
    // A conversation under bob's conversation id, "running" (a restart answers it with events), with events that
    // are not objects; one whose start request is not an object; one with a huge line; and a non-id folder.
    const crafted = [
      `mkdir -p ${dir}/${bob.hex} ${dir}/${f} ${dir}/${e} ${dir}/not-an-id`,
      `printf '%s' '{"body":{"agent":{"tools":"x","llm":5}},"sealed":"AAAA"}' > ${dir}/${bob.hex}/start.json`,
      `printf '%s' '{"execution_status":"running","id":"${alice.hex}"}' > ${dir}/${bob.hex}/info.json`,
      `printf 'null\\n5\\n"x"\\n[1]\\n{"kind":"ActionEvent","action":{},"tool_call_id":"crafted-by-alice","id":"crafted-action-by-alice"}\\n' > ${dir}/${bob.hex}/events.jsonl`,
      `echo null > ${dir}/${f}/start.json`,
      `printf '%s' '{"body":[],"sealed":7}' > ${dir}/${e}/start.json`,
      `printf '%s' '[]' > ${dir}/${e}/info.json`,
      `head -c 3000000 /dev/zero | tr '\\0' '[' > ${dir}/${e}/events.jsonl`,
      // Alice's own conversation: an event line that is JSON but no event.
      `echo null >> ${dir}/${alice.hex}/events.jsonl`,
    ].join(" && ");
    expect((await bash(alice, crafted)).exit_code).toBe(0);
    await restart(alice);
    // The agent serves alice's own conversation, with its events.
    const again = await until(
      () => conversation(alice.key, alice.conv.id),
      (c) => c.conversation_url !== null,
    );
    await refresh(alice, again);
    // The restarted agent keeps the sandbox's key, and is reached through the service as before.
    expect(again.session_api_key).toBe(alice.conv.session_api_key);
    const got = await fetch(`${alice.via}/api/conversations/${alice.conv.id}`, {
      headers: { "x-session-api-key": again.session_api_key ?? "" },
    });
    expect(got.status).toBe(200);
    const events = await fetch(`${alice.via}/api/conversations/${alice.conv.id}/events/search?limit=100`, {
      headers: { "x-session-api-key": again.session_api_key ?? "" },
    });
    expect(events.status).toBe(200);
    expect(JSON.stringify(await events.json())).toContain("Hello from alice");
    // Whatever the agent posts for the conversation named after bob's is refused: bob's conversation is unchanged.
    await new Promise((r) => setTimeout(r, 1500));
    const bobs = await call(
      t.url,
      bob.key,
      "GET",
      `/api/v1/events/search?conversation_id__eq=${bob.hex}&limit=100`,
    );
    expect(bobs.status).toBe(200);
    expect(bobs.text).not.toContain("crafted-by-alice");
    expect(bobs.text).not.toContain("AgentRestarted");
    expect(await t.storage.events.count("alice", { conversationIdEq: bob.conv.id })).toBe(0);
    await refresh(alice, again);
  }, 90_000);
});

describe("resuming a sandbox whose agent ended", () => {
  it("another user cannot resume, pause, delete or start a conversation in it", async () => {
    const id = alice.conv.sandbox_id;
    for (const action of ["resume", "pause"])
      expect((await call(t.url, bob.key, "POST", `/api/v1/sandboxes/${id}/${action}`)).status).toBe(404);
    expect((await call(t.url, bob.key, "DELETE", `/api/v1/sandboxes/${id}`)).status).toBe(404);
    const started = await call(t.url, bob.key, "POST", "/api/v1/app-conversations", { sandbox_id: id });
    expect(started.status).toBe(200);
    const taskId = (started.body as { id: string }).id;
    const task = await until(
      async () =>
        (
          (await call(t.url, bob.key, "GET", `/api/v1/app-conversations/start-tasks?ids=${taskId}`)).body as {
            status: string;
            detail: string | null;
          }[]
        )[0],
      (s) => s?.status === "ERROR" || s?.status === "READY",
    );
    expect(task?.status).toBe("ERROR");
    expect(task?.detail).toContain("not found");
    expect(await sandboxStatus(alice.key, id)).toBe("RUNNING");
    // Nor can bob read its key through the conversation listing.
    expect(
      (await call(t.url, bob.key, "GET", `/api/v1/app-conversations?ids=${alice.conv.id}`)).body,
    ).toEqual([null]);
  });

  it("racing resumes start one agent; an ended agent is not started again without a resume", async () => {
    killAgent(alice.workspace);
    await until(
      () => sandboxStatus(alice.key, alice.conv.sandbox_id),
      (s) => s === "ERROR",
    );
    // No restart loop of its own: the sweep records the end and leaves it ended.
    await t.app.sweep();
    await t.app.sweep();
    expect(await sandboxStatus(alice.key, alice.conv.sandbox_id)).toBe("ERROR");
    expect(agentProcesses(alice.workspace)).toHaveLength(0);
    const resumes = await Promise.all(
      Array.from({ length: 6 }, () =>
        call(t.url, alice.key, "POST", `/api/v1/sandboxes/${alice.conv.sandbox_id}/resume`),
      ),
    );
    for (const r of resumes) expect(r.status).toBe(200);
    await until(
      () => sandboxStatus(alice.key, alice.conv.sandbox_id),
      (s) => s === "RUNNING",
    );
    await new Promise((r) => setTimeout(r, 500));
    expect(agentProcesses(alice.workspace)).toHaveLength(1);
    await refresh(
      alice,
      await until(
        () => conversation(alice.key, alice.conv.id),
        (c) => c.conversation_url !== null,
      ),
    );
  }, 60_000);
});

describe("the agent's routes and events websocket from a browser", () => {
  const open = (url: string, headers: Record<string, string> = {}) =>
    new Promise<number>((resolve) => {
      const ws = new WebSocket(url, { headers });
      ws.once("open", () => {
        ws.close();
        resolve(101);
      });
      ws.once("unexpected-response", (_req, res) => {
        resolve(res.statusCode ?? 0);
        ws.terminate();
      });
      ws.once("error", () => resolve(0));
    });

  /** The frames a websocket gets within `ms` of opening (null: it did not open). */
  const framesOf = (url: string, ms = 500) =>
    new Promise<string[] | null>((resolve) => {
      const frames: string[] = [];
      const ws = new WebSocket(url);
      ws.on("message", (d) => frames.push(d.toString()));
      ws.once("open", () =>
        setTimeout(() => {
          ws.close();
          resolve(frames);
        }, ms),
      );
      ws.once("unexpected-response", () => {
        ws.terminate();
        resolve(null);
      });
      ws.once("error", () => resolve(null));
    });

  it("through the service: another sandbox's key, a user's API key or no key reads nothing of the agent; no CORS grant", async () => {
    // The UI's way in: the service's own origin, which forwards a call only for the sandbox its key names.
    expect(alice.via).toBe(new URL(t.url).origin);
    const ws = `${alice.via.replace(/^http/, "ws")}/sockets/events/${alice.conv.id}`;
    // Bob's sandbox key opens bob's own agent only, which has nothing of alice's conversation.
    const bobs = await framesOf(`${ws}?resend_all=true&session_api_key=${bob.sandboxKey}`);
    expect(JSON.stringify(bobs)).not.toContain("Hello from alice");
    // A user's API key, or no key, is no agent call: refused at the handshake.
    expect(await open(`${ws}?session_api_key=${alice.key}`)).toBe(401);
    expect(await open(ws, { origin: "https://evil.example" })).toBe(401);
    // Alice's key with bob's browser session: the cookie's user must own the sandbox.
    const signIn = await fetch(`${t.url}/api/auth/session`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ key: bob.key }),
    });
    const bobCookie = signIn.headers.getSetCookie()[0]?.split(";")[0] ?? "";
    expect(bobCookie).toMatch(/^aws_session=./);
    expect(await open(`${ws}?session_api_key=${alice.sandboxKey}`, { cookie: bobCookie })).toBe(403);
    const own = await framesOf(`${ws}?resend_all=true&session_api_key=${alice.sandboxKey}`);
    expect(JSON.stringify(own)).toContain("Hello from alice");
    // HTTP: bob's key reaches bob's agent (which has no such conversation), no key reaches no agent.
    const withBobs = await fetch(`${alice.via}/api/conversations/${alice.conv.id}`, {
      headers: { "x-session-api-key": bob.sandboxKey },
    });
    expect(withBobs.status).toBe(404);
    expect(await withBobs.text()).not.toContain("Hello from alice");
    const noKey = await fetch(`${alice.via}/api/conversations/${alice.conv.id}`);
    expect(noKey.status).toBe(401); // the service's own route, which wants a user's credential
    const withCookie = await fetch(`${alice.via}/api/conversations/${alice.conv.id}`, {
      headers: { "x-session-api-key": alice.sandboxKey, cookie: bobCookie },
    });
    expect(withCookie.status).toBe(403);
    // A foreign origin's preflight gets no grant (the service has no CORS for it), nor does an answer with the key.
    const preflight = await fetch(`${alice.via}/api/conversations/${alice.conv.id}`, {
      method: "OPTIONS",
      headers: {
        origin: "https://evil.example",
        "access-control-request-method": "GET",
        "access-control-request-headers": "x-session-api-key",
      },
    });
    expect(preflight.headers.get("access-control-allow-origin")).toBeNull();
    const foreign = await fetch(`${alice.via}/api/conversations/${alice.conv.id}`, {
      headers: { origin: "https://evil.example", "x-session-api-key": alice.sandboxKey },
    });
    expect(foreign.status).toBe(200);
    expect(foreign.headers.get("access-control-allow-origin")).toBeNull();
  });

  it("at the agent's own port: another sandbox's key, a user's API key or no key reads nothing; a foreign origin gets no CORS grant", async () => {
    const ws = `${alice.agent.replace(/^http/, "ws")}/sockets/events/${alice.conv.id}`;
    expect(await open(`${ws}?session_api_key=${bob.sandboxKey}`)).toBe(403);
    expect(await open(`${ws}?session_api_key=${alice.key}`)).toBe(403);
    expect(await open(ws, { origin: "https://evil.example" })).toBe(403);
    expect(await open(`${ws}?session_api_key=${alice.sandboxKey}`)).toBe(101);
    for (const key of [bob.sandboxKey, alice.key]) {
      const r = await fetch(`${alice.agent}/api/conversations/${alice.conv.id}`, {
        headers: { "x-session-api-key": key },
      });
      expect(r.status).toBe(401);
    }
    const preflight = await fetch(`${alice.agent}/api/conversations/${alice.conv.id}`, {
      method: "OPTIONS",
      headers: {
        origin: "https://evil.example",
        "access-control-request-method": "GET",
        "access-control-request-headers": "x-session-api-key",
      },
    });
    expect(preflight.status).toBe(400);
    expect(preflight.headers.get("access-control-allow-origin")).toBeNull();
    // Even with the key, an answer to a foreign origin carries no grant: a browser page there cannot read it.
    const foreign = await fetch(`${alice.agent}/api/conversations/${alice.conv.id}`, {
      headers: { origin: "https://evil.example", "x-session-api-key": alice.sandboxKey },
    });
    expect(foreign.headers.get("access-control-allow-origin")).toBeNull();
    // Through the service, bob's key reads nothing of alice's conversation: not its agent's URL or key, nor events.
    const legacy = await call(t.url, bob.key, "GET", `/api/conversations/${alice.conv.id}`);
    // The reference's answer for a conversation the caller does not have: null.
    expect([legacy.status, legacy.body]).toEqual([200, null]);
    const hex = alice.conv.id.replaceAll("-", "");
    const count = await call(t.url, bob.key, "GET", `/api/v1/events/count?conversation_id__eq=${hex}`);
    expect(count.body).toBe(0);
    const search = await call(t.url, bob.key, "GET", `/api/v1/events/search?conversation_id__eq=${hex}`);
    expect(search.text).not.toContain("Hello from alice");
    expect(
      (await call(t.url, alice.key, "GET", `/api/v1/events/count?conversation_id__eq=${hex}`)).body,
    ).toBeGreaterThan(0);
  });

  it("the workspace routes stay inside the workspace: no .. and no symlink out of it", async () => {
    expect((await bash(alice, "ln -sfn / $HOME/escape && echo ok")).stdout).toContain("ok");
    const h = { "x-session-api-key": alice.sandboxKey };
    // Through the service (the UI's way) and at the agent's own port.
    for (const base of [alice.via, alice.agent]) {
      for (const path of [
        "/workspace/../../../etc/hostname",
        "/workspace/project/../../etc/hostname",
        `${alice.workspace}/../../etc/hostname`,
        `${alice.workspace}/escape/etc/hostname`,
        "/workspace/escape/etc/hostname",
      ]) {
        const r = await fetch(`${base}/api/git/diff/${encodeURIComponent(path)}`, { headers: h });
        expect(r.status, `${base} ${path}`).toBe(400);
        const form = new FormData();
        form.set("file", new Blob(["x"]), "x");
        const up = await fetch(`${base}/api/file/upload/${encodeURIComponent(`${path}-up`)}`, {
          method: "POST",
          headers: h,
          body: form,
        });
        expect(up.status, `${base} ${path}`).toBe(400);
      }
      const inside = await fetch(`${base}/api/git/diff/${encodeURIComponent("/workspace/inside.txt")}`, {
        headers: h,
      });
      expect(inside.status, base).toBe(200);
    }
  });
});

describe("a restart racing a delete", () => {
  it("leaves no agent behind: the sandbox is gone with its processes and workspace", async () => {
    killAgent(bob.workspace);
    await until(
      () => sandboxStatus(bob.key, bob.conv.sandbox_id),
      (s) => s === "ERROR",
    );
    const [resumed, deleted] = await Promise.all([
      call(t.url, bob.key, "POST", `/api/v1/sandboxes/${bob.conv.sandbox_id}/resume`),
      call(t.url, bob.key, "DELETE", `/api/v1/sandboxes/${bob.conv.sandbox_id}`),
    ]);
    expect(resumed.status).toBeLessThan(500);
    expect(deleted.status).toBe(200);
    await new Promise((r) => setTimeout(r, 1500));
    await t.app.sweep();
    expect(await sandboxStatus(bob.key, bob.conv.sandbox_id)).toBe("none");
    expect(findSandboxProcesses(bob.workspace)).toEqual([]);
  }, 60_000);
});
