import type { ApiKeyRepository } from "./api-key-repository.ts";
import type { ChangeLog } from "./change-log.ts";
import type { ConversationRepository, StartTaskRepository } from "./conversation-repository.ts";
import type { EventRepository } from "./event-repository.ts";
import type { SandboxRepository } from "./sandbox-repository.ts";
import type { UserDataRepository } from "./user-data-repository.ts";

/** Everything a storage adapter provides. */
export interface Storage {
  readonly kind: "sqlite" | "mongo";
  readonly userData: UserDataRepository;
  readonly apiKeys: ApiKeyRepository;
  readonly sandboxes: SandboxRepository;
  readonly conversations: ConversationRepository;
  readonly startTasks: StartTaskRepository;
  readonly events: EventRepository;
  /** The change log every server sharing the store appends to and follows (watches). */
  readonly changes: ChangeLog;
  /** Resolves when storage answers (readiness). Rejects otherwise. */
  ping(): Promise<void>;
  /** Resolves when storage accepts a write: rewrites one tiny heartbeat record of this server (readiness). */
  checkWritable(): Promise<void>;
  /**
   * Gives space freed by deletes back to the file system, a bounded amount per call (the sweep): SQLite runs an
   * incremental vacuum; MongoDB (WiredTiger reuses freed space itself) does nothing.
   */
  compact(): Promise<void>;
  close(): Promise<void>;
}
