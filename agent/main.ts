/**
 * Entry point of the built-in sandbox agent: `node agent/main.ts [--port N]`.
 *
 * Environment: PORT (or `--port N`; default 8000), HOST (default 127.0.0.1; 0.0.0.0 in a container with its own
 * network), LISTEN_FD (an inherited listening socket to serve on instead of binding HOST:PORT), SESSION_API_KEY or OH_SESSION_API_KEYS_0 (required), WORKSPACE_DIR (default: the current directory),
 * OH_WEBHOOKS_0_BASE_URL (report conversations and events there) with OH_WEBHOOKS_0_EVENT_BUFFER_SIZE,
 * OH_WEBHOOKS_0_FLUSH_DELAY and OH_WEBHOOKS_0_RETRY_DELAY (seconds) and OH_WEBHOOKS_0_NUM_RETRIES,
 * OH_ALLOW_CORS_ORIGINS_0, _1, … (browser origins allowed to call it; default any localhost/127.0.0.1 origin),
 * SANDBOX_AGENT_MAX_CONNECTIONS (default 256), SANDBOX_AGENT_HEADERS_TIMEOUT_MS (10000) and
 * SANDBOX_AGENT_IDLE_TIMEOUT_MS (30000): what one client may hold of its server (ConnectionLimits in connection-limits.ts).
 * Exits 0 on SIGTERM/SIGINT after closing the listener and killing running commands; 2 on bad configuration.
 *
 * SANDBOX_AGENT_CLAIM=stdin starts a warm agent (see src/adapters/runtimes/process/warm-agents.ts): it loads its modules, then
 * waits for one line on stdin, the JSON object `{"env": {...}, "cwd": "..."}`, which becomes its whole environment
 * and working directory before it reads the configuration above and serves. It exits 0 when stdin ends without one.
 * SANDBOX_AGENT_CLAIM=now reads that line at once (the process runtime's cold start: the session key then never is
 * in this process's /proc/<pid>/environ, which the commands it runs can read).
 */
// First: the Node.js version check (an image or a host with an old Node gets one clear line and exit 1). A Node
// too old for .ts files fails before this module runs: start the agent as `node --import <this folder>/
// require-node.mjs main.ts` there (the Docker test image's command does).
import "./shared/require-node.mjs";
import { mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { createAgentServer } from "./agent-server.ts";
import type { ConnectionLimits } from "./connection-limits.ts";
import type { WebhookOptions } from "./webhook.ts";

// SIGUSR1 would open Node's inspector on the loopback, where other sandboxes reach it: a listener of its own keeps
// it closed (the process runtime starts the agent with --disable-sigusr1 too, which also covers Node's start).
process.on("SIGUSR1", () => {});

// V8's young generation grows (up to two 16 MiB semi-spaces) under the allocation of a conversation's turns and never
// gives the pages back: kept at its start size (1 MiB semi-spaces), the agent's private memory after 200 turns is
// lower (45–60 MiB against 49–63 MiB in the benchmark; docs/builtin-agent.md, Performance); a scavenge of so small
// a space takes well under a millisecond.
// The factor is read each time the space would grow, so setting it now takes effect.
process.getBuiltinModule("node:v8").setFlagsFromString("--semi-space-growth-factor=1");

// Not a static import: the ESM loader would read every export of node:module, ~50 ms of the agent's start (see
// agent-server.ts).
const { flushCompileCache } = process.getBuiltinModule("node:module");

/** Variables the agent reads and does not hand on to the commands it runs. */
const PRIVATE_ENV = new Set([
  "SESSION_API_KEY",
  "OH_SESSION_API_KEYS_0",
  "NODE_COMPILE_CACHE",
  "LISTEN_FD",
  "SANDBOX_AGENT_CLAIM",
]);
const SHUTDOWN_GRACE_MS = 2000;

function fail(message: string): never {
  process.stderr.write(`sandbox-agent: ${message}\n`);
  process.exit(2);
}

function portArgument(argv: string[]): string | undefined {
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--port") return argv[i + 1];
    if (arg?.startsWith("--port=")) return arg.slice("--port=".length);
  }
  return undefined;
}

