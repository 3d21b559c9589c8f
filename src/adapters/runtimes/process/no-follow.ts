/**
 * Root's file system work inside a sandbox's workspace, which the sandbox controls: every step opens the folder it
 * works in and goes on from that descriptor (`/proc/self/fd/<fd>/<name>`, the openat() of a Node program), with
 * O_NOFOLLOW on each name, so that no symlink the sandbox planted is followed, not even one swapped in between two
 * steps. A name that is a symlink, or not what the step expects (a folder, a regular file), is refused.
 */
import {
  closeSync,
  constants,
  fchownSync,
  fstatSync,
  lchownSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
} from "node:fs";

const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW, O_WRONLY, O_APPEND, O_CREAT, O_NONBLOCK } = constants;
const DIR = O_RDONLY | O_DIRECTORY | O_NOFOLLOW;

/** The path naming `name` inside the folder open on `fd`, resolved from that descriptor (not from a path). */
export const atFd = (fd: number, name?: string): string =>
  name === undefined ? `/proc/self/fd/${fd}` : `/proc/self/fd/${fd}/${name}`;

/** Thrown when a name on the way is a symlink or not a folder (or not a regular file where one is expected). */
export class LinkRefused extends Error {
  constructor(path: string, what: string) {
    super(`${path}: ${what}; refused (a sandbox's symlink is never followed)`);
  }
}

/** Opens the folder `name` inside the folder open on `dirFd` without following a symlink; throws LinkRefused. */
export function openChildDir(dirFd: number, name: string, shown: string): number {
  try {
    return openSync(atFd(dirFd, name), DIR);
  } catch (e: unknown) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ELOOP" || code === "ENOTDIR") throw new LinkRefused(shown, "a symlink or not a folder");
    throw e;
  }
}

/** Opens a folder root trusts (a workspace folder itself, whose parent is root's) without following a symlink. */
export function openTrustedDir(path: string): number {
  try {
    return openSync(path, DIR);
  } catch (e: unknown) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ELOOP" || code === "ENOTDIR") throw new LinkRefused(path, "a symlink or not a folder");
    throw e;
  }
}

/**
 * Makes the folders of `rel` (a relative path without `..`) inside `base`, each created when missing (mode 0700)
 * and, with `owner`, handed to it (the base folder too), without following any symlink; returns the descriptor of
 * the last folder (the caller closes it). Throws LinkRefused when a name on the way is a symlink or not a folder.
 */
export function makeDirsAt(base: string, rel: string, owner: { uid: number; gid: number } | null): number {
  let fd = openTrustedDir(base);
  try {
    if (owner) fchownSync(fd, owner.uid, owner.gid);
    let shown = base;
    for (const name of rel.split("/").filter((n) => n !== "" && n !== ".")) {
      if (name === "..") throw new LinkRefused(`${shown}/..`, "a parent reference");
      shown = `${shown}/${name}`;
      try {
        // mkdir never follows a symlink in its last name (EEXIST).
        mkdirSync(atFd(fd, name), { mode: 0o700 });
      } catch (e: unknown) {
        if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      }
      const next = openChildDir(fd, name, shown);
      closeSync(fd);
      fd = next;
      if (owner) fchownSync(fd, owner.uid, owner.gid);
    }
    return fd;
  } catch (e: unknown) {
    closeSync(fd);
    throw e;
  }
}

/**
 * Opens `name` in the folder open on `dirFd` for appending (created with `mode` when missing), only when it is a
 * regular file with one link: never through a symlink (O_NOFOLLOW), never blocking on a FIFO (O_NONBLOCK: no
 * reader is ENXIO), never a device or a hard link to a file elsewhere. Returns the descriptor; throws LinkRefused.
 */
export function openAppendAt(dirFd: number, name: string, shown: string, mode = 0o600): number {
  let fd: number;
  try {
    fd = openSync(atFd(dirFd, name), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK, mode);
  } catch (e: unknown) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ELOOP" || code === "ENXIO") throw new LinkRefused(shown, "a symlink or a FIFO");
    throw e;
  }
  const stat = fstatSync(fd);
  if (!stat.isFile() || stat.nlink !== 1) {
    closeSync(fd);
    throw new LinkRefused(shown, "not a regular file of its own");
  }
  return fd;
}

/**
 * Hands the folder `path` (one root trusts, see openTrustedDir) and everything in it to uid:gid: folders through
 * their descriptors, other entries (symlinks included) with lchown, so nothing outside is ever changed.
 */
export function chownTreeAt(path: string, uid: number, gid: number): void {
  const fd = openTrustedDir(path);
  try {
    chownDirFd(fd, path, uid, gid);
  } finally {
    closeSync(fd);
  }
}

function chownDirFd(fd: number, shown: string, uid: number, gid: number): void {
  fchownSync(fd, uid, gid);
  for (const name of readdirSync(atFd(fd))) {
    const entry = atFd(fd, name);
    let isDir: boolean;
    try {
      isDir = lstatSync(entry).isDirectory();
    } catch {
      continue; // removed meanwhile
    }
    if (!isDir) {
      try {
        lchownSync(entry, uid, gid);
      } catch {
        // removed meanwhile
      }
      continue;
    }
    let child: number;
    try {
      child = openChildDir(fd, name, `${shown}/${name}`);
    } catch {
      continue; // swapped for a symlink or removed meanwhile: not followed
    }
    try {
      chownDirFd(child, `${shown}/${name}`, uid, gid);
    } finally {
      closeSync(child);
    }
  }
}
