import type { DescMethod, MessageInitShape, MessageShape } from "@bufbuild/protobuf";
import type { ContextValues } from "@connectrpc/connect";
import type { Dialect, FieldLocations } from "./rest-errors.ts";
import type { RouteDocs } from "./schema-builder.ts";

/** What a REST binder sees of a request. */
export interface RestInput {
  /** Parsed JSON body; `undefined` when the request has none. Invalid JSON never reaches binders. */
  body: unknown;
  query: Record<string, string | string[] | undefined>;
  params: Record<string, string>;
  /**
   * The context values the service method will see (`ctx.values`, the caller already set): a binder may hand the
   * service what it already knows about the request under a key the service defines.
   */
  values: ContextValues;
}

/**
 * One REST path mapped onto one service method: the binder turns the request into the RPC request message
 * (throwing ValidationError with FastAPI locations), the shaper turns the RPC response into the exact JSON of the
 * reference. No business logic lives here.
 */
export interface RestRoute {
  method: "GET" | "POST" | "PUT" | "DELETE" | "PATCH";
  /**
   * Fastify path (`:name` parameters), or FastAPI's `{name:path}` for one parameter spanning segments followed by
   * a fixed ending (routes sharing the part before it are told apart by that ending, in table order).
   */
  url: string;
  /** The RPC this route calls, by its descriptor (e.g. `SettingsService.method.getSettings`). */
  rpc: DescMethod;
  dialect: Dialect;
  /** Where violations raised by the service are located (default "body"). */
  location?: "body" | "query" | "path";
  /** Service fields bound from elsewhere than `location` (e.g. `{repository: ["path", "repository_name"]}`). */
  fieldLocations?: FieldLocations;
  successStatus?: number;
  /**
   * The body of a 404 (NOT_FOUND from the service or the shaper), where the reference answers its own shape; a
   * function builds it from the request's path parameters (the reference names the id it did not find).
   */
  notFoundBody?: unknown;
  /** The body must be present (FastAPI: missing body → 422 at ["body"]). */
  bodyRequired?: boolean;
  bind: (input: RestInput) => unknown;
  shape: (response: never) => unknown;
  /** Server-streaming method: the shaper is applied to each message, written as one JSON array. */
  stream?: boolean;
  /**
   * The method rewrites the caller's user document (settings, tokens, secrets): held to the user's write rate,
   * which the gateway checks before the body is read (RESOURCE_EXHAUSTED, 429), so that refused writes cost
   * nothing to parse.
   */
  writesUserData?: boolean;
  /**
   * A browser that made the call with its session cookie (not with a key in X-Session-API-Key) is signed out by
   * the answer: its session cookie is cleared (the OpenHands UI's Logout, in open-source mode, is this call).
   */
  endsBrowserSession?: boolean;
  /** OpenAPI summary. */
  summary: string;
  /** OpenAPI details: body and query models, and the response where the shaper changes the RPC output. */
  docs?: RouteDocs;
}

/** Routes that need no session key and map to no RPC (liveness, docs). */
export interface PlainRoute {
  method: "GET";
  url: string;
  handler: () => unknown;
}

/**
 * Builds a route with its binder and shaper checked against the method's request and response messages (for a
 * server-streaming method, the shaper takes each message).
 */
export function route<M extends DescMethod>(
  r: Omit<RestRoute, "rpc" | "bind" | "shape"> & {
    rpc: M;
    bind: (input: RestInput) => MessageInitShape<M["input"]>;
    shape: (response: MessageShape<M["output"]>) => unknown;
  },
): RestRoute {
  return r as unknown as RestRoute;
}

/** RPCs deliberately without a REST route (streaming status feeds have no reference path). */
export const RPC_ONLY: ReadonlySet<string> = new Set([
  "workspace.v1.SandboxService/WatchSandboxes",
  "workspace.v1.EventService/WatchConversationEvents",
]);
