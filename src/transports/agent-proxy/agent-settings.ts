import type { AgentProxyLimits } from "./agent-http.ts";
import type { AgentSocketLimits } from "./agent-sockets.ts";

/** Every limit of the agent proxy, HTTP and websocket (the AGENT_PROXY_* and AGENT_SOCKET* settings). */
export type AgentProxySettings = AgentProxyLimits & AgentSocketLimits;

/** The proxy's limits when nothing sets them (the defaults the configuration documents). */
export const DEFAULT_AGENT_PROXY: Readonly<AgentProxySettings> = Object.freeze({
  maxBodyBytes: 64 * 1024 * 1024,
  timeoutMs: 120_000,
  callsPerSecond: 100,
  maxMessageBytes: 1024 * 1024,
  messagesPerSecond: 20,
  socketsPerUser: 32,
  handshakeTimeoutMs: 10_000,
  checkMs: 2_000,
});
