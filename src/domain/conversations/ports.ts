/**
 * What the conversation services need of the other services, as small interfaces: the composition root
 * (src/server/container.ts) passes the services that implement them, tests pass fakes. No conversation module
 * imports another service's class.
 */
import type { SandboxInfo } from "../../gen/workspace/v1/sandbox_pb.js";
import type { ConversationRecord } from "../../ports/conversation-repository.ts";
import type { SandboxRecord, SandboxStatus } from "../../ports/sandbox-repository.ts";
import type { SlotWait } from "../sandboxes/sandbox-lifecycle.ts";
import type { LiveSandbox } from "../sandboxes/sandbox-state.ts";
import type { ConversationConfig } from "../settings/settings-service.ts";

/** Reading a user's sandboxes with their live state (SandboxService). */
export interface SandboxReader {
  get(userId: string, id: string): Promise<LiveSandbox | null>;
  getMany(userId: string, ids: readonly string[]): Promise<Map<string, LiveSandbox>>;
  /** The plaintext session key of a sandbox (its agent server's). */
  sessionKey(record: SandboxRecord): string;
  /** The sandbox as the API shows it (exposed URLs included). */
  toInfo(live: LiveSandbox): SandboxInfo;
}

/** What the conversation RPCs need of the sandboxes: reading them, and deleting one a deleted conversation leaves. */
export interface ConversationSandboxes extends SandboxReader {
  /** Deletes the user's sandbox; NOT_FOUND when the user has none of that id. */
  delete(userId: string, id: string): Promise<void>;
}

/** What a conversation start needs of the sandboxes: getting one RUNNING for the start, and pausing it on failure. */
export interface StartSandboxes extends SandboxReader {
  /** The id of the sandbox a start will start: a warm sandbox's taken for it, else a new one. */
  newSandboxId(userId: string, specId?: string): Promise<string>;
  start(userId: string, specId: string | undefined, id?: string, wait?: SlotWait): Promise<LiveSandbox>;
  restartUnstarted(userId: string, id: string): Promise<LiveSandbox>;
  resume(userId: string, id: string, wait?: SlotWait): Promise<LiveSandbox>;
  waitUntilSettled(userId: string, id: string, timeoutMs: number): Promise<LiveSandbox | null>;
  pause(userId: string, id: string): Promise<void>;
  recordedStatus(userId: string, id: string): Promise<SandboxStatus | null>;
}

/** The user's settings as a new conversation needs them, secrets in plaintext (SettingsService). */
export interface ConversationConfigSource {
  openConversationConfig(userId: string): Promise<ConversationConfig>;
}

/** The user's custom secrets in plaintext, by name (SecretsService). */
export interface SecretSource {
  openAll(userId: string): Promise<Record<string, string>>;
}

/**
 * Facts about conversations, told one way to whoever listens (the event service names a conversation from a first
 * user message that arrived before its record existed). Listeners must not throw.
 */
export type ConversationFact = { kind: "created"; record: ConversationRecord };

/** Where the conversation services tell their facts. */
export interface ConversationFacts {
  publish(fact: ConversationFact): void;
}

/** A fan-out of conversation facts to the listeners subscribed at composition. */
export class ConversationFactBus implements ConversationFacts {
  readonly #listeners: ((fact: ConversationFact) => void)[] = [];

  subscribe(listener: (fact: ConversationFact) => void): void {
    this.#listeners.push(listener);
  }

  publish(fact: ConversationFact): void {
    for (const listener of this.#listeners) listener(fact);
  }
}
