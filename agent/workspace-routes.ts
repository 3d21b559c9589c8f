/**
 * The agent server's workspace routes the OpenHands UI calls: `GET /api/git/changes/{path}`,
 * `GET /api/git/diff/{path}`, `POST /api/file/upload/{path}` (multipart, field `file`) and `GET /api/vscode/url`
 * (always `{"url": null}`: the built-in agent has no VS Code server).
 *
 * Paths are absolute. The UI assumes the reference image's layout (`/workspace/project`, `/workspace/<file>`): where
 * the workspace is elsewhere (the process runtime), a path under `/workspace` is taken relative to the workspace.
 * Every path must end up inside the workspace, and a file route (upload, diff) never goes through a symlink as
 * the file itself: the routes answer 400 for one, and open the file without following it (O_NOFOLLOW).
 */
import { execFile } from "node:child_process";
import { existsSync, lstatSync, mkdirSync, readdirSync, statSync } from "node:fs";
import type { IncomingMessage } from "node:http";
import { dirname, join, relative } from "node:path";
import { NotRegularFile, readRegularFile, writeRegularFile } from "./regular-files.ts";
import { detail, type Reply, RequestError, tooLarge } from "./replies.ts";
import { readBody } from "./request-body.ts";
import { realInWorkspace } from "./workspace-paths.ts";

const GIT_TIMEOUT_MS = 30_000;
const MAX_DIFF_FILE_BYTES = 5 * 1024 * 1024;
/** git's empty tree: the base to compare against in a repository without commits. */
const EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/** What the workspace routes need of the server. */
export interface WorkspaceContext {
  workspaceDir: string;
  /** Largest file accepted by an upload in bytes; larger gets 413. */
  maxUploadBytes: number;
}

export async function workspaceRoute(
  req: IncomingMessage,
  url: URL,
  path: string,
  method: string,
  ctx: WorkspaceContext,
): Promise<Reply | null> {
  if (path === "/api/vscode/url") {
    if (method !== "GET") return detail(405, "Method Not Allowed");
    return { status: 200, body: { url: null } };
  }
  const m = /^\/api\/(git\/changes|git\/diff|file\/upload)\/(.+)$/.exec(url.pathname);
  if (m === null) return null;
  let raw: string;
  try {
    raw = decodeURIComponent(m[2] ?? "");
  } catch {
    return detail(400, "Malformed path");
  }
  // FastAPI's {path:path} drops the leading slash of an absolute path that arrives unencoded.
  if (!raw.startsWith("/")) raw = `/${raw}`;
  const target = realInWorkspace(raw, ctx.workspaceDir);
  if (target === null) return detail(400, `Path must be inside the workspace (${ctx.workspaceDir})`);
  if (m[1] !== "git/changes" && isSymlink(target)) return detail(400, "The path is a symlink");
  if (m[1] === "file/upload") {
    if (method !== "POST") return detail(405, "Method Not Allowed");
    return upload(req, target, ctx.maxUploadBytes, ctx.workspaceDir);
  }
  if (method !== "GET") return detail(405, "Method Not Allowed");
  if (m[1] === "git/changes") return { status: 200, body: await gitChanges(target) };
  return { status: 200, body: await gitDiff(target) };
}

async function upload(
  req: IncomingMessage,
  target: string,
  limit: number,
  workspaceDir: string,
): Promise<Reply> {
  const type = req.headers["content-type"] ?? "";
  if (!/^multipart\/form-data/i.test(type)) return detail(400, "Expected a multipart/form-data body");
  if (Number(req.headers["content-length"] ?? 0) > limit) throw tooLarge(limit);
  const raw = await readBody(req, limit);
  if (raw === null) throw tooLarge(limit);
  let file: unknown;
  try {
    // The platform's multipart parser (undici's, through Response): loaded only for an upload.
    const form = await new Response(new Uint8Array(raw), { headers: { "content-type": type } }).formData();
    file = form.get("file");
  } catch {
    return detail(400, "Malformed multipart body");
  }
  if (!(file instanceof Blob))
    throw new RequestError({
      status: 422,
      body: { detail: [{ type: "missing", loc: ["body", "file"], msg: "Field required", input: null }] },
    });
  if (existsSync(target) && statSync(target).isDirectory()) return detail(400, "The path is a directory");
  const bytes = new Uint8Array(await file.arrayBuffer());
  try {
    mkdirSync(dirname(target), { recursive: true });
    // Checked again now that the folders exist (one on the way may have been swapped for a link meanwhile).
    if (realInWorkspace(target, workspaceDir) === null)
      return detail(400, `Path must be inside the workspace (${workspaceDir})`);
    writeRegularFile(target, bytes);
  } catch (e: unknown) {
    if (e instanceof NotRegularFile) return detail(400, "The path is not a regular file");
    return detail(500, `Failed to upload file: ${e instanceof Error ? e.message : String(e)}`);
  }
  return { status: 200, body: { success: true } };
}

