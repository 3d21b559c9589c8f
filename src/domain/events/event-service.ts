import { createHash, timingSafeEqual } from "node:crypto";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { Code, ConnectError } from "@connectrpc/connect";
import { requireCaller } from "../../core/context.ts";
import { type FieldViolation, notFound, unauthenticated, ValidationError } from "../../core/errors.ts";
import { parseHexId } from "../../core/ids.ts";
import { uuidViolation } from "../../core/model-formats.ts";
import type { PageTokens } from "../../core/page-token.ts";
import { RateLimiter } from "../../core/rate-limiter.ts";
import {
  type BatchGetEventsRequest,
  type BatchGetEventsResponse,
  type CountEventsRequest,
  type CountEventsResponse,
  type EventService as EventServiceDesc,
  EventSortOrder,
  type SearchEventsRequest,
  type SearchEventsResponse,
  type WatchConversationEventsRequest,
  type WatchConversationEventsResponse,
} from "../../gen/workspace/v1/event_pb.js";
import type { ConversationRecord } from "../../ports/conversation-repository.ts";
import type { EventCursor, EventFilter, EventRecord, EventRepository } from "../../ports/event-repository.ts";
import type { SandboxRecord } from "../../ports/sandbox-repository.ts";
import type { ChangeFeed } from "../change-feed.ts";
import { MAX_TITLE } from "../conversations/title.ts";
import { checkBatch, readPage } from "../paging.ts";
import { checkEventBatch, eventFromRecord, eventSource, messageText, timestampUsOf } from "./event-json.ts";

/** What the event service needs of the sandboxes: the registry (any owner) and their session keys. */
export interface SandboxKeys {
  /** The sandbox with this id, whoever owns it; null when unknown. */
  get(id: string): Promise<SandboxRecord | null>;
  /** The plaintext session key of a sandbox. */
  sessionKey(record: SandboxRecord): string;
}

/** What the event service needs of the conversations. */
export interface ConversationAccess {
  get(id: string, ownerId: string): Promise<ConversationRecord | null>;
  /** Sets the title (the title processor); false when the conversation is gone. */
  setTitle(id: string, ownerId: string, title: string): Promise<boolean>;
  /** Applies what the agent server reports of a conversation (model, metrics). */
  applyAgentInfo(
    id: string,
    ownerId: string,
    info: { llmModel?: string; metrics?: Record<string, unknown> | null },
  ): Promise<boolean>;
  /** Asks the conversation's agent server for a title (its generate_title); null when it cannot. */
  generateTitle(record: ConversationRecord, maxLength: number): Promise<string | null>;
}

/** Limits on what sandboxes post (docs/quotas.md). */
export interface EventLimits {
  /** Events stored per conversation; a batch beyond is refused whole (FAILED_PRECONDITION, 409). */
  maxPerConversation: number;
  /** Events a sandbox may post per second, sustained (0: no limit); beyond, RESOURCE_EXHAUSTED (429). */
  perSecond: number;
  /** Events a sandbox may post at once (the bucket's size). */
  burst: number;
}

export const DEFAULT_EVENT_LIMITS: EventLimits = Object.freeze({
  maxPerConversation: 50_000,
  perSecond: 200,
  burst: 5_000,
});

export interface EventServiceOptions {
  events: EventRepository;
  /**
   * The owner's unfinished start that planned this conversation id (see StartTaskRepository.findPending): the
   * agent may post a conversation's first events before its record exists.
   */
  pendingStart?: (ownerId: string, conversationId: string) => Promise<PendingStart | null>;
  limits?: EventLimits;
  sandboxes: SandboxKeys;
  conversations: ConversationAccess;
  tokens: PageTokens;
  /** The store's change feed: new events are published there, and watches follow it (every server's). */
  changes: ChangeFeed;
  log?: (msg: string, data?: Record<string, unknown>) => void;
}

/** What the webhook needs of a start in flight. */
export interface PendingStart {
  status: string;
  sandboxId: string | null;
}

