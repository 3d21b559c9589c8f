import { providerFromName, providerName, triggerName } from "../../codec/conversation-json.ts";
import { PROVIDERS } from "../../codec/settings-fields.ts";
import { notFound } from "../../core/errors.ts";
import { newHexId } from "../../core/ids.ts";
import { list, nullable, object } from "../../core/model/containers.ts";
import { int } from "../../core/model/numbers.ts";
import { anyValue, bool, str } from "../../core/model/scalars.ts";
import { validate } from "../../core/model/validate.ts";
import { refine } from "../../core/model/validators.ts";
import { uuidHex } from "../../core/model-formats.ts";
import { branchProblem, repositoryProblem } from "../../domain/conversations/workspace-commands.ts";
import {
  type AppConversation,
  AppConversationService,
  type AppConversationStartRequest,
  type AppConversationStartTask,
  AppConversationStartTaskStatus,
  ConversationExecutionStatus,
  ConversationTrigger,
  type MessageContent,
} from "../../gen/workspace/v1/app_conversation_pb.js";
import { SandboxStatus } from "../../gen/workspace/v1/sandbox_pb.js";
import { type RestInput, type RestRoute, route } from "./rest-route.ts";
import { iso, PAGE_QUERY, pathParam, present, single } from "./route-kit.ts";
import type { JsonSchema } from "./schema-builder.ts";
import { bindUpdateConversation, updateConversationBodySchema } from "./v1-conversation-routes.ts";

/**
 * The legacy conversation family (`/api/conversations`) over V1 conversations, as the reference's
 * manage_conversations routes answer for V1 conversations (`_to_conversation_info`): the UI lists, opens, renames
 * and deletes conversations through these paths, and creates them here when its V1 flag is off.
 */

/** ConversationStatus of the legacy model, from the sandbox's status. */
const CONVERSATION_STATUS: Record<number, string> = {
  [SandboxStatus.RUNNING]: "RUNNING",
  [SandboxStatus.STARTING]: "STARTING",
  [SandboxStatus.PAUSED]: "STOPPED",
  [SandboxStatus.ERROR]: "ERROR",
  [SandboxStatus.MISSING]: "ARCHIVED",
};

/** RuntimeStatus of a RUNNING conversation, from the agent's execution status (unknown → STATUS$ERROR). */
const RUNTIME_STATUS: Record<number, string> = {
  [ConversationExecutionStatus.IDLE]: "STATUS$READY",
  [ConversationExecutionStatus.RUNNING]: "STATUS$READY",
  [ConversationExecutionStatus.PAUSED]: "STATUS$READY",
  [ConversationExecutionStatus.WAITING_FOR_CONFIRMATION]: "STATUS$READY",
  [ConversationExecutionStatus.FINISHED]: "STATUS$READY",
  [ConversationExecutionStatus.ERROR]: "STATUS$ERROR",
  [ConversationExecutionStatus.STUCK]: "STATUS$ERROR",
};

/** RuntimeStatus of a conversation still being started, from its start task's state. */
const STARTING_RUNTIME_STATUS: Record<number, string> = {
  [AppConversationStartTaskStatus.WORKING]: "STATUS$STARTING_RUNTIME",
  [AppConversationStartTaskStatus.WAITING_FOR_SANDBOX]: "STATUS$STARTING_RUNTIME",
  [AppConversationStartTaskStatus.PREPARING_REPOSITORY]: "STATUS$SETTING_UP_WORKSPACE",
  [AppConversationStartTaskStatus.RUNNING_SETUP_SCRIPT]: "STATUS$SETTING_UP_WORKSPACE",
  [AppConversationStartTaskStatus.SETTING_UP_GIT_HOOKS]: "STATUS$SETTING_UP_GIT_HOOKS",
  [AppConversationStartTaskStatus.SETTING_UP_SKILLS]: "STATUS$SETTING_UP_SKILLS",
  [AppConversationStartTaskStatus.STARTING_CONVERSATION]: "STATUS$RUNTIME_STARTED",
  [AppConversationStartTaskStatus.READY]: "STATUS$READY",
  [AppConversationStartTaskStatus.ERROR]: "STATUS$ERROR",
};

/** A V1 conversation as the legacy ConversationInfo. */
export function shapeConversationInfo(c: AppConversation) {
  const status = CONVERSATION_STATUS[c.sandboxStatus] ?? "STOPPED";
  return {
    conversation_id: c.id,
    title: c.title || `Conversation ${c.id}`,
    last_updated_at: iso(c.updatedAt),
    status,
    runtime_status: status === "RUNNING" ? (RUNTIME_STATUS[c.executionStatus ?? 0] ?? "STATUS$ERROR") : null,
    selected_repository: c.selectedRepository ?? null,
    selected_branch: c.selectedBranch ?? null,
    git_provider: providerName(c.gitProvider),
    trigger: triggerName(c.trigger),
    num_connections: 0,
    url: c.conversationUrl ?? null,
    session_api_key: c.sessionApiKey ?? null,
    created_at: iso(c.createdAt),
    pr_number: c.prNumber,
    conversation_version: "V1",
    sub_conversation_ids: c.subConversationIds,
  };
}

