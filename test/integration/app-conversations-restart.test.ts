// Restart safety of conversation starts.
// Shared setup: test/helpers/app-conversations.ts.

import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime.ts";
import {
  settle,
  startConversationApp,
  stopConversationApp,
  type Task,
} from "../helpers/app-conversations.ts";
import { call, startTestApp } from "../helpers/test-app.ts";

let bare: string;
beforeAll(async () => {
  ({ bare } = await startConversationApp());
});
afterAll(stopConversationApp);

describe("restart safety", () => {
  it("a start cut off by a shutdown is handed over: the restarted server resumes it in the same sandbox", async () => {
    const dir = mkdtempSync(join(tmpdir(), "aws-restart-"));
    const encryptionKey = randomBytes(32);
    const unisolated = () =>
      createProcessRuntime({ workspaceRoot: join(dir, "sandboxes"), isolation: "none" });
    const first = await startTestApp({
      dir,
      encryptionKey,
      runtime: unisolated(),
      keepSandboxes: true,
      conversations: { shutdownGraceMs: 50 },
      llmModel: "openai/test-model",
    });
    const key = await first.keyFor("frank");
    const r = await call(first.url, key, "POST", "/api/v1/app-conversations", {
      selected_repository: bare,
      selected_branch: "slow-once",
    });
    const id = (r.body as Task).id;
    const deadline = Date.now() + 10_000;
    let cut: Task | undefined;
    for (;;) {
      cut = (
        (await call(first.url, key, "GET", `/api/v1/app-conversations/start-tasks?ids=${id}`)).body as Task[]
      )[0];
      if (cut?.status === "RUNNING_SETUP_SCRIPT") break;
      if (Date.now() > deadline) throw new Error(`setup script not reached: ${JSON.stringify(cut)}`);
      await new Promise((r) => setTimeout(r, 10));
    }
    const stopping = Date.now();
    await first.close();
    expect(Date.now() - stopping).toBeLessThan(5000);

    const secondRuntime = unisolated();
    const second = await startTestApp({ dir, encryptionKey, runtime: secondRuntime });
    try {
      const key2 = await second.keyFor("frank");
      // The restarted server took the task over at once and ran it on from its last state.
      const resumed = await settle(key2, id, 20_000, second);
      expect(resumed).toMatchObject({ status: "READY", sandbox_id: cut.sandbox_id });
      const sandboxes = (await call(second.url, key2, "GET", "/api/v1/sandboxes/search")).body as {
        items: { id: string }[];
      };
      expect(sandboxes.items.map((s) => s.id)).toEqual([cut.sandbox_id]);
      const conversation = await call(
        second.url,
        key2,
        "GET",
        `/api/v1/app-conversations?ids=${resumed.app_conversation_id}`,
      );
      expect((conversation.body as { sandbox_id: string }[])[0]?.sandbox_id).toBe(cut.sandbox_id);
      // New starts work on the restarted server.
      const again = await settle(
        key2,
        ((await call(second.url, key2, "POST", "/api/v1/app-conversations", {})).body as Task).id,
        20_000,
        second,
      );
      expect(again.status).toBe("READY");
      // The sandboxes kept across the restart are still the user's and can be removed.
      for (const sandboxId of [cut.sandbox_id, again.sandbox_id])
        expect((await call(second.url, key2, "DELETE", `/api/v1/sandboxes/${sandboxId}`)).body).toEqual({
          success: true,
        });
    } finally {
      await second.close();
      await secondRuntime.killAll();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
