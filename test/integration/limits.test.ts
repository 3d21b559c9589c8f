import { Code } from "@connectrpc/connect";
import { afterAll, describe, expect, it } from "vitest";
import { SettingsService } from "../../src/gen/workspace/v1/settings_pb.js";
import { grpcClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

const apps: TestApp[] = [];
afterAll(async () => {
  for (const a of apps) await a.close().catch(() => {});
});

describe("per-key rate limit", () => {
  it("answers 429 {message: Too many requests} with Retry-After beyond the burst, per key, on REST and gRPC", async () => {
    const t = await startTestApp({ rateLimit: { perSecond: 1, burst: 5 } });
    apps.push(t);
    const a = await t.keyFor("a");
    const b = await t.keyFor("b");
    const statuses: number[] = [];
    for (let i = 0; i < 8; i++) statuses.push((await call(t.url, a, "GET", "/api/secrets")).status);
    expect(statuses.slice(0, 5)).toEqual([200, 200, 200, 200, 200]);
    const limited = await call(t.url, a, "GET", "/api/secrets");
    expect(limited.status).toBe(429);
    expect(limited.body).toEqual({ message: "Too many requests" });
    expect(limited.headers.get("retry-after")).toBe("1");
    // another key is not affected
    expect((await call(t.url, b, "GET", "/api/secrets")).status).toBe(200);
    const g = grpcClient(SettingsService, t.grpcAddress);
    await expect(g.unary("GetSettings", {}, a)).rejects.toMatchObject({ code: Code.ResourceExhausted });
    g.close();
  });
});

describe("storage outage", () => {
  it("answers 503 with a JSON body (never 500, never a stack trace) when storage is gone", async () => {
    const t = await startTestApp();
    apps.push(t);
    const key = await t.keyFor("u");
    await call(t.url, key, "POST", "/api/settings", { agent: "x" });
    // A key already authenticated is cached; storage then fails under the running server.
    await t.storage.close();
    for (const [m, p, body] of [
      ["GET", "/api/settings", undefined],
      ["POST", "/api/settings", { agent: "y" }],
      ["GET", "/api/secrets", undefined],
      ["GET", "/api/v1/sandboxes/search", undefined],
    ] as const) {
      const r = await call(t.url, key, m, p, body);
      expect(r.status, `${m} ${p}: ${r.text}`).toBe(503);
      expect(r.headers.get("content-type")).toContain("application/json");
      expect(r.text).not.toMatch(/at .*\.ts|sqlite|SQLITE/i);
    }
    // an unknown key cannot be checked either: 503, not 401 and not 500
    expect((await call(t.url, "unknown-key", "GET", "/api/settings")).status).toBe(503);
  });
});
