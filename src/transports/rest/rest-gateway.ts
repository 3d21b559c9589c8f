import type { DescMethod } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Caller } from "../../core/context.ts";
import type { FieldViolation } from "../../core/errors.ts";
import { resourceExhausted, unauthenticated, ValidationError } from "../../core/errors.ts";
import { TOO_MANY_WRITES } from "../../domain/user-data-store.ts";
import { type Admission, callValues } from "../kit/admission.ts";
import { endSessionCookies, headerKeyOf, type KeyOf, nodeHeaders } from "../kit/browser-session.ts";
import type { AnswerObserver } from "../kit/call-metrics.ts";
import { isInternal } from "../kit/errors.ts";
import { abortOnClientGone, lazyHandlerContext } from "../kit/handler-context.ts";
import type { ServiceBinding } from "../kit/service-binding.ts";
import { closeIfBodyUnread } from "../kit/unread-body.ts";
import { NO_CACHE, restError, sendRestError, writeRestError } from "./rest-errors.ts";
import type { RestRoute } from "./rest-route.ts";

/**
 * A route a sandbox calls (its agent server's webhooks): no user key; the service it calls checks the sandbox's
 * own session key (X-Session-API-Key), so a wrong key is 401 and nothing is stored. Errors in the V1 dialect.
 */
export interface SandboxCallbackRoute {
  method: "POST";
  url: string;
  /** Largest body of this route (default: the gateway's). */
  bodyLimit?: number;
  /**
   * Answer a refusal of what was posted (invalid, too large, not this sandbox's: 4xx but 401 and 429) with 200
   * `{success: false, status, detail}`: the agent-server re-sends a batch that got any other answer with every later
   * one, for ever, so a refused batch would stop all that conversation's events.
   */
  acknowledgeRefusals?: boolean;
  handle: (input: {
    body: unknown;
    params: Record<string, string>;
    sessionKey: string | undefined;
  }) => Promise<unknown>;
}

export interface RestGatewayOptions {
  routes: readonly RestRoute[];
  callbacks?: readonly SandboxCallbackRoute[];
  bindings: readonly ServiceBinding[];
  admission: Admission;
  /**
   * Whether the user may write its user document now (its write rate; see RestRoute.writesUserData); a route that
   * writes it is refused with 429 before its body is read when not.
   */
  canWriteUserData?: (userId: string) => boolean;
  /** Largest request body (413 beyond). */
  maxBodyBytes: number;
  /** The request's session key: the header, or a browser session's (default: the header only). */
  keyOf?: KeyOf;
  /**
   * Called for every route's answer sent with a 2xx status (AnswerObserver), with the route's method
   * (`package.Service/Method`): from the route's handler to the reply's payload serialized and handed on to be
   * written (Fastify's onSend), before its head and body reach the socket.
   */
  onAnswer?: AnswerObserver;
}

declare module "fastify" {
  interface FastifyRequest {
    /** The route's method and its handler's start, for RestGatewayOptions.onAnswer. */
    answerTiming?: { name: string; started: number };
    caller?: Caller;
    /** The session key the caller was admitted with. */
    sessionKey?: string | undefined;
  }
}

const INVALID_JSON = Symbol("invalid-json");
interface InvalidJson {
  [INVALID_JSON]: FieldViolation;
}

function parseJsonBody(text: string): unknown {
  if (text.length === 0) return undefined;
  try {
    return JSON.parse(text);
  } catch (err) {
    const message = err instanceof Error ? err.message : "";
    const position = Number(/position (\d+)/.exec(message)?.[1] ?? 0);
    const violation: FieldViolation = {
      type: "json_invalid",
      loc: ["body", position],
      msg: "JSON decode error",
      input: {},
      ctx: { error: "Expecting value" },
    };
    return { [INVALID_JSON]: violation } satisfies InvalidJson;
  }
}

/**
 * Registers the REST routes as a Fastify plugin: session-key auth per route, JSON bodies parsed into FastAPI's
 * error shapes, binder → service method (called directly, no in-process transport) → shaper, and one error
 * mapping per dialect.
 */
