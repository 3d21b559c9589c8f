import type { StartTaskRecord } from "./conversation-repository.ts";
import type { SandboxRecord } from "./sandbox-repository.ts";

/**
 * The store's change log: one entry per change that watchers follow (a sandbox's status, a start task's state,
 * new events of a conversation), numbered by a sequence that only grows. The storage adapters write the entry of
 * a change with the change itself (in the same transaction where the store has them). Every server sharing the store appends
 * to it and reads it, so a watch on one server sees what another server changed, and a client that reconnects
 * with the last sequence number it saw misses nothing still retained.
 */
export type ChangeTopic = "sandbox" | "start-task" | "events";

/** A change as appended. `body` is JSON text; what it holds depends on the topic. */
export interface ChangeEntry {
  ownerId: string;
  topic: ChangeTopic;
  /** What changed: a sandbox id, a start task id, a conversation id. */
  key: string;
  body: string;
}

/** A change as stored: its sequence number and when it was appended. */
export interface ChangeRecord extends ChangeEntry {
  seq: number;
  at: Date;
}

export interface ChangeLog {
  /**
   * Appends the entries in order (all or none) and resolves with their sequence numbers, each higher than any
   * number handed out before, once they are durable. (The repositories append the entries of their own changes.)
   */
  append(entries: readonly ChangeEntry[]): Promise<number[]>;
  /**
   * Entries with a sequence number above `after`, ascending, at most `limit`. Never skips an entry that may still
   * appear: where numbers are handed out before their entries are stored (MongoDB), a missing number ends the
   * answer until it is stored, or until its writer can be presumed dead (then it is skipped for good).
   */
  read(after: number, limit: number): Promise<ChangeRecord[]>;
  /** The highest sequence number stored (0 when none ever was). */
  head(): Promise<number>;
  /** The highest sequence number pruned (0 when none was): entries at or below it can no longer be read. */
  floor(): Promise<number>;
  /**
   * Deletes the entries appended before `before`, and (with `keep`) all but the newest `keep` entries by sequence
   * number, so the log stays bounded by size as well as by age; returns how many.
   */
  prune(before: Date, keep?: number): Promise<number>;
  /**
   * Calls `onAppend` soon after another server may have appended (MongoDB change streams where the server is a
   * replica set); returns an unsubscribe function. Absent, or never calling, where the store cannot push: the
   * readers poll.
   */
  subscribe?(onAppend: () => void): () => void;
}

/**
 * The entry of a sandbox change: the record as the change left it (dates as milliseconds), and when the change was
 * made. Storage adapters write it with the change itself.
 */
export function sandboxChange(record: SandboxRecord): ChangeEntry {
  return {
    ownerId: record.ownerId,
    topic: "sandbox",
    key: record.id,
    body: JSON.stringify({
      changedAt: Date.now(),
      record: { ...record, createdAt: record.createdAt.getTime(), updatedAt: record.updatedAt.getTime() },
    }),
  };
}

/** A sandbox change's record and when it was made, or null for a body that is not one. */
export function parseSandboxChange(body: string): { record: SandboxRecord; changedAt: number } | null {
  try {
    const c = JSON.parse(body) as {
      changedAt: number;
      record: Omit<SandboxRecord, "createdAt" | "updatedAt"> & { createdAt: number; updatedAt: number };
    };
    return {
      changedAt: c.changedAt,
      record: {
        ...c.record,
        createdAt: new Date(c.record.createdAt),
        updatedAt: new Date(c.record.updatedAt),
      },
    };
  } catch {
    return null;
  }
}

/** The entry of a start task change: the task as the change left it. */
export function startTaskChange(task: StartTaskRecord): ChangeEntry {
  return { ownerId: task.ownerId, topic: "start-task", key: task.id, body: JSON.stringify(task) };
}

/** A start task change's task, or null. */
export function parseStartTaskChange(body: string): StartTaskRecord | null {
  try {
    const t = JSON.parse(body) as StartTaskRecord & { createdAt: string; updatedAt: string };
    return { ...t, createdAt: new Date(t.createdAt), updatedAt: new Date(t.updatedAt) };
  } catch {
    return null;
  }
}

/** The entries of newly stored events: one per conversation, with the events' ids in the order stored. */
export function eventsChanges(
  events: readonly { ownerId: string; conversationId: string; id: string }[],
): ChangeEntry[] {
  const byConversation = new Map<string, { ownerId: string; conversationId: string; ids: string[] }>();
  for (const e of events) {
    const key = `${e.ownerId}\n${e.conversationId}`;
    const group = byConversation.get(key);
    if (group === undefined)
      byConversation.set(key, { ownerId: e.ownerId, conversationId: e.conversationId, ids: [e.id] });
    else group.ids.push(e.id);
  }
  return [...byConversation.values()].map((g) => ({
    ownerId: g.ownerId,
    topic: "events",
    key: g.conversationId,
    body: JSON.stringify(g.ids),
  }));
}
