/**
 * A network of its own for every isolated process sandbox, as Docker gives each container: a network namespace
 * reached from the host over a veth pair, with NAT to the outside.
 *
 * - Each sandbox folder leases an index n: the namespace `awsn<n>` holds `eth0` at <subnet>+4n+2/30 with a default
 *   route to the host's end `awsh<n>` at <subnet>+4n+1 (the sandbox's host gateway). `ip netns add` is the lease:
 *   it fails when any server on this host holds that index, so two servers never share one. The lease is recorded
 *   in `<workspace root>/.net/<folder>`, removed with the namespace when the workspace is removed.
 * - The agent listens inside its namespace (HOST=0.0.0.0, PORT 8000): the service reaches it at the sandbox's
 *   address, and there is no port of it on the host's loopback.
 * - Host rules (iptables, chains AWS-SBX-*, set up once per host): nothing enters a sandbox but answers and the
 *   host's own connections; sandboxes never reach each other or Docker's bridges; their traffic to the host is
 *   refused (a TCP reset, so a client fails at once) except the allowed host ports, which the gateway forwards to
 *   the host's loopback (DNAT to 127.0.0.1, with route_localnet on the host's veth end): the service's webhook
 *   port, and the model ports of SANDBOX_HOST_PORTS (an Ollama at localhost:11434). What leaves for elsewhere is
 *   masqueraded (git clone, package installs, a remote model).
 * - A sandbox keeps its loopback URLs: the launcher rewrites the webhook URL it hands the agent to the gateway, and
 *   the built-in agent does the same for a model base URL on loopback (SANDBOX_HOST_GATEWAY).
 * - DNS: a host resolver on loopback (systemd-resolved's 127.0.0.53) is reached through the virtual address
 *   <subnet>+65534, which sandboxes get in a resolv.conf of their own; other resolvers are reached as the outside.
 *
 * Everything is done by iproute2's `ip` (two batches per sandbox: host side, then namespace side) and iptables;
 * both run as root only, so the network is used when the server runs as root with bubblewrap (see probe).
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { HOST_CHAINS, LoopbackPorts, setRouteLocalnet } from "../host-loopback.ts";
import { rootTools, runTool } from "../host-tools.ts";

export { isLoopbackHost, viaGateway } from "../host-loopback.ts";

/** `SANDBOX_NETWORK`: isolated (required), host (shared with the host, explicitly), auto (isolated when possible). */
export type NetworkSetting = "auto" | "isolated" | "host";

/** The port every agent listens on inside its namespace (the agent-server's default). */
export const SANDBOX_AGENT_PORT = 8000;

/** One sandbox folder's network. */
export interface NetLease {
  index: number;
  /** The namespace (a file in /run/netns). */
  name: string;
  /** The host's end of the veth pair. */
  hostIf: string;
  /** The sandbox's address, where the service reaches its agent. */
  address: string;
  /** The host's address on the pair: the sandbox's host gateway. */
  gateway: string;
}

export interface SandboxNetworkOptions {
  /** The workspace root: leases are recorded in `<root>/.net/`. */
  root: string;
  /** A /16 of private addresses (default 10.213.0.0/16). */
  subnet?: string;
  /** Host loopback ports sandboxes reach through their gateway (model servers); more are added by allowPort. */
  hostPorts?: readonly number[];
  /** Where ip, iptables and nsenter are looked up. */
  searchPath: string;
  log: (msg: string, data?: object) => void;
}

interface Tools {
  ip: string;
  iptables: string;
  nsenter: string;
}

const NAME = "awsn";
const HOST_IF = "awsh";
/** How many /30 pairs a /16 holds, less the last block (the DNS address). */
const MAX_INDEX = 16382;
/** Names of host chains, and the interfaces they match. */
const CHAIN = { ...HOST_CHAINS, fwd: "AWS-SBX-FWD", post: "AWS-SBX-POST" } as const;

