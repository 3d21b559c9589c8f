// EventService over fakes: the webhook's checks (the sandbox's own key, the conversation's sandbox, the quotas) and
// what the owner reads back (search, count, batch get), scoped to the owner. Naming is in event-service-title.test.ts.

import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { beforeEach, describe, expect, it } from "vitest";
import { newHexId } from "../../../src/core/ids.ts";
import { type EventLimits, EventService } from "../../../src/domain/events/event-service.ts";
import {
  BatchGetEventsRequestSchema,
  CountEventsRequestSchema,
  SearchEventsRequestSchema,
} from "../../../src/gen/workspace/v1/event_pb.js";
import type { ConversationRecord } from "../../../src/ports/conversation-repository.ts";
import type { SandboxRecord } from "../../../src/ports/sandbox-repository.ts";
import { conversationRecord } from "../../helpers/conversation-fixtures.ts";
import {
  callAs,
  InMemoryConversationRepository,
  InMemoryEventRepository,
  testChangeFeed,
  testCrypto,
} from "../../helpers/fakes/index.ts";

const OWNER = "alice";
const KEY = "sandbox-a-key";
const OTHER_KEY = "sandbox-b-key";

interface World {
  service: EventService;
  events: InMemoryEventRepository;
  conversations: InMemoryConversationRepository;
  sandboxA: string;
  sandboxB: string;
  conversation: string;
}

function world(limits: EventLimits = { maxPerConversation: 1000, perSecond: 0, burst: 1000 }): World {
  const events = new InMemoryEventRepository();
  const conversations = new InMemoryConversationRepository();
  const sandboxA = newHexId();
  const sandboxB = newHexId();
  const sandboxes = new Map<string, { record: SandboxRecord; key: string }>([
    [sandboxA, { record: { id: sandboxA, ownerId: OWNER } as SandboxRecord, key: KEY }],
    [sandboxB, { record: { id: sandboxB, ownerId: OWNER } as SandboxRecord, key: OTHER_KEY }],
  ]);
  const service = new EventService({
    events,
    changes: testChangeFeed(),
    limits,
    sandboxes: {
      get: async (id) => sandboxes.get(id)?.record ?? null,
      sessionKey: (r) => sandboxes.get(r.id)?.key ?? "",
    },
    conversations: {
      get: (id, ownerId) => conversations.get(id, ownerId),
      setTitle: async () => true,
      applyAgentInfo: async () => true,
      generateTitle: async () => null,
    },
    pendingStart: async () => null,
    tokens: testCrypto().tokens,
  });
  return { service, events, conversations, sandboxA, sandboxB, conversation: newHexId() };
}

function conversationIn(w: World, sandboxId: string): ConversationRecord {
  return conversationRecord({
    id: w.conversation,
    ownerId: OWNER,
    sandboxId,
    title: "Named already",
    trigger: "gui",
    createdAt: new Date("2025-11-28T10:00:00Z"),
  });
}

const action = (id: string, second: number) => ({
  kind: "ActionEvent",
  id,
  timestamp: `2025-11-28T10:00:${String(second).padStart(2, "0")}`,
  source: "agent",
});

const codeOf = async (p: Promise<unknown>): Promise<Code | "ok"> =>
  p.then(
    () => "ok" as const,
    (e: unknown) => ConnectError.from(e).code,
  );

let w: World;

/** How many events the owner has, as the service counts them. */
const stored = async (): Promise<number> =>
  Number((await w.service.countEvents(create(CountEventsRequestSchema, {}), callAs(OWNER))).count);

beforeEach(async () => {
  w = world();
  await w.conversations.insert(conversationIn(w, w.sandboxA));
});

