/**
 * The agent proxy's HTTP half: an agent call (src/transports/agent-proxy/agent-calls.ts) made to the service's own listener is
 * forwarded to the agent address the service recorded for the sandbox its key names, with @fastify/reply-from
 * (undici) in a Fastify instance of its own, so that none of the service's routes, hooks or body parsers see it.
 * What crosses is bounded (body size, time, calls per second per sandbox) and filtered both ways (agent-calls.ts).
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { Transform } from "node:stream";
import replyFrom from "@fastify/reply-from";
import Fastify, { type FastifyBaseLogger, LogController } from "fastify";
import { RateLimiter } from "../../core/rate-limiter.ts";
import type { AgentTarget } from "../../domain/sandboxes/agent-targets.ts";
import {
  agentCallKey,
  agentRequestHeaders,
  clientResponseHeaders,
  corsGrant,
  isAgentPath,
  pathOf,
} from "./agent-calls.ts";

/** Limits of proxied agent calls (AGENT_PROXY_* settings). */
export interface AgentProxyLimits {
  /** Largest request body (an upload) forwarded to an agent. */
  maxBodyBytes: number;
  /** Time an agent has to answer a call (headers, then between body chunks). */
  timeoutMs: number;
  /** Calls per second per sandbox, sustained (burst twice that); 0: no limit. */
  callsPerSecond: number;
}

export interface AgentProxyDeps {
  /** The sandbox a session key opens (SandboxService.agentTarget). */
  target(key: string): Promise<AgentTarget | null>;
  /** The user of a request's own credential besides the key (its browser-session cookie); null without one. */
  userOf(req: IncomingMessage): Promise<string | null>;
  limits: AgentProxyLimits;
  /** Other origins the UI may be served from (CORS_ORIGINS): their agent calls get the service's CORS grant. */
  corsOrigins: ReadonlySet<string>;
  logger: FastifyBaseLogger;
  /** The HTTP metrics of one call. */
  observe(method: string, route: string, status: number, seconds: number): void;
  requestId: () => string;
}

/** An agent call the proxy refuses: its status and `{"detail": …}` answer. */
export class AgentCallError extends Error {
  readonly status: number;
  readonly headers: Record<string, string>;
  constructor(status: number, message: string, headers: Record<string, string> = {}) {
    super(message);
    this.status = status;
    this.headers = headers;
  }
}

/**
 * Where a call with `key` goes: the running sandbox's agent URL, after the checks every agent call passes (the key
 * opens a sandbox; a user credential that came along is the owner's; the sandbox is running). Throws
 * {@link AgentCallError} with a clear answer otherwise; never waits on the sandbox.
 */
export async function resolveAgent(
  deps: Pick<AgentProxyDeps, "target" | "userOf">,
  key: string,
  req: IncomingMessage,
): Promise<AgentTarget & { agentUrl: string }> {
  const [target, user] = await Promise.all([deps.target(key), deps.userOf(req)]);
  if (target === null)
    throw new AgentCallError(
      404,
      "No sandbox has this session key: the sandbox was deleted, or the key is wrong",
    );
  if (user !== null && user !== target.ownerId)
    throw new AgentCallError(403, "This sandbox belongs to another user");
  if (target.status === "STARTING")
    throw new AgentCallError(503, `Sandbox ${target.sandboxId} is starting; try again in a moment`, {
      "retry-after": "1",
    });
  if (target.status === "PAUSED")
    throw new AgentCallError(
      409,
      `Sandbox ${target.sandboxId} is paused: resume it (POST /api/v1/sandboxes/${target.sandboxId}/resume) to reach its agent`,
    );
  if (target.status !== "RUNNING" || target.agentUrl === null)
    throw new AgentCallError(409, `Sandbox ${target.sandboxId} is not running (${target.status})`);
  return { ...target, agentUrl: target.agentUrl };
}

/** What a refusal needs of a Fastify reply (any server type's). */
interface Answerable {
  code(status: number): { headers(h: Record<string, string>): { send(body: string): unknown } };
}

/**
 * Builds the HTTP agent proxy (see the module's comment): `routing` serves a request that is an agent call
 * (`agentCallKey(req)` defined); `close` releases its connection pool.
 */
