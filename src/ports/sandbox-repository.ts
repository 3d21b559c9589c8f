import type { Page, PageQuery } from "./page.ts";

export type SandboxStatus = "STARTING" | "RUNNING" | "PAUSED" | "ERROR" | "MISSING";

/** A sandbox in the registry. */
export interface SandboxRecord {
  id: string;
  ownerId: string;
  specId: string;
  /** Which runtime owns it ("process" or "docker"). */
  runtime: string;
  /** Runtime-specific handle (pid, port, container id, ...); JSON-compatible. */
  handle: Record<string, unknown>;
  /** Sealed session key of the sandbox's agent server. */
  sessionApiKey: string;
  /** Last status recorded (the live status is reconciled with the runtime on read). */
  status: SandboxStatus;
  createdAt: Date;
  updatedAt: Date;
}

export interface SandboxRepository {
  insert(record: SandboxRecord): Promise<void>;
  /** The sandbox if it exists and (when ownerId is given) belongs to that owner. */
  get(id: string, ownerId?: string): Promise<SandboxRecord | null>;
  /** Records with these ids owned by ownerId, in any order. */
  getMany(ids: readonly string[], ownerId: string): Promise<SandboxRecord[]>;
  /** Applies the patch; false when the sandbox does not exist. */
  update(
    id: string,
    patch: Partial<Pick<SandboxRecord, "handle" | "status" | "updatedAt">>,
  ): Promise<boolean>;
  /** Newest first (createdAt desc, id desc). */
  list(ownerId: string, page: PageQuery): Promise<Page<SandboxRecord>>;
  /** Every record of one owner (or of everyone), newest first; used for reconciliation and limits. */
  listAll(ownerId?: string): Promise<SandboxRecord[]>;
  /** false when it did not exist. */
  delete(id: string): Promise<boolean>;
}
