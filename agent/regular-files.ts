/**
 * Reading and writing files the sandbox's own user can replace (its saved conversations, the files the workspace
 * routes name) only when they are regular files: opened without following a symlink in the last name
 * (O_NOFOLLOW) and without blocking on a FIFO (O_NONBLOCK: a FIFO without a writer reads empty, one without a
 * reader cannot be opened for writing), then checked on the descriptor (fstat), so nothing can be swapped in
 * between the check and the use. A FIFO in place of a saved file would otherwise hold the agent's start forever.
 */
import { closeSync, constants, fstatSync, openSync, readFileSync, writeSync } from "node:fs";

const { O_RDONLY, O_WRONLY, O_CREAT, O_TRUNC, O_APPEND, O_EXCL, O_NOFOLLOW, O_NONBLOCK } = constants;

/** Thrown when a path is a symlink, a FIFO, a folder or anything but a regular file. */
export class NotRegularFile extends Error {
  readonly code = "ENOTREG";
  constructor(path: string) {
    super(`${path} is not a regular file (a symlink, FIFO, folder or device is not opened)`);
  }
}

/** Opens `path` with `flags` (plus O_NOFOLLOW and O_NONBLOCK) when it is a regular file; else NotRegularFile. */
function openRegular(path: string, flags: number, mode?: number): number {
  let fd: number;
  try {
    fd = openSync(path, flags | O_NOFOLLOW | O_NONBLOCK, mode);
  } catch (e: unknown) {
    const code = (e as NodeJS.ErrnoException).code;
    // ELOOP: the last name is a symlink; ENXIO: a FIFO without a reader; EISDIR: a folder opened for writing.
    if (code === "ELOOP" || code === "ENXIO" || code === "EISDIR") throw new NotRegularFile(path);
    throw e;
  }
  if (!fstatSync(fd).isFile()) {
    closeSync(fd);
    throw new NotRegularFile(path);
  }
  return fd;
}

/**
 * The content of `path` when it is a regular file of at most `maxBytes` (else an error saying its size); throws
 * ENOENT as readFileSync does, NotRegularFile for anything else than a regular file.
 */
export function readRegularFile(path: string, maxBytes = Number.POSITIVE_INFINITY): Buffer {
  const fd = openRegular(path, O_RDONLY);
  try {
    const size = fstatSync(fd).size;
    if (size > maxBytes) throw new Error(`${path} holds ${size} bytes; at most ${maxBytes} are read`);
    return readFileSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * Writes `data` to `path` as a regular file: `append` adds to it (created when missing), `exclusive` creates it
 * anew (EEXIST when something is there), otherwise it is created or truncated. Never through a symlink, never
 * into a FIFO, a folder or a device (NotRegularFile).
 */
export function writeRegularFile(
  path: string,
  data: string | Uint8Array,
  how: { mode?: number; append?: boolean; exclusive?: boolean } = {},
): void {
  const flags = O_WRONLY | O_CREAT | (how.append ? O_APPEND : how.exclusive ? O_EXCL : O_TRUNC);
  const fd = openRegular(path, flags, how.mode ?? 0o666);
  try {
    const bytes = typeof data === "string" ? Buffer.from(data) : data;
    for (let at = 0; at < bytes.length; ) at += writeSync(fd, bytes, at, bytes.length - at);
  } finally {
    closeSync(fd);
  }
}