/** A verified webhook caller: the sandbox and its owner. */
interface VerifiedSandbox {
  id: string;
  ownerId: string;
  digest: Buffer;
  until: number;
}

/** How long a verified sandbox key is remembered (a deleted sandbox's agent is killed with it). */
const KEY_CACHE_MS = 10_000;
const KEY_CACHE_SIZE = 1000;
const HOME_CACHE_SIZE = 10_000;
/** Length of an automatic title, as the reference's SetTitleCallbackProcessor asks for. */
const TITLE_LENGTH = 50;

const digest = (value: string): Buffer => createHash("sha256").update(value, "utf8").digest();

/**
 * Conversation events: received from the sandboxes' agent servers through their webhooks (authenticated with the
 * sandbox's own session key), stored durably per conversation, and served to the conversation's owner (search,
 * count, batch get, and a live watch). The first user message of a conversation that still has its default title
 * names it (the reference's SetTitleCallbackProcessor): the agent server's generate_title, else the message text.
 */
export class EventService implements ServiceImpl<typeof EventServiceDesc> {
  readonly #o: EventServiceOptions;
  readonly #verified = new Map<string, VerifiedSandbox>();
  /** Conversations being named ("<owner>:<id>"); `again`: named once more after the run in flight. */
  readonly #titling = new Map<string, { again: boolean }>();
  /** "<owner>:<conversation>" → the sandbox the conversation lives in (never changes once it exists). */
  readonly #homes = new Map<string, { sandboxId: string; until: number }>();
  /** "<owner>:<conversation>" → events stored (counted by the store, then kept up here for a while). */
  readonly #counts = new Map<string, { stored: number; until: number }>();
  readonly #limits: EventLimits;
  /** Events per sandbox per second (a token bucket per sandbox, the batch's size its cost). */
  readonly #rate: RateLimiter;
  readonly #log: (msg: string, data?: Record<string, unknown>) => void;

  constructor(options: EventServiceOptions) {
    this.#o = options;
    this.#limits = options.limits ?? DEFAULT_EVENT_LIMITS;
    this.#rate = new RateLimiter(this.#limits.perSecond, this.#limits.burst);
    this.#log = options.log ?? (() => {});
  }

  // ---- RPCs (REST: /api/v1/events) ----