export function restGateway(options: RestGatewayOptions) {
  const impls = new Map(options.bindings.map((b) => [b.desc.typeName, b]));
  const keyOf = options.keyOf ?? headerKeyOf;
  return async (app: FastifyInstance): Promise<void> => {
    app.removeAllContentTypeParsers();
    const parse = (_req: FastifyRequest, body: string | Buffer, done: (err: null, body: unknown) => void) =>
      done(null, parseJsonBody(body as string));
    // Every body is read as JSON whatever its content type, as FastAPI does. application/json is registered by
    // name too: Fastify caches the parser it finds by name per content-type header, but looks for the catch-all
    // again (parsing the header into a new object) on every request.
    app.addContentTypeParser("application/json", { parseAs: "string" }, parse);
    app.addContentTypeParser("*", { parseAs: "string" }, parse);

    // Callback-style hook: a cached key is admitted without a promise turn. An unknown key answers 401 from the
    // hook (done is then not called, which ends the request there) and closes the connection if the body is still
    // arriving, so that such a client is not waited for.
    const authenticate = (req: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void): void => {
      let key: string | undefined;
      const admitted = (caller: Caller): void => {
        req.caller = caller;
        req.sessionKey = key;
        done();
      };
      const refused = (err: unknown): void => {
        if (err instanceof ConnectError && err.code === Code.Unauthenticated) {
          closeIfBodyUnread(req.raw, reply.raw);
          void sendRestError(reply, unauthenticated());
          return;
        }
        done(err as Error);
      };
      let caller: Caller | Promise<Caller>;
      try {
        key = keyOf(req.method, nodeHeaders(req.headers));
        caller = options.admission(key);
      } catch (err) {
        refused(err);
        return;
      }
      if (caller instanceof Promise) caller.then(admitted, refused);
      else admitted(caller);
    };

    for (const r of options.callbacks ?? []) registerCallback(app, r, options.maxBodyBytes);

    // Routes sharing a Fastify url (FastAPI `{name:path}` parameters become one wildcard) are registered once and
    // told apart by what follows the parameter, in table order as Starlette tries them.
    const groups = new Map<string, { url: string; entries: RouteEntry[] }>();
    for (const r of options.routes) {
      const method = r.rpc;
      const binding = impls.get(method.parent.typeName);
      if (binding === undefined)
        throw new Error(`route ${r.method} ${r.url}: no implementation of ${method.parent.typeName}`);
      const fn = (binding.impl as Record<string, (req: unknown, ctx: unknown) => unknown>)[method.localName];
      if (fn === undefined) throw new Error(`no implementation of ${method.parent.typeName}/${method.name}`);
      const span = pathParameter(r.url);
      const url = span === null ? r.url : `${span.prefix}*`;
      const key = `${r.method} ${url}`;
      const group = groups.get(key) ?? { url, entries: [] };
      const first = group.entries[0]?.route;
      if (first !== undefined && span === null)
        throw new Error(`routes ${first.url} and ${r.url} share ${key}`);
      group.entries.push({
        route: r,
        method,
        name: `${method.parent.typeName}/${method.name}`,
        impl: fn.bind(binding.impl),
        span,
      });
      groups.set(key, group);
    }

    /** authenticate, then the user's write rate for routes that write its user document. */
    const authenticateWriter = (
      req: FastifyRequest,
      reply: FastifyReply,
      done: (err?: Error) => void,
    ): void =>
      authenticate(req, reply, (err) => {
        const caller = req.caller;
        if (err !== undefined || caller === undefined || (options.canWriteUserData?.(caller.userId) ?? true))
          return done(err);
        closeIfBodyUnread(req.raw, reply.raw);
        void sendRestError(reply, resourceExhausted(TOO_MANY_WRITES));
      });

    const { onAnswer } = options;
    /** The answer timed once Fastify has serialized it (its onSend hook), 2xx answers only. */
    const answered =
      onAnswer === undefined
        ? undefined
        : (
            req: FastifyRequest,
            reply: FastifyReply,
            payload: unknown,
            done: (e: null, p: unknown) => void,
          ) => {
            const timing = req.answerTiming;
            if (timing !== undefined && reply.statusCode < 300)
              onAnswer(timing.name, (performance.now() - timing.started) / 1000);
            done(null, payload);
          };

    for (const { url, entries } of groups.values()) {
      const r0 = (entries[0] as RouteEntry).route;
      app.route({
        method: r0.method,
        url,
        onRequest: entries.some((e) => e.route.writesUserData === true) ? authenticateWriter : authenticate,
        ...(answered === undefined ? {} : { onSend: answered }),
        // Not an async function: a service answering a plain value (a kept GetSettings answer) is sent in the same
        // turn, without a promise; a promise is handed to Fastify, which sends or reports what it settles to.
        handler: (req, reply) => {
          const started = performance.now();
          const params = req.params as Record<string, string>;
          const matched = matchEntry(entries, params);
          if (matched === null) return reply.callNotFound();
          const { route: r, method, name, impl } = matched.entry;
          if (onAnswer !== undefined) req.answerTiming = { name, started };
          if (entries.length > 1) matchedRoutes.set(req, r);
          const body = req.body as unknown;
          if (typeof body === "object" && body !== null && INVALID_JSON in body) {
            throw new ValidationError([(body as InvalidJson)[INVALID_JSON]]);
          }
          if (r.bodyRequired === true && body === undefined) {
            throw new ValidationError([
              { type: "missing", loc: ["body"], msg: "Field required", input: null },
            ]);
          }
          const values = callValues(req.caller as Caller, req.sessionKey, r.stream === true);
          const input = r.bind({
            body,
            query: req.query as Record<string, string | string[] | undefined>,
            params: matched.params,
            values,
          });
          const ctx = lazyHandlerContext({
            service: method.parent,
            method,
            protocolName: "rest",
            requestMethod: req.method,
            url: req.url,
            // Made when a service first uses the signal (streams always do); most unary methods never look at it.
            signal: () => closeController(reply).signal,
            values,
          });
          if (r.stream === true) {
            const abort = closeController(reply);
            reply.hijack();
            return writeJsonArray(reply, impl(input, ctx) as AsyncIterable<never>, r.shape, abort).then(
              () => reply,
            );
          }
          const out = impl(input, ctx);
          if (out instanceof Promise) return out.then((o: unknown) => sendShaped(reply, r, o));
          return sendShaped(reply, r, out);
        },
        errorHandler: (err, req, reply) => {
          const r = matchedRoutes.get(req) ?? r0;
          const e =
            r.notFoundBody !== undefined && isNotFound(err)
              ? { status: 404, body: notFoundBodyOf(r, req) }
              : restError(err, {
                  dialect: r.dialect,
                  location: r.location ?? "body",
                  ...(r.fieldLocations === undefined ? {} : { fields: r.fieldLocations }),
                  maxBodyBytes: options.maxBodyBytes,
                });
          if (isInternal(err) && e.status >= 500) req.log.error({ err }, "request failed");
          return writeRestError(reply, e);
        },
      });
    }
  };
}

