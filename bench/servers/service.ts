// The service under test: the real app (buildApp) on a fresh SQLite file in a temporary folder with the process
// sandbox runtime, listening on free loopback ports. Prints {port, grpcPort, key, userId, pid, dir} as one JSON
// line on stdout once it listens; SIGTERM removes its sandboxes, stops it and deletes the folder.
//
//   --conversations N   bulk-load N conversations of the benchmark user before listening (search benchmark)
//   --events N          bulk-load N events of the benchmark user before listening: 1,000 per conversation, the
//                       conversation ids being benchEventConversation(0..N/1000-1) (events search benchmark)
//   --warm-agents N     built-in agents the process runtime keeps started ahead of need (default: npm start's
//                       default, SANDBOX_WARM_AGENTS); 0 measures cold starts
//   --docker-image I    sandboxes on the Docker runtime (engine of DOCKER_HOST, --network host) with the default
//                       spec of that image (the agent-server's), instead of the process runtime
//   --docker-builtin    with --docker-image: the image runs the built-in agent (its own command), as
//                       WORKSPACE_TEST_DOCKER_IMAGE does, instead of the agent-server's command
//   --warm-containers N with --docker-image: containers the Docker runtime keeps started and healthy ahead of
//                       need (default 0: every start is cold)
//   --connect-fast-path on|off  the everyday Connect unary call on the hand-written path (src/transports/connect/connect-unary.ts;
//                       default on, as the server runs) or, off, every Connect call on connect-node's handler
//   --sandbox-host-ports P,Q  host loopback ports the process runtime's sandboxes reach when they have networks of
//                       their own (SANDBOX_HOST_PORTS: a benchmark's fake model)
//   --sandbox-nice N    niceness of process sandboxes (default SANDBOX_NICE's, 10; 0: the service's)
//   --agent-proxy-limits J  the agent proxy's limits (src/transports/agent-proxy/agent-settings.ts), a JSON object of the fields to
//                       change from their defaults, e.g. {"socketsPerUser":1000} (the agent-proxy benchmark)
//   --log-level L       Fastify/pino level as in production (default info), written to a file in the temporary
//                       folder through the production log destination (src/server/log-destination.ts), as the
//                       server writes to stdout; "silent" turns it off
import { randomBytes } from "node:crypto";
import { mkdtempSync, openSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { BUILTIN_AGENT_COMMAND } from "../../agent/shared/builtin-agent.ts";
import { createProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime.ts";
import { createSqliteStorage, sqliteDatabaseOf } from "../../src/adapters/storage/sqlite/sqlite-storage.ts";
import type { EventRecord } from "../../src/ports/event-repository.ts";
import { buildApp } from "../../src/server/app.ts";
import { DEFAULT_SANDBOX_NICE, DEFAULT_WARM_AGENTS } from "../../src/server/config.ts";
import { DEFAULT_QUOTAS } from "../../src/server/container.ts";
import { LogDestination } from "../../src/server/log-destination.ts";
import { defaultSpecs } from "../../src/server/sandbox-specs.ts";
import type { AgentProxySettings } from "../../src/transports/agent-proxy/agent-settings.ts";
import { syntheticConversation } from "../../test/helpers/conversation-fixtures.ts";
import { benchEventConversation, EVENTS_PER_CONVERSATION } from "./fixture.ts";

const { values } = parseArgs({
  options: {
    conversations: { type: "string", default: "0" },
    events: { type: "string", default: "0" },
    "log-level": { type: "string", default: "info" },
    "warm-agents": { type: "string", default: String(DEFAULT_WARM_AGENTS) },
    "docker-image": { type: "string" },
    "warm-containers": { type: "string", default: "0" },
    "docker-builtin": { type: "boolean", default: false },
    "connect-fast-path": { type: "string", default: "on" },
    "agent-proxy-limits": { type: "string", default: "{}" },
    "sandbox-host-ports": { type: "string", default: "" },
    "sandbox-nice": { type: "string", default: String(DEFAULT_SANDBOX_NICE) },
  },
});
const USER = "bench-user";

const dir = mkdtempSync(join(tmpdir(), "aws-bench-"));
const storage = createSqliteStorage({ path: join(dir, "workspace.sqlite") });
const dockerImage = values["docker-image"];
// dockerode and the Docker runtime are imported only for --docker-image, as `npm start` imports them only for
// SANDBOX_RUNTIME=docker (src/server/serve.ts): loaded at start they cost the idle server ~6 MiB.
const runtime =
  dockerImage === undefined
    ? createProcessRuntime({
        workspaceRoot: join(dir, "sandboxes"),
        warmAgents: Number(values["warm-agents"]),
        limits: { nice: Number(values["sandbox-nice"]) },
        hostPorts: (values["sandbox-host-ports"] ?? "")
          .split(",")
          .filter((p) => p !== "")
          .map(Number),
      })
    : await (async () => {
        const [{ default: Docker }, { createDockerRuntime }] = await Promise.all([
          import("dockerode"),
          import("../../src/adapters/runtimes/docker/docker-runtime.ts"),
        ]);
        return createDockerRuntime({
          docker: new Docker(
            process.env.DOCKER_HOST?.startsWith("unix://")
              ? { socketPath: process.env.DOCKER_HOST.slice(7) }
              : {},
          ),
          network: "host",
          labels: { "workspace.bench": "1" },
          stopTimeoutSeconds: 2,
          warmContainers: Number(values["warm-containers"]),
        });
      })();
const level = values["log-level"] ?? "info";
const logFd = openSync(join(dir, "server.log"), "a");
const app = await buildApp({
  storage,
  runtime,
  specs:
    dockerImage !== undefined && values["docker-builtin"] === true
      ? [
          {
            id: dockerImage,
            command: [BUILTIN_AGENT_COMMAND],
            initialEnv: {},
            workingDir: "/workspace",
            createdAt: new Date(),
          },
        ]
      : defaultSpecs(
          dockerImage === undefined ? { kind: "process" } : { kind: "docker", image: dockerImage },
          new Date(),
        ),
  encryptionKey: randomBytes(32),
  verifier: null,
  // The load comes from one key: a limit far above what one core can serve keeps the limiter on the hot path
  // without ever answering 429.
  rateLimit: { perSecond: 10_000_000, burst: 10_000_000 },
  // Likewise the write and event quotas: the POST load writes one user's settings, and the ingest benchmark posts
  // events to one conversation, far faster than a user or a sandbox may (the paths are measured, not refusals).
  quotas: {
    userData: { ...DEFAULT_QUOTAS.userData, writesPerSecond: 0 },
    events: { maxPerConversation: 1_000_000_000, perSecond: 0, burst: 1_000_000_000 },
  },
  // The sandbox benchmarks keep 50 paused sandboxes of the one bench user.
  maxSandboxesPerUser: 100,
  connectFastPath: values["connect-fast-path"] !== "off",
  agentProxy: { limits: JSON.parse(values["agent-proxy-limits"] ?? "{}") as Partial<AgentProxySettings> },
  logger:
    level === "silent"
      ? false
      : {
          level,
          redact: {
            paths: ['req.headers["x-session-api-key"]', "req.headers.authorization"],
            censor: "[redacted]",
          },
          stream: new LogDestination(logFd),
        },
});
const { key } = await app.keys.issue(USER);

const conversations = Number(values.conversations ?? "0");
if (conversations > 0) {
  // The bulk-load pattern of test/contract/storage-sqlite-perf.test.ts: one transaction, the adapter's own
  // insert (its SQL runs synchronously when called).
  const record = syntheticConversation;

  const started = performance.now();
  let pending: Promise<void>[] = [];
  const db = sqliteDatabaseOf(storage);
  for (let from = 0; from < conversations; from += 10_000) {
    db.transaction(() => {
      for (let i = from; i < Math.min(conversations, from + 10_000); i++)
        pending.push(storage.conversations.insert(record(i, USER)));
    })();
    await Promise.all(pending);
    pending = [];
  }
  process.stderr.write(
    `service: loaded ${conversations} conversations in ${Math.round(performance.now() - started)} ms\n`,
  );
}

const events = Number(values.events ?? "0");
if (events > 0) {
  const started = performance.now();
  const db = sqliteDatabaseOf(storage);
  const kinds = ["MessageEvent", "ActionEvent", "ObservationEvent", "ConversationStateUpdateEvent"];
  const t0 = Date.UTC(2025, 10, 1) * 1000;
  for (let from = 0; from < events; from += 20_000) {
    const batch: EventRecord[] = [];
    for (let i = from; i < Math.min(events, from + 20_000); i++) {
      const conversationId = benchEventConversation(Math.floor(i / EVENTS_PER_CONVERSATION));
      const kind = kinds[i % kinds.length] as string;
      const id = `ev-${i}`;
      const ts = t0 + i * 1000;
      batch.push({
        ownerId: USER,
        conversationId,
        id,
        kind,
        timestampUs: ts,
        body: JSON.stringify({
          kind,
          id,
          timestamp: new Date(ts / 1000).toISOString().replace("Z", "000"),
          source: i % 2 === 0 ? "agent" : "user",
          llm_message: {
            role: "assistant",
            content: [{ type: "text", text: `Step ${i}: ran the test suite.` }],
          },
        }),
      });
    }
    // Inside a transaction the adapter writes at once (no group commit needed for a bulk load).
    db.transaction(() => void storage.events.append(batch))();
  }
  db.pragma("optimize");
  process.stderr.write(`service: loaded ${events} events in ${Math.round(performance.now() - started)} ms\n`);
}

const ports = await app.listen("127.0.0.1", 0, 0);
process.stdout.write(`${JSON.stringify({ ...ports, key, userId: USER, pid: process.pid, dir })}\n`);

let stopping = false;
const stop = async (): Promise<void> => {
  if (stopping) return;
  stopping = true;
  // Docker: after the app (and its warm pool) stopped, so that no container being warmed is left behind.
  if ("killAll" in runtime) await runtime.killAll();
  await app.close();
  if (!("killAll" in runtime)) await runtime.removeAll();
  rmSync(dir, { recursive: true, force: true });
  process.exit(0);
};
process.on("SIGTERM", () => void stop());
process.on("SIGINT", () => void stop());
