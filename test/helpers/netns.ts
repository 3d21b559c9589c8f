/**
 * A second host on this machine for end-to-end tests: a network namespace joined to this one by a veth pair
 * (10.77.<n>.1/24 on this side, 10.77.<n>.2/24 inside, both up, `lo` up inside). A process run in it
 * (`ip netns exec`) has its own loopback and reaches this machine only at the link address 10.77.<n>.1: a server
 * listening there is reachable from it, one on 127.0.0.1 is not. Needs root (CAP_SYS_ADMIN for the namespace,
 * CAP_NET_ADMIN for the link) and iproute2; where either is missing, makeNetNs says why, for the test to skip.
 */
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";

export interface NetNsRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** The command was killed after `timeoutMs`. */
  timedOut: boolean;
}

export interface NetNs {
  /** The namespace's name (`ip netns list`). */
  name: string;
  /** The veth end on this side (removing it removes its peer). */
  hostLink: string;
  /** This machine's address on the link, as the namespace reaches it (10.77.<n>.1). */
  hostAddress: string;
  /** The namespace's own address on the link (10.77.<n>.2). */
  address: string;
  /**
   * Runs `argv` inside the namespace (`ip netns exec <name> ...argv`) and collects its output; it is killed after
   * `timeoutMs` (default 60 s). The environment is this process's unless `env` is given.
   */
  run(
    argv: string[],
    options?: { env?: NodeJS.ProcessEnv; timeoutMs?: number; cwd?: string },
  ): Promise<NetNsRun>;
  /** Removes the link and the namespace (idempotent, synchronous; also done at process exit). */
  remove(): void;
}

const PREFIX = "awsns";

/** Runs `ip` with `args`; the problem as a sentence when it fails. */
function ip(args: string[]): string | null {
  const r = spawnSync("ip", args, { encoding: "utf8", timeout: 10_000 });
  if (r.error) {
    const code = (r.error as NodeJS.ErrnoException).code;
    return code === "ENOENT"
      ? "no `ip` command (install iproute2)"
      : `ip ${args.join(" ")}: ${r.error.message}`;
  }
  if (r.status !== 0) return `ip ${args.join(" ")} failed (${r.status}): ${(r.stderr || r.stdout).trim()}`;
  return null;
}