function git(args: string[], cwd: string): Promise<{ ok: boolean; out: string }> {
  return new Promise((done) => {
    execFile(
      "git",
      ["--no-pager", ...args],
      { cwd, timeout: GIT_TIMEOUT_MS, maxBuffer: 16 * 1024 * 1024, encoding: "utf8" },
      (error, stdout) => done({ ok: error === null, out: stdout }),
    );
  });
}

/** The base a repository's changes are shown against: its upstream's merge base, else HEAD, else empty. */
async function baseRef(repo: string): Promise<string> {
  const upstream = await git(["merge-base", "HEAD", "@{upstream}"], repo);
  if (upstream.ok && upstream.out.trim() !== "") return upstream.out.trim();
  const head = await git(["rev-parse", "--verify", "HEAD"], repo);
  return head.ok ? "HEAD" : EMPTY_TREE;
}

async function repoRoot(dir: string): Promise<string | null> {
  if (!existsSync(dir) || !statSync(dir).isDirectory()) return null;
  const r = await git(["rev-parse", "--show-toplevel"], dir);
  return r.ok ? r.out.trim() : null;
}

/** Changes of one repository, paths relative to `shownFrom`. */
async function changesIn(repo: string, shownFrom: string): Promise<{ status: string; path: string }[]> {
  const ref = await baseRef(repo);
  const out: { status: string; path: string }[] = [];
  const diff = await git(["diff", "--name-status", "-z", ref], repo);
  if (diff.ok) {
    const parts = diff.out.split("\0").filter((p) => p !== "");
    for (let i = 0; i < parts.length; ) {
      const code = parts[i++] ?? "";
      const rel = (p: string): string => relative(shownFrom, join(repo, p));
      if (code.startsWith("R")) {
        out.push({ status: "DELETED", path: rel(parts[i++] ?? "") });
        out.push({ status: "ADDED", path: rel(parts[i++] ?? "") });
      } else if (code.startsWith("C")) {
        i++;
        out.push({ status: "ADDED", path: rel(parts[i++] ?? "") });
      } else {
        const status = code === "A" ? "ADDED" : code === "D" ? "DELETED" : "UPDATED";
        out.push({ status, path: rel(parts[i++] ?? "") });
      }
    }
  }
  const untracked = await git(["ls-files", "--others", "--exclude-standard", "-z"], repo);
  if (untracked.ok)
    for (const p of untracked.out.split("\0"))
      if (p !== "") out.push({ status: "ADDED", path: relative(shownFrom, join(repo, p)) });
  return out;
}

/** The SDK's git changes: of the repository at `dir`, else of the repositories directly below it. */
async function gitChanges(dir: string): Promise<{ status: string; path: string }[]> {
  const root = await repoRoot(dir);
  if (root !== null) return changesIn(root, root);
  if (!existsSync(dir) || !statSync(dir).isDirectory()) return [];
  const all: { status: string; path: string }[] = [];
  for (const name of readdirSync(dir).sort()) {
    const sub = join(dir, name);
    if (!existsSync(join(sub, ".git"))) continue;
    all.push(...(await changesIn(sub, dir)));
  }
  return all;
}

/**
 * The SDK's git diff of one file: its content now (null when it no longer exists) and at the base ("" when it is not
 * there, or the repository has no commit, as the SDK answers).
 */
async function gitDiff(file: string): Promise<{ modified: string | null; original: string }> {
  let modified: string | null = null;
  try {
    modified = readRegularFile(file, MAX_DIFF_FILE_BYTES).toString("utf8");
  } catch {
    // gone, too large, or not a regular file (a FIFO would block): no content now
  }
  const root = await repoRoot(existsSync(file) ? dirname(file) : nearestDir(file));
  let original = "";
  if (root !== null) {
    const ref = await baseRef(root);
    if (ref !== EMPTY_TREE) {
      const shown = await git(["show", `${ref}:${relative(root, file)}`], root);
      if (shown.ok) original = shown.out;
    }
  }
  return { modified, original };
}

function isSymlink(path: string): boolean {
  try {
    return lstatSync(path).isSymbolicLink();
  } catch {
    return false;
  }
}

function nearestDir(p: string): string {
  let dir = dirname(p);
  while (!existsSync(dir) && dir !== dirname(dir)) dir = dirname(dir);
  return dir;
}