  async searchEvents(req: SearchEventsRequest, ctx: HandlerContext): Promise<SearchEventsResponse> {
    const { userId } = requireCaller(ctx);
    const descending = req.sortOrder === EventSortOrder.TIMESTAMP_DESC;
    const filter = eventFilter(req);
    const scope = `events:${userId}:${descending ? "desc" : "asc"}`;
    const page = readPage(this.#o.tokens, scope, req.pageId, req.limit);
    const after = page.after === null ? null : fromPageCursor(page.after.id);
    if (page.after !== null && after === null)
      throw new ValidationError([
        {
          type: "value_error",
          loc: ["query", "page_id"],
          msg: "Value error, bad page_id",
          input: req.pageId,
        },
      ]);
    const result = await this.#o.events.search(userId, filter, { limit: page.limit, after }, descending);
    return {
      $typeName: "workspace.v1.SearchEventsResponse",
      items: result.items.map(eventFromRecord),
      ...(result.next ? { nextPageId: this.#o.tokens.encode(toPageCursor(result.next), scope) } : {}),
    };
  }

  async countEvents(req: CountEventsRequest, ctx: HandlerContext): Promise<CountEventsResponse> {
    const { userId } = requireCaller(ctx);
    const n = await this.#o.events.count(userId, eventFilter(req));
    return { $typeName: "workspace.v1.CountEventsResponse", count: BigInt(n) };
  }

  async batchGetEvents(req: BatchGetEventsRequest, ctx: HandlerContext): Promise<BatchGetEventsResponse> {
    const { userId } = requireCaller(ctx);
    checkBatch(req.id, "id");
    const records = await this.#o.events.getMany([...new Set(req.id)], userId);
    // An id may name events of several conversations: the earliest stored one answers, as a stable choice.
    const byId = new Map<string, EventRecord>();
    for (const r of records) {
      const seen = byId.get(r.id);
      if (seen === undefined || r.timestampUs < seen.timestampUs) byId.set(r.id, r);
    }
    return {
      $typeName: "workspace.v1.BatchGetEventsResponse",
      items: req.id.map((id) => {
        const r = byId.get(id);
        return { $typeName: "workspace.v1.EventSlot", ...(r ? { event: eventFromRecord(r) } : {}) };
      }),
    };
  }

  /** The stored events of the conversation, then each new one, until cancelled. */
  async *watchConversationEvents(
    req: WatchConversationEventsRequest,
    ctx: HandlerContext,
  ): AsyncGenerator<WatchConversationEventsResponse> {
    const { userId } = requireCaller(ctx);
    const conversationId = parseHexId(req.conversationId);
    if (conversationId === null)
      throw new ValidationError([uuidViolation(["conversation_id"], req.conversationId)]);
    const owned = await this.#o.conversations.get(conversationId, userId);
    if (owned === null) throw notFound();
    const wrap = (r: EventRecord): WatchConversationEventsResponse => ({
      $typeName: "workspace.v1.WatchConversationEventsResponse",
      event: eventFromRecord(r),
    });
    // The log position first, then what is stored: nothing stored in between is missed (duplicates are skipped).
    const from = await this.#o.changes.head();
    const sent = new Set<string>();
    try {
      let after: EventCursor | null = null;
      if (req.afterEventId !== undefined && req.afterEventId !== "") {
        const [found] = (await this.#o.events.getMany([req.afterEventId], userId)).filter(
          (e) => e.conversationId === conversationId,
        );
        if (found === undefined) throw notFound(`No event ${req.afterEventId} in this conversation`);
        after = { timestampUs: found.timestampUs, id: found.id };
      }
      for (;;) {
        const page = await this.#o.events.search(
          userId,
          { conversationIdEq: conversationId },
          { limit: 100, after },
          false,
        );
        for (const r of page.items) {
          sent.add(r.id);
          yield wrap(r);
        }
        if (page.next === null) break;
        after = page.next;
      }
      for await (const c of this.#o.changes.follow(
        from,
        (c) => c.topic === "events" && c.ownerId === userId && c.key === conversationId,
        ctx.signal,
      )) {
        const ids = (JSON.parse(c.body) as string[]).filter((id) => !sent.has(id));
        if (ids.length === 0) continue;
        const byId = new Map(
          (await this.#o.events.getMany(ids, userId))
            .filter((r) => r.conversationId === conversationId)
            .map((r) => [r.id, r]),
        );
        for (const id of ids) {
          const r = byId.get(id);
          if (r === undefined || sent.has(id)) continue;
          sent.add(id);
          yield wrap(r);
        }
      }
    } catch (err) {
      if ((err as { name?: string }).name !== "AbortError") throw err;
    }
  }

  // ---- webhooks (sandbox → service) ----

  /**
   * POST /api/v1/webhooks/{sandbox_id}/events/{conversation_id}: stores the events (a JSON array of agent events)
   * durably before resolving. UNAUTHENTICATED unless `key` is the sandbox's session key; INVALID_ARGUMENT (nothing
   * stored) for malformed events; NOT_FOUND for a conversation that neither exists nor is being started in this
   * sandbox; PERMISSION_DENIED when the conversation belongs to another sandbox; RESOURCE_EXHAUSTED when the
   * sandbox posts more events per second than its rate; FAILED_PRECONDITION when the conversation would exceed
   * its event cap. Refused batches store nothing.
   */
  async receiveEvents(sandboxId: string, key: string | undefined, rawConversationId: string, body: unknown) {
    const sandbox = await this.#verify(sandboxId, key);
    const conversationId = parseHexId(rawConversationId);
    if (conversationId === null)
      throw new ValidationError([uuidViolation(["path", "conversation_id"], rawConversationId)]);
    const events = checkEventBatch(body);
    this.#rate.take(
      sandbox.id,
      events.length,
      undefined,
      `Sandbox ${sandbox.id} posts more than ${this.#limits.perSecond} events per second`,
    );
    const firstUser = events.find((e) => e.kind === "MessageEvent" && e.source === "user");
    const home = `${sandbox.ownerId}:${conversationId}`;
    const now = Date.now();
    const known = this.#homes.get(home);
    // The conversation's sandbox is remembered for a while; the record itself is read when a user message may
    // name the conversation (its title is checked then).
    let conversation: ConversationRecord | null = null;
    let homeSandbox: string | null = known !== undefined && known.until > now ? known.sandboxId : null;
    if (homeSandbox === null || firstUser !== undefined) {
      conversation = await this.#o.conversations.get(conversationId, sandbox.ownerId);
      homeSandbox = conversation?.sandboxId ?? null;
      if (conversation !== null) {
        if (this.#homes.size >= HOME_CACHE_SIZE) {
          const oldest = this.#homes.keys().next();
          if (oldest.done !== true) this.#homes.delete(oldest.value);
        }
        this.#homes.set(home, { sandboxId: conversation.sandboxId, until: now + KEY_CACHE_MS });
      }
    }
    if (homeSandbox === null) homeSandbox = await this.#startingIn(sandbox.ownerId, conversationId);
    if (homeSandbox === null)
      throw notFound(`No conversation ${conversationId} exists or is starting in sandbox ${sandbox.id}`);
    if (homeSandbox !== sandbox.id)
      throw new ConnectError("The conversation belongs to another sandbox", Code.PermissionDenied);
    const count = await this.#storedCount(home, sandbox.ownerId, conversationId, now);
    if (count.stored + events.length > this.#limits.maxPerConversation)
      throw new ConnectError(
        `Conversation ${conversationId} holds ${count.stored} events; its limit is ${this.#limits.maxPerConversation}`,
        Code.FailedPrecondition,
      );
    const records: EventRecord[] = events.map((e) => ({
      ownerId: sandbox.ownerId,
      conversationId,
      id: e.id,
      kind: e.kind,
      timestampUs: e.timestampUs,
      body: e.json,
    }));
    const stored = await this.#o.events.append(records);
    count.stored += stored.length;
    // Logged by the store with the events: wake this server's watches at once.
    if (stored.length > 0) this.#o.changes.poke();
    const firstUserMessage = firstUser && stored.find((r) => r.id === firstUser.id);
    // Without a record yet the conversation may still be starting (the record is inserted once the agent's start
    // call answers, and the agent posts the first message before that): the naming run reads the record again,
    // now that this batch is stored. conversationCreated covers the other order.
    if (firstUserMessage !== undefined && (conversation === null || hasDefaultTitle(conversation)))
      this.#nameLater(sandbox.ownerId, conversationId, firstUserMessage);
    return { success: true };
  }

  /**
   * A conversation's record was just created. The start flow creates it only once the agent server's start call
   * has answered, and the agent may post the first user message before that: the conversation is then named from
   * the first user message already stored, as if that message arrived now. Never rejects (naming runs in the
   * background).
   */
  conversationCreated(record: ConversationRecord): void {
    if (hasDefaultTitle(record)) this.#nameLater(record.ownerId, record.id, null);
  }

  /**
   * POST /api/v1/webhooks/{sandbox_id}/conversations: what the agent server reports of a conversation (its model
   * and metrics) is applied to the stored conversation. Conversations are created by the start flow; one the
   * service does not know is acknowledged and left alone.
   */
  async receiveConversation(sandboxId: string, key: string | undefined, body: unknown) {
    const sandbox = await this.#verify(sandboxId, key);
    const info = body as { id?: unknown; agent?: { llm?: { model?: unknown } }; metrics?: unknown } | null;
    const rawId = typeof info === "object" && info !== null ? info.id : undefined;
    const id = typeof rawId === "string" ? parseHexId(rawId) : null;
    if (id === null)
      throw new ValidationError([
        typeof rawId === "string"
          ? uuidViolation(["body", "id"], rawId)
          : { type: "missing", loc: ["body", "id"], msg: "Field required", input: body },
      ]);
    const conversation = await this.#o.conversations.get(id, sandbox.ownerId);
    if (conversation === null) return { success: true };
    if (conversation.sandboxId !== sandbox.id)
      throw new ConnectError("The conversation belongs to another sandbox", Code.PermissionDenied);
    const model = info?.agent?.llm?.model;
    const metrics = info?.metrics;
    await this.#o.conversations.applyAgentInfo(id, sandbox.ownerId, {
      ...(typeof model === "string" && model !== "" ? { llmModel: model } : {}),
      ...(typeof metrics === "object" && metrics !== null && !Array.isArray(metrics)
        ? { metrics: metrics as Record<string, unknown> }
        : {}),
    });
    return { success: true };
  }

