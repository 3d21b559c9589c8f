import type {
  EventCursor,
  EventFilter,
  EventPage,
  EventRecord,
  EventRepository,
} from "../../../src/ports/event-repository.ts";

const before = (a: EventCursor, b: EventCursor): boolean =>
  a.timestampUs < b.timestampUs || (a.timestampUs === b.timestampUs && a.id < b.id);

function matches(e: EventRecord, ownerId: string, f: EventFilter): boolean {
  if (e.ownerId !== ownerId) return false;
  if (f.conversationIdEq !== undefined && e.conversationId !== f.conversationIdEq) return false;
  if (f.kindEq !== undefined && e.kind !== f.kindEq) return false;
  if (f.timestampGteUs !== undefined && e.timestampUs < f.timestampGteUs) return false;
  if (f.timestampLtUs !== undefined && e.timestampUs >= f.timestampLtUs) return false;
  return true;
}

/**
 * In-memory EventRepository: unique per (conversation, id), owner-scoped, keyset pages on (timestampUs, id).
 * `beforeAppend`, when set, is awaited by the next append before it stores anything (a test holds a write
 * there to interleave other calls with it).
 */
export class InMemoryEventRepository implements EventRepository {
  readonly #rows: EventRecord[] = [];
  beforeAppend: (() => Promise<void>) | null = null;

  async append(events: readonly EventRecord[]): Promise<EventRecord[]> {
    const gate = this.beforeAppend;
    this.beforeAppend = null;
    if (gate !== null) await gate();
    const fresh: EventRecord[] = [];
    for (const e of events) {
      const dup = (r: EventRecord) => r.conversationId === e.conversationId && r.id === e.id;
      if (this.#rows.some(dup) || fresh.some(dup)) continue;
      fresh.push({ ...e });
    }
    this.#rows.push(...fresh);
    return fresh.map((e) => ({ ...e }));
  }

  async search(
    ownerId: string,
    filter: EventFilter,
    page: { limit: number; after: EventCursor | null },
    descending: boolean,
  ): Promise<EventPage> {
    const sorted = this.#rows
      .filter((e) => matches(e, ownerId, filter))
      .sort((a, b) => (before(a, b) ? -1 : before(b, a) ? 1 : 0));
    if (descending) sorted.reverse();
    const after = page.after;
    const rest =
      after === null ? sorted : sorted.filter((e) => (descending ? before(e, after) : before(after, e)));
    const items = rest.slice(0, page.limit).map((e) => ({ ...e }));
    const last = items.at(-1);
    return {
      items,
      next: rest.length > page.limit && last ? { timestampUs: last.timestampUs, id: last.id } : null,
    };
  }

  async count(ownerId: string, filter: EventFilter): Promise<number> {
    return this.#rows.filter((e) => matches(e, ownerId, filter)).length;
  }

  async getMany(ids: readonly string[], ownerId: string): Promise<EventRecord[]> {
    const wanted = new Set(ids);
    return this.#rows.filter((e) => e.ownerId === ownerId && wanted.has(e.id)).map((e) => ({ ...e }));
  }

  async deleteConversation(conversationId: string, ownerId: string): Promise<number> {
    let n = 0;
    for (let i = this.#rows.length - 1; i >= 0; i--) {
      const e = this.#rows[i];
      if (e?.conversationId === conversationId && e.ownerId === ownerId) {
        this.#rows.splice(i, 1);
        n++;
      }
    }
    return n;
  }
}
