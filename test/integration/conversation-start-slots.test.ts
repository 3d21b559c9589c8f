// An accepted conversation start never fails because of the same user's other starts: the running limit never
// pauses a sandbox that is starting or in use by a conversation start; a start that finds every running slot of
// its user held so waits in WAITING_FOR_SANDBOX (its detail says why) until one is free.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime.ts";
import type { ProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime-types.ts";
import type { Task } from "../helpers/app-conversations.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

let t: TestApp;
let runtime: ProcessRuntime;
let dir: string;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "aws-slots-"));
  runtime = createProcessRuntime({ workspaceRoot: join(dir, "sandboxes"), isolation: "none", warmAgents: 2 });
  t = await startTestApp({
    dir,
    runtime,
    maxRunningSandboxes: 5,
    sweepIntervalMs: 0,
    llmModel: "openai/test-model",
  });
}, 30_000);
afterAll(async () => {
  await t.close();
  await runtime.killAll();
  rmSync(dir, { recursive: true, force: true });
});

describe("conversation starts and the running limit", () => {
  it("eight parallel starts with a running limit of five all end READY; the late ones wait for a slot and say why", async () => {
    const key = await t.keyFor("eager");
    const tasks = await Promise.all(
      Array.from({ length: 8 }, async () => {
        const r = await call(t.url, key, "POST", "/api/v1/app-conversations", {});
        expect(r.status, r.text).toBe(200);
        return r.body as Task;
      }),
    );
    const seen = new Map<string, Set<string>>();
    const details: string[] = [];
    const deadline = Date.now() + 60_000;
    let last: Task[] = [];
    for (;;) {
      const r = await call(
        t.url,
        key,
        "GET",
        `/api/v1/app-conversations/start-tasks?${tasks.map((x) => `ids=${x.id}`).join("&")}`,
      );
      last = r.body as Task[];
      for (const task of last) {
        const states = seen.get(task.id) ?? new Set();
        states.add(task.status);
        seen.set(task.id, states);
        if (task.status === "WAITING_FOR_SANDBOX" && task.detail) details.push(task.detail);
      }
      if (last.every((x) => x.status === "READY" || x.status === "ERROR")) break;
      if (Date.now() > deadline) throw new Error(`not settled: ${JSON.stringify(last)}`);
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(last.map((x) => [x.status, x.detail])).toEqual(last.map(() => ["READY", null]));
    // Three of them found five starting sandboxes and waited (at least one was seen doing so).
    expect(details.length).toBeGreaterThan(0);
    expect(details[0]).toMatch(/Waiting for a running slot: all 5 of your running sandboxes are starting/);
    // The limit holds at the end: five run, the three oldest were paused once their conversations were ready.
    const sandboxes = (await call(t.url, key, "GET", "/api/v1/sandboxes/search?limit=100")).body as {
      items: { id: string; status: string }[];
    };
    const statuses = sandboxes.items.map((s) => s.status);
    expect(statuses.filter((s) => s === "RUNNING")).toHaveLength(5);
    expect(statuses.filter((s) => s === "PAUSED")).toHaveLength(3);
  }, 90_000);
});
