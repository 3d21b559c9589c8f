import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime-types.ts";
import {
  SandboxService,
  SandboxStatus,
  type WatchSandboxesResponse,
} from "../../src/gen/workspace/v1/sandbox_pb.js";
import { directAgentUrl } from "../helpers/agent-address.ts";
import { connectClient, grpcClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

let t: TestApp;
let alice: string;
let bob: string;
const api = (key: string | undefined, method: string, path: string, body?: unknown) =>
  call(t.url, key, method, path, body);

interface Sandbox {
  id: string;
  status: string;
  session_api_key: string | null;
  exposed_urls: { name: string; url: string; port: number }[] | null;
  created_by_user_id: string;
  sandbox_spec_id: string;
  created_at: string;
}

async function waitStatus(key: string, id: string, status: string, ms = 10_000): Promise<Sandbox> {
  const deadline = Date.now() + ms;
  for (;;) {
    const r = await api(key, "GET", `/api/v1/sandboxes?id=${id}`);
    const s = (r.body as (Sandbox | null)[])[0];
    if (s?.status === status) return s;
    if (Date.now() > deadline) throw new Error(`sandbox ${id} not ${status}: ${JSON.stringify(s)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

beforeAll(async () => {
  t = await startTestApp({ maxRunningSandboxes: 2 });
  alice = await t.keyFor("alice");
  bob = await t.keyFor("bob");
});
afterAll(async () => {
  await t.close();
});

describe("sandbox specs", () => {
  it("search lists the configured specs, first is the default; batch get aligned with null", async () => {
    const r = await api(alice, "GET", "/api/v1/sandbox-specs/search");
    expect(r.status).toBe(200);
    const page = r.body as {
      items: {
        id: string;
        command: string[] | null;
        working_dir: string;
        initial_env: object;
        created_at: string;
      }[];
      next_page_id: null;
    };
    expect(page.next_page_id).toBeNull();
    expect(page.items[0]?.id).toBe("workspace-agent");
    expect(page.items[0]?.created_at).toMatch(/Z$/);
    const b = await api(alice, "GET", "/api/v1/sandbox-specs?id=workspace-agent&id=nope");
    expect((b.body as unknown[])[1]).toBeNull();
    expect((b.body as { id: string }[])[0]?.id).toBe("workspace-agent");
  });
});

describe("sandbox lifecycle over REST (process runtime)", () => {
  let sb: Sandbox;

  it("POST starts a sandbox; RUNNING exposes the agent URL and session key, and the agent answers with that key", async () => {
    const r = await api(alice, "POST", "/api/v1/sandboxes");
    expect(r.status).toBe(200);
    sb = r.body as Sandbox;
    expect(sb.sandbox_spec_id).toBe("workspace-agent");
    expect(sb.created_by_user_id).toBe("alice");
    sb = await waitStatus(alice, sb.id, "RUNNING");
    // The key names its sandbox; the agent is this service's own origin ("/"), its own address beside it (its
    // loopback port, or its address on port 8000 when sandboxes have networks of their own).
    expect(sb.session_api_key).toMatch(new RegExp(`^sbx_${sb.id}_[0-9A-Za-z]{43}$`));
    // Each entry's port is the one its URL reaches: the service's own (where "/" resolves), and the agent's.
    const port = sb.exposed_urls?.[1]?.port ?? 0;
    expect(sb.exposed_urls).toEqual([
      { name: "AGENT_SERVER", url: "/", port: Number(new URL(t.url).port) },
      {
        name: "AGENT_SERVER_DIRECT",
        url: expect.stringMatching(directAgentUrl((t.runtime as ProcessRuntime).network)),
        port,
      },
    ]);
    expect(new URL(sb.exposed_urls?.[1]?.url ?? "http://x").port).toBe(String(port));
    expect(port).toBeGreaterThan(0);
    const exec = (base: string, key: string | null) =>
      fetch(new URL("/api/bash/execute_bash_command", base), {
        method: "POST",
        headers: {
          ...(key === null ? {} : { "x-session-api-key": key }),
          "content-type": "application/json",
        },
        body: JSON.stringify({ command: "echo hi && pwd" }),
      });
    // Through the service (AGENT_SERVER resolved against the service's URL, as a client does) with the key.
    const viaService = new URL(sb.exposed_urls?.[0]?.url ?? "", t.url).href;
    const proxied = await exec(viaService, sb.session_api_key);
    expect(proxied.status).toBe(200);
    const out = (await proxied.json()) as { exit_code: number; stdout: string };
    expect(out.exit_code).toBe(0);
    expect(out.stdout).toContain("hi");
    // Another secret for the same sandbox opens nothing.
    const forged = `sbx_${sb.id}_${"A".repeat(43)}`;
    expect((await exec(viaService, forged)).status).toBe(404);
    // The agent itself, directly: alive, and it checks the key too.
    const direct = sb.exposed_urls?.[1]?.url ?? "";
    expect((await fetch(`${direct}/alive`)).status).toBe(200);
    expect((await exec(direct, null)).status).toBe(401);
    expect((await exec(direct, forged)).status).toBe(401);
    const straight = await exec(direct, sb.session_api_key);
    expect(((await straight.json()) as { stdout: string }).stdout).toContain("hi");
  });

  it("pause → PAUSED (key and URLs hidden, agent frozen); resume → RUNNING; both idempotent", async () => {
    expect((await api(alice, "POST", `/api/v1/sandboxes/${sb.id}/pause`, {})).body).toEqual({
      success: true,
    });
    expect((await api(alice, "POST", `/api/v1/sandboxes/${sb.id}/pause`, {})).body).toEqual({
      success: true,
    });
    const paused = await waitStatus(alice, sb.id, "PAUSED");
    expect(paused.session_api_key).toBeNull();
    expect(paused.exposed_urls).toBeNull();
    expect((await api(alice, "POST", `/api/v1/sandboxes/${sb.id}/resume`, {})).body).toEqual({
      success: true,
    });
    expect((await api(alice, "POST", `/api/v1/sandboxes/${sb.id}/resume`, {})).body).toEqual({
      success: true,
    });
    await waitStatus(alice, sb.id, "RUNNING");
  });

  it("another user's sandbox does not exist for them", async () => {
    expect((await api(bob, "GET", `/api/v1/sandboxes?id=${sb.id}`)).body).toEqual([null]);
    expect(await api(bob, "POST", `/api/v1/sandboxes/${sb.id}/pause`)).toMatchObject({
      status: 404,
      body: { detail: "Not Found" },
    });
    expect((await api(bob, "DELETE", `/api/v1/sandboxes/${sb.id}`)).status).toBe(404);
    expect(((await api(bob, "GET", "/api/v1/sandboxes/search")).body as { items: unknown[] }).items).toEqual(
      [],
    );
    await waitStatus(alice, sb.id, "RUNNING");
  });

  it("a process killed behind our back is reported MISSING", async () => {
    const r = await api(alice, "POST", "/api/v1/sandboxes");
    const victim = await waitStatus(alice, (r.body as Sandbox).id, "RUNNING");
    const record = await t.storage.sandboxes.get(victim.id);
    const pid = (record?.handle as { data: { pid: number } } | undefined)?.data.pid ?? 0;
    expect(pid).toBeGreaterThan(0);
    process.kill(-pid, "SIGKILL");
    const after = await waitStatus(alice, victim.id, "ERROR").catch(() =>
      waitStatus(alice, victim.id, "MISSING"),
    );
    expect(["ERROR", "MISSING"]).toContain(after.status);
    expect((await api(alice, "DELETE", `/api/v1/sandboxes/${victim.id}`)).body).toEqual({ success: true });
  });

  it("the per-user limit pauses the oldest running sandbox", async () => {
    const second = (await api(alice, "POST", "/api/v1/sandboxes")).body as Sandbox;
    await waitStatus(alice, second.id, "RUNNING");
    const third = (await api(alice, "POST", "/api/v1/sandboxes")).body as Sandbox;
    await waitStatus(alice, third.id, "RUNNING");
    await waitStatus(alice, sb.id, "PAUSED"); // the oldest, with a limit of 2
    expect((await api(alice, "GET", `/api/v1/sandboxes?id=${second.id}`)).body).toMatchObject([
      { status: "RUNNING" },
    ]);
    for (const s of [second, third]) await api(alice, "DELETE", `/api/v1/sandboxes/${s.id}`);
  });

  it("search pages newest first with opaque, stable page ids", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push(((await api(bob, "POST", "/api/v1/sandboxes")).body as Sandbox).id);
    const p1 = (await api(bob, "GET", "/api/v1/sandboxes/search?limit=2")).body as {
      items: Sandbox[];
      next_page_id: string;
    };
    expect(p1.items.map((s) => s.id)).toEqual([ids[2], ids[1]]);
    // a new sandbox created between pages does not shift the next page
    ids.push(((await api(bob, "POST", "/api/v1/sandboxes")).body as Sandbox).id);
    const p2 = (
      await api(bob, "GET", `/api/v1/sandboxes/search?limit=2&page_id=${encodeURIComponent(p1.next_page_id)}`)
    ).body as { items: Sandbox[]; next_page_id: string | null };
    expect(p2.items.map((s) => s.id)).toEqual([ids[0]]);
    expect(p2.next_page_id).toBeNull();
    // alice cannot use bob's page id
    expect(
      (await api(alice, "GET", `/api/v1/sandboxes/search?page_id=${encodeURIComponent(p1.next_page_id)}`))
        .status,
    ).toBe(422);
    for (const id of ids)
      expect((await api(bob, "DELETE", `/api/v1/sandboxes/${id}`)).body).toEqual({ success: true });
  });

  it("delete removes it: later look-ups are null / 404", async () => {
    expect((await api(alice, "DELETE", `/api/v1/sandboxes/${sb.id}`)).body).toEqual({ success: true });
    expect((await api(alice, "GET", `/api/v1/sandboxes?id=${sb.id}`)).body).toEqual([null]);
    expect((await api(alice, "POST", `/api/v1/sandboxes/${sb.id}/resume`)).status).toBe(404);
  });
});

describe("bad input on sandbox routes", () => {
  it("limits, page ids, specs, id lists", async () => {
    const cases: [string, string, number, unknown][] = [
      ["GET", "/api/v1/sandboxes/search?limit=0", 422, ["query", "limit"]],
      ["GET", "/api/v1/sandboxes/search?limit=101", 422, ["query", "limit"]],
      ["GET", "/api/v1/sandboxes/search?limit=abc", 422, ["query", "limit"]],
      ["GET", "/api/v1/sandboxes/search?page_id=bogus", 422, ["query", "page_id"]],
      ["GET", "/api/v1/sandbox-specs/search?limit=-5", 422, ["query", "limit"]],
      ["GET", "/api/v1/sandboxes", 422, ["query", "id"]],
      ["GET", "/api/v1/sandbox-specs", 422, ["query", "id"]],
      ["POST", "/api/v1/sandboxes?sandbox_spec_id=nope", 422, ["query", "sandbox_spec_id"]],
      [
        "GET",
        `/api/v1/sandboxes?${Array.from({ length: 101 }, (_, i) => `id=x${i}`).join("&")}`,
        422,
        ["query", "id"],
      ],
      ["POST", "/api/v1/sandboxes/does-not-exist/pause", 404, null],
      ["DELETE", "/api/v1/sandboxes/does-not-exist", 404, null],
    ];
    for (const [m, p, status, loc] of cases) {
      const r = await api(alice, m, p);
      expect(r.status, `${m} ${p}: ${r.text}`).toBe(status);
      if (loc !== null) expect((r.body as { detail: { loc: unknown }[] }).detail[0]?.loc).toEqual(loc);
      else expect(r.body).toEqual({ detail: "Not Found" });
    }
    expect((await api(undefined, "GET", "/api/v1/sandboxes/search")).status).toBe(401);
  });
});

describe("sandboxes over gRPC and Connect", () => {
  it("StartSandbox/PauseSandbox/ResumeSandbox/DeleteSandbox and WatchSandboxes pushes each status change", async () => {
    const g = grpcClient(SandboxService, t.grpcAddress);
    const started = await g.unary<{ sandbox: { id: string; status: number } }>("StartSandbox", {}, alice);
    const id = started.sandbox.id;
    const seen: number[] = [];
    const stream = g.stream("WatchSandboxes", { id: [id] }, alice);
    stream.on("data", (m: WatchSandboxesResponse) => {
      if (m.sandbox) seen.push(m.sandbox.status);
    });
    stream.on("error", () => {});
    await waitStatus(alice, id, "RUNNING");
    await g.unary("PauseSandbox", { sandboxId: id }, alice);
    await g.unary("ResumeSandbox", { sandboxId: id }, alice);
    await waitStatus(alice, id, "RUNNING");
    await g.unary("DeleteSandbox", { sandboxId: id }, alice);
    const deadline = Date.now() + 5000;
    while (!seen.includes(SandboxStatus.MISSING) && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 20));
    stream.cancel();
    expect(seen).toContain(SandboxStatus.PAUSED);
    expect(seen).toContain(SandboxStatus.RUNNING);
    expect(seen.at(-1)).toBe(SandboxStatus.MISSING);
    await expect(g.unary("PauseSandbox", { sandboxId: id }, alice)).rejects.toMatchObject({
      code: Code.NotFound,
    });
    await expect(g.unary("SearchSandboxes", { limit: 500 }, alice)).rejects.toMatchObject({
      code: Code.InvalidArgument,
    });
    g.close();

    const c = connectClient(SandboxService, t.url, bob);
    const page = await c.searchSandboxes({});
    expect(page.items).toEqual([]);
  });
});
