/**
 * Bubblewrap (`bwrap`) command lines for process sandboxes, and the probe that tells whether they can run here.
 *
 * A sandbox sees: the system folders read-only (/usr and the /bin, /lib… links or folders, /etc), the files the
 * runtime lists read-only (the Node binary, the built-in agent's folder), its own workspace read-write, a fresh
 * /proc of its own PID namespace, a minimal /dev, and private /tmp and /dev/shm, and nothing else: no DATA_DIR, no
 * other workspace, no other process. Its network is not bwrap's business: the launcher starts bwrap inside the
 * sandbox's own network namespace (sandbox-network.ts), or in the host's where that cannot be made.
 *
 * Users: run as root, bwrap sets the sandbox up with root's rights (no user namespace, so bind sources behind
 * 0700 folders such as DATA_DIR are reachable), then `setpriv` (util-linux) switches the command to the sandbox's
 * own uid/gid with no supplementary groups, no capabilities (empty bounding set) and no_new_privs, and a second,
 * unprivileged bwrap puts the command in a user namespace of its own that forbids nested ones (--disable-userns).
 * Run as any other user, bwrap makes a user namespace that maps the server's uid onto itself and forbids nested user
 * namespaces. /tmp and /dev/shm are tmpfs of the sizes given (their pages also count against a memory cgroup).
 */
import { spawnSync } from "node:child_process";
import { accessSync, constants, existsSync, lstatSync, readlinkSync, statSync } from "node:fs";
import { dirname, resolve } from "node:path";

/** Where the host's tools and a sandbox's commands are looked for when no PATH is given. */
export const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** `SANDBOX_ISOLATION`: bwrap (required), none (explicitly off) or auto (bwrap when it works). */
export type IsolationSetting = "auto" | "bwrap" | "none";

/** Who the sandboxed command runs as. */
export interface SandboxUser {
  uid: number;
  gid: number;
}

export interface BwrapLayout {
  /** Read-write: the sandbox's workspace (same path inside as outside). */
  workspace: string;
  /** Working directory of the command (inside the workspace). */
  cwd: string;
  /** Read-only files or folders bound at the same path (the Node binary, the agent's folder, a compile cache). */
  readOnly: readonly string[];
  /** The sandbox's user; `asRoot` selects how it is applied (see the module comment). */
  user: SandboxUser;
  asRoot: boolean;
  /** Sizes of the private /tmp and /dev/shm in bytes (absent: the tmpfs default, half the RAM). */
  tmpBytes?: number;
  shmBytes?: number;
  /** A file bound read-only over /etc/resolv.conf (a sandbox network's DNS forwarder). */
  resolvConf?: string;
}

/** Top-level system folders bound read-only (or recreated as the same symlink, for merged-/usr systems). */
const SYSTEM_PATHS = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"];
/** Extra read-only paths some systems need for DNS (a resolv.conf symlink into /run). */
const OPTIONAL_PATHS = ["/run/systemd/resolve"];

/**
 * The programs that set a sandbox up, by absolute path: never looked up in a sandbox's PATH (a spec's environment
 * could otherwise name a program of its own to run as root). `setpriv` is only needed when running as root.
 */
export interface BwrapTools {
  bwrap: string;
  setpriv: string | null;
}

/** The absolute path of an executable file: `command` itself when it has a "/", else its first match in `path`. */
export function findExecutable(command: string, path: string, cwd = "/"): string | null {
  const candidates = command.includes("/")
    ? [resolve(cwd, command)]
    : path.split(":").map((dir) => resolve(cwd, dir, command));
  for (const candidate of candidates) {
    try {
      accessSync(candidate, constants.X_OK);
      if (statSync(candidate).isFile()) return candidate;
    } catch {
      // next
    }
  }
  return null;
}

/** Finds bwrap (and setpriv as root) in `searchPath`; a string says what is missing. */
export function findTools(bwrap: string, searchPath: string, asRoot: boolean): BwrapTools | string {
  const bwrapFile = findExecutable(bwrap, searchPath);
  if (!bwrapFile) return `${bwrap} not found in ${searchPath}`;
  const setpriv = asRoot ? findExecutable("setpriv", searchPath) : null;
  if (asRoot && !setpriv) return `setpriv (util-linux) not found in ${searchPath}`;
  return { bwrap: bwrapFile, setpriv };
}

