/**
 * Containers on a bridge reach the host at host.docker.internal, where the host's loopback services are not: the
 * allowed host loopback ports (SANDBOX_HOST_PORTS, and those of URLs the service hands sandboxes) are forwarded
 * there (host-loopback.ts), set up once, at the first start that needs them. Needs root, iptables and a local
 * engine; elsewhere only services listening beyond loopback are reached at the gateway.
 */
import type Docker from "dockerode";
import { isLoopbackHost, LoopbackPorts } from "../host-loopback.ts";
import { rootTools } from "../host-tools.ts";

const DEFAULT_SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

export interface GatewayPortsOptions {
  docker: Docker;
  /** The containers' network: only a bridge ("host" and "none" are not) has a gateway to forward to. */
  network: string;
  /** Ports allowed from the start. */
  hostPorts?: readonly number[] | undefined;
  /** Where iptables is looked up (default: the standard system folders). */
  searchPath?: string | undefined;
  log: (msg: string, data?: object) => void;
}

/** The host loopback ports a Docker runtime's containers reach at the host gateway (see the file's comment). */
export class GatewayPorts {
  readonly #o: GatewayPortsOptions;
  readonly #bridged: boolean;
  readonly #wanted: Set<number>;
  #forwarding: Promise<LoopbackPorts | null> | null = null;

  constructor(options: GatewayPortsOptions) {
    this.#o = options;
    this.#bridged = options.network !== "host" && options.network !== "none";
    this.#wanted = new Set(options.hostPorts ?? []);
  }

  /** Lets containers reach the port of a loopback `url` at the gateway (nothing for other URLs or networks). */
  reach(url: string): void {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      return;
    }
    if (!isLoopbackHost(parsed.hostname) || !this.#bridged) return;
    const port = Number(parsed.port || (parsed.protocol === "https:" ? 443 : 80));
    this.#wanted.add(port);
    void this.#forward().then((ports) => ports?.allowPort(port));
  }

  /** Before a container starts: the forwarding is set up when ports are wanted. */
  async ready(): Promise<void> {
    if (this.#bridged && this.#wanted.size > 0) await this.#forward();
  }

  /** Removes the forwarding. */
  async close(): Promise<void> {
    (await this.#forwarding)?.close();
  }

  #forward(): Promise<LoopbackPorts | null> {
    this.#forwarding ??= this.#setUp();
    return this.#forwarding;
  }

  async #setUp(): Promise<LoopbackPorts | null> {
    const { docker, network, log } = this.#o;
    const tools = rootTools(["iptables"], this.#o.searchPath ?? DEFAULT_SEARCH_PATH, "not root");
    const local = typeof (docker.modem as { socketPath?: unknown }).socketPath === "string";
    if (!this.#bridged || typeof tools === "string" || !local) {
      if (this.#wanted.size > 0)
        log("host loopback ports not forwarded to containers: that needs root, iptables and a local engine", {
          ports: [...this.#wanted],
        });
      return null;
    }
    try {
      const info = (await docker.getNetwork(network).inspect()) as {
        Id: string;
        Driver?: string;
        Options?: Record<string, string>;
      };
      const iface =
        info.Options?.["com.docker.network.bridge.name"] ??
        (info.Driver === "bridge" ? `br-${info.Id.slice(0, 12)}` : null);
      if (iface === null) return null;
      const ports = new LoopbackPorts(tools.iptables);
      ports.forwardFrom(iface);
      for (const port of this.#wanted) ports.allowPort(port);
      log("host loopback ports forwarded to containers at the host gateway", {
        bridge: iface,
        ports: ports.ports,
      });
      return ports;
    } catch (e: unknown) {
      log("host loopback ports not forwarded to containers", { error: String(e) });
      return null;
    }
  }
}