  /** Forgets a sandbox's verified key (when it is deleted). */
  forgetSandbox(sandboxId: string): void {
    this.#verified.delete(sandboxId);
  }

  // ---- internals ----

  /**
   * The sandbox a conversation without a record is being started in: that of the owner's unfinished start that
   * planned its id (not failed), else null. The record is read once more when there is none: the start may have
   * just finished, creating it.
   */
  async #startingIn(ownerId: string, conversationId: string): Promise<string | null> {
    const pending = (await this.#o.pendingStart?.(ownerId, conversationId)) ?? null;
    if (pending !== null && pending.status !== "ERROR" && pending.sandboxId !== null)
      return pending.sandboxId;
    return (await this.#o.conversations.get(conversationId, ownerId))?.sandboxId ?? null;
  }

  /** The conversation's stored-event count: from the store, then kept up by this server for a while. */
  async #storedCount(
    home: string,
    ownerId: string,
    conversationId: string,
    now: number,
  ): Promise<{ stored: number; until: number }> {
    const cached = this.#counts.get(home);
    if (cached !== undefined && cached.until > now) return cached;
    const stored = await this.#o.events.count(ownerId, { conversationIdEq: conversationId });
    if (this.#counts.size >= HOME_CACHE_SIZE) {
      const oldest = this.#counts.keys().next();
      if (oldest.done !== true) this.#counts.delete(oldest.value);
    }
    const fresh = { stored, until: now + KEY_CACHE_MS };
    this.#counts.set(home, fresh);
    return fresh;
  }

