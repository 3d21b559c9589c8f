// Restart safety of conversation starts.
// Shared setup: test/helpers/app-conversations.ts.

import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newHexId } from "../../src/core/ids.ts";
import type { StartTaskRecord } from "../../src/ports/conversation-repository.ts";
import { createProcessRuntime } from "../../src/sandbox/process/process-runtime.ts";
import { INTERRUPTED_DETAIL } from "../../src/services/conversations/app-conversation-service.ts";
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
  it("a start cut off by a shutdown ends in ERROR; unfinished tasks found at start-up are marked ERROR", async () => {
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
    });
    const key = await first.keyFor("frank");
    const r = await call(first.url, key, "POST", "/api/v1/app-conversations", {
      selected_repository: bare,
      selected_branch: "slow",
    });
    const id = (r.body as Task).id;
    const deadline = Date.now() + 10_000;
    for (;;) {
      const task = (
        (await call(first.url, key, "GET", `/api/v1/app-conversations/start-tasks?ids=${id}`)).body as Task[]
      )[0];
      if (task?.status === "RUNNING_SETUP_SCRIPT") break;
      if (Date.now() > deadline) throw new Error(`setup script not reached: ${JSON.stringify(task)}`);
      await new Promise((r) => setTimeout(r, 10));
    }
    const stopping = Date.now();
    await first.close();
    expect(Date.now() - stopping).toBeLessThan(5000);

    const secondRuntime = unisolated();
    const second = await startTestApp({ dir, encryptionKey, runtime: secondRuntime });
    try {
      const key2 = await second.keyFor("frank");
      const cut = await settle(key2, id, 1000, second);
      expect(cut.status).toBe("ERROR");
      expect(cut.detail).toContain("the server shut down");
      // A task left behind by a process that died without a shutdown (written directly, as it would be found).
      const orphan: StartTaskRecord = {
        id: newHexId(),
        ownerId: "frank",
        status: "PREPARING_REPOSITORY",
        detail: null,
        appConversationId: null,
        sandboxId: cut.sandbox_id,
        agentServerUrl: null,
        request: {},
        createdAt: new Date(),
        updatedAt: new Date(),
      };
      await second.storage.startTasks.insert(orphan);
      expect(await second.app.services.conversations.recoverInterrupted()).toBe(1);
      const recovered = await settle(key2, orphan.id, 1000, second);
      expect(recovered).toMatchObject({ status: "ERROR", detail: INTERRUPTED_DETAIL });
      expect(await second.app.services.conversations.recoverInterrupted()).toBe(0);
      // The sandbox kept across the restart is still the user's and can be removed.
      expect((await call(second.url, key2, "DELETE", `/api/v1/sandboxes/${cut.sandbox_id}`)).body).toEqual({
        success: true,
      });
      // New starts work on the restarted server.
      const again = await settle(
        key2,
        ((await call(second.url, key2, "POST", "/api/v1/app-conversations", {})).body as Task).id,
        20_000,
        second,
      );
      expect(again.status).toBe("READY");
    } finally {
      await second.close();
      await secondRuntime.killAll();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