/** A conversation that does not exist yet, from the start task that names it (STARTING, or ERROR). */
export function shapeStartingInfo(t: AppConversationStartTask) {
  const r = t.request;
  const failed = t.status === AppConversationStartTaskStatus.ERROR;
  const id = r?.conversationId ?? t.appConversationId ?? "";
  return {
    conversation_id: id,
    title: `Conversation ${id}`,
    last_updated_at: iso(t.updatedAt),
    status: failed ? "ERROR" : "STARTING",
    runtime_status: STARTING_RUNTIME_STATUS[t.status] ?? null,
    selected_repository: r?.selectedRepository ?? null,
    selected_branch: r?.selectedBranch ?? null,
    git_provider: providerName(r?.gitProvider),
    trigger: triggerName(r?.trigger),
    num_connections: 0,
    url: null,
    session_api_key: null,
    created_at: iso(t.createdAt),
    pr_number: r?.prNumber ?? [],
    conversation_version: "V1",
    sub_conversation_ids: [],
  };
}

const listQuery = object(
  {
    page_id: { schema: str() },
    limit: { schema: int() },
    include_sub_conversations: { schema: bool() },
  },
  { title: "ConversationListQuery" },
);

function bindList(query: RestInput["query"]) {
  const q = validate(
    listQuery,
    present({
      page_id: single(query.page_id),
      limit: single(query.limit),
      include_sub_conversations: single(query.include_sub_conversations),
    }),
    ["query"],
  );
  return {
    // The reference's default page size here is 20 (the V1 searches default to 100).
    limit: q.limit ?? 20,
    ...(q.page_id === undefined ? {} : { pageId: q.page_id }),
    ...(q.include_sub_conversations === undefined
      ? {}
      : { includeSubConversations: q.include_sub_conversations }),
  };
}

const microagentQuery = object(
  {
    selected_repository: { schema: str(), required: true },
    page_id: { schema: str() },
    limit: { schema: int() },
  },
  { title: "MicroagentConversationsQuery" },
);

/** The microagent management listing's query (limit's range is the service's, for RPC callers too). */
function bindMicroagentList(query: RestInput["query"]) {
  const q = validate(
    microagentQuery,
    present({
      selected_repository: single(query.selected_repository),
      page_id: single(query.page_id),
      limit: single(query.limit),
    }),
    ["query"],
  );
  return {
    selectedRepository: q.selected_repository,
    ...(q.page_id === undefined ? {} : { pageId: q.page_id }),
    ...(q.limit === undefined ? {} : { limit: q.limit }),
  };
}

const optStr = { schema: nullable(str()) };

const suggestedTask = object(
  {
    git_provider: { schema: nullable(str()) },
    task_type: { schema: str(), required: true },
    repo: { schema: str(), required: true },
    issue_number: { schema: int(), required: true },
    title: { schema: str(), required: true },
  },
  { title: "SuggestedTask" },
);

const createMicroagent = object(
  {
    repo: { schema: str(), required: true },
    git_provider: { schema: nullable(str()) },
    title: optStr,
  },
  { title: "CreateMicroagent" },
);

const unsupported = (what: string) =>
  refine(anyValue(), (v) =>
    v === null || v === undefined ? null : `${what} is not supported by this server`,
  );

/** Body of the legacy POST /api/conversations (InitSessionRequest; unknown keys are rejected, as upstream). */
export const initSessionBodySchema = object(
  {
    repository: {
      schema: nullable(refine(str(), (v) => (v === "" ? null : repositoryProblem(v)))),
    },
    git_provider: {
      schema: nullable(
        refine(str(), (v) => (PROVIDERS.includes(v as never) ? null : `unknown provider ${v}`)),
      ),
    },
    selected_branch: { schema: nullable(refine(str(), (v) => (v === "" ? null : branchProblem(v)))) },
    initial_user_msg: optStr,
    image_urls: { schema: nullable(list(str(), { maxItems: 100 })) },
    replay_json: {
      schema: refine(nullable(str()), (v) =>
        v === null ? null : "replaying a trajectory is not supported by this server",
      ),
    },
    suggested_task: { schema: nullable(suggestedTask) },
    create_microagent: { schema: nullable(createMicroagent) },
    conversation_instructions: optStr,
    mcp_config: {
      schema: unsupported("mcp_config here (set MCP servers in the settings)"),
    },
  },
  { title: "InitSessionRequest", extra: "forbid" },
);

