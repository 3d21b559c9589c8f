/**
 * Which sandbox a session key opens, for the agent proxy. A part of the sandbox service's RPC face.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { sandboxIdOfSessionKey } from "../../core/ids.ts";
import type { SandboxRecord, SandboxStatus } from "../../ports/sandbox-repository.ts";
import type { SessionKeys } from "./ports.ts";
import { handleOrNull } from "./sandbox-state.ts";

/** Where the agent proxy sends a call made with a sandbox's session key (see {@link SandboxService.agentTarget}). */
export interface AgentTarget {
  sandboxId: string;
  ownerId: string;
  status: SandboxStatus;
  /** The agent's base URL as the runtime recorded it; null when the sandbox has no running handle. */
  agentUrl: string | null;
}

/** What agent targets need of the store: a sandbox's record by id, whoever owns it. */
export interface SandboxLookup {
  get(id: string): Promise<SandboxRecord | null>;
}

export interface AgentTargetsOptions {
  records: SandboxLookup;
  keys: Pick<SessionKeys, "open">;
}

/** Session keys to the sandboxes they open. */
export class AgentTargets {
  readonly #o: AgentTargetsOptions;
  /** SHA-256 of each sandbox's session key, by its sealed form (see target). */
  readonly #keyDigests = new Map<string, Buffer>();

  constructor(options: AgentTargetsOptions) {
    this.#o = options;
  }

  /**
   * The sandbox a session key opens: the key names the sandbox's id and must equal the key sealed in its record
   * (compared in constant time). Null for any other string, an unknown or deleted sandbox, or a wrong key; the
   * record's status and runtime handle are returned as stored (no probe of the agent).
   */
  async target(key: string): Promise<AgentTarget | null> {
    const id = sandboxIdOfSessionKey(key);
    if (id === null) return null;
    const record = await this.#o.records.get(id);
    if (record === null || record.deleting === true) return null;
    // The stored key's digest, by its sealed form (which never changes for a sandbox): opened once, not per call.
    let expected = this.#keyDigests.get(record.sessionApiKey);
    if (expected === undefined) {
      try {
        expected = createHash("sha256").update(this.#o.keys.open(record)).digest();
      } catch {
        return null;
      }
      if (this.#keyDigests.size >= 10_000) this.#keyDigests.clear();
      this.#keyDigests.set(record.sessionApiKey, expected);
    }
    if (!timingSafeEqual(expected, createHash("sha256").update(key).digest())) return null;
    const handle = handleOrNull(record);
    return {
      sandboxId: record.id,
      ownerId: record.ownerId,
      status: record.status,
      agentUrl: handle?.agentUrl ?? null,
    };
  }
}
