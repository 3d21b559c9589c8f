import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect } from "vitest";
import { settle, type Task } from "./app-conversations.ts";
import { type FakeLlm, startFakeLlm } from "./fake-llm.ts";
import { call, startTestApp, type TestApp } from "./test-app.ts";

/** What useBuiltinAgentApp sets up; its fields are filled in the suite's beforeAll. */
export interface BuiltinAgentApp {
  t: TestApp;
  llm: FakeLlm;
  key: string;
  /** The app's data folder (its process sandboxes' workspaces are under `sandboxes/`). */
  root: string;
  /** A REST call as user alice. */
  api(method: string, path: string, body?: unknown): ReturnType<typeof call>;
  /** Starts a conversation as alice (POST /api/v1/app-conversations) and waits until its start task is READY or ERROR. */
  startSettled(body: unknown): Promise<Task>;
}

/**
 * Registers the suite's beforeAll/afterAll for a conversation with the built-in agent on the embedded default: a
 * scripted OpenAI-compatible model, the app (process runtime) with its data in a fresh folder, and user alice whose
 * LLM settings point at the model with `modelKey`.
 */
export function useBuiltinAgentApp(folderPrefix: string, modelKey: string): BuiltinAgentApp {
  const fx = {
    root: mkdtempSync(join(tmpdir(), folderPrefix)),
    key: "",
    api: (method: string, path: string, body?: unknown) => call(fx.t.url, fx.key, method, path, body),
    async startSettled(body: unknown) {
      const created = await fx.api("POST", "/api/v1/app-conversations", body);
      expect(created.status, created.text).toBe(200);
      return settle(fx.key, (created.body as { id: string }).id, 30_000, fx.t);
    },
  } as BuiltinAgentApp;
  beforeAll(async () => {
    fx.llm = await startFakeLlm();
    // The default runtime of the app, with its workspaces in this suite's folder (the process runtime hands the
    // agent the packages its conversations load, ws and openai).
    fx.t = await startTestApp({ dir: fx.root });
    // Isolated sandboxes reach the host's loopback only where allowed (SANDBOX_HOST_PORTS for a server): the
    // scripted model is on it.
    fx.t.runtime.reachHost?.(fx.llm.url);
    fx.key = await fx.t.keyFor("alice");
    const saved = await fx.api("POST", "/api/settings", {
      llm_model: "openai/fake-model",
      llm_base_url: fx.llm.url,
      llm_api_key: modelKey,
    });
    expect(saved.status).toBe(200);
  }, 60_000);
  afterAll(async () => {
    await fx.t?.close();
    await fx.llm?.close();
    rmSync(fx.root, { recursive: true, force: true });
  });
  return fx;
}