/** Argv of bwrap and its options, up to and including `--` (append the command). */
export function bwrapArgs(tools: BwrapTools, layout: BwrapLayout): string[] {
  const args = [
    tools.bwrap,
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--hostname",
    "sandbox",
  ];
  if (!layout.asRoot) {
    args.push(
      "--unshare-user",
      "--uid",
      String(layout.user.uid),
      "--gid",
      String(layout.user.gid),
      "--disable-userns",
    );
  }
  for (const path of SYSTEM_PATHS) {
    const stat = lstatOrNull(path);
    if (stat?.isSymbolicLink()) args.push("--symlink", readlinkSync(path), path);
    else if (stat?.isDirectory()) args.push("--ro-bind", path, path);
  }
  for (const path of OPTIONAL_PATHS) if (existsSync(path)) args.push("--ro-bind", path, path);
  if (layout.resolvConf) args.push("--ro-bind", layout.resolvConf, "/etc/resolv.conf");
  const size = (bytes: number | undefined): string[] => (bytes ? ["--size", String(bytes)] : []);
  args.push(
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    "--perms",
    "1777",
    ...size(layout.shmBytes),
    "--tmpfs",
    "/dev/shm",
  );
  args.push("--perms", "1777", ...size(layout.tmpBytes), "--tmpfs", "/tmp");
  // bwrap creates missing parent folders of a bind target with mode 0700 (root's when run as root): create them
  // first, world-traversable, so that the sandbox user can reach what is bound below them.
  const made = new Set<string>(["/"]);
  const parents = (path: string): void => {
    const parent = dirname(path);
    if (made.has(parent) || parent === path) return;
    parents(parent);
    made.add(parent);
    if (!SYSTEM_PATHS.includes(parent)) args.push("--perms", "0755", "--dir", parent);
  };
  for (const path of tools.setpriv ? [tools.setpriv, ...layout.readOnly] : layout.readOnly) {
    if (!existsSync(path)) continue;
    parents(path);
    args.push("--ro-bind", path, path);
  }
  parents(layout.workspace);
  args.push("--bind", layout.workspace, layout.workspace, "--chdir", layout.cwd, "--");
  if (layout.asRoot) {
    if (!tools.setpriv) throw new Error("setpriv is needed to run sandboxes as root");
    args.push(
      tools.setpriv,
      `--reuid=${layout.user.uid}`,
      `--regid=${layout.user.gid}`,
      "--clear-groups",
      "--inh-caps=-all",
      "--bounding-set=-all",
      "--no-new-privs",
      "--",
      // Nested user namespaces are refused by a second, unprivileged bwrap: a user namespace of its own, mapping
      // the sandbox's uid onto itself, whose limit of further user namespaces is zero (--disable-userns). Without
      // it any sandbox could `unshare -U -r` and get capabilities (over its own namespaces) back. It keeps the
      // working directory it is started in.
      tools.bwrap,
      "--unshare-user",
      "--uid",
      String(layout.user.uid),
      "--gid",
      String(layout.user.gid),
      "--disable-userns",
      "--bind",
      "/",
      "/",
      // Device files of /dev stay usable (a plain bind would make them nodev in the new namespace).
      "--dev-bind",
      "/dev",
      "/dev",
      "--",
    );
  }
  return args;
}

function lstatOrNull(path: string): ReturnType<typeof lstatSync> | null {
  try {
    return lstatSync(path);
  } catch {
    return null;
  }
}

/** True when this process runs as root (then every sandbox gets its own uid). */
export function runningAsRoot(): boolean {
  return process.getuid?.() === 0;
}

const probes = new Map<string, string | null>();

/**
 * Runs `id -u` in a sandbox laid out as real ones are (once per bwrap path and user per process) and returns
 * null when that works, else why not (bwrap missing, namespaces not permitted, setpriv missing…).
 */
export function probeBwrap(
  tools: BwrapTools,
  workspace: string,
  user: SandboxUser,
  asRoot: boolean,
): string | null {
  const key = `${tools.bwrap}\0${tools.setpriv}\0${user.uid}:${user.gid}\0${asRoot}`;
  const known = probes.get(key);
  if (known !== undefined) return known;
  const argv = bwrapArgs(tools, { workspace, cwd: workspace, readOnly: [], user, asRoot });
  // A shell, not Node: the probe runs at every server start, and a Node start costs ten times as much.
  const check = '[ "$(id -u)" = "$1" ] || exit 3';
  const result = spawnSync(tools.bwrap, [...argv.slice(1), "/bin/sh", "-c", check, "sh", String(user.uid)], {
    env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" },
    encoding: "utf8",
    timeout: 10_000,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let reason: string | null = null;
  if (result.error) reason = `${tools.bwrap}: ${result.error.message}`;
  else if (result.status === 3) reason = `the sandboxed command did not run as uid ${user.uid}`;
  else if (result.status !== 0)
    reason = `${tools.bwrap} exited with ${result.status ?? result.signal}: ${result.stderr.trim().slice(0, 300)}`;
  probes.set(key, reason);
  return reason;
}
