// Eight conversation starts by one user with a running limit of five, accepted by a server that is killed while
// they run: another server sharing the store resumes them, and every one ends READY (none fails because another
// start of the same user took its running slot).

import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { freeFixedPorts, killProcessesUnder, Replica } from "../helpers/replicas.ts";
import { CLI } from "../helpers/server-process.ts";

const tmp = mkdtempSync(join(tmpdir(), "aws-slots-replicas-"));
const dataDir = join(tmp, "data");
mkdirSync(dataDir, { recursive: true });
const replicas: Replica[] = [];
afterAll(async () => {
  await Promise.all(replicas.map((r) => r.kill()));
  await killProcessesUnder(dataDir);
  rmSync(tmp, { recursive: true, force: true });
}, 60_000);

const env = (): Record<string, string> => ({
  PATH: process.env.PATH ?? "/usr/bin:/bin",
  HOME: process.env.HOME ?? "/tmp",
  TMPDIR: tmpdir(),
  DATA_DIR: dataDir,
  GIT_PROVIDER_VERIFY: "false",
  RATE_LIMIT_PER_SECOND: "0",
  MAX_RUNNING_SANDBOXES: "5",
  SWEEP_INTERVAL_MS: "500",
  LEASE_MS: "1500",
  SANDBOX_START_TIMEOUT_MS: "30000",
});

interface Task {
  id: string;
  status: string;
  detail: string | null;
}

async function api(r: Replica, key: string, method: string, path: string, body?: unknown): Promise<unknown> {
  const res = await fetch(`${r.url}${path}`, {
    method,
    headers: {
      "x-session-api-key": key,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  expect(res.status, `${method} ${path}`).toBe(200);
  return res.json();
}

describe("conversation starts resumed by another server", () => {
  it("eight starts with a running limit of five, their server killed midway: all end READY on the other", async () => {
    const made = spawnSync(process.execPath, [CLI, "keys", "create", "--init", "--user", "eager"], {
      env: env(),
      encoding: "utf8",
    });
    expect(made.status, made.stderr).toBe(0);
    const key = made.stdout.trim().split("\n").at(-1) ?? "";
    const ports = await freeFixedPorts(4);
    for (let i = 0; i < 2; i++)
      replicas.push(
        new Replica({
          index: i,
          entry: CLI,
          env: env(),
          port: ports[2 * i] ?? 0,
          grpcPort: ports[2 * i + 1] ?? 0,
          logFile: join(tmp, `replica-${i}.log`),
        }),
      );
    const [a, b] = replicas as [Replica, Replica];
    await a.start();
    await b.start();

    const tasks = (await Promise.all(
      Array.from({ length: 8 }, () =>
        api(a, key, "POST", "/api/v1/app-conversations", { llm_model: "openai/test-model" }),
      ),
    )) as Task[];
    const query = `/api/v1/app-conversations/start-tasks?${tasks.map((t) => `ids=${t.id}`).join("&")}`;
    // Killed while the starts run: once one of them waits for a slot (or after 3 s at most).
    const waitUntil = Date.now() + 3000;
    let sawWaiting = false;
    while (Date.now() < waitUntil && !sawWaiting) {
      const now = (await api(b, key, "GET", query)) as Task[];
      sawWaiting = now.some((t) => t.status === "WAITING_FOR_SANDBOX" && t.detail !== null);
      if (now.every((t) => t.status === "READY")) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    await a.kill();

    const deadline = Date.now() + 60_000;
    let last: Task[] = [];
    for (;;) {
      last = (await api(b, key, "GET", query)) as Task[];
      if (last.every((t) => t.status === "READY" || t.status === "ERROR")) break;
      if (Date.now() > deadline) throw new Error(`not settled: ${JSON.stringify(last)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(last.map((t) => [t.status, t.detail])).toEqual(last.map(() => ["READY", null]));
    console.log(`replicas-slots: a start was seen waiting for a slot before the kill: ${sawWaiting}`);
    // The limit holds: five hold a slot, the others were paused once their starts were over.
    const page = (await api(b, key, "GET", "/api/v1/sandboxes/search?limit=100")) as {
      items: { id: string; status: string }[];
    };
    const holding = page.items.filter((s) => s.status === "RUNNING" || s.status === "STARTING");
    expect(holding.length).toBeLessThanOrEqual(5);
    // Delete them through the surviving server (it removes their workspaces and mounts).
    for (const s of page.items)
      await fetch(`${b.url}/api/v1/sandboxes/${s.id}`, {
        method: "DELETE",
        headers: { "x-session-api-key": key },
      });
  }, 120_000);
});
