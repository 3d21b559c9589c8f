import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { createProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime.ts";
import type { ProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime-types.ts";
import { directAgentUrl } from "../helpers/agent-address.ts";
import { call, startTestApp } from "../helpers/test-app.ts";

const dir = mkdtempSync(join(tmpdir(), "aws-restart-"));
const key = randomBytes(32);
afterAll(async () => {
  await createProcessRuntime({ workspaceRoot: join(dir, "sandboxes") }).killAll();
  rmSync(dir, { recursive: true, force: true });
});

describe("server restart", () => {
  it("reconciles every recorded sandbox at start: a survivor stays RUNNING, a dead one is ERROR (its workspace is there: a resume starts it again), a paused one PAUSED", async () => {
    const first = await startTestApp({ dir, encryptionKey: key, keepSandboxes: true });
    const k = await first.keyFor("restart-user");
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await call(first.url, k, "POST", "/api/v1/sandboxes");
      ids.push((r.body as { id: string }).id);
    }
    const [survivor, victim, paused] = ids as [string, string, string];
    const deadline = Date.now() + 10_000;
    for (;;) {
      const list = (
        await call(first.url, k, "GET", `/api/v1/sandboxes?${ids.map((i) => `id=${i}`).join("&")}`)
      ).body as { status: string }[];
      if (list.every((s) => s.status === "RUNNING")) break;
      if (Date.now() > deadline) throw new Error(JSON.stringify(list));
      await new Promise((r) => setTimeout(r, 20));
    }
    await call(first.url, k, "POST", `/api/v1/sandboxes/${paused}/pause`);
    const victimRecord = await first.storage.sandboxes.get(victim);
    const victimPid = (victimRecord?.handle as { data?: { pid?: number } } | undefined)?.data?.pid ?? 0;
    expect(victimPid).toBeGreaterThan(0);
    await first.close(); // the server stops; sandboxes keep running
    process.kill(-victimPid, "SIGKILL"); // dies while no server watches
    await new Promise((r) => setTimeout(r, 100));

    const second = await startTestApp({ dir, encryptionKey: key, keepSandboxes: true });
    const counts = await second.app.services.sandboxes.reconcileAll();
    expect(counts).toMatchObject({ RUNNING: 1, ERROR: 1, PAUSED: 1 });
    // what was recorded is now true in storage, before any client asks
    expect((await second.storage.sandboxes.get(survivor))?.status).toBe("RUNNING");
    expect((await second.storage.sandboxes.get(victim))?.status).toBe("ERROR");
    expect((await second.storage.sandboxes.get(paused))?.status).toBe("PAUSED");
    const list = (
      await call(second.url, k, "GET", `/api/v1/sandboxes?${ids.map((i) => `id=${i}`).join("&")}`)
    ).body as { status: string }[];
    expect(list.map((s) => s.status)).toEqual(["RUNNING", "ERROR", "PAUSED"]);
    // the survivor's agent still answers with its (persisted, encrypted) session key: through the new server's
    // own origin (AGENT_SERVER is "/", resolved against the service's URL as a client does), and directly
    const s = list[0] as unknown as {
      exposed_urls: { name: string; url: string; port: number }[];
      session_api_key: string;
    };
    expect(s.session_api_key).toMatch(new RegExp(`^sbx_${survivor}_[0-9A-Za-z]{43}$`));
    const [viaService, direct] = s.exposed_urls;
    expect(viaService).toEqual({ name: "AGENT_SERVER", url: "/", port: Number(new URL(second.url).port) });
    // The agent's own address: its loopback port, or its address on port 8000 in a network of its own.
    expect(direct).toEqual({
      name: "AGENT_SERVER_DIRECT",
      url: expect.stringMatching(directAgentUrl((second.runtime as ProcessRuntime).network)),
      port: expect.any(Number),
    });
    expect(new URL(direct?.url ?? "http://x").port).toBe(String(direct?.port));
    for (const base of [new URL(viaService?.url ?? "", second.url).href, `${direct?.url}/`]) {
      const res = await fetch(`${base}api/conversations?ids=x`, {
        headers: { "x-session-api-key": s.session_api_key },
      });
      expect(res.status, base).toBe(200);
      expect(await res.json(), base).toEqual([null]);
    }
    // The dead one, resumed: its agent starts again on the same workspace (the new server is not its parent).
    const resumed = await call(second.url, k, "POST", `/api/v1/sandboxes/${victim}/resume`);
    expect(resumed.status).toBe(200);
    const until = Date.now() + 10_000;
    for (;;) {
      const [v] = (await call(second.url, k, "GET", `/api/v1/sandboxes?id=${victim}`)).body as {
        status: string;
      }[];
      if (v?.status === "RUNNING") break;
      if (Date.now() > until) throw new Error(JSON.stringify(v));
      await new Promise((r) => setTimeout(r, 20));
    }
    const again = (await second.storage.sandboxes.get(victim))?.handle as { data?: { pid?: number } };
    expect(again.data?.pid).not.toBe(victimPid);
    for (const id of ids) await call(second.url, k, "DELETE", `/api/v1/sandboxes/${id}`);
    await second.close();
  });
});