describe("EventService webhook", () => {
  it("stores a batch from the conversation's sandbox, and its owner reads it back in order", async () => {
    const batch = [action("e-1", 1), action("e-2", 2), action("e-3", 3)];
    expect(await w.service.receiveEvents(w.sandboxA, KEY, w.conversation, batch)).toEqual({ success: true });
    const alice = callAs(OWNER);
    const count = await w.service.countEvents(
      create(CountEventsRequestSchema, { conversationIdEq: w.conversation }),
      alice,
    );
    expect(count.count).toBe(3n);
    const page = await w.service.searchEvents(
      create(SearchEventsRequestSchema, { conversationIdEq: w.conversation, limit: 2 }),
      alice,
    );
    expect(page.items.map((e) => e.id)).toEqual(["e-1", "e-2"]);
    expect(page.nextPageId).toBeTruthy();
    const rest = await w.service.searchEvents(
      create(SearchEventsRequestSchema, {
        conversationIdEq: w.conversation,
        limit: 2,
        pageId: page.nextPageId ?? "",
      }),
      alice,
    );
    expect(rest.items.map((e) => e.id)).toEqual(["e-3"]);
    const got = await w.service.batchGetEvents(
      create(BatchGetEventsRequestSchema, { id: ["e-2", "missing"] }),
      alice,
    );
    expect(got.items.map((slot) => slot.event?.id ?? null)).toEqual(["e-2", null]);
  });

  it("the same event posted twice is stored once", async () => {
    await w.service.receiveEvents(w.sandboxA, KEY, w.conversation, [action("e-1", 1)]);
    await w.service.receiveEvents(w.sandboxA, KEY, w.conversation, [action("e-1", 1), action("e-2", 2)]);
    expect(await stored()).toBe(2);
  });

  it("refuses a wrong or missing key, an unknown sandbox and another sandbox's conversation, storing nothing", async () => {
    const batch = [action("e-1", 1)];
    expect(await codeOf(w.service.receiveEvents(w.sandboxA, "wrong", w.conversation, batch))).toBe(
      Code.Unauthenticated,
    );
    expect(await codeOf(w.service.receiveEvents(w.sandboxA, undefined, w.conversation, batch))).toBe(
      Code.Unauthenticated,
    );
    expect(await codeOf(w.service.receiveEvents(newHexId(), KEY, w.conversation, batch))).toBe(
      Code.Unauthenticated,
    );
    // Sandbox B authenticates with its own key, but the conversation lives in sandbox A.
    expect(await codeOf(w.service.receiveEvents(w.sandboxB, OTHER_KEY, w.conversation, batch))).toBe(
      Code.PermissionDenied,
    );
    // A conversation that neither exists nor is starting.
    expect(await codeOf(w.service.receiveEvents(w.sandboxA, KEY, newHexId(), batch))).toBe(Code.NotFound);
    // A malformed conversation id and a malformed batch.
    expect(await codeOf(w.service.receiveEvents(w.sandboxA, KEY, "not-an-id", batch))).toBe(
      Code.InvalidArgument,
    );
    expect(await codeOf(w.service.receiveEvents(w.sandboxA, KEY, w.conversation, { kind: 1 }))).toBe(
      Code.InvalidArgument,
    );
    expect(await stored()).toBe(0);
  });

  it("refuses a batch that would pass the conversation's limit, whole", async () => {
    w = world({ maxPerConversation: 3, perSecond: 0, burst: 1000 });
    await w.conversations.insert(conversationIn(w, w.sandboxA));
    await w.service.receiveEvents(w.sandboxA, KEY, w.conversation, [action("e-1", 1), action("e-2", 2)]);
    expect(
      await codeOf(
        w.service.receiveEvents(w.sandboxA, KEY, w.conversation, [action("e-3", 3), action("e-4", 4)]),
      ),
    ).toBe(Code.FailedPrecondition);
    expect(await stored()).toBe(2);
    await w.service.receiveEvents(w.sandboxA, KEY, w.conversation, [action("e-3", 3)]);
    expect(await stored()).toBe(3);
  });

  it("refuses a sandbox posting faster than its rate, with RESOURCE_EXHAUSTED", async () => {
    w = world({ maxPerConversation: 1000, perSecond: 1, burst: 2 });
    await w.conversations.insert(conversationIn(w, w.sandboxA));
    await w.service.receiveEvents(w.sandboxA, KEY, w.conversation, [action("e-1", 1), action("e-2", 2)]);
    expect(await codeOf(w.service.receiveEvents(w.sandboxA, KEY, w.conversation, [action("e-3", 3)]))).toBe(
      Code.ResourceExhausted,
    );
    expect(await stored()).toBe(2);
  });
});

describe("EventService reads", () => {
  it("another user sees none of the owner's events; a caller without a key is refused", async () => {
    await w.service.receiveEvents(w.sandboxA, KEY, w.conversation, [action("e-1", 1)]);
    const bob = callAs("bob");
    const count = await w.service.countEvents(
      create(CountEventsRequestSchema, { conversationIdEq: w.conversation }),
      bob,
    );
    expect(count.count).toBe(0n);
    const page = await w.service.searchEvents(create(SearchEventsRequestSchema, {}), bob);
    expect(page.items).toEqual([]);
    expect(await codeOf(w.service.countEvents(create(CountEventsRequestSchema, {}), callAs(null)))).toBe(
      Code.Unauthenticated,
    );
  });
});
