/**
 * Host loopback ports opened to sandboxes at their gateway, on both runtimes: a sandbox whose loopback is its own
 * (a process sandbox's network namespace, a container on a Docker bridge) reaches the host's 127.0.0.1:<port> at
 * any host address it can route to (its gateway), for the ports allowed only: the service's webhook port and the
 * model ports of SANDBOX_HOST_PORTS (an Ollama at localhost:11434).
 *
 * How: iptables `nat` chain AWS-SBX-PRE, jumped to from PREROUTING for each sandbox-facing interface, DNATs
 * `<host address>:<port>` to `127.0.0.1:<port>` (the interface needs `route_localnet`, set by forwardFrom), and
 * `filter` chain AWS-SBX-IN accepts it where that chain guards the interface (process sandboxes' veths). The chains
 * are made once per host and shared by every server on it; each rule carries its runtime's tag
 * (`aws:<pid>:<start time>:<instance>`): close() removes the runtime's own, and a new runtime removes those whose
 * process is gone.
 */
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";

export { isLoopbackHost, viaGateway } from "../../core/loopback-url.ts";

/** The chains shared by both runtimes' rules. */
export const HOST_CHAINS = { in: "AWS-SBX-IN", pre: "AWS-SBX-PRE" } as const;

/** A process's start time in clock ticks (field 22 of /proc/<pid>/stat), or -1 when it is gone. */
export function readProcStartTime(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]);
  } catch {
    return -1;
  }
}

/** One runtime's host loopback ports opened to its sandboxes. */
export class LoopbackPorts {
  readonly #iptablesPath: string;
  readonly #allowed = new Set<number>();
  readonly #tag =
    `aws:${process.pid}:${readProcStartTime(process.pid)}:${Math.random().toString(36).slice(2, 10)}`;

  constructor(iptablesPath: string) {
    this.#iptablesPath = iptablesPath;
    this.#chain("nat", HOST_CHAINS.pre, []);
    this.#dropTagged(false);
  }

  iptables(args: readonly string[]): void {
    execFileSync(this.#iptablesPath, ["-w", "5", ...args], { stdio: ["ignore", "ignore", "pipe"] });
  }

  /** True when `chain` of `table` holds `rule`. */
  has(table: string, chain: string, rule: readonly string[]): boolean {
    try {
      this.iptables(["-t", table, "-C", chain, ...rule]);
      return true;
    } catch {
      return false;
    }
  }

  /** Makes `name` with `rules` unless it exists (made by this or another server: its rules are in place). */
  #chain(table: string, name: string, rules: string[][]): void {
    try {
      this.iptables(["-t", table, "-N", name]);
    } catch {
      return;
    }
    for (const rule of rules) this.iptables(["-t", table, "-A", name, ...rule]);
  }

  /** Makes the chain `name` of `table` with `rules` unless another server made it. */
  chain(table: string, name: string, rules: string[][]): void {
    this.#chain(table, name, rules);
  }

  /** Inserts `rule` first in `parent` unless it is there. */
  jump(table: string, parent: string, rule: string[]): void {
    if (!this.has(table, parent, rule)) this.iptables(["-t", table, "-I", parent, "1", ...rule]);
  }

  /** Sandboxes behind the interface `iface` (a name or an iptables `prefix+`) get the allowed ports. */
  forwardFrom(iface: string): void {
    this.jump("nat", "PREROUTING", ["-i", iface, "-j", HOST_CHAINS.pre]);
    if (!iface.endsWith("+")) setRouteLocalnet(iface);
  }

  /** Lets sandboxes reach the host's loopback port `port` at their gateway (idempotent; cheap once done). */
  allowPort(port: number): void {
    if (this.#allowed.has(port) || !Number.isInteger(port) || port < 1 || port > 65535) return;
    const tag = ["-m", "comment", "--comment", this.#tag];
    const local = ["-m", "addrtype", "--dst-type", "LOCAL"];
    const dnat = ["-p", "tcp", "--dport", String(port), ...local, ...tag, "-j", "DNAT"];
    const to = ["--to-destination", `127.0.0.1:${port}`];
    if (!this.has("nat", HOST_CHAINS.pre, [...dnat, ...to]))
      this.iptables(["-t", "nat", "-A", HOST_CHAINS.pre, ...dnat, ...to]);
    if (this.#guarded) {
      const accept = ["-d", "127.0.0.1", "-p", "tcp", "--dport", String(port), ...tag, "-j", "ACCEPT"];
      if (!this.has("filter", HOST_CHAINS.in, accept))
        this.iptables(["-t", "filter", "-I", HOST_CHAINS.in, "2", ...accept]);
    }
    this.#allowed.add(port);
  }

  /**
   * Lets sandboxes whose input the host guards (AWS-SBX-IN) reach `address:port` of the host itself (a service
   * listening on an address other than loopback, such as the webhook URL of a server on its link address).
   */
  allowAddress(address: string, port: number): void {
    const key = `${address}:${port}`;
    if (this.#addresses.has(key) || !this.#guarded) return;
    const rule = [
      "-d",
      address,
      "-p",
      "tcp",
      "--dport",
      String(port),
      "-m",
      "comment",
      "--comment",
      this.#tag,
    ];
    if (!this.has("filter", HOST_CHAINS.in, [...rule, "-j", "ACCEPT"]))
      this.iptables(["-t", "filter", "-I", HOST_CHAINS.in, "2", ...rule, "-j", "ACCEPT"]);
    this.#addresses.add(key);
  }

  readonly #addresses = new Set<string>();
  #guarded = false;
  /** The filter chain AWS-SBX-IN guards some interfaces (it exists): allowed ports are accepted there too. */
  guardInput(): void {
    this.#guarded = true;
    for (const port of [...this.#allowed]) {
      this.#allowed.delete(port);
      this.allowPort(port);
    }
  }

  /** The ports allowed, ascending. */
  get ports(): number[] {
    return [...this.#allowed].sort((a, b) => a - b);
  }

  /** Removes the rules of runtimes whose process is gone (or, with `own`, this runtime's). */
  #dropTagged(own: boolean): void {
    for (const [table, chain] of [
      ["nat", HOST_CHAINS.pre],
      ["filter", HOST_CHAINS.in],
    ] as const) {
      let listing = "";
      try {
        listing = execFileSync(this.#iptablesPath, ["-w", "5", "-t", table, "-S", chain], {
          encoding: "utf8",
          stdio: ["ignore", "pipe", "ignore"],
        });
      } catch {
        continue;
      }
      for (const line of listing.split("\n")) {
        const m = /--comment "?(aws:(\d+):(\d+):\w+)"?/.exec(line);
        if (!m || !line.startsWith(`-A ${chain} `)) continue;
        const [, tag, pid, ticks] = m;
        const dead = readProcStartTime(Number(pid)) !== Number(ticks);
        if (own ? tag !== this.#tag : !dead) continue;
        const rule = line.slice(`-A ${chain} `.length).replace(/"/g, "").split(" ");
        try {
          this.iptables(["-t", table, "-D", chain, ...rule]);
        } catch {
          // removed meanwhile by another server
        }
      }
    }
  }

  /** Takes back the ports this runtime opened. */
  close(): void {
    this.#dropTagged(true);
    this.#allowed.clear();
    this.#addresses.clear();
  }
}

/** Lets the interface route packets DNATed to 127.0.0.1 (off elsewhere: only rules above send them there). */
export function setRouteLocalnet(iface: string): void {
  writeFileSync(`/proc/sys/net/ipv4/conf/${iface}/route_localnet`, "1");
}
