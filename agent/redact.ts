/**
 * Redacting by key: string values under secret-looking keys (api_key, token, …) are replaced, so that a start
 * request kept in a conversation's record or on disk holds no credential. (Masking secret values wherever they
 * appear, in what commands print, is secret-mask.ts.)
 */
import type { Json } from "./json.ts";

export const REDACTED = "**********";
const SECRET_KEY = /api_?key|token|secret|password|authorization|credential/i;

/** Replaces string values under secret-looking keys (api_key, token, ...) so that no credential is kept. */
export function redact(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(redact);
  if (value === null || typeof value !== "object") return value;
  const out: Json = {};
  for (const [key, inner] of Object.entries(value)) {
    out[key] = typeof inner === "string" && SECRET_KEY.test(key) ? REDACTED : redact(inner);
  }
  return out;
}