/**
 * The legacy create as a V1 start request. The conversation id is chosen here, so that the answer can name the
 * conversation at once (the legacy UI opens it right away and polls it while it is STARTING).
 */
export function bindInitSession(body: unknown): { request: AppConversationStartRequest } {
  const b = validate(initSessionBodySchema, body, ["body"]);
  let trigger = ConversationTrigger.GUI;
  let text = b.initial_user_msg ?? null;
  let repository = b.repository || null;
  let provider = b.git_provider ?? null;
  if (b.suggested_task) {
    const t = b.suggested_task;
    trigger = ConversationTrigger.SUGGESTED_TASK;
    text = `Please work on ${t.task_type.toLowerCase().replaceAll("_", " ")} #${t.issue_number} ("${t.title}") in ${t.repo}.`;
    repository ??= t.repo;
    provider ??= t.git_provider ?? null;
  } else if (b.create_microagent) {
    trigger = ConversationTrigger.MICROAGENT_MANAGEMENT;
    repository ??= b.create_microagent.repo;
    provider ??= b.create_microagent.git_provider ?? null;
  }
  const content: MessageContent[] = [];
  if (text !== null && text !== "")
    content.push({
      $typeName: "workspace.v1.MessageContent",
      content: { case: "text", value: { $typeName: "workspace.v1.TextContent", text, cachePrompt: false } },
    });
  if ((b.image_urls ?? []).length > 0)
    content.push({
      $typeName: "workspace.v1.MessageContent",
      content: {
        case: "image",
        value: { $typeName: "workspace.v1.ImageContent", imageUrls: b.image_urls ?? [], cachePrompt: false },
      },
    });
  const gitProvider = providerFromName(provider);
  const request: AppConversationStartRequest = {
    $typeName: "workspace.v1.AppConversationStartRequest",
    conversationId: newHexId(),
    ...(content.length > 0
      ? {
          initialMessage: {
            $typeName: "workspace.v1.SendMessageRequest",
            role: 1,
            content,
            run: true,
          },
        }
      : {}),
    ...(b.conversation_instructions ? { systemMessageSuffix: b.conversation_instructions } : {}),
    processors: [],
    ...(repository === null ? {} : { selectedRepository: repository }),
    ...(b.selected_branch ? { selectedBranch: b.selected_branch } : {}),
    ...(gitProvider === undefined ? {} : { gitProvider }),
    trigger,
    prNumber: [],
    agentType: 1,
  };
  return { request };
}

const conversationIdParam = ({ params }: RestInput) => ({
  id: validate(uuidHex(), pathParam(params.conversation_id, "conversation_id"), ["path", "conversation_id"]),
});

const nullable$ = (s: JsonSchema): JsonSchema => ({ anyOf: [s, { type: "null" }] });
const str$ = { type: "string" };
const conversationInfoSchema: JsonSchema = {
  type: "object",
  required: ["conversation_id", "title", "status", "conversation_version"],
  properties: {
    conversation_id: str$,
    title: str$,
    last_updated_at: nullable$({ type: "string", format: "date-time" }),
    status: { type: "string", enum: ["STARTING", "RUNNING", "STOPPED", "ARCHIVED", "ERROR"] },
    runtime_status: nullable$(str$),
    selected_repository: nullable$(str$),
    selected_branch: nullable$(str$),
    git_provider: nullable$(str$),
    trigger: nullable$(str$),
    num_connections: { type: "integer" },
    url: nullable$(str$),
    session_api_key: nullable$(str$),
    created_at: { type: "string", format: "date-time" },
    pr_number: { type: "array", items: { type: "integer" } },
    conversation_version: { type: "string", enum: ["V0", "V1"] },
    sub_conversation_ids: { type: "array", items: str$ },
  },
};