/** Sends a service's answer as the route's JSON. */
function sendShaped(reply: FastifyReply, r: RestRoute, out: unknown): FastifyReply {
  reply.code(r.successStatus ?? 200).headers(NO_CACHE);
  // Admitted with a key that was not in the header: the session cookie's.
  const req = reply.request;
  if (
    r.endsBrowserSession === true &&
    req.sessionKey !== undefined &&
    req.headers["x-session-api-key"] === undefined
  )
    reply.header("set-cookie", endSessionCookies());
  return reply.send(r.shape(out as never));
}

/** The route a shared url matched, for its error handler (only set when several routes share the url). */
const matchedRoutes = new WeakMap<FastifyRequest, RestRoute>();

interface RouteEntry {
  route: RestRoute;
  method: DescMethod;
  /** The method's name, `package.Service/Method`. */
  name: string;
  impl: (req: unknown, ctx: unknown) => unknown;
  span: PathParameter | null;
}

/** A FastAPI `{name:path}` parameter in a route url: it spans segments up to the fixed `suffix`. */
interface PathParameter {
  prefix: string;
  name: string;
  suffix: string;
}

/** The `{name:path}` parameter of a url (at most one), or null. */
export function pathParameter(url: string): PathParameter | null {
  const m = /^([^{]*)\{([A-Za-z_]+):path\}([^{*:]*)$/.exec(url);
  if (m === null) return null;
  return { prefix: m[1] ?? "", name: m[2] ?? "", suffix: m[3] ?? "" };
}

/** The first route whose fixed ending follows a non-empty path parameter, with that parameter; else null. */
function matchEntry(
  entries: readonly RouteEntry[],
  params: Record<string, string>,
): { entry: RouteEntry; params: Record<string, string> } | null {
  for (const entry of entries) {
    if (entry.span === null) return { entry, params };
    const rest = params["*"] ?? "";
    const { name, suffix } = entry.span;
    if (rest.length > suffix.length && rest.endsWith(suffix))
      return { entry, params: { [name]: rest.slice(0, rest.length - suffix.length) } };
  }
  return null;
}

function registerCallback(app: FastifyInstance, r: SandboxCallbackRoute, maxBodyBytes: number): void {
  app.route({
    method: r.method,
    url: r.url,
    ...(r.bodyLimit === undefined ? {} : { bodyLimit: r.bodyLimit }),
    handler: async (req, reply) => {
      const body = req.body as unknown;
      if (typeof body === "object" && body !== null && INVALID_JSON in body)
        throw new ValidationError([(body as InvalidJson)[INVALID_JSON]]);
      if (body === undefined)
        throw new ValidationError([{ type: "missing", loc: ["body"], msg: "Field required", input: null }]);
      const header = req.headers["x-session-api-key"];
      const out = await r.handle({
        body,
        params: req.params as Record<string, string>,
        sessionKey: typeof header === "string" ? header : undefined,
      });
      return reply.code(200).headers(NO_CACHE).send(out);
    },
    errorHandler: (err, req, reply) => {
      const e = restError(err, { dialect: "v1", maxBodyBytes: r.bodyLimit ?? maxBodyBytes });
      if (e.status >= 500 && e.status !== 503) req.log.error({ err }, "sandbox callback failed");
      if (
        r.acknowledgeRefusals === true &&
        e.status >= 400 &&
        e.status < 500 &&
        e.status !== 401 &&
        e.status !== 429
      ) {
        req.log.warn(
          { status: e.status, detail: e.body },
          "sandbox callback refused (acknowledged, so not re-sent)",
        );
        return reply
          .code(200)
          .headers(NO_CACHE)
          .send({
            success: false,
            status: e.status,
            detail: (e.body as { detail?: unknown } | null)?.detail ?? e.body,
          });
      }
      return writeRestError(reply, e);
    },
  });
}

const closeControllers = new WeakMap<FastifyReply, AbortController>();

/**
 * The request's cancellation: aborted when the client goes away before the answer is complete. Made on first use,
 * once per reply.
 */
function closeController(reply: FastifyReply): AbortController {
  let controller = closeControllers.get(reply);
  if (controller === undefined) {
    controller = abortOnClientGone(reply.raw);
    closeControllers.set(reply, controller);
  }
  return controller;
}

/** Streams a server-streaming RPC as one JSON array: "[" then each state as it happens, then "]". */
async function writeJsonArray(
  reply: FastifyReply,
  messages: AsyncIterable<never>,
  shape: (m: never) => unknown,
  abort: AbortController,
): Promise<void> {
  const res = reply.raw;
  let started = false;
  try {
    for await (const m of messages) {
      if (!started) {
        res.writeHead(200, { "content-type": "application/json", ...NO_CACHE });
        res.write("[");
        started = true;
      } else {
        res.write(",");
      }
      res.write(JSON.stringify(shape(m)));
    }
    if (!started) res.writeHead(200, { "content-type": "application/json", ...NO_CACHE }).write("[");
    res.end("]");
  } catch (err) {
    if (!started) {
      if (isInternal(err)) reply.log.error({ err }, "request failed");
      writeRestError(reply, { ...restError(err), headers: {} });
    } else {
      abort.abort();
      res.end("]");
    }
  }
}

function notFoundBodyOf(r: RestRoute, req: FastifyRequest): unknown {
  const body = r.notFoundBody;
  if (typeof body !== "function") return body;
  return (body as (params: Record<string, string>) => unknown)(req.params as Record<string, string>);
}

function isNotFound(err: unknown): boolean {
  return err instanceof ConnectError && err.code === Code.NotFound;
}
