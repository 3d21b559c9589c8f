import { randomBytes, randomUUID } from "node:crypto";

const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/** Random base62 string (rejection-sampled, so unbiased). */
export function base62(length: number): string {
  let out = "";
  while (out.length < length) {
    for (const byte of randomBytes(length * 2)) {
      if (byte < 248 && out.length < length) out += BASE62[byte % 62];
    }
  }
  return out;
}

/** A new conversation / start-task id: 32 lower-case hex characters (a UUID v4 without dashes). */
export function newHexId(): string {
  return randomUUID().replaceAll("-", "");
}

const HEX32 = /^[0-9a-f]{32}$/;
const DASHED = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** Normalises a UUID given with or without dashes (any case) to 32 lower-case hex; null when not a UUID. */
export function parseHexId(input: string): string | null {
  const s = input
    .trim()
    .toLowerCase()
    .replace(/^\{|\}$/g, "")
    .replace(/^urn:uuid:/, "");
  if (HEX32.test(s)) return s;
  if (DASHED.test(s)) return s.replaceAll("-", "");
  return null;
}

/** How a routable sandbox session key is written: `sbx_<sandbox id>_<43 random base62 characters>`. */
const SESSION_KEY = /^sbx_([0-9A-Za-z]{1,64})_[0-9A-Za-z]{43}$/;

/**
 * A new session key for the sandbox `sandboxId`. The key names its sandbox, so the service's agent proxy finds the
 * one sandbox a key opens with a lookup by id (the secret part is what proves it; docs/agent-proxy.md).
 */
export function newSessionKey(sandboxId: string): string {
  return `sbx_${sandboxId}_${base62(43)}`;
}

/** The sandbox id a session key names; null for any other string (a user's API key, an older sandbox's key). */
export function sandboxIdOfSessionKey(key: string): string | null {
  return SESSION_KEY.exec(key)?.[1] ?? null;
}
