/**
 * The store's change log: one entry per change that watchers follow (a sandbox's status, a start task's state,
 * new events of a conversation), numbered by a sequence that only grows. Every server sharing the store appends
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
   * number handed out before, once they are durable.
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
  /** Deletes the entries appended before `before`; returns how many. */
  prune(before: Date): Promise<number>;
  /**
   * Calls `onAppend` soon after another server may have appended (MongoDB change streams where the server is a
   * replica set); returns an unsubscribe function. Absent, or never calling, where the store cannot push: the
   * readers poll.
   */
  subscribe?(onAppend: () => void): () => void;
}
