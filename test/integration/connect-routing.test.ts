// Which Connect requests the server's request listener answers ahead of Fastify (src/transports/connect/connect-ahead.ts) and
// which it leaves to Fastify's routes (src/transports/connect/connect-plugin.ts): both answer alike, and cross-origin requests
// under CORS get @fastify/cors's headers and preflight.

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestApp, type TestApp } from "../helpers/test-app.ts";

const UI_ORIGIN = "http://ui.localhost:5173";
const PATH = "/workspace.v1.SettingsService/GetSettings";

describe("Connect requests with CORS on", () => {
  let t: TestApp;
  let key: string;
  beforeAll(async () => {
    t = await startTestApp({ web: { corsOrigins: [UI_ORIGIN] } });
    key = await t.keyFor("routing");
  });
  afterAll(() => t.close());

  const post = (headers: Record<string, string>) =>
    fetch(`${t.url}${PATH}`, {
      method: "POST",
      headers: { "x-session-api-key": key, "content-type": "application/json", ...headers },
      body: "{}",
    });

  it("answers a cross-origin call (through Fastify) as a same-origin one (ahead of it), with the CORS headers", async () => {
    const plain = await post({});
    const cross = await post({ origin: UI_ORIGIN });
    expect(cross.status).toBe(plain.status);
    expect(await cross.json()).toStrictEqual(await plain.json());
    expect(cross.headers.get("access-control-allow-origin")).toBe(UI_ORIGIN);
    expect(cross.headers.get("access-control-allow-credentials")).toBe("true");
    expect(plain.headers.get("access-control-allow-origin")).toBeNull();
    for (const res of [plain, cross]) {
      expect(res.headers.get("content-type")).toBe("application/json");
      expect(res.headers.get("x-request-id")).toMatch(/^req-/);
    }
    expect(cross.headers.get("x-request-id")).not.toBe(plain.headers.get("x-request-id"));
  });

  it("answers the preflight of a Connect call from an allowed origin", async () => {
    const pre = await fetch(`${t.url}${PATH}`, {
      method: "OPTIONS",
      headers: {
        origin: UI_ORIGIN,
        "access-control-request-method": "POST",
        "access-control-request-headers": "content-type,connect-protocol-version,x-session-api-key",
      },
    });
    expect(pre.status).toBe(204);
    expect(pre.headers.get("access-control-allow-origin")).toBe(UI_ORIGIN);
    expect(pre.headers.get("access-control-allow-methods")).toContain("POST");
  });

  it("refuses a cross-origin call without a key as a same-origin one", async () => {
    const plain = await fetch(`${t.url}${PATH}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    const cross = await fetch(`${t.url}${PATH}`, {
      method: "POST",
      headers: { "content-type": "application/json", origin: UI_ORIGIN },
      body: "{}",
    });
    expect([plain.status, cross.status]).toEqual([401, 401]);
    expect(await cross.json()).toStrictEqual(await plain.json());
  });
});
