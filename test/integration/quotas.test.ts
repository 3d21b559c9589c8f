/**
 * Quotas (docs/quotas.md): what a sandbox may post on its event webhook (conversations that exist or are being
 * started in it, a cap per conversation, a rate per sandbox) and what one user may store (custom secrets, the size
 * of the settings document), each refused with a 4xx in the route's shape, storing nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newHexId } from "../../src/core/ids.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

let t: TestApp;
let key: string;
let conversationId = "";
let sandboxId = "";
let sandboxKey = "";

const CAP = 150;
const event = (id: string) => ({
  kind: "MessageEvent",
  id,
  timestamp: "2025-11-28T10:00:01.123456",
  source: "agent",
});
const batch = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => event(`${prefix}-${i}`));
const post = (events: unknown[], conversation = conversationId) =>
  call(t.url, sandboxKey, "POST", `/api/v1/webhooks/${sandboxId}/events/${conversation}`, events);
const stored = async (conversation = conversationId) =>
  (await call(t.url, key, "GET", `/api/v1/events/count?conversation_id__eq=${conversation}`)).body as number;

beforeAll(async () => {
  t = await startTestApp({
    quotas: {
      events: { maxPerConversation: CAP, perSecond: 100, burst: 1000 },
      userData: { maxSecrets: 5, maxBytes: 64 * 1024, writesPerSecond: 0, writesBurst: 1 },
    },
  });
  key = await t.keyFor("alice");
  // A model for the start (no message is run: the model is never called).
  const task = (
    await call(t.url, key, "POST", "/api/v1/app-conversations", { llm_model: "openai/test-model" })
  ).body as { id: string };
  for (let i = 0; i < 200 && conversationId === ""; i++) {
    const [s] = (await call(t.url, key, "GET", `/api/v1/app-conversations/start-tasks?ids=${task.id}`))
      .body as { status: string; app_conversation_id: string; sandbox_id: string }[];
    if (s?.status === "READY") {
      conversationId = s.app_conversation_id;
      sandboxId = s.sandbox_id;
    } else await new Promise((r) => setTimeout(r, 50));
  }
  const [sbx] = (await call(t.url, key, "GET", `/api/v1/sandboxes?id=${sandboxId}`)).body as {
    session_api_key: string;
  }[];
  sandboxKey = sbx?.session_api_key ?? "";
  // The agent's own first event (its state update) comes in on its own.
  for (let i = 0; i < 100 && (await stored()) < 1; i++) await new Promise((r) => setTimeout(r, 50));
}, 60_000);

afterAll(async () => {
  await t?.close();
});

describe("event webhook", () => {
  // A refusal of what was posted is answered 200 with success false and the refusal's status: the agent-server
  // re-sends a batch that got any other answer with every later one. A rate limit stays a 429 (it should retry).
  it("refuses events for a conversation that neither exists nor is starting in the sandbox (404, acknowledged), nothing stored", async () => {
    const unknown = newHexId();
    const r = await post(batch("ghost", 10), unknown);
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ success: false, status: 404, detail: "Not Found" });
    expect(await stored(unknown)).toBe(0);
  });

  it("caps the events of one conversation: a batch beyond is refused whole (409, acknowledged)", async () => {
    const before = await stored();
    expect(before).toBeGreaterThanOrEqual(1);
    expect((await post(batch("a", CAP - before - 10))).status).toBe(200);
    const over = await post(batch("b", 20));
    expect(over.status).toBe(200);
    expect(over.body).toEqual({
      success: false,
      status: 409,
      detail: `Conversation ${conversationId} holds ${CAP - 10} events; its limit is ${CAP}`,
    });
    expect(await stored()).toBe(CAP - 10);
    expect((await post(batch("c", 10))).status).toBe(200); // up to the cap
    expect(await stored()).toBe(CAP);
  });

  it("limits the events a sandbox posts per second: 429 with Retry-After, nothing stored", async () => {
    // The bucket (1000 events) is mostly spent by the batches above: a full batch now exceeds it.
    const before = await stored();
    const r = await post(batch("rate", 1000));
    expect(r.status).toBe(429);
    expect(r.headers.get("retry-after")).toBe("1");
    expect(r.body).toEqual({ message: `Sandbox ${sandboxId} posts more than 100 events per second` });
    expect(await stored()).toBe(before);
  });
});

describe("user data", () => {
  it("custom secrets per user: the one beyond the limit is refused with 409 on every route, nothing stored", async () => {
    const k = await t.keyFor("secrets-user");
    for (let i = 0; i < 5; i++)
      expect((await call(t.url, k, "POST", "/api/secrets", { name: `S${i}`, value: "v" })).status).toBe(201);
    const sixth = await call(t.url, k, "POST", "/api/secrets", { name: "S5", value: "v" });
    expect(sixth.status).toBe(409);
    expect(sixth.body).toEqual({ error: "A user may store at most 5 custom secrets" });
    // In bulk through the settings' secrets store: refused whole.
    const custom = Object.fromEntries(Array.from({ length: 10 }, (_, i) => [`B${i}`, { secret: "v" }]));
    const bulk = await call(t.url, k, "POST", "/api/settings", { secrets_store: { custom_secrets: custom } });
    expect(bulk.status).toBe(409);
    const names = (await call(t.url, k, "GET", "/api/secrets")).body as {
      custom_secrets: { name: string }[];
    };
    expect(names.custom_secrets.map((s) => s.name)).toEqual(["S0", "S1", "S2", "S3", "S4"]);
    // Room again once one is deleted; renaming one stays possible at the limit.
    expect((await call(t.url, k, "DELETE", "/api/secrets/S0")).status).toBe(200);
    expect((await call(t.url, k, "POST", "/api/secrets", { name: "S5", value: "v" })).status).toBe(201);
    expect((await call(t.url, k, "PUT", "/api/secrets/S1", { name: "S1b" })).status).toBe(200);
  });

  it("the size of a user's settings document: a write beyond is refused with 409, the stored one unchanged", async () => {
    const k = await t.keyFor("big-user");
    expect((await call(t.url, k, "POST", "/api/settings", { llm_model: "small/model" })).status).toBe(200);
    const big = await call(t.url, k, "POST", "/api/secrets", { name: "BIG", value: "x".repeat(60 * 1024) });
    expect(big.status).toBe(409);
    expect((big.body as { error: string }).error).toMatch(
      /^A user's settings and secrets may take at most 65536 bytes/,
    );
    const fields = await call(t.url, k, "POST", "/api/settings", {
      llm_base_url: `http://h/${"p".repeat(70_000)}`,
    });
    expect(fields.status).toBe(409);
    const settings = (await call(t.url, k, "GET", "/api/settings")).body as Record<string, unknown>;
    expect(settings.llm_model).toBe("small/model");
    expect(settings.llm_base_url ?? null).toBeNull();
    expect(
      ((await call(t.url, k, "GET", "/api/secrets")).body as { custom_secrets: unknown[] }).custom_secrets,
    ).toEqual([]);
  });
});