/** The tools a sandbox network is made with, or why the network cannot be isolated here. */
export function networkTools(searchPath: string, asRoot: boolean): Tools | string {
  if (!asRoot) return "the server does not run as root (a namespace's network needs root here)";
  return rootTools(["ip", "iptables", "nsenter"] as const, searchPath, "the server does not run as root");
}

function ipv4(base: number, offset: number): string {
  const n = (base + offset) >>> 0;
  return `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
}

function parseSubnet(subnet: string): number {
  const m = /^(\d{1,3})\.(\d{1,3})\.0\.0\/16$/.exec(subnet);
  if (!m)
    throw new Error(`SANDBOX_SUBNET must be a /16 such as 10.213.0.0/16, got ${JSON.stringify(subnet)}`);
  const [a, b] = [Number(m[1]), Number(m[2])];
  if (a > 255 || b > 255) throw new Error(`SANDBOX_SUBNET ${subnet} is not an address`);
  return ((a << 24) | (b << 16)) >>> 0;
}

/** The loopback nameserver of the host's resolv.conf, if its first one is on loopback. */
function loopbackResolver(): string | null {
  try {
    const first = /^\s*nameserver\s+(\S+)/m.exec(readFileSync("/etc/resolv.conf", "utf8"));
    return first?.[1] && /^127\./.test(first[1]) ? first[1] : null;
  } catch {
    return null;
  }
}

/** The networks of one process runtime's sandboxes. */
export class SandboxNetwork {
  readonly #o: SandboxNetworkOptions;
  readonly #tools: Tools;
  readonly #base: number;
  readonly #dir: string;
  readonly #ports: LoopbackPorts;
  /** The host's loopback resolver and the file sandboxes get as /etc/resolv.conf (null: the host's own works). */
  readonly resolvConf: string | null;
  readonly #resolver: string | null;

  private constructor(options: SandboxNetworkOptions, tools: Tools) {
    this.#o = options;
    this.#tools = tools;
    this.#base = parseSubnet(options.subnet ?? "10.213.0.0/16");
    this.#dir = join(options.root, ".net");
    this.#resolver = loopbackResolver();
    this.resolvConf = this.#resolver === null ? null : join(this.#dir, "resolv.conf");
    this.#ports = new LoopbackPorts(tools.iptables);
  }

  /**
   * The network of a runtime whose sandboxes run under bubblewrap, set up on the host (its rules, forwarding);
   * a string says why it cannot be.
   */
  static create(options: SandboxNetworkOptions, asRoot: boolean): SandboxNetwork | string {
    const tools = networkTools(options.searchPath, asRoot);
    if (typeof tools === "string") return tools;
    let network: SandboxNetwork;
    try {
      network = new SandboxNetwork(options, tools);
      network.#setUpHost();
    } catch (e: unknown) {
      return e instanceof Error ? (e.message.split("\n")[0] ?? String(e)) : String(e);
    }
    return network;
  }

  get subnet(): string {
    return `${ipv4(this.#base, 0)}/16`;
  }

  /** The address of the DNS forwarder sandboxes use when the host's resolver is on loopback. */
  get dnsAddress(): string {
    return ipv4(this.#base, 65534);
  }

  #iptables(args: readonly string[]): void {
    this.#ports.iptables(args);
  }

  #has(table: string, chain: string, rule: readonly string[]): boolean {
    return this.#ports.has(table, chain, rule);
  }

  /** The host's side: forwarding on, the chains and their jumps (kept when another server made them). */
  #setUpHost(): void {
    if (readFileSync("/proc/sys/net/ipv4/ip_forward", "utf8").trim() !== "1") {
      writeFileSync("/proc/sys/net/ipv4/ip_forward", "1");
      this.#o.log("sandbox network: IPv4 forwarding turned on (net.ipv4.ip_forward=1)");
    }
    const iface = `${HOST_IF}+`;
    const chain = (table: string, name: string, rules: string[][]): void =>
      this.#ports.chain(table, name, rules);
    chain("filter", CHAIN.in, [
      ["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
      ["-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"],
      ["-j", "REJECT"],
    ]);
    chain("filter", CHAIN.fwd, [
      ["-i", iface, "-o", iface, "-j", "REJECT"],
      ["-o", iface, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
      ["-o", iface, "-j", "DROP"],
      ["-i", iface, "-o", "docker0", "-j", "REJECT"],
      ["-i", iface, "-o", "br-+", "-j", "REJECT"],
      ["-i", iface, "-j", "ACCEPT"],
    ]);
    chain("nat", CHAIN.post, [["-s", this.subnet, "!", "-o", iface, "-j", "MASQUERADE"]]);
    const jump = (table: string, parent: string, rule: string[]): void =>
      this.#ports.jump(table, parent, rule);
    jump("filter", "INPUT", ["-i", iface, "-j", CHAIN.in]);
    jump("filter", "FORWARD", ["-j", CHAIN.fwd]);
    this.#ports.forwardFrom(iface);
    this.#ports.guardInput();
    jump("nat", "POSTROUTING", ["-j", CHAIN.post]);
    mkdirSync(this.#dir, { recursive: true, mode: 0o700 });
    if (this.#resolver !== null && this.resolvConf !== null) {
      writeFileSync(this.resolvConf, `nameserver ${this.dnsAddress}\n`, { mode: 0o644 });
      for (const proto of ["udp", "tcp"]) {
        const dnat = ["-d", this.dnsAddress, "-p", proto, "--dport", "53", "-j", "DNAT"];
        const to = ["--to-destination", `${this.#resolver}:53`];
        if (!this.#has("nat", CHAIN.pre, [...dnat, ...to]))
          this.#iptables(["-t", "nat", "-I", CHAIN.pre, "1", ...dnat, ...to]);
        const accept = ["-d", this.#resolver, "-p", proto, "--dport", "53", "-j", "ACCEPT"];
        if (!this.#has("filter", CHAIN.in, accept))
          this.#iptables(["-t", "filter", "-I", CHAIN.in, "2", ...accept]);
      }
    }
    for (const port of this.#o.hostPorts ?? []) this.allowPort(port);
  }

  /** Lets sandboxes reach the host's loopback port `port` at their gateway (see host-loopback.ts). */
  allowPort(port: number): void {
    this.#ports.allowPort(port);
  }

  /** Lets sandboxes reach the host's own `address:port` (a service listening beyond loopback). */
  allowAddress(address: string, port: number): void {
    this.#ports.allowAddress(address, port);
  }

  /** Takes back the host ports this runtime let sandboxes reach. */
  close(): void {
    this.#ports.close();
  }

  /** The ports sandboxes reach on the host (for the start log). */
  get allowedPorts(): number[] {
    return this.#ports.ports;
  }

  #lease(index: number): NetLease {
    return {
      index,
      name: `${NAME}${index}`,
      hostIf: `${HOST_IF}${index}`,
      address: ipv4(this.#base, index * 4 + 2),
      gateway: ipv4(this.#base, index * 4 + 1),
    };
  }

  /** The lease recorded for `folder`, if its namespace still exists. */
  recorded(folder: string): NetLease | null {
    try {
      const index = Number(readFileSync(join(this.#dir, folder), "utf8"));
      if (!Number.isInteger(index) || index < 0 || index > MAX_INDEX) return null;
      const lease = this.#lease(index);
      return existsSync(`/run/netns/${lease.name}`) ? lease : null;
    } catch {
      return null;
    }
  }

  /** The network of the workspace folder `folder`: the one it has, else a new one (two `ip` batches). */
  async lease(folder: string): Promise<NetLease> {
    const known = this.recorded(folder);
    if (known !== null) return known;
    const start = Math.floor(Math.random() * MAX_INDEX);
    let failures = 0;
    for (let tries = 0; tries < 256; tries++) {
      const lease = this.#lease((start + tries) % MAX_INDEX);
      if (existsSync(`/run/netns/${lease.name}`)) continue;
      try {
        // The first line fails when another server took the index meanwhile: nothing is done then.
        await runTool(
          this.#tools.ip,
          ["-batch", "-"],
          [
            `netns add ${lease.name}`,
            `link add ${lease.hostIf} type veth peer name eth0 netns ${lease.name}`,
            `addr add ${lease.gateway}/30 dev ${lease.hostIf}`,
            `link set ${lease.hostIf} up`,
            "",
          ].join("\n"),
        );
      } catch (e: unknown) {
        if (/-:1\b/.test(String(e))) continue;
        // Its namespace was made but not the rest (a veth of that name left behind): removed, next index.
        await this.#drop(lease);
        if (++failures >= 3) throw e;
        continue;
      }
      try {
        setRouteLocalnet(lease.hostIf);
        await runTool(
          this.#tools.ip,
          ["-n", lease.name, "-batch", "-"],
          [
            `addr add ${lease.address}/30 dev eth0`,
            "link set lo up",
            "link set eth0 up",
            `route add default via ${lease.gateway}`,
            "",
          ].join("\n"),
        );
        writeFileSync(join(this.#dir, folder), String(lease.index), { mode: 0o600 });
        register(lease, join(this.#dir, folder));
      } catch (e: unknown) {
        await this.#drop(lease);
        throw e;
      }
      return lease;
    }
    throw new Error("no free sandbox network: every index of SANDBOX_SUBNET is in use");
  }

  async #drop(lease: NetLease): Promise<void> {
    // Deleting the namespace destroys its veth pair with it.
    await runTool(this.#tools.ip, ["netns", "del", lease.name]).catch(() => {});
    rmSync(join(REGISTRY, lease.name), { force: true });
  }

  /** Removes the network of `folder` (its namespace and veth pair) and its record. */
  async release(folder: string): Promise<void> {
    const lease = this.recorded(folder);
    rmSync(join(this.#dir, folder), { force: true });
    if (lease !== null) await this.#drop(lease);
  }

  /**
   * Removes the networks whose workspace folder is gone (left by a server that died while removing one), and, on the
   * whole host, those whose lease record is gone (their workspace root deleted with sandboxes still in it).
   */
  async sweep(folders: ReadonlySet<string>): Promise<number> {
    let removed = 0;
    for (const folder of listDir(this.#dir)) {
      if (folder === "resolv.conf" || folders.has(folder)) continue;
      await this.release(folder);
      removed++;
    }
    for (const name of listDir(REGISTRY)) {
      const index = Number(name.slice(NAME.length));
      if (!name.startsWith(NAME) || !Number.isInteger(index)) continue;
      let record = "";
      try {
        record = readFileSync(join(REGISTRY, name), "utf8");
      } catch {
        continue;
      }
      if (readOr(record, "") === String(index)) continue;
      await this.#drop(this.#lease(index));
      removed++;
    }
    return removed;
  }

  /** The argv prefix that runs a command in the namespace of `lease`. */
  enter(lease: NetLease): string[] {
    return [this.#tools.nsenter, `--net=/run/netns/${lease.name}`, "--"];
  }
}

/**
 * Host-wide: for each namespace leased, the path of its lease record (`/run` is gone at reboot, as namespaces are),
 * so that any server's sweep finds the namespaces of a workspace root that was deleted with its sandboxes.
 */
const REGISTRY = "/run/agent-workspace/netns";

function register(lease: NetLease, record: string): void {
  try {
    mkdirSync(REGISTRY, { recursive: true, mode: 0o700 });
    writeFileSync(join(REGISTRY, lease.name), record, { mode: 0o600 });
  } catch {
    // Only the host-wide sweep misses it: the root's own sweep still finds it.
  }
}

/** The text of a file, or `fallback` when it cannot be read. */
function readOr(path: string, fallback: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return fallback;
  }
}

function listDir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}
