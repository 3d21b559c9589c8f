import { list, object } from "../../core/model/containers.ts";
import { int } from "../../core/model/numbers.ts";
import { str } from "../../core/model/scalars.ts";
import { validate } from "../../core/model/validate.ts";
import {
  type SandboxInfo,
  SandboxInfoSchema,
  SandboxService,
  SandboxStatus,
} from "../../gen/workspace/v1/sandbox_pb.js";
import {
  type SandboxSpecInfo,
  SandboxSpecInfoSchema,
  SandboxSpecService,
} from "../../gen/workspace/v1/sandbox_spec_pb.js";
import { type RestInput, type RestRoute, route } from "./rest-route.ts";
import { idsQuery, iso, many, PAGE_QUERY, pathParam, present, single } from "./route-kit.ts";

/**
 * Query of the spec and sandbox searches: page_id, limit (range checked by the service so RPC callers get the same
 * rule).
 */
const pageQuery = object(
  { page_id: { schema: str() }, limit: { schema: int() } },
  { title: "PageQuery", extra: "ignore" },
);

function bindPage(query: RestInput["query"]): { pageId?: string; limit?: number } {
  const q = validate(pageQuery, present({ page_id: single(query.page_id), limit: single(query.limit) }), [
    "query",
  ]);
  return {
    ...(q.page_id === undefined ? {} : { pageId: q.page_id }),
    ...(q.limit === undefined ? {} : { limit: q.limit }),
  };
}

const ids = (name: string) => (q: RestInput["query"]) =>
  validate(list(str()), many(q[name]), ["query", name]);

const statusName = (s: SandboxStatus): string => SandboxStatus[s] ?? "MISSING";

function shapeSandbox(s: SandboxInfo) {
  const running = s.status === SandboxStatus.RUNNING;
  return {
    id: s.id,
    created_by_user_id: s.createdByUserId ?? null,
    sandbox_spec_id: s.sandboxSpecId,
    status: statusName(s.status),
    session_api_key: running ? (s.sessionApiKey ?? null) : null,
    exposed_urls: running ? s.exposedUrls.map((u) => ({ name: u.name, url: u.url, port: u.port })) : null,
    created_at: iso(s.createdAt),
  };
}

function shapeSpec(s: SandboxSpecInfo) {
  return {
    id: s.id,
    command: s.command.length > 0 ? s.command : null,
    created_at: iso(s.createdAt),
    initial_env: s.initialEnv,
    working_dir: s.workingDir,
  };
}

const success = (r: { success: boolean }) => ({ success: r.success });

/** /api/v1/sandboxes and /api/v1/sandbox-specs. */
export const v1SandboxRoutes: RestRoute[] = [
  route({
    method: "GET",
    url: "/api/v1/sandbox-specs/search",
    rpc: SandboxSpecService.method.searchSandboxSpecs,
    dialect: "v1",
    location: "query",
    summary: "List sandbox specs (first is the default)",
    docs: { query: PAGE_QUERY },
    bind: ({ query }) => bindPage(query),
    shape: (r) => ({
      items: r.items.map(shapeSpec),
      next_page_id: r.nextPageId ?? null,
    }),
  }),
  route({
    method: "GET",
    url: "/api/v1/sandbox-specs",
    rpc: SandboxSpecService.method.batchGetSandboxSpecs,
    dialect: "v1",
    location: "query",
    summary: "Get sandbox specs by id (aligned, null when unknown)",
    docs: { query: idsQuery("id"), response: (s) => s.array(s.nullable(s.message(SandboxSpecInfoSchema))) },
    bind: ({ query }) => ({ id: ids("id")(query) }),
    shape: (r) => r.items.map((i) => (i.spec ? shapeSpec(i.spec) : null)),
  }),
  route({
    method: "GET",
    url: "/api/v1/sandboxes/search",
    rpc: SandboxService.method.searchSandboxes,
    dialect: "v1",
    location: "query",
    summary: "List the caller's sandboxes, newest first",
    docs: { query: PAGE_QUERY },
    bind: ({ query }) => bindPage(query),
    shape: (r) => ({
      items: r.items.map(shapeSandbox),
      next_page_id: r.nextPageId ?? null,
    }),
  }),
  route({
    method: "GET",
    url: "/api/v1/sandboxes",
    rpc: SandboxService.method.batchGetSandboxes,
    dialect: "v1",
    location: "query",
    summary: "Get sandboxes by id (aligned, null when unknown or not owned)",
    docs: { query: idsQuery("id"), response: (s) => s.array(s.nullable(s.message(SandboxInfoSchema))) },
    bind: ({ query }) => ({ id: ids("id")(query) }),
    shape: (r) => r.items.map((i) => (i.sandbox ? shapeSandbox(i.sandbox) : null)),
  }),
  route({
    method: "POST",
    url: "/api/v1/sandboxes",
    rpc: SandboxService.method.startSandbox,
    dialect: "v1",
    location: "query",
    summary: "Start a sandbox (query sandbox_spec_id; default spec when absent)",
    docs: {
      query: { sandbox_spec_id: { schema: { type: "string" } } },
      response: (s) => s.message(SandboxInfoSchema),
    },
    bind: ({ query }) => {
      const q = validate(
        object({ sandbox_spec_id: { schema: str() } }, { extra: "ignore" }),
        present({ sandbox_spec_id: single(query.sandbox_spec_id) }),
        ["query"],
      );
      return q.sandbox_spec_id === undefined ? {} : { sandboxSpecId: q.sandbox_spec_id };
    },
    shape: (r) => (r.sandbox ? shapeSandbox(r.sandbox) : null),
  }),
  ...(["pause", "resume"] as const).map((action) =>
    route({
      method: "POST",
      url: `/api/v1/sandboxes/:sandbox_id/${action}`,
      rpc: SandboxService.method[`${action}Sandbox`],
      dialect: "v1",
      location: "path",
      summary: `${action === "pause" ? "Pause" : "Resume"} a sandbox (idempotent)`,
      bind: ({ params }) => ({ sandboxId: pathParam(params.sandbox_id, "sandbox_id") }),
      shape: success,
    }),
  ),
  route({
    method: "DELETE",
    url: "/api/v1/sandboxes/:sandbox_id",
    rpc: SandboxService.method.deleteSandbox,
    dialect: "v1",
    location: "path",
    summary: "Stop and remove a sandbox and its workspace",
    bind: ({ params }) => ({ sandboxId: pathParam(params.sandbox_id, "sandbox_id") }),
    shape: success,
  }),
];