/**
 * A warm agent's claim: reads stdin up to its first newline and makes the object on that line this process's
 * environment and working directory. Exits 0 when stdin ends empty (the server went away before claiming it), 2 on
 * a malformed claim.
 */
async function applyClaim(): Promise<void> {
  let text = "";
  process.stdin.setEncoding("utf8");
  // The claim is one line: act on its newline, not on the end of stdin (which reaches here tens of ms later).
  for await (const chunk of process.stdin) {
    text += chunk;
    if (text.includes("\n")) break;
  }
  process.stdin.destroy();
  useClaim(text);
}

/**
 * {@link applyClaim} for a cold start, whose claim is written as the process starts: read from the descriptor at
 * once, without setting up the stdin stream (~10 ms of the start). Falls back to the stream on a non-blocking stdin.
 */
async function applyClaimNow(): Promise<void> {
  const { readSync, closeSync } = process.getBuiltinModule("node:fs");
  const chunks: Buffer[] = [];
  const buffer = Buffer.alloc(64 * 1024);
  for (;;) {
    let n: number;
    try {
      n = readSync(0, buffer, 0, buffer.length, null);
    } catch (e: unknown) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "EINTR") continue;
      if (code === "EAGAIN" && chunks.length === 0) return applyClaim();
      throw e;
    }
    if (n === 0) break;
    chunks.push(Buffer.from(buffer.subarray(0, n)));
    if (buffer.subarray(0, n).includes(10)) break;
  }
  closeSync(0);
  useClaim(Buffer.concat(chunks).toString("utf8"));
}

/** Makes the claim's first line this process's whole environment and working directory (exit 0 when empty). */
function useClaim(text: string): void {
  if (text.trim() === "") process.exit(0);
  let claim: unknown;
  try {
    claim = JSON.parse(text.split("\n", 1)[0] ?? "");
  } catch {
    fail("the claim on stdin is not JSON");
  }
  const { env, cwd } = (claim ?? {}) as { env?: unknown; cwd?: unknown };
  if (typeof cwd !== "string" || typeof env !== "object" || env === null) fail("malformed claim on stdin");
  const entries = Object.entries(env);
  if (entries.some(([, value]) => typeof value !== "string")) fail("claim env values must be strings");
  for (const name of Object.keys(process.env)) delete process.env[name];
  for (const [name, value] of entries) process.env[name] = value as string;
  process.chdir(cwd);
}
/**
 * Answers one health request through a throwaway server on an in-memory connection (no port), so that a warm
 * agent's first real request runs code that has run before.
 */
async function warmUp(): Promise<void> {
  const { duplexPair } = process.getBuiltinModule("node:stream");
  const server = createAgentServer({
    sessionApiKey: `warm-up-${Math.random()}`,
    workspaceDir: process.cwd(),
  });
  const [inside, outside] = duplexPair();
  server.emit("connection", inside);
  outside.resume();
  const done = new Promise<void>((ok) => outside.once("end", ok).once("close", ok).once("error", ok));
  outside.write("GET /alive HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n");
  // Only an optimisation: it never holds the claim up for long.
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([done, new Promise<void>((ok) => (timer = setTimeout(ok, 1000)))]);
  clearTimeout(timer);
  server.close();
}
/**
 * A warm agent without an inherited socket (in a network of its own, where the runtime cannot make one for it)
 * binds its port before its claim, holding connections paused until it serves: the runtime's health probes made
 * right after the claim wait for the server instead of being refused and retried.
 */