  /** The sandbox, when `key` is its session key; UNAUTHENTICATED otherwise (unknown sandbox included). */
  async #verify(sandboxId: string, key: string | undefined): Promise<{ id: string; ownerId: string }> {
    if (key === undefined || key === "") throw unauthenticated();
    const given = digest(key);
    const now = Date.now();
    const cached = this.#verified.get(sandboxId);
    if (cached !== undefined && cached.until > now) {
      if (!timingSafeEqual(cached.digest, given)) throw unauthenticated();
      return cached;
    }
    const record = await this.#o.sandboxes.get(sandboxId);
    if (record === null) throw unauthenticated();
    const expected = digest(this.#o.sandboxes.sessionKey(record));
    if (!timingSafeEqual(expected, given)) throw unauthenticated();
    if (this.#verified.size >= KEY_CACHE_SIZE) {
      const oldest = this.#verified.keys().next();
      if (oldest.done !== true) this.#verified.delete(oldest.value);
    }
    const verified = { id: record.id, ownerId: record.ownerId, digest: expected, until: now + KEY_CACHE_MS };
    this.#verified.set(sandboxId, verified);
    return verified;
  }

  /**
   * Names a conversation that still has its default title from its first user message (`message`, else the first
   * one stored), in the background. A request while a run for the same conversation is in flight makes that run go
   * once more, reading everything again, so that no order of webhook and record creation loses the title.
   */
  #nameLater(ownerId: string, conversationId: string, message: EventRecord | null): void {
    const key = `${ownerId}:${conversationId}`;
    const busy = this.#titling.get(key);
    if (busy !== undefined) {
      busy.again = true;
      return;
    }
    const run = { again: false };
    this.#titling.set(key, run);
    const loop = async () => {
      let first = message;
      do {
        run.again = false;
        await this.#name(ownerId, conversationId, first);
        first = null;
      } while (run.again);
    };
    loop()
      .catch((err: unknown) => this.#log("could not set the conversation title", { error: String(err) }))
      .finally(() => this.#titling.delete(key));
  }

  async #name(ownerId: string, conversationId: string, message: EventRecord | null): Promise<void> {
    const conversation = await this.#o.conversations.get(conversationId, ownerId);
    if (conversation === null || !hasDefaultTitle(conversation)) return;
    const event = message ?? (await this.#firstStoredUserMessage(ownerId, conversationId));
    if (event === null) return;
    let title = await this.#o.conversations.generateTitle(conversation, TITLE_LENGTH).catch(() => null);
    if (title === null || title.trim() === "") title = fallbackTitle(messageText(event.body), TITLE_LENGTH);
    if (title === null) return;
    // Only while the title is still the default: a rename that happened meanwhile wins.
    const current = await this.#o.conversations.get(conversationId, ownerId);
    if (current === null || !hasDefaultTitle(current)) return;
    await this.#o.conversations.setTitle(conversationId, ownerId, title.trim().slice(0, MAX_TITLE));
  }

  /** The conversation's earliest stored user MessageEvent (looked for among its first 100 messages), or null. */
  async #firstStoredUserMessage(ownerId: string, conversationId: string): Promise<EventRecord | null> {
    const page = await this.#o.events.search(
      ownerId,
      { conversationIdEq: conversationId, kindEq: "MessageEvent" },
      { limit: 100, after: null },
      false,
    );
    return page.items.find((r) => eventSource(r.body) === "user") ?? null;
  }
}