function ipOut(args: string[]): string {
  const r = spawnSync("ip", args, { encoding: "utf8", timeout: 10_000 });
  return r.status === 0 ? r.stdout : "";
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Namespaces of an earlier run of this helper whose process is gone (a SIGKILLed test run): removed, so that
 * they do not pile up. Only names made by this helper (`awsns-<pid>-<hex>`) are touched.
 */
function removeStale(): void {
  for (const line of ipOut(["netns", "list"]).split("\n")) {
    const m = /^(awsns-(\d+)-[0-9a-f]+)\b/.exec(line.trim());
    if (m?.[1] && m[2] && !alive(Number(m[2]))) ip(["netns", "del", m[1]]);
  }
}

/** A /24 under 10.77.0.0/16 that no interface of this machine has an address in. */
function freeSubnet(): number | null {
  const used = new Set<number>();
  for (const m of ipOut(["-o", "-4", "addr", "show"]).matchAll(/inet 10\.77\.(\d+)\./g))
    used.add(Number(m[1]));
  for (let tries = 0; tries < 50; tries++) {
    const n = 1 + Math.floor(Math.random() * 254);
    if (!used.has(n)) return n;
  }
  return null;
}

/**
 * Makes the namespace and its link, or returns why it cannot (not root, no iproute2, EPERM in a container without
 * the capabilities, ...): `{ reason }` for the test to print when it skips. Whatever was made before a failing step
 * is removed again.
 */
export function makeNetNs(): NetNs | { reason: string } {
  if (process.platform !== "linux")
    return { reason: `network namespaces need Linux (this is ${process.platform})` };
  const uid = process.getuid?.();
  if (uid !== 0)
    return { reason: `not root (uid ${uid}): ip netns and veth links need CAP_SYS_ADMIN and CAP_NET_ADMIN` };
  const version = ip(["-V"]);
  if (version !== null) return { reason: version };
  removeStale();
  const n = freeSubnet();
  if (n === null) return { reason: "no free 10.77.<n>.0/24 subnet on this machine" };
  const tag = randomBytes(3).toString("hex");
  const name = `${PREFIX}-${process.pid}-${tag}`;
  const hostLink = `awh${tag}`;
  const nsLink = `awn${tag}`;
  const hostAddress = `10.77.${n}.1`;
  const address = `10.77.${n}.2`;

  let removed = false;
  const remove = (): void => {
    if (removed) return;
    removed = true;
    process.removeListener("exit", remove);
    // Deleting the namespace destroys its veth end and with it the pair; the link is deleted first anyway, in
    // case a process still holds the namespace open (then `netns del` only removes its name).
    if (ipOut(["-o", "link", "show", "dev", hostLink]) !== "") ip(["link", "del", hostLink]);
    if (
      ipOut(["netns", "list"])
        .split("\n")
        .some((l) => l.split(" ")[0] === name)
    )
      ip(["netns", "del", name]);
  };
  process.on("exit", remove);

  const steps: string[][] = [
    ["netns", "add", name],
    ["link", "add", hostLink, "type", "veth", "peer", "name", nsLink],
    ["link", "set", nsLink, "netns", name],
    ["addr", "add", `${hostAddress}/24`, "dev", hostLink],
    ["link", "set", hostLink, "up"],
    ["-n", name, "addr", "add", `${address}/24`, "dev", nsLink],
    ["-n", name, "link", "set", nsLink, "up"],
    ["-n", name, "link", "set", "lo", "up"],
  ];
  for (const step of steps) {
    const problem = ip(step);
    if (problem !== null) {
      remove();
      return { reason: problem };
    }
  }

  return {
    name,
    hostLink,
    hostAddress,
    address,
    remove,
    run(argv, options = {}) {
      return new Promise((resolve, reject) => {
        const child = spawn("ip", ["netns", "exec", name, ...argv], {
          env: options.env ?? process.env,
          ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
          stdio: ["ignore", "pipe", "pipe"],
        });
        let stdout = "";
        let stderr = "";
        let timedOut = false;
        child.stdout.on("data", (c: Buffer) => {
          stdout += c.toString();
        });
        child.stderr.on("data", (c: Buffer) => {
          stderr += c.toString();
        });
        // `ip netns exec` execs the command itself, so this pid is the command's.
        const timer = setTimeout(() => {
          timedOut = true;
          child.kill("SIGKILL");
        }, options.timeoutMs ?? 60_000);
        child.on("error", (e) => {
          clearTimeout(timer);
          reject(e);
        });
        child.on("close", (code, signal) => {
          clearTimeout(timer);
          resolve({ code, signal, stdout, stderr, timedOut });
        });
      });
    },
  };
}

/** What a TCP connection attempt from inside the namespace met. */
export type ProbeResult = "connected" | "refused" | "timeout" | `error ${string}`;

const PROBE = `
const net = require("node:net");
const [host, port, ms] = process.argv.slice(1);
const s = net.connect({ host, port: Number(port) });
const done = (r) => { console.log(r); s.destroy(); process.exit(0); };
s.setTimeout(Number(ms), () => done("timeout"));
s.on("connect", () => done("connected"));
s.on("error", (e) => done(e.code === "ECONNREFUSED" ? "refused" : "error " + e.code));
`;

/**
 * Tries a TCP connection from inside the namespace to host:port with this machine's Node, within `timeoutMs`
 * (default 2 s).
 */
export async function probeTcp(
  ns: NetNs,
  host: string,
  port: number,
  timeoutMs = 2000,
): Promise<ProbeResult> {
  const r = await ns.run([process.execPath, "-e", PROBE, host, String(port), String(timeoutMs)], {
    timeoutMs: timeoutMs + 10_000,
  });
  const out = r.stdout.trim();
  if (out === "connected" || out === "refused" || out === "timeout" || out.startsWith("error "))
    return out as ProbeResult;
  return `error probe ended ${r.code ?? r.signal}: ${r.stderr.trim().slice(0, 300)}`;
}
