/**
 * Where a process sandbox's agent is reached (its AGENT_SERVER_DIRECT URL, the runtime handle's agentUrl): in a
 * network of its own (the process runtime's `network.mode` "isolated", as root with bubblewrap) at the sandbox's
 * address in the runtime's subnet on the agent-server's port 8000; else on the host's loopback at a port of its own.
 */

/** A process runtime's network as tests need it (ProcessRuntime.network, or what a server's start log says). */
export type SandboxNetworkMode = { mode: "isolated"; subnet: string } | { mode: "host" };

/** The port an agent listens on inside its own network. */
export const ISOLATED_AGENT_PORT = 8000;

/** The first two octets of a /16 such as 10.213.0.0/16. */
function prefixOf(subnet: string): string {
  const m = /^(\d{1,3})\.(\d{1,3})\.0\.0\/16$/.exec(subnet);
  if (!m) throw new Error(`not a /16: ${subnet}`);
  return `${m[1]}.${m[2]}.`;
}

/** The exact form of an agent's direct URL under `network`. */
export function directAgentUrl(network: SandboxNetworkMode): RegExp {
  return network.mode === "isolated"
    ? new RegExp(
        `^http://${prefixOf(network.subnet).replaceAll(".", "\\.")}\\d{1,3}\\.\\d{1,3}:${ISOLATED_AGENT_PORT}$`,
      )
    : /^http:\/\/127\.0\.0\.1:\d+$/;
}

/** The sandbox's gateway (the host as the sandbox reaches it) from its agent's address: the /30's first host. */
export function gatewayOf(agentUrl: string): string {
  const octets = new URL(agentUrl).hostname.split(".").map(Number);
  if (octets.length !== 4 || octets.some((n) => !Number.isInteger(n)))
    throw new Error(`not an IPv4 agent URL: ${agentUrl}`);
  return [octets[0], octets[1], octets[2], (octets[3] ?? 2) - 1].join(".");
}

/**
 * The process sandboxes' network as a server (CLI `serve`) says at start: its "networks of their own" line, else
 * the host's.
 */
export function networkFromServerLog(output: string): SandboxNetworkMode {
  const line = output.split("\n").find((l) => l.includes('"process sandboxes have networks of their own"'));
  if (line === undefined) return { mode: "host" };
  const { network } = JSON.parse(line) as { network: { mode: string; subnet: string } };
  if (network.mode !== "isolated") throw new Error(`unexpected network in the start log: ${line}`);
  return { mode: "isolated", subnet: network.subnet };
}

/** What a connection refused or dropped by the sandboxes' network rules gives a client (never "connected"). */
export const UNREACHABLE = /^(ECONNREFUSED|EHOSTUNREACH|ENETUNREACH|timeout)$/;

/**
 * A Node program (for `node -e '…'`, no single quotes in it) that connects to `host`:`port` and prints
 * "connected", the error's code, or "timeout" after `timeoutMs`.
 */
export function connectProbe(host: string, port: number | string, timeoutMs = 2000): string {
  return `const s = require("net").connect(${JSON.stringify(Number(port))}, ${JSON.stringify(host)}); s.setTimeout(${timeoutMs}, () => { console.log("timeout"); process.exit(); }); s.on("connect", () => { console.log("connected"); process.exit(); }).on("error", (e) => { console.log(e.code); process.exit(); });`;
}
