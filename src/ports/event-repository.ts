/**
 * Events of conversations as the sandboxes' agent servers report them through their webhooks. An event is kept
 * as the JSON text it arrived as, plus the columns searches use. Ids are unique per conversation: storing an event
 * again (a webhook retry) keeps the stored one.
 */
export interface EventRecord {
  ownerId: string;
  /** 32 lower-case hex characters. */
  conversationId: string;
  /** The event's own id (the agent server's). */
  id: string;
  kind: string;
  /** Microseconds since the epoch (the agent's timestamps carry microseconds; sorting keeps their order). */
  timestampUs: number;
  /** The event as received, JSON text. */
  body: string;
}

export interface EventFilter {
  conversationIdEq?: string;
  kindEq?: string;
  /** Inclusive lower bound, microseconds. */
  timestampGteUs?: number;
  /** Exclusive upper bound, microseconds. */
  timestampLtUs?: number;
}

/** Keyset position: the (timestampUs, id) of the last event of the previous page. */
export interface EventCursor {
  timestampUs: number;
  id: string;
}

export interface EventPage {
  items: EventRecord[];
  /** Cursor of the last item when more items exist, else null. */
  next: EventCursor | null;
}

export interface EventRepository {
  /**
   * Stores the events (all or none). An event whose (conversationId, id) is already stored is skipped, and so is
   * one of a conversation deleted lately (its tombstone, see ConversationRepository.delete): a webhook racing a
   * delete leaves nothing behind. Resolves once everything is durable; returns the events stored, in the order
   * given.
   */
  append(events: readonly EventRecord[]): Promise<EventRecord[]>;
  /** Ordered by (timestampUs, id), ascending unless `descending`. */
  search(
    ownerId: string,
    filter: EventFilter,
    page: { limit: number; after: EventCursor | null },
    descending: boolean,
  ): Promise<EventPage>;
  count(ownerId: string, filter: EventFilter): Promise<number>;
  /** The owner's events with these ids (any conversation), in any order. */
  getMany(ids: readonly string[], ownerId: string): Promise<EventRecord[]>;
  /** Deletes every event of the owner's conversation; returns how many. */
  deleteConversation(conversationId: string, ownerId: string): Promise<number>;
}
