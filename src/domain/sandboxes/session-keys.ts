/**
 * The sandboxes' session keys at rest: sealed with the service's SecretBox under a context naming the record's
 * owner, so a sealed key copied into another user's record does not open. Shared by the sandbox service's jobs.
 */
import type { SecretBox } from "../../core/secret-box.ts";
import type { SessionKeys } from "./ports.ts";

/** Session keys sealed into and opened from sandbox records with `box`. */
export function sealedSessionKeys(box: SecretBox): SessionKeys {
  return {
    seal: (ownerId, key) => box.seal(key, `${ownerId}:sandbox`),
    open: (record) => box.open(record.sessionApiKey, `${record.ownerId}:sandbox`),
  };
}
