import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { basename, isAbsolute, join, resolve } from "node:path";
import { failedPrecondition } from "../../../core/errors.ts";
import type { SandboxUser } from "./bwrap.ts";
import { chownTreeAt } from "./no-follow.ts";
import { WORKSPACE_FOLDER } from "./warm-agents.ts";

/** A uid claim naming a workspace that does not exist is left over from a crash once this old. */
const STALE_UID_CLAIM_MS = 60_000;

export interface SandboxUidsOptions {
  /** The folder holding the workspaces (each owned by its sandbox's uid). */
  workspaceRoot: string;
  /** Sandbox uids are base .. base + count - 1 (gid = uid). */
  base: number;
  count: number;
  /** The host-wide folder of `<uid>` claim files, shared by every server on the host. */
  claimsDir: string;
  /** Only a server running as root gives sandboxes uids of their own; otherwise every sandbox runs as `ownUser`. */
  asRoot: boolean;
  ownUser: SandboxUser;
}

/**
 * The uids of isolated process sandboxes (as root): one per workspace, claimed host-wide by an exclusive
 * `<claimsDir>/<uid>` file naming the workspace, so that servers on one host (workers, replicas, servers with other
 * DATA_DIRs, their warm agents starting together) never hand out the same uid; given back when the workspace goes.
 */
export class SandboxUids {
  readonly #o: SandboxUidsOptions;

  constructor(options: SandboxUidsOptions) {
    this.#o = options;
  }

  /**
   * Claims `uid` for the workspace at `path` in the host-wide folder: true when the claim file was made for it or
   * already names it. A claim naming a workspace that no longer exists, older than a minute, is a crash's
   * leftover and is taken over.
   */
  #claim(uid: number, path: string): boolean {
    const file = join(this.#o.claimsDir, String(uid));
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        writeFileSync(file, path, { flag: "wx", mode: 0o600 });
        return true;
      } catch (e: unknown) {
        if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      }
      try {
        const owner = readFileSync(file, "utf8");
        if (owner === path) return true;
        if (existsSync(owner) || Date.now() - statSync(file).mtimeMs < STALE_UID_CLAIM_MS) return false;
        rmSync(file, { force: true });
      } catch {
        // removed meanwhile: try again
      }
    }
    return false;
  }

  /**
   * As root: the uid owning an existing workspace of this id (a sandbox started again), if it is one of ours and
   * its claim names this workspace (re-made when missing). A uid another server's workspace claims is given up:
   * the workspace is handed to a newly allocated uid.
   */
  reuse(workspace: string): SandboxUser | null {
    if (!this.#o.asRoot) return null;
    let owner: SandboxUser;
    try {
      const { uid, gid } = statSync(workspace);
      if (uid < this.#o.base || uid >= this.#o.base + this.#o.count) return null;
      owner = { uid, gid };
    } catch {
      return null;
    }
    mkdirSync(this.#o.claimsDir, { recursive: true, mode: 0o700 });
    if (this.#claim(owner.uid, resolve(workspace))) return owner;
    const fresh = this.allocate(basename(workspace));
    chownTreeAt(workspace, fresh.uid, fresh.gid);
    return fresh;
  }

  /**
   * As root: the lowest uid of the range that owns no workspace here and that no server on the host has claimed:
   * `<this.#o.claimsDir>/<uid>` is created exclusively, naming the workspace, so that servers on one host (workers,
   * replicas, servers with other DATA_DIRs, their warm agents starting together) never hand out the same uid.
   */
  allocate(folder: string): SandboxUser {
    if (!this.#o.asRoot) return this.#o.ownUser;
    const used = new Set<number>();
    for (const name of readdirSync(this.#o.workspaceRoot)) {
      if (!WORKSPACE_FOLDER.test(name)) continue;
      try {
        used.add(statSync(join(this.#o.workspaceRoot, name)).uid);
      } catch {
        // removed meanwhile
      }
    }
    mkdirSync(this.#o.claimsDir, { recursive: true, mode: 0o700 });
    const path = resolve(this.#o.workspaceRoot, folder);
    for (let uid = this.#o.base; uid < this.#o.base + this.#o.count; uid++) {
      if (used.has(uid)) continue;
      if (this.#claim(uid, path)) return { uid, gid: uid };
    }
    throw failedPrecondition(`all ${this.#o.count} sandbox uids from ${this.#o.base} are in use`);
  }

  /** Gives back the uid claimed for `folder` (see allocate), read from the folder before it is removed. */
  release(folder: string): void {
    if (!this.#o.asRoot) return;
    let uid: number;
    try {
      uid = statSync(join(this.#o.workspaceRoot, folder)).uid;
    } catch {
      return;
    }
    const lock = join(this.#o.claimsDir, String(uid));
    try {
      if (readFileSync(lock, "utf8") === resolve(this.#o.workspaceRoot, folder))
        rmSync(lock, { force: true });
    } catch {
      // not claimed through a lock (a workspace made before locks existed)
    }
  }

  /**
   * Gives back claims whose workspace is gone (a server died between claiming and removing) after a minute, long
   * after any claim's workspace exists (it is made right after the claim, in the same turn). Claims name their
   * workspace by absolute path: those of every server on the host are checked alike.
   */
  sweepStale(): void {
    if (!this.#o.asRoot) return;
    const now = Date.now();
    for (const name of existsSync(this.#o.claimsDir) ? readdirSync(this.#o.claimsDir) : []) {
      try {
        const lock = join(this.#o.claimsDir, name);
        const workspace = readFileSync(lock, "utf8");
        if (
          isAbsolute(workspace) &&
          !existsSync(workspace) &&
          now - statSync(lock).mtimeMs > STALE_UID_CLAIM_MS
        )
          rmSync(lock, { force: true });
      } catch {
        // removed meanwhile
      }
    }
  }
}
