/**
 * The built-in agent's conversations on disk, so that an agent started again on the same workspace (after a crash,
 * its memory limit, a host restart) picks them up, as the OpenHands agent-server reloads the conversations it keeps
 * under its workspace. One folder per conversation in the state folder (mode 0700, in the sandbox's own home):
 *
 * - `start.json`: the start request, in clear with every secret-looking value masked and its secrets left out, and
 *   whole only sealed (AES-256-GCM under a key derived from the sandbox's session key, which lives in the agent's
 *   environment only and which the service gives the agent again when it starts it again): no secret is in clear
 *   on disk;
 * - `info.json`: the conversation's record (title, execution status, …), rewritten when its info changes;
 * - `events.jsonl`: every event, one JSON line each, appended as it happens (the model's message history is rebuilt
 *   from them).
 *
 * The sandbox's own user can replace any of these: each is read and written only as a regular file (no symlink
 * followed, no FIFO waited on: regular-files.ts), so nothing put there can hold the agent's start.
 */
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from "node:crypto";
import { mkdirSync, readdirSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { Json } from "./json.ts";
import { REDACTED, redact } from "./redact.ts";
import { readRegularFile, writeRegularFile } from "./regular-files.ts";

/** A conversation read back from disk. */
export interface StoredConversation {
  id: string;
  /** The start request, with its secrets put back when they could be unsealed. */
  body: Json;
  /** False when the sealed secrets could not be opened (another session key): the conversation has none. */
  secretsRestored: boolean;
  record: Json | null;
  events: Json[];
}

const ID = /^[0-9a-f]{32}$/;
/**
 * Largest events file read back (a conversation beyond is skipped and logged): the agent holds a conversation's
 * events in memory, and the service stores at most MAX_EVENTS_PER_CONVERSATION (50,000 by default) of them.
 */
const MAX_EVENTS_FILE_BYTES = 256 * 1024 * 1024;

export class ConversationStore {
  readonly #dir: string;
  readonly #key: Buffer;
  readonly #log: (msg: string) => void;

  constructor(dir: string, sessionApiKey: string, log: (msg: string) => void = () => {}) {
    this.#dir = dir;
    // The HKDF label is part of the key: another label would leave saved conversations' secrets unreadable.
    this.#key = Buffer.from(
      hkdfSync("sha256", sessionApiKey, "sandbox-agent conversations", "conversation secrets v1", 32),
    );
    this.#log = log;
  }

  /** Saves a new conversation's start request (secrets sealed) and its first record. */
  create(id: string, body: Json, record: Json): void {
    const folder = this.#folder(id);
    if (folder === null) return;
    this.#safely(id, () => {
      mkdirSync(this.#dir, { recursive: true, mode: 0o700 });
      // The folder may lie inside the workspace's git repository (the process runtime's HOME is the workspace): a
      // .gitignore of "*" keeps it, itself included, out of git's changes (the UI's Changes tab), as pytest's and
      // mypy's caches do.
      writeRegularFile(join(this.#dir, ".gitignore"), "# the built-in agent's saved conversations\n*\n");
      mkdirSync(folder, { recursive: true, mode: 0o700 });
      const request: Json = { ...body };
      delete request.initial_message; // an event already, once sent
      // In clear: the settings with every secret-looking value masked (and the secrets left out), for a reader and
      // as the fallback when the sealed copy cannot be opened; sealed: the whole request.
      const clean = redact(request) as Json;
      delete clean.secrets;
      writeAtomic(
        join(folder, "start.json"),
        JSON.stringify({ body: clean, sealed: this.#seal(JSON.stringify(request)) }),
      );
      writeAtomic(join(folder, "info.json"), JSON.stringify(record));
      writeRegularFile(join(folder, "events.jsonl"), "", { mode: 0o600 });
    });
  }

  append(id: string, event: Json): void {
    const folder = this.#folder(id);
    if (folder === null) return;
    this.#safely(id, () =>
      writeRegularFile(join(folder, "events.jsonl"), `${JSON.stringify(event)}\n`, {
        append: true,
        mode: 0o600,
      }),
    );
  }

  saveInfo(id: string, record: Json): void {
    const folder = this.#folder(id);
    if (folder === null) return;
    this.#safely(id, () => writeAtomic(join(folder, "info.json"), JSON.stringify(record)));
  }

  delete(id: string): void {
    const folder = this.#folder(id);
    if (folder !== null) rmSync(folder, { recursive: true, force: true });
  }

  /** Every stored conversation that can be read (a folder without its start request is skipped and logged). */
  loadAll(): StoredConversation[] {
    let names: string[];
    try {
      names = readdirSync(this.#dir);
    } catch {
      return [];
    }
    const out: StoredConversation[] = [];
    for (const id of names.sort()) {
      if (!ID.test(id)) continue;
      const folder = join(this.#dir, id);
      try {
        // The sandbox's own user can write this folder: anything that is not what this store writes is left out
        // (a start request or record that is no object, an event line that is no object), never a crash.
        const start = objectOrNull(JSON.parse(readText(join(folder, "start.json"))));
        if (start === null) throw new Error("start.json holds no start request");
        const opened = typeof start.sealed === "string" ? this.#open(start.sealed) : null;
        const body = opened ?? unmasked(objectOrNull(start.body) ?? {});
        const secrets = opened;
        let record: Json | null = null;
        try {
          record = objectOrNull(JSON.parse(readText(join(folder, "info.json"))));
        } catch {
          // written after start.json: the record is rebuilt from the start request
        }
        const events: Json[] = [];
        let raw = "";
        try {
          raw = readRegularFile(join(folder, "events.jsonl"), MAX_EVENTS_FILE_BYTES).toString("utf8");
        } catch (e: unknown) {
          if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e; // else: no event yet
        }
        for (const line of raw.split("\n")) {
          if (line === "") continue;
          let event: Json | null;
          try {
            event = objectOrNull(JSON.parse(line));
          } catch {
            break; // a line cut by the crash: the ones before it stand
          }
          if (event !== null) events.push(event);
        }
        out.push({ id, body, secretsRestored: secrets !== null, record, events });
      } catch (e: unknown) {
        this.#log(`conversation ${id} could not be restored: ${e instanceof Error ? e.message : String(e)}`);
      }
    }
    return out;
  }

  #folder(id: string): string | null {
    return ID.test(id) ? join(this.#dir, id) : null;
  }

  /** A failure to write (disk full) is logged once per call: the conversation goes on in memory. */
  #safely(id: string, write: () => void): void {
    try {
      write();
    } catch (e: unknown) {
      this.#log(`conversation ${id} could not be saved: ${e instanceof Error ? e.message : String(e)}`);
    }
  }

  #seal(text: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv("aes-256-gcm", this.#key, iv);
    const data = Buffer.concat([cipher.update(text, "utf8"), cipher.final()]);
    return Buffer.concat([iv, cipher.getAuthTag(), data]).toString("base64");
  }

  #open(sealed: string): Json | null {
    try {
      const raw = Buffer.from(sealed, "base64");
      const decipher = createDecipheriv("aes-256-gcm", this.#key, raw.subarray(0, 12));
      decipher.setAuthTag(raw.subarray(12, 28));
      const text = Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString("utf8");
      const parsed = JSON.parse(text) as unknown;
      return parsed && typeof parsed === "object" && !Array.isArray(parsed) ? (parsed as Json) : null;
    } catch {
      return null;
    }
  }
}

/** `value` when it is a JSON object (not an array), else null. */
function objectOrNull(value: unknown): Json | null {
  return value !== null && typeof value === "object" && !Array.isArray(value) ? (value as Json) : null;
}

/** The masked request without its masked values (absent rather than a mask taken for a key). */
function unmasked(value: Json): Json {
  const out: Json = {};
  for (const [key, inner] of Object.entries(value ?? {})) {
    if (inner === REDACTED) continue;
    out[key] =
      inner !== null && typeof inner === "object" && !Array.isArray(inner) ? unmasked(inner as Json) : inner;
  }
  return out;
}

/** Small files (start request, record) are read whole; anything larger is not this store's. */
const MAX_JSON_FILE_BYTES = 64 * 1024 * 1024;

function readText(path: string): string {
  return readRegularFile(path, MAX_JSON_FILE_BYTES).toString("utf8");
}

/** Writes `path` whole: a new temporary file (whatever was in its place removed, never followed), renamed. */
function writeAtomic(path: string, text: string): void {
  rmSync(`${path}.tmp`, { force: true, recursive: true });
  writeRegularFile(`${path}.tmp`, text, { mode: 0o600, exclusive: true });
  renameSync(`${path}.tmp`, path);
}