let early: { server: import("node:net").Server; pending: import("node:net").Socket[] } | undefined;
if (process.env.SANDBOX_AGENT_CLAIM === "stdin" && process.env.LISTEN_FD === undefined) {
  const { createServer: createNetServer } = process.getBuiltinModule("node:net");
  const held = {
    server: createNetServer({ pauseOnConnect: true }),
    pending: [] as import("node:net").Socket[],
  };
  held.server.on("connection", (socket) => {
    // Nobody but the runtime calls an agent not claimed yet: a few held connections are plenty.
    if (held.pending.length >= 64) socket.destroy();
    else held.pending.push(socket);
  });
  const bound = await new Promise<boolean>((ok) => {
    held.server.once("error", () => ok(false));
    held.server.listen(Number(process.env.PORT || 8000), process.env.HOST || "127.0.0.1", () => ok(true));
  });
  if (bound) early = held;
}
if (process.env.SANDBOX_AGENT_CLAIM === "stdin") {
  await warmUp();
  await applyClaim();
} else if (process.env.SANDBOX_AGENT_CLAIM === "now") {
  // A cold start of the process runtime: the environment with the session key comes on stdin at once, so that
  // the key is not in this process's /proc/<pid>/environ (readable by the commands it runs, which share its uid).
  await applyClaimNow();
}

const rawPort = portArgument(process.argv.slice(2)) ?? process.env.PORT ?? "8000";
const port = Number(rawPort);
if (!Number.isInteger(port) || port < 0 || port > 65535) fail(`invalid port ${JSON.stringify(rawPort)}`);
const host = process.env.HOST || "127.0.0.1";
const sessionApiKey = process.env.SESSION_API_KEY || process.env.OH_SESSION_API_KEYS_0;
if (!sessionApiKey) fail("SESSION_API_KEY (or OH_SESSION_API_KEYS_0) is required");
const workspaceDir = resolve(process.env.WORKSPACE_DIR || process.cwd());
mkdirSync(workspaceDir, { recursive: true });

const commandEnv: Record<string, string> = {};
for (const [name, value] of Object.entries(process.env)) {
  if (value !== undefined && !PRIVATE_ENV.has(name)) commandEnv[name] = value;
}

/** A number from the environment (seconds → ms with `scale`), else undefined; exits 2 when malformed. */
function envNumber(name: string, scale = 1): number | undefined {
  const raw = process.env[name];
  if (raw === undefined || raw === "") return undefined;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < 0) fail(`${name} must be a non-negative number, got ${JSON.stringify(raw)}`);
  return n * scale;
}
/** A whole number in [min, max] from the environment, else undefined; exits 2 when malformed or out of range. */
function envInt(name: string, min: number, max: number): number | undefined {
  const n = envNumber(name);
  if (n !== undefined && !(Number.isInteger(n) && n >= min && n <= max))
    fail(`${name} must be a whole number from ${min} to ${max}, got ${JSON.stringify(process.env[name])}`);
  return n;
}
// SANDBOX_AGENT_MAX_CONNECTIONS, _HEADERS_TIMEOUT_MS, _IDLE_TIMEOUT_MS: see ConnectionLimits in connection-limits.ts.
const connections: Partial<ConnectionLimits> = {
  ...defined("maxConnections", envInt("SANDBOX_AGENT_MAX_CONNECTIONS", 1, 1_000_000)),
  ...defined("headersTimeoutMs", envInt("SANDBOX_AGENT_HEADERS_TIMEOUT_MS", 100, 300_000)),
  ...defined("idleTimeoutMs", envInt("SANDBOX_AGENT_IDLE_TIMEOUT_MS", 100, 3_600_000)),
};

const webhookBase = process.env.OH_WEBHOOKS_0_BASE_URL;
const webhook: WebhookOptions | undefined = webhookBase
  ? {
      baseUrl: webhookBase,
      ...defined("bufferSize", envNumber("OH_WEBHOOKS_0_EVENT_BUFFER_SIZE")),
      ...defined("flushDelayMs", envNumber("OH_WEBHOOKS_0_FLUSH_DELAY", 1000)),
      ...defined("retries", envNumber("OH_WEBHOOKS_0_NUM_RETRIES")),
      ...defined("retryDelayMs", envNumber("OH_WEBHOOKS_0_RETRY_DELAY", 1000)),
    }
  : undefined;
