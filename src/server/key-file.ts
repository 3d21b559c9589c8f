import { randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { ConfigError } from "./config-types.ts";

/**
 * The encryption key from its file, creating the file (32 random bytes, base64, mode 0600) on first start.
 * Refuses a key file readable by group or others.
 */
export function loadOrCreateKeyFile(path: string): { key: Buffer; created: boolean } {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  try {
    writeFileSync(path, `${randomBytes(32).toString("base64")}\n`, { flag: "wx", mode: 0o600 });
    return { key: readKey(path), created: true };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
  }
  const mode = statSync(path).mode & 0o777;
  if ((mode & 0o077) !== 0)
    throw new ConfigError(
      `key file ${path} must be readable by its owner only (chmod 600); it is ${mode.toString(8)}`,
    );
  return { key: readKey(path), created: false };
}

function readKey(path: string): Buffer {
  const key = Buffer.from(readFileSync(path, "utf8").trim(), "base64");
  if (key.length !== 32) throw new ConfigError(`key file ${path} does not hold a 32-byte base64 key`);
  return key;
}