export async function createAgentHttpProxy(deps: AgentProxyDeps): Promise<{
  routing: (req: IncomingMessage, res: ServerResponse) => void;
  close: () => Promise<void>;
}> {
  const { limits } = deps;
  /** The sandbox each call went to, for its access line. */
  const sandboxOf = new WeakMap<object, string>();
  const rate = new RateLimiter(limits.callsPerSecond, Math.max(1, limits.callsPerSecond * 2));
  const app = Fastify({
    loggerInstance: deps.logger,
    logController: new LogController({ disableRequestLogging: true }),
    genReqId: deps.requestId,
    requestIdHeader: "x-request-id",
    // Bodies are streamed through, never parsed (each is counted against maxBodyBytes on its way).
    bodyLimit: limits.maxBodyBytes,
  });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", (req, payload, done) => {
    try {
      done(null, bounded(payload, req.headers, limits.maxBodyBytes));
    } catch (err) {
      done(err as Error, undefined);
    }
  });
  await app.register(replyFrom, {
    undici: { headersTimeout: limits.timeoutMs, bodyTimeout: limits.timeoutMs, connections: 64 },
    disableRequestLogging: true,
    // A proxied call is never retried: the agent may have acted on it.
    retryMethods: [],
    maxRetriesOn503: 0,
  });
  const refuse = (reply: Answerable, status: number, detail: string, headers: Record<string, string> = {}) =>
    reply
      .code(status)
      .headers({ ...headers, "content-type": "application/json", "x-content-type-options": "nosniff" })
      .send(JSON.stringify({ detail }));
  app.setErrorHandler((err: Error & { statusCode?: number }, _req, reply) => {
    const status = err.statusCode ?? 500;
    if (status === 413) return refuse(reply, 413, `Request body is larger than ${limits.maxBodyBytes} bytes`);
    if (status >= 400 && status < 500) return refuse(reply, status, err.message);
    deps.logger.error({ err }, "agent call failed");
    return refuse(reply, 502, "The sandbox's agent could not be reached");
  });
  // Set before anything answers, so refusals carry it too (a UI on an allowed origin must read why).
  app.addHook("onRequest", (req, reply, done) => {
    const origin = req.headers.origin;
    reply.headers(corsGrant(typeof origin === "string" ? origin : undefined, deps.corsOrigins));
    done();
  });
  app.all("/*", async (req, reply) => {
    const key = agentCallKey(req.raw) as string;
    const path = pathOf(req.url);
    let agent: AgentTarget & { agentUrl: string };
    try {
      agent = await resolveAgent(deps, key, req.raw);
    } catch (err) {
      if (err instanceof AgentCallError) return refuse(reply, err.status, err.message, err.headers);
      throw err;
    }
    if (!rate.has(agent.sandboxId))
      return refuse(reply, 429, "Too many calls to this sandbox's agent", { "retry-after": "1" });
    rate.spend(agent.sandboxId);
    // The URL is the recorded agent's origin and the request's own path, resolved as the agent will read it.
    const base = new URL(agent.agentUrl);
    const url = new URL(path, base.origin);
    // What the agent will read (dot segments resolved) must still be one of its routes.
    if (!isAgentPath(url.pathname)) return refuse(reply, 404, "Not Found");
    sandboxOf.set(req, agent.sandboxId);
    return reply.from(url.href, {
      rewriteRequestHeaders: (r) => agentRequestHeaders(r.headers, url.host),
      rewriteHeaders: (headers) => clientResponseHeaders(headers, url.pathname),
      onError: (r, { error }) => {
        // A body that grew past the limit while streaming fails the forwarded request: still the client's 413.
        if ((error.cause as { statusCode?: number } | undefined)?.statusCode === 413)
          return refuse(r, 413, `Request body is larger than ${limits.maxBodyBytes} bytes`);
        const timeout = (error as { statusCode?: number }).statusCode === 504;
        deps.logger.warn({ sandboxId: agent.sandboxId, err: error }, "agent call failed");
        return refuse(
          r,
          timeout ? 504 : 502,
          timeout
            ? `The sandbox's agent did not answer within ${limits.timeoutMs} ms`
            : "The sandbox's agent could not be reached",
        );
      },
    });
  });
  app.addHook("onResponse", (req, reply, done) => {
    const ms = reply.elapsedTime;
    deps.observe(req.method, "agent-proxy", reply.statusCode, ms / 1000);
    req.log.info(
      {
        method: req.method,
        url: req.url,
        route: "agent-proxy",
        sandboxId: sandboxOf.get(req),
        statusCode: reply.statusCode,
        ms,
      },
      "request completed",
    );
    done();
  });
  await app.ready();
  return {
    routing: (req, res) => app.routing(req, res),
    close: () => app.close(),
  };
}

/**
 * The request body as a stream that fails with 413 once more than `max` bytes came (a declared length over it is
 * refused before anything is read).
 */
function bounded(
  payload: IncomingMessage,
  headers: IncomingMessage["headers"],
  max: number,
): NodeJS.ReadableStream {
  const tooLarge = () =>
    Object.assign(new Error(`Request body is larger than ${max} bytes`), { statusCode: 413 });
  const length = headers["content-length"];
  const declared = Number(length ?? 0);
  if (declared > max) throw tooLarge();
  // A declared length within the limit is what Node's parser reads, no more: the body goes through as it is.
  if (length !== undefined && headers["transfer-encoding"] === undefined) return payload;
  let seen = 0;
  const counter = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      seen += chunk.length;
      cb(seen > max ? tooLarge() : null, chunk);
    },
  });
  payload.on("error", (err) => counter.destroy(err));
  return payload.pipe(counter);
}
