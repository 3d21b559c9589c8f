import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime.ts";
import type { ProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime-types.ts";
import { createSqliteStorage } from "../../src/adapters/storage/sqlite/sqlite-storage.ts";
import type { SandboxSpec } from "../../src/domain/sandboxes/sandbox-spec-service.ts";
import type { GitProviderVerifier } from "../../src/ports/git-provider-verifier.ts";
import type { SandboxRuntime } from "../../src/ports/sandbox-runtime.ts";
import type { Storage } from "../../src/ports/storage.ts";
import { type App, type AppDeps, buildApp } from "../../src/server/app.ts";
import { DEFAULT_QUOTAS } from "../../src/server/container.ts";
import { defaultSpecs } from "../../src/server/sandbox-specs.ts";
import { startFakeLlm } from "./fake-llm.ts";

export interface TestApp {
  app: App;
  /** http://127.0.0.1:PORT (options.host instead of 127.0.0.1 when given; https with options.tls) */
  url: string;
  /** With options.tls and no webhookBaseUrl: the plain-HTTP webhook listener's http://127.0.0.1:PORT. */
  webhookUrl?: string;
  grpcAddress: string;
  /** The admin listener's http://127.0.0.1:PORT, when the app has one (options.admin.port). */
  adminUrl?: string;
  storage: Storage;
  /** The runtime (a process runtime under dir unless one was given). */
  runtime: SandboxRuntime;
  dir: string;
  encryptionKey: Buffer;
  /** Issues a key for a user (created on first use). */
  keyFor(user: string): Promise<string>;
  close(): Promise<void>;
}

export interface TestAppOptions {
  verifier?: GitProviderVerifier | null;
  rateLimit?: { perSecond: number; burst: number };
  /** Reuse a data dir (restart tests); the caller removes it. */
  dir?: string;
  encryptionKey?: Buffer;
  runtime?: SandboxRuntime;
  specs?: SandboxSpec[];
  maxRunningSandboxes?: number;
  maxSandboxesPerUser?: number;
  /** Period of the background sweep (default: the app's); 0: none (call app.sweep()). */
  sweepIntervalMs?: number;
  /** Wraps the SQLite storage before the app uses it (fault injection). */
  wrapStorage?: (storage: Storage) => Storage;
  /** Keep sandboxes running when closing (restart tests). */
  keepSandboxes?: boolean;
  /** Conversation start timeouts and shutdown grace. */
  conversations?: AppDeps["conversations"];
  /** The server's logger (Fastify/pino options); none by default. */
  logger?: AppDeps["logger"];
  /** Browser-facing options (UI folder, CORS, sign-in, single-user mode, options lists). */
  web?: AppDeps["web"];
  /** Git provider hosts, clients, timeout and repository cache. */
  git?: AppDeps["git"];
  /** Message size, stream, connection and timeout limits. */
  limits?: AppDeps["limits"];
  /** false: every Connect call on connect-node's handler (no hand-written unary path). */
  connectFastPath?: boolean;
  /** Client of the sandboxes' agent servers (default: HTTP). */
  agent?: AppDeps["agent"];
  /**
   * The model every user made by keyFor has in their settings (a conversation needs one, as it does once a person
   * has set up the UI); none by default.
   */
  llmModel?: string;
  /**
   * With llmModel: the model server's URL. Default: a fake one started with the app (test/helpers/fake-llm.ts,
   * answering each call with a final message), since no test may reach outside this machine.
   */
  llmBaseUrl?: string;
  /** /metrics, /docs, /openapi.json: an admin listener of their own (port 0: any free one), a metrics token. */
  admin?: AppDeps["admin"];
  /** What one user may store and what sandboxes may post. */
  quotas?: AppDeps["quotas"];
  /** This service's URL as sandboxes reach it (default: the listener's). */
  webhookBaseUrl?: string;
  /** Serve HTTPS and gRPC over TLS with this certificate chain and key (then `url` is https). */
  tls?: AppDeps["tls"];
  /** The address the HTTP and gRPC listeners bind (default 127.0.0.1); `url` and `grpcAddress` use it. */
  host?: string;
  /** The agent proxy's switch, public URL and limits (default: on, DEFAULT_AGENT_PROXY). */
  agentProxy?: AppDeps["agentProxy"];
}

/** A real server on free loopback ports over a SQLite file in a temporary folder. */
export async function startTestApp(options: TestAppOptions = {}): Promise<TestApp> {
  const dir = options.dir ?? mkdtempSync(join(tmpdir(), "aws-test-"));
  const sqlite = createSqliteStorage({ path: join(dir, "workspace.sqlite") });
  const storage = options.wrapStorage ? options.wrapStorage(sqlite) : sqlite;
  const encryptionKey = options.encryptionKey ?? randomBytes(32);
  const runtime = options.runtime ?? defaultRuntime(join(dir, "sandboxes"));
  const app = await buildApp({
    storage,
    runtime,
    specs: options.specs ?? defaultSpecs({ kind: "process" }, new Date()),
    ...(options.maxRunningSandboxes ? { maxRunningSandboxes: options.maxRunningSandboxes } : {}),
    ...(options.maxSandboxesPerUser ? { maxSandboxesPerUser: options.maxSandboxesPerUser } : {}),
    ...(options.sweepIntervalMs === undefined ? {} : { sweepIntervalMs: options.sweepIntervalMs }),
    encryptionKey,
    verifier: options.verifier ?? null,
    rateLimit: options.rateLimit ?? { perSecond: 0, burst: 1 },
    ...(options.conversations ? { conversations: options.conversations } : {}),
    ...(options.logger ? { logger: options.logger } : {}),
    ...(options.web ? { web: options.web } : {}),
    ...(options.git ? { git: options.git } : {}),
    ...(options.limits ? { limits: options.limits } : {}),
    ...(options.agent ? { agent: options.agent } : {}),
    ...(options.admin ? { admin: options.admin } : {}),
    ...(options.webhookBaseUrl ? { webhookBaseUrl: options.webhookBaseUrl } : {}),
    ...(options.tls ? { tls: options.tls } : {}),
    ...(options.agentProxy ? { agentProxy: options.agentProxy } : {}),
    ...(options.connectFastPath === undefined ? {} : { connectFastPath: options.connectFastPath }),
    // As the per-key rate, one user's write rate is off unless a test asks for it.
    quotas: options.quotas ?? {
      ...DEFAULT_QUOTAS,
      userData: { ...DEFAULT_QUOTAS.userData, writesPerSecond: 0 },
    },
  });
  const host = options.host ?? "127.0.0.1";
  const ports = await app.listen(host, 0, 0);
  const keys = new Map<string, string>();
  const llm =
    options.llmModel !== undefined && options.llmBaseUrl === undefined ? await startFakeLlm() : null;
  const llmBaseUrl = options.llmBaseUrl ?? llm?.url ?? null;
  // Sandboxes with networks of their own reach the host's loopback only at allowed ports, as a server's
  // SANDBOX_HOST_PORTS allows a model's: the users' model server here is one.
  if (llmBaseUrl !== null) runtime.reachHost?.(llmBaseUrl);
  return {
    app,
    url: `${options.tls ? "https" : "http"}://${host}:${ports.port}`,
    ...(ports.webhookPort === undefined ? {} : { webhookUrl: `http://127.0.0.1:${ports.webhookPort}` }),
    grpcAddress: `${host}:${ports.grpcPort}`,
    ...(ports.adminPort === undefined ? {} : { adminUrl: `http://127.0.0.1:${ports.adminPort}` }),
    storage,
    runtime,
    dir,
    encryptionKey,
    async keyFor(user) {
      let k = keys.get(user);
      if (k === undefined) {
        k = (await app.keys.issue(user)).key;
        keys.set(user, k);
        if (options.llmModel !== undefined) {
          const r = await fetch(`http://${host}:${ports.port}/api/settings`, {
            method: "POST",
            headers: { "x-session-api-key": k, "content-type": "application/json" },
            body: JSON.stringify({ llm_model: options.llmModel, llm_base_url: llmBaseUrl }),
          });
          if (!r.ok) throw new Error(`storing the test model failed: ${r.status} ${await r.text()}`);
        }
      }
      return k;
    },
    async close() {
      if (options.runtime === undefined && options.keepSandboxes !== true)
        await (runtime as ProcessRuntime).killAll();
      await app.close();
      await llm?.close();
      if (options.dir === undefined) rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** fetch with the session key and JSON handling; returns status, parsed body and headers. */
export async function call(
  base: string,
  key: string | undefined,
  method: string,
  path: string,
  body?: unknown,
  rawBody?: string,
): Promise<{ status: number; body: unknown; headers: Headers; text: string }> {
  const headers: Record<string, string> = {};
  if (key !== undefined) headers["x-session-api-key"] = key;
  let payload: string | undefined;
  if (rawBody !== undefined) payload = rawBody;
  else if (body !== undefined) payload = JSON.stringify(body);
  if (payload !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`${base}${path}`, {
    method,
    headers,
    ...(payload === undefined ? {} : { body: payload }),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // keep text
  }
  return { status: res.status, body: parsed, headers: res.headers, text };
}

let fallbackNoted = false;
/**
 * The process runtime as the server makes it by default (bubblewrap where it runs). Where it cannot, the runtime
 * would serve one user only; the multi-user tests then run unisolated, and say so once.
 */
function defaultRuntime(workspaceRoot: string): ProcessRuntime {
  const runtime = createProcessRuntime({ workspaceRoot });
  if (!runtime.isolation.singleUser) return runtime;
  if (!fallbackNoted) console.log(`test apps run sandboxes unisolated: ${runtime.isolation.reason}`);
  fallbackNoted = true;
  return createProcessRuntime({ workspaceRoot, isolation: "none" });
}