/** Whether the conversation still has the title it was created with (`Conversation <id>`), or none. */
function hasDefaultTitle(c: ConversationRecord): boolean {
  return c.title === null || c.title === `Conversation ${c.id}`;
}

/** The SDK's fallback title: the message, trimmed, cut to maxLength with "..." at the end. */
export function fallbackTitle(text: string | null, maxLength: number): string | null {
  const t = text?.replace(/\s+/g, " ").trim() ?? "";
  if (t === "") return null;
  return t.length > maxLength ? `${t.slice(0, maxLength - 3)}...` : t;
}

/** Page tokens carry (createdAt, id) cursors: the event cursor travels in the id as "<timestampUs>:<id>". */
function toPageCursor(c: EventCursor) {
  return { createdAt: new Date(Math.floor(c.timestampUs / 1000)), id: `${c.timestampUs}:${c.id}` };
}

function fromPageCursor(id: string): EventCursor | null {
  const colon = id.indexOf(":");
  const us = Number(id.slice(0, colon));
  return colon > 0 && Number.isSafeInteger(us) ? { timestampUs: us, id: id.slice(colon + 1) } : null;
}

const KIND = /^[A-Za-z_][A-Za-z0-9_]{0,99}$/;

function eventFilter(req: CountEventsRequest | SearchEventsRequest): EventFilter {
  const f: EventFilter = {};
  const issues: FieldViolation[] = [];
  if (req.conversationIdEq !== undefined && req.conversationIdEq !== "") {
    const id = parseHexId(req.conversationIdEq);
    if (id === null) issues.push(uuidViolation(["query", "conversation_id__eq"], req.conversationIdEq));
    else f.conversationIdEq = id;
  }
  if (req.kindEq !== undefined && req.kindEq !== "") {
    if (!KIND.test(req.kindEq))
      issues.push({
        type: "value_error",
        loc: ["query", "kind__eq"],
        msg: "Value error, an event kind is a class name such as MessageEvent",
        input: req.kindEq,
        ctx: { error: {} },
      });
    else f.kindEq = req.kindEq;
  }
  if (req.timestampGte !== undefined) f.timestampGteUs = timestampUsOf(req.timestampGte);
  if (req.timestampLt !== undefined) f.timestampLtUs = timestampUsOf(req.timestampLt);
  if (issues.length > 0) throw new ValidationError(issues);
  return f;
}
