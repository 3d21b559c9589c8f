// Paging, filters and isolation of conversation and start-task listings.
// Shared setup: test/helpers/app-conversations.ts.

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newHexId } from "../../src/core/ids.ts";
import { AppConversationService } from "../../src/gen/workspace/v1/app_conversation_pb.js";
import type { ConversationRecord, StartTaskRecord } from "../../src/ports/conversation-repository.ts";
import {
  api,
  type Conversation,
  type Page,
  startConversationApp,
  stopConversationApp,
  type Task,
} from "../helpers/app-conversations.ts";
import { conversationRecord } from "../helpers/conversation-fixtures.ts";
import { grpcClient } from "../helpers/rpc-clients.ts";
import type { TestApp } from "../helpers/test-app.ts";

let t: TestApp;
beforeAll(async () => {
  ({ t } = await startConversationApp());
});
afterAll(stopConversationApp);

describe("paging and filters", () => {
  const owner = "pager";
  const base = Date.parse("2025-01-01T00:00:00Z");
  const at = (minutes: number) => new Date(base + minutes * 60_000);
  const convs: ConversationRecord[] = [];
  let key: string;

  beforeAll(async () => {
    key = await t.keyFor(owner);
    for (let i = 0; i < 250; i++) {
      const c = conversationRecord({
        ownerId: owner,
        sandboxId: "no-such-sandbox",
        gitProvider: i % 2 === 0 ? "github" : null,
        title: i % 10 === 0 ? `Deploy ${i}` : `Conversation ${i}`,
        parentConversationId: i % 25 === 1 ? (convs[0]?.id ?? null) : null,
        createdAt: at(i),
        updatedAt: at(1000 - i),
      });
      convs.push(c);
      await t.storage.conversations.insert(c);
    }
    for (let i = 0; i < 130; i++) {
      const task: StartTaskRecord = {
        id: newHexId(),
        ownerId: owner,
        status: "READY",
        detail: null,
        appConversationId: convs[i % 5]?.id ?? null,
        sandboxId: null,
        agentServerUrl: null,
        request: {},
        createdAt: at(i),
        updatedAt: at(i),
      };
      await t.storage.startTasks.insert(task);
    }
  });

  it("pages through every conversation newest first, without duplicates, with stable page ids", async () => {
    const top = convs.filter((c) => c.parentConversationId === null);
    const seen: string[] = [];
    let pageId: string | null = null;
    let pages = 0;
    do {
      const q: string = pageId === null ? "" : `&page_id=${encodeURIComponent(pageId)}`;
      const r = await api(key, "GET", `/api/v1/app-conversations/search?limit=100${q}`);
      expect(r.status, r.text).toBe(200);
      const page = r.body as Page<Conversation>;
      seen.push(...page.items.map((c) => c.id));
      pageId = page.next_page_id;
      pages++;
      if (pages === 1) {
        expect(page.items[0]).toMatchObject({
          sandbox_status: "MISSING",
          execution_status: null,
          conversation_url: null,
          session_api_key: null,
        });
      }
    } while (pageId !== null && pages < 10);
    expect(pages).toBe(3);
    expect(seen).toEqual([...top].reverse().map((c) => c.id));
    expect((await api(key, "GET", "/api/v1/app-conversations/count")).body).toBe(top.length);
    expect(
      (await api(key, "GET", "/api/v1/app-conversations/count?include_sub_conversations=true")).body,
    ).toBe(250);
  });

  it("filters by title, created_at and updated_at (search and count agree)", async () => {
    const ids = async (q: string) =>
      (
        (await api(key, "GET", `/api/v1/app-conversations/search?include_sub_conversations=true&${q}`))
          .body as Page<Conversation>
      ).items.map((c) => c.id);
    const deploy = convs
      .filter((c) => c.title?.startsWith("Deploy"))
      .reverse()
      .map((c) => c.id);
    expect(await ids("title__contains=deploy")).toEqual(deploy);
    expect(
      (
        await api(
          key,
          "GET",
          "/api/v1/app-conversations/count?title__contains=deploy&include_sub_conversations=1",
        )
      ).body,
    ).toBe(deploy.length);
    const gte = encodeURIComponent(at(240).toISOString());
    expect(await ids(`created_at__gte=${gte}`)).toEqual(
      convs
        .slice(240)
        .reverse()
        .map((c) => c.id),
    );
    expect(
      await ids(`created_at__gte=2025-01-01T04:00:00%2B00:00&created_at__lt=2025-01-01T04:03:00Z`),
    ).toEqual(
      convs
        .slice(240, 243)
        .reverse()
        .map((c) => c.id),
    );
    // updated_at runs the other way round: updated_at < at(755) means i > 245.
    expect(await ids(`updated_at__lt=${encodeURIComponent(at(755).toISOString())}`)).toEqual(
      convs
        .slice(246)
        .reverse()
        .map((c) => c.id),
    );
    expect(await ids(`updated_at__gte=${encodeURIComponent(at(999).toISOString())}`)).toEqual([
      convs[1]?.id,
      convs[0]?.id,
    ]);
    expect(await ids("created_at__lt=2025-01-01")).toEqual([]);
  });

  it("pages start tasks in both directions and filters them", async () => {
    const collect = async (sort: string) => {
      const out: string[] = [];
      let pageId: string | null = null;
      do {
        const q: string = pageId === null ? "" : `&page_id=${encodeURIComponent(pageId)}`;
        const page = (
          await api(
            key,
            "GET",
            `/api/v1/app-conversations/start-tasks/search?limit=50&sort_order=${sort}${q}`,
          )
        ).body as Page<Task>;
        out.push(...page.items.map((x) => x.created_at));
        pageId = page.next_page_id;
      } while (pageId !== null);
      return out;
    };
    const asc = await collect("CREATED_AT");
    expect(asc).toHaveLength(130);
    expect(asc).toEqual([...asc].sort());
    expect(await collect("CREATED_AT_DESC")).toEqual([...asc].reverse());
    expect(await collect("UPDATED_AT_DESC")).toEqual([...asc].reverse());
    expect(await collect("UPDATED_AT")).toEqual(asc);
    const byConv = (
      await api(
        key,
        "GET",
        `/api/v1/app-conversations/start-tasks/search?conversation_id__eq=${convs[2]?.id}`,
      )
    ).body as Page<Task>;
    expect(byConv.items).toHaveLength(26);
    expect(byConv.items.every((x) => x.app_conversation_id === convs[2]?.id)).toBe(true);
    expect(
      (
        await api(
          key,
          "GET",
          `/api/v1/app-conversations/start-tasks/count?conversation_id__eq=${convs[2]?.id}`,
        )
      ).body,
    ).toBe(26);
    const since = encodeURIComponent(at(100).toISOString());
    expect(
      (await api(key, "GET", `/api/v1/app-conversations/start-tasks/count?created_at__gte=${since}`)).body,
    ).toBe(30);
    expect((await api(key, "GET", "/api/v1/app-conversations/start-tasks/count")).body).toBe(130);
    // A page id is bound to its listing and its direction.
    const first = (await api(key, "GET", "/api/v1/app-conversations/start-tasks/search?limit=10"))
      .body as Page<Task>;
    const next = encodeURIComponent(first.next_page_id ?? "");
    expect(
      (
        await api(
          key,
          "GET",
          `/api/v1/app-conversations/start-tasks/search?page_id=${next}&sort_order=CREATED_AT`,
        )
      ).status,
    ).toBe(422);
    expect((await api(key, "GET", `/api/v1/app-conversations/search?page_id=${next}`)).status).toBe(422);
  });

  it("isolation: another user sees none of it", async () => {
    const other = await t.keyFor("outsider");
    const someConv = convs[5]?.id ?? "";
    const conv = await api(other, "GET", `/api/v1/app-conversations?ids=${someConv}`);
    expect(conv.body).toEqual([null]);
    expect(
      ((await api(other, "GET", "/api/v1/app-conversations/search")).body as Page<Conversation>).items,
    ).toEqual([]);
    expect(
      (await api(other, "GET", "/api/v1/app-conversations/count?include_sub_conversations=true")).body,
    ).toBe(0);
    const tasks = (await api(key, "GET", "/api/v1/app-conversations/start-tasks/search?limit=1"))
      .body as Page<Task>;
    const taskId = tasks.items[0]?.id ?? "";
    expect((await api(other, "GET", `/api/v1/app-conversations/start-tasks?ids=${taskId}`)).body).toEqual([
      null,
    ]);
    expect((await api(key, "GET", `/api/v1/app-conversations/start-tasks?ids=${taskId}`)).body).toMatchObject(
      [{ id: taskId }],
    );
    expect(
      ((await api(other, "GET", "/api/v1/app-conversations/start-tasks/search")).body as Page<Task>).items,
    ).toEqual([]);
    expect(
      (await api(other, "GET", `/api/v1/app-conversations/start-tasks/count?conversation_id__eq=${someConv}`))
        .body,
    ).toBe(0);
    const g = grpcClient(AppConversationService, t.grpcAddress);
    const r = await g.unary<{ items: { conversation?: unknown }[] }>(
      "BatchGetAppConversations",
      { ids: [someConv] },
      other,
    );
    expect(r.items[0]?.conversation).toBeUndefined();
    g.close();
  });
});