function defined<K extends string>(key: K, value: number | undefined): Partial<Record<K, number>> {
  return value === undefined ? {} : ({ [key]: value } as Record<K, number>);
}

// OH_ALLOW_CORS_ORIGINS_0, _1, …: the browser origins allowed besides localhost (as the reference reads its list).
const corsOrigins: string[] = [];
for (let i = 0; process.env[`OH_ALLOW_CORS_ORIGINS_${i}`]; i++)
  corsOrigins.push(process.env[`OH_ALLOW_CORS_ORIGINS_${i}`] as string);

// Conversations are saved in the sandbox's home (the process runtime's workspace folder, the container's /workspace)
// and taken back by the next process of this agent on the same workspace.
const stateDir = join(resolve(process.env.HOME || workspaceDir), ".openhands", "conversations");

// A full garbage collection once the conversations are idle after a turn (conversations.ts): V8 hands a script its
// `gc` only with --expose-gc, read when a context is made, so the flag is set and a context made on the first use.
let gc: (() => void) | undefined;
const collectGarbage = (): void => {
  if (gc === undefined) {
    process.getBuiltinModule("node:v8").setFlagsFromString("--expose-gc");
    gc = process.getBuiltinModule("node:vm").runInNewContext("gc") as () => void;
  }
  // "last-resort": every round V8 needs, with its memory-reducing flags, so the freed pages go back to the system now.
  (gc as (options: object) => void)({ type: "major", execution: "sync", flavor: "last-resort" });
};

const server = createAgentServer({
  sessionApiKey,
  workspaceDir,
  stateDir,
  commandEnv,
  corsOrigins,
  connections,
  collectGarbage,
  ...(webhook ? { webhook } : {}),
});
server.on("error", (e: Error) => {
  process.stderr.write(`sandbox-agent: ${e.message}\n`);
  process.exit(1);
});
// LISTEN_FD: a socket the runtime already listens on (inherited), so the port cannot be lost in between and no
// address lookup is needed; otherwise bind HOST:PORT.
const listenFd = process.env.LISTEN_FD === undefined ? undefined : Number(process.env.LISTEN_FD);
if (listenFd !== undefined && !(Number.isInteger(listenFd) && listenFd > 2))
  fail("LISTEN_FD must be a descriptor above 2");
const onListening = (): void => {
  const address = (early?.server ?? server).address();
  const bound = typeof address === "object" && address ? address.port : port;
  process.stdout.write(
    `${JSON.stringify({ msg: "sandbox agent listening", host, port: bound, workspaceDir })}\n`,
  );
  // With NODE_COMPILE_CACHE set (the process runtime sets it), the next agent starts from the cached compilation.
  flushCompileCache();
};
if (early !== undefined) {
  // The socket bound before the claim: its connections go to the server from now on, the held ones first.
  const { server: bound, pending } = early;
  bound.removeAllListeners("connection");
  bound.on("connection", (socket) => {
    server.emit("connection", socket);
    socket.resume();
  });
  for (const socket of pending.splice(0)) {
    server.emit("connection", socket);
    socket.resume();
  }
  onListening();
} else if (listenFd !== undefined) server.listen({ fd: listenFd }, onListening);
else server.listen(port, host, onListening);

const shutdown = (): void => {
  early?.server.close();
  // Its "close" (once its connections are gone) releases the conversations, running commands and webhooks.
  server.close();
  // Every connection, handed-over and websocket ones too: one left open (the runtime's kept-alive probe, a relayed
  // events socket) would hold the process until the grace ends and the runtime kills it.
  server.closeEveryConnection();
  // Exits by itself once the listener and commands are gone; this only bounds a stuck shutdown.
  setTimeout(() => process.exit(0), SHUTDOWN_GRACE_MS).unref();
};
process.once("SIGTERM", shutdown);
process.once("SIGINT", shutdown);
