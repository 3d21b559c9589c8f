import { BlockList, isIP } from "node:net";

/** Address ranges a provider host may point at only when the operator allows that host. */
const INTERNAL = new BlockList();
for (const [net, prefix] of [
  ["0.0.0.0", 8],
  ["10.0.0.0", 8],
  ["100.64.0.0", 10],
  ["127.0.0.0", 8],
  ["169.254.0.0", 16],
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15],
  ["224.0.0.0", 3],
] as const)
  INTERNAL.addSubnet(net, prefix, "ipv4");
for (const [net, prefix] of [
  ["::", 128],
  ["::1", 128],
  ["fc00::", 7],
  ["fe80::", 10],
  ["ff00::", 8],
] as const)
  INTERNAL.addSubnet(net, prefix, "ipv6");

/** True for loopback, private, link-local, CGNAT, multicast and unspecified addresses (IPv4-mapped too). */
export function isInternalAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return INTERNAL.check(address, "ipv4");
  if (family !== 6) return false;
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped?.[1] !== undefined) return INTERNAL.check(mapped[1], "ipv4");
  return INTERNAL.check(address, "ipv6");
}

/** Names that only make sense inside a network (never a public provider). */
function internalName(name: string): boolean {
  return (
    !name.includes(".") ||
    name === "localhost" ||
    name.endsWith(".localhost") ||
    name.endsWith(".local") ||
    name.endsWith(".internal")
  );
}

const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;

/** A provider host in canonical form. */
export interface ParsedHost {
  /** Lower-case host name or IP literal (IPv6 without brackets). */
  hostname: string;
  /** Explicit port, or null. */
  port: number | null;
  /** host[:port] as written back (IPv6 in brackets). */
  authority: string;
}

/**
 * Which hosts a stored git provider token may point the server at. A host is a DNS name with an optional port:
 * no scheme, path, query, fragment or user info. IP literals (in any spelling a URL parser accepts, e.g.
 * `2130706433`), internal names (`localhost`, single labels, `.local`, `.internal`) and names resolving to
 * loopback/private ranges are refused unless listed in the allow list. An allow-list entry is `host` (any port),
 * `host:port`, or either prefixed with `http://` to let the server speak plain HTTP to it (all other hosts get
 * HTTPS).
 */
export class ProviderHostPolicy {
  readonly #allowed = new Map<string, { anyPort: boolean; ports: Set<number>; http: boolean }>();

  constructor(allowed: readonly string[] = []) {
    for (const raw of allowed) {
      const entry = raw.trim();
      if (entry === "") continue;
      const http = /^http:\/\//i.test(entry);
      const parsed = parseHost(entry.replace(/^https?:\/\//i, "").replace(/\/+$/, ""));
      if (typeof parsed === "string")
        throw new Error(`invalid allowed git provider host ${JSON.stringify(raw)}`);
      const rule = this.#allowed.get(parsed.hostname) ?? { anyPort: false, ports: new Set<number>(), http };
      if (parsed.port === null) rule.anyPort = true;
      else rule.ports.add(parsed.port);
      rule.http ||= http;
      this.#allowed.set(parsed.hostname, rule);
    }
  }

  /** True when the operator listed this host (and port). */
  allows(host: ParsedHost): boolean {
    const rule = this.#allowed.get(host.hostname);
    return rule !== undefined && (rule.anyPort || (host.port !== null && rule.ports.has(host.port)));
  }

  /** The problem with a user-supplied host, or the host parsed. */
  check(host: string): ParsedHost | string {
    const parsed = parseHost(host.trim());
    if (typeof parsed === "string") return parsed;
    if (this.allows(parsed)) return parsed;
    if (isIP(parsed.hostname) !== 0)
      return "host must be a domain name: IP addresses are not allowed (see GIT_PROVIDER_ALLOWED_HOSTS)";
    if (internalName(parsed.hostname))
      return "host must be a public domain name (see GIT_PROVIDER_ALLOWED_HOSTS)";
    return parsed;
  }

  /** Whether a resolved address of this host may be contacted. */
  addressAllowed(host: ParsedHost, address: string): boolean {
    return this.allows(host) || !isInternalAddress(address);
  }

  /** "http" only for hosts allowed with an http:// entry. */
  scheme(host: ParsedHost): "http" | "https" {
    return this.allows(host) && this.#allowed.get(host.hostname)?.http === true ? "http" : "https";
  }
}

/** Parses `name[:port]` strictly; answers the problem as a message otherwise. */
export function parseHost(host: string): ParsedHost | string {
  if (host.length === 0 || host.length > 260) return "host must be a host name with an optional port";
  if (/[/?#@\\\s%]/.test(host) || /^[a-z][a-z0-9+.-]*:\/\//i.test(host))
    return "host must be a host name with an optional port: no scheme, path, query or user info";
  const m = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)(?::(\d{1,5}))?$/.exec(host);
  if (m === null) return "host must be a host name with an optional port";
  const port = m[2] === undefined ? null : Number(m[2]);
  if (port !== null && (port < 1 || port > 65535)) return "host port must be 1-65535";
  let hostname: string;
  try {
    // The URL parser gives the form a client would connect to (e.g. "0x7f.1" → "127.0.0.1").
    hostname = new URL(`https://${m[1]}/`).hostname;
  } catch {
    return "host must be a host name with an optional port";
  }
  const bare = hostname.startsWith("[") ? hostname.slice(1, -1) : hostname;
  if (isIP(bare) === 0) {
    const name = bare.endsWith(".") ? bare.slice(0, -1) : bare;
    const labels = name.split(".");
    if (!labels.every((l) => LABEL.test(l)) || /^\d+$/.test(labels.at(-1) ?? ""))
      return "host must be a host name with an optional port";
    hostname = name;
  } else {
    hostname = bare;
  }
  const shown = isIP(hostname) === 6 ? `[${hostname}]` : hostname;
  return { hostname, port, authority: port === null ? shown : `${shown}:${port}` };
}