/** The legacy /api/conversations routes. */
export const legacyConversationRoutes: RestRoute[] = [
  route({
    method: "GET",
    url: "/api/conversations",
    rpc: AppConversationService.method.searchAppConversations,
    dialect: "legacy",
    location: "query",
    summary: "List the caller's conversations, newest first (legacy ConversationInfoResultSet, page size 20)",
    docs: {
      query: {
        ...PAGE_QUERY,
        limit: { schema: { type: "integer", minimum: 1, maximum: 100, default: 20 } },
        include_sub_conversations: { schema: { type: "boolean", default: false } },
      },
      response: conversationInfoResultSet,
    },
    bind: ({ query }) => bindList(query),
    shape: shapeConversationInfoResultSet,
  }),
  route({
    method: "GET",
    url: "/api/conversations/:conversation_id",
    rpc: AppConversationService.method.getAppConversation,
    dialect: "legacy",
    location: "path",
    summary:
      "Get one conversation (legacy ConversationInfo; STARTING while its start runs; null when unknown)",
    docs: { response: () => nullable$(conversationInfoSchema) },
    bind: conversationIdParam,
    shape: (r) =>
      r.conversation
        ? shapeConversationInfo(r.conversation)
        : r.startTask
          ? shapeStartingInfo(r.startTask)
          : null,
  }),
  route({
    method: "GET",
    url: "/api/conversations/:conversation_id/config",
    rpc: AppConversationService.method.getAppConversation,
    dialect: "legacy",
    location: "path",
    // The reference's answer for a conversation it has not got (FastAPI HTTPException naming the id).
    notFoundBody: (params: Record<string, string>) => ({
      detail: `Conversation ${params.conversation_id} not found`,
    }),
    summary:
      "The conversation's runtime config: {runtime_id: its sandbox id, session_id: its id}; 404 for an unknown id or one still starting",
    docs: {
      response: () => ({
        type: "object",
        required: ["runtime_id", "session_id"],
        properties: { runtime_id: str$, session_id: str$ },
      }),
    },
    bind: conversationIdParam,
    // As the reference: only a conversation that exists has a config (not one whose start is still running).
    shape: (r) => {
      if (r.conversation === undefined) throw notFound();
      return { runtime_id: r.conversation.sandboxId, session_id: r.conversation.id };
    },
  }),
  route({
    method: "PATCH",
    url: "/api/conversations/:conversation_id",
    rpc: AppConversationService.method.updateAppConversation,
    dialect: "legacy",
    location: "body",
    bodyRequired: true,
    notFoundBody: { status: "error", message: "Conversation not found", msg_id: "CONVERSATION$NOT_FOUND" },
    summary: "Rename a conversation: true, or 404 for an unknown id",
    docs: { body: updateConversationBodySchema, response: () => ({ type: "boolean" }) },
    bind: bindUpdateConversation,
    shape: () => true,
  }),
  route({
    method: "DELETE",
    url: "/api/conversations/:conversation_id",
    rpc: AppConversationService.method.deleteAppConversation,
    dialect: "legacy",
    location: "path",
    summary:
      "Delete a conversation (and its sandbox when no other conversation uses it): true, false if unknown",
    docs: { response: () => ({ type: "boolean" }) },
    bind: conversationIdParam,
    shape: (r: { deleted: boolean }) => r.deleted,
  }),
  route({
    method: "GET",
    url: "/api/microagent-management/conversations",
    rpc: AppConversationService.method.searchMicroagentConversations,
    dialect: "legacy",
    location: "query",
    summary:
      "The caller's microagent management conversations of one repository (legacy ConversationInfoResultSet, page size 20; closed pull requests left out)",
    docs: {
      query: {
        selected_repository: { schema: { type: "string" }, required: true },
        ...PAGE_QUERY,
        limit: { schema: { type: "integer", minimum: 1, maximum: 100, default: 20 } },
      },
      response: conversationInfoResultSet,
    },
    bind: ({ query }) => bindMicroagentList(query),
    shape: shapeConversationInfoResultSet,
  }),
  route({
    method: "POST",
    url: "/api/conversations",
    rpc: AppConversationService.method.startAppConversation,
    dialect: "legacy",
    location: "body",
    bodyRequired: true,
    summary: "Create a conversation (a V1 start): answers its id at once; it is STARTING until ready",
    docs: {
      body: initSessionBodySchema,
      response: () => ({
        type: "object",
        required: ["status", "conversation_id"],
        properties: {
          status: str$,
          conversation_id: str$,
          message: nullable$(str$),
          conversation_status: nullable$(str$),
        },
      }),
    },
    bind: ({ body }) => bindInitSession(body),
    shape: (r) => ({
      status: "ok",
      conversation_id: r.task?.request?.conversationId ?? null,
      message: null,
      conversation_status: r.task?.status === AppConversationStartTaskStatus.ERROR ? "ERROR" : "STARTING",
    }),
  }),
];

/** The reference's ConversationInfoResultSet (OpenAPI schema). */
function conversationInfoResultSet() {
  return {
    type: "object",
    required: ["results", "next_page_id"],
    properties: {
      results: { type: "array", items: conversationInfoSchema },
      next_page_id: nullable$(str$),
    },
  };
}

/** A page of conversations as the reference's ConversationInfoResultSet. */
function shapeConversationInfoResultSet(r: { items: AppConversation[]; nextPageId?: string | undefined }) {
  return { results: r.items.map(shapeConversationInfo), next_page_id: r.nextPageId ?? null };
}
