// A conversation delete cut short on MongoDB (no multi-document transactions): its tombstones stay not done, and
// finishDeletes completes it: events, finished start tasks, sub-conversations and the conversation go.
import type { Db } from "mongodb";
import { describe, expect, it } from "vitest";
import { createMongoStorageFromDb } from "../../src/adapters/storage/mongo/mongo-storage.ts";
import { conversationRecord } from "../helpers/conversation-fixtures.ts";
import { createMongoStandin } from "../helpers/mongo-standin.ts";

const hex = (c: string) => c.repeat(32);

describe("MongoDB conversation delete cut short", () => {
  it("is finished by finishDeletes once past the grace, and refuses events meanwhile", async () => {
    const standin = createMongoStandin();
    const storage = await createMongoStorageFromDb(standin as unknown as Db);
    const owner = "crash-owner";
    const now = new Date();
    await storage.conversations.insert(conversationRecord({ id: hex("a"), ownerId: owner }));
    await storage.conversations.insert(
      conversationRecord({ id: hex("b"), ownerId: owner, parentConversationId: hex("a") }),
    );
    const ev = (conversationId: string, id: string) => ({
      ownerId: owner,
      conversationId,
      id,
      kind: "MessageEvent",
      timestampUs: 1,
      body: "{}",
    });
    await storage.events.append([ev(hex("a"), "e1"), ev(hex("b"), "e2")]);
    await storage.startTasks.insert({
      id: "task-1",
      ownerId: owner,
      status: "READY",
      detail: null,
      appConversationId: hex("a"),
      sandboxId: "s",
      agentServerUrl: null,
      request: {},
      createdAt: now,
      updatedAt: now,
    });
    // What a delete wrote before its server died: the tombstones, nothing deleted yet.
    const tombstones = standin.collection("conversation_tombstones");
    const cut = new Date(Date.now() - 120_000);
    for (const id of [hex("a"), hex("b")])
      await tombstones.updateOne(
        { _id: id },
        { $set: { ownerId: owner, at: cut, done: false } },
        { upsert: true },
      );
    expect(await storage.events.append([ev(hex("a"), "e3")])).toEqual([]);

    // A delete in progress (younger than the grace) is left alone.
    expect((await storage.conversations.finishDeletes(cut, new Date(0))).finished).toBe(0);
    expect(await storage.conversations.get(hex("a"), owner)).not.toBeNull();

    const result = await storage.conversations.finishDeletes(new Date(), new Date(0));
    expect(result.finished).toBe(2);
    expect(await storage.conversations.get(hex("a"), owner)).toBeNull();
    expect(await storage.conversations.get(hex("b"), owner)).toBeNull();
    expect(await storage.events.count(owner, {})).toBe(0);
    expect(await storage.startTasks.get("task-1", owner)).toBeNull();
    expect((await storage.conversations.finishDeletes(new Date(), new Date(0))).finished).toBe(0);
    expect((await storage.conversations.finishDeletes(new Date(), new Date())).pruned).toBe(2);
    await storage.close();
  });
});
