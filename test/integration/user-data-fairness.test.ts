/**
 * One user's large writes do not slow another user's reads: user B's GET /api/settings p50 while user A writes
 * custom secrets in bulk (from another process, as a second client would, so that A's client work does not run on
 * this process's event loop) stays within 2x of B's p50 measured just before.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_QUOTAS } from "../../src/server/container.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

let t: TestApp;
let writer: ChildProcess | undefined;

beforeAll(async () => {
  // The default quotas, and the default per-key rate (as a server started without settings has it).
  t = await startTestApp({ rateLimit: { perSecond: 200, burst: 400 }, quotas: DEFAULT_QUOTAS });
});
afterAll(async () => {
  writer?.kill();
  await t?.close();
});

/** `n` sequential GET /api/settings of `key`: their times in ms. */
async function times(key: string, n: number): Promise<number[]> {
  const ms: number[] = [];
  for (let i = 0; i < n; i++) {
    const start = performance.now();
    const r = await fetch(`${t.url}/api/settings`, { headers: { "x-session-api-key": key } });
    await r.arrayBuffer();
    ms.push(performance.now() - start);
    if (r.status !== 200) throw new Error(`GET /api/settings answered ${r.status}`);
  }
  return ms;
}

const median = (ms: number[]): number =>
  [...ms].sort((a, b) => a - b)[Math.floor(ms.length / 2)] ?? Number.NaN;

/** Writes custom secrets as fast as the server takes them, 4 requests at a time, 100 secrets of 1 KiB each. */
const WRITER = `
const [url, key] = process.argv.slice(1);
let n = 0, ok = 0, refused = 0;
const value = "s".repeat(1024);
async function loop(w) {
  for (;;) {
    const custom = {};
    for (let i = 0; i < 100; i++) custom["W" + w + "_" + n++] = { secret: value, description: "bulk" };
    const r = await fetch(url + "/api/settings", {
      method: "POST",
      headers: { "x-session-api-key": key, "content-type": "application/json" },
      body: JSON.stringify({ secrets_store: { custom_secrets: custom } }),
    }).catch(() => null);
    if (r === null) continue;
    await r.arrayBuffer();
    if (r.status === 200) ok++; else refused++;
    if ((ok + refused) % 20 === 0) process.stdout.write(JSON.stringify({ ok, refused }) + "\\n");
  }
}
for (let w = 0; w < 4; w++) loop(w);
`;

describe("user data fairness", () => {
  it("another user's GET /api/settings p50 stays within 2x of its baseline while one user writes secrets in bulk", async () => {
    const reader = await t.keyFor("reader");
    const bulk = await t.keyFor("bulk-writer");
    expect(
      (await call(t.url, reader, "POST", "/api/settings", { llm_model: "a/b", language: "en" })).status,
    ).toBe(200);
    await times(reader, 100); // warm-up

    writer = spawn(process.execPath, ["-e", WRITER, t.url, bulk], { stdio: ["ignore", "pipe", "inherit"] });
    let progress = { ok: 0, refused: 0 };
    writer.stdout?.on("data", (d: Buffer) => {
      const last = d.toString().trim().split("\n").at(-1);
      if (last) progress = JSON.parse(last) as typeof progress;
    });
    while (progress.ok + progress.refused < 20) await new Promise((r) => setTimeout(r, 50));
    // Alone and during the writes, in turns (the writer stopped and continued), so that the machine's other load
    // weighs on both alike.
    const alone: number[] = [];
    const during: number[] = [];
    for (let round = 0; round < 6; round++) {
      writer.kill("SIGSTOP");
      await new Promise((r) => setTimeout(r, 100)); // its requests in flight answered
      alone.push(...(await times(reader, 60)));
      writer.kill("SIGCONT");
      await new Promise((r) => setTimeout(r, 100));
      during.push(...(await times(reader, 60)));
    }
    const writes = { ...progress };
    writer.kill();
    writer = undefined;
    const baseline = median(alone);
    const loaded = median(during);

    console.log(
      `GET /api/settings p50: ${baseline.toFixed(2)} ms alone, ${loaded.toFixed(2)} ms during`,
      writes,
    );
    expect(writes.ok).toBe(5); // 500 secrets: the quota
    expect(writes.refused).toBeGreaterThan(100);
    expect(loaded).toBeLessThanOrEqual(2 * baseline);
  }, 120_000);

  it("one user's writes beyond USER_DATA_WRITES_PER_SECOND (10, burst 20) are refused with 429 and store nothing", async () => {
    const k = await t.keyFor("hasty");
    const answers = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        call(t.url, k, "POST", "/api/secrets", { name: `H${i}`, value: "v" }),
      ),
    );
    const refused = answers.filter((r) => r.status === 429);
    expect(answers.filter((r) => r.status === 201).length).toBeGreaterThanOrEqual(20);
    expect(refused.length).toBeGreaterThan(0);
    expect(refused[0]?.headers.get("retry-after")).toBe("1");
    expect(refused[0]?.body).toEqual({
      message: "Too many changes to this user's settings and secrets; try again",
    });
    const listed = (await call(t.url, k, "GET", "/api/secrets")).body as { custom_secrets: unknown[] };
    expect(listed.custom_secrets).toHaveLength(30 - refused.length);
    // Another user is not held to this one's rate.
    expect(
      (await call(t.url, await t.keyFor("calm"), "POST", "/api/secrets", { name: "C", value: "v" })).status,
    ).toBe(201);
  });
});
