/**
 * The AppConversationService RPCs, each a thin step over the service's jobs: starts run by a StartTaskRunner
 * (start-task-runner.ts), conversations shown with their live status (conversation-views.ts), renames and deletes
 * (conversation-writes.ts), the requests' ids and filters (conversation-filters.ts).
 */
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { type Clock, systemClock } from "../../core/clock.ts";
import { requireCaller } from "../../core/context.ts";
import { ValidationError } from "../../core/errors.ts";
import { newHexId } from "../../core/ids.ts";
import { valueError } from "../../core/model/schema.ts";
import type { PageTokens } from "../../core/page-token.ts";
import { localRepositoryFolder } from "../../core/repository-names.ts";
import {
  type AppConversationService as AppConversationServiceDesc,
  AppConversationStartTaskSortOrder,
  type BatchGetAppConversationsRequest,
  type BatchGetAppConversationsResponse,
  type BatchGetStartTasksRequest,
  type BatchGetStartTasksResponse,
  type CountAppConversationsRequest,
  type CountAppConversationsResponse,
  type CountStartTasksRequest,
  type CountStartTasksResponse,
  type DeleteAppConversationRequest,
  type DeleteAppConversationResponse,
  type GetAppConversationRequest,
  type GetAppConversationResponse,
  type SearchAppConversationsRequest,
  type SearchAppConversationsResponse,
  type SearchMicroagentConversationsRequest,
  type SearchMicroagentConversationsResponse,
  type SearchStartTasksRequest,
  type SearchStartTasksResponse,
  type StartAppConversationRequest,
  type StartAppConversationResponse,
  type StreamStartAppConversationRequest,
  type StreamStartAppConversationResponse,
  type UpdateAppConversationRequest,
  type UpdateAppConversationResponse,
} from "../../gen/workspace/v1/app_conversation_pb.js";
import { parseStartTaskChange } from "../../ports/change-log.ts";
import type { StartTaskRecord } from "../../ports/conversation-repository.ts";
import type { EventRepository } from "../../ports/event-repository.ts";
import { readPage } from "../paging.ts";
import { checkId, checkIds, conversationFilter, startTaskFilter } from "./conversation-filters.ts";
import { ConversationViews, toTask } from "./conversation-views.ts";
import { ConversationWrites } from "./conversation-writes.ts";
import type { ConversationSandboxes } from "./ports.ts";
import { checkStartRequest } from "./start-request.ts";
import { StartTaskRunner, type StartTaskRunnerOptions } from "./start-task-runner.ts";
import { titleViolation } from "./title.ts";

export { TOO_MANY_ATTEMPTS_DETAIL } from "./start-task-runner.ts";

export interface AppConversationServiceOptions extends StartTaskRunnerOptions {
  /** What the conversation RPCs need of the sandboxes (SandboxService; the starts' needs are sandboxStarts). */
  sandboxes: ConversationSandboxes;
  tokens: PageTokens;
  /** How long a listing waits for an agent server's execution status (default 1000 ms). */
  liveStatusTimeoutMs?: number;
  /** The conversations' events, deleted with them. */
  events?: Pick<EventRepository, "deleteConversation">;
  /** Pull request states, for the microagent management listing (default: every pull request counts as open). */
  pullRequests?: PullRequestStates;
  /**
   * Folders a conversation may start from by local path or file:// URL (LOCAL_REPOSITORY_ROOTS, bound read-only
   * into sandboxes); a local repository elsewhere is refused up front. Undefined: any local path (embedding,
   * tests); the server always passes its configured list, empty by default.
   */
  localRepositoryRoots?: readonly string[];
}

/** Whether pull requests are still open, as a user's own git provider tokens see them. */
export interface PullRequestStates {
  /** Aligned with `prs`; true where the state cannot be told. Never rejects. */
  open(
    userId: string,
    prs: readonly { provider: string; repository: string; number: number }[],
  ): Promise<boolean[]>;
}

/** The trigger of conversations started from the UI's microagent management page. */
const MICROAGENT_TRIGGER = "microagent_management";
/** The microagent management listing's default page size (the reference's). */
const MICROAGENT_PAGE = 20;

const TERMINAL = new Set(["READY", "ERROR"]);

/**
 * The AppConversationService RPCs: starting conversations (an asynchronous start task per start, saved at every
 * state, run by a StartTaskRunner) and listing them with live status from their sandboxes. Every read and write is scoped to the caller: another user's
 * conversations and tasks behave as if they did not exist.
 */
export class AppConversationService implements ServiceImpl<typeof AppConversationServiceDesc> {
  readonly #o: AppConversationServiceOptions;
  readonly #clock: Clock;
  readonly #log: (msg: string, data?: Record<string, unknown>) => void;
  /** The starts this server runs, their leases and takeovers. */
  readonly #starts: StartTaskRunner;
  /** Conversations with their live status, as the reads answer them. */
  readonly #views: ConversationViews;
  /** Renames and deletes. */
  readonly #writes: ConversationWrites;

  constructor(options: AppConversationServiceOptions) {
    this.#o = options;
    this.#clock = options.clock ?? systemClock;
    this.#log = options.log ?? (() => {});
    this.#starts = new StartTaskRunner({ ...options, clock: this.#clock, log: this.#log });
    this.#views = new ConversationViews({
      sandboxes: options.sandboxes,
      agent: options.agent,
      liveStatusTimeoutMs: options.liveStatusTimeoutMs ?? 1000,
    });
    this.#writes = new ConversationWrites({
      conversations: options.conversations,
      startTasks: options.startTasks,
      sandboxes: options.sandboxes,
      agent: options.agent,
      events: options.events,
      clock: this.#clock,
      log: this.#log,
    });
  }

  /**
   * The start request checked (checkStartRequest), and a local repository it names (`@local/<folder>`) listed:
   * INVALID_ARGUMENT at selected_repository otherwise, before anything is started.
   */
  async #checkedRequest(
    req: StartAppConversationRequest["request"],
  ): Promise<NonNullable<StartAppConversationRequest["request"]>> {
    const request = checkStartRequest(req, this.#o.localRepositoryRoots);
    const repo = request.selectedRepository;
    if (repo && localRepositoryFolder(repo) !== null) {
      const listed = (await this.#o.localRepositories?.list()) ?? [];
      if (!listed.some((r) => r.name === repo))
        throw new ValidationError([
          valueError(
            ["selected_repository"],
            this.#o.localRepositories === undefined
              ? "selected_repository names a local repository, but this server offers none (LOCAL_REPOSITORY_ROOTS)"
              : `selected_repository names no local repository of this server: ${repo} (GET /api/user/repositories lists them)`,
            repo,
          ),
        ]);
    }
    return request;
  }

  /** The periodic sweep: saves start ends whose save failed; returns how many it saved. */
  sweepStartTasks(): Promise<number> {
    return this.#starts.sweep();
  }

  /** Keeps this server's start leases and takes over expired ones (see StartTaskRunner.startLeases). */
  startLeases(): void {
    this.#starts.startLeases();
  }

  /** One lease round (see StartTaskRunner.maintainLeases); returns how many starts it resumed. */
  maintainLeases(): Promise<number> {
    return this.#starts.maintainLeases();
  }

  /** Calls `listener` with the state a start task enters, on every change (metrics). */
  onTaskChange(listener: (status: string) => void): void {
    this.#starts.onTaskChange(listener);
  }

  /** Refuses new starts and hands running ones over (see StartTaskRunner.shutdown). */
  shutdown(graceMs?: number): Promise<void> {
    return this.#starts.shutdown(graceMs);
  }

  async startAppConversation(
    req: StartAppConversationRequest,
    ctx: HandlerContext,
  ): Promise<StartAppConversationResponse> {
    const { userId } = requireCaller(ctx);
    const request = await this.#checkedRequest(req.request);
    const task = await this.#starts.begin(userId, request, newHexId());
    return { $typeName: "workspace.v1.StartAppConversationResponse", task: toTask(task) };
  }

  /**
   * Starts like startAppConversation, then streams every state of the task until READY or ERROR, whichever server
   * runs it (a server that resumes it after this one stopped included).
   */
  async *streamStartAppConversation(
    req: StreamStartAppConversationRequest,
    ctx: HandlerContext,
  ): AsyncGenerator<StreamStartAppConversationResponse> {
    const { userId } = requireCaller(ctx);
    const request = await this.#checkedRequest(req.request);
    const id = newHexId();
    const wrap = (t: StartTaskRecord): StreamStartAppConversationResponse => ({
      $typeName: "workspace.v1.StreamStartAppConversationResponse",
      task: toTask(t),
    });
    // The log position before the start runs, so that no state is missed.
    const from = await this.#o.changes.head();
    const task = await this.#starts.begin(userId, request, id);
    yield wrap(task);
    if (TERMINAL.has(task.status)) return;
    let last = task;
    try {
      for await (const c of this.#o.changes.follow(
        from,
        (c) => c.topic === "start-task" && c.key === id && c.ownerId === userId,
        ctx.signal,
      )) {
        const t = parseStartTaskChange(c.body);
        // The log also holds the state already sent (the task as inserted).
        if (t === null || (t.status === last.status && t.updatedAt.getTime() <= last.updatedAt.getTime()))
          continue;
        last = t;
        yield wrap(t);
        if (TERMINAL.has(t.status)) return;
      }
    } catch (err) {
      // The client went away: the start goes on in the background.
      if ((err as { name?: string }).name !== "AbortError") throw err;
    }
  }

  async searchAppConversations(
    req: SearchAppConversationsRequest,
    ctx: HandlerContext,
  ): Promise<SearchAppConversationsResponse> {
    const { userId } = requireCaller(ctx);
    const scope = `app-conversations:${userId}`;
    const page = readPage(this.#o.tokens, scope, req.pageId, req.limit);
    const result = await this.#o.conversations.search(userId, conversationFilter(req), page);
    return {
      $typeName: "workspace.v1.SearchAppConversationsResponse",
      items: await this.#views.withLiveStatus(userId, result.items),
      ...(result.next ? { nextPageId: this.#o.tokens.encode(result.next, scope) } : {}),
    };
  }

  async countAppConversations(
    req: CountAppConversationsRequest,
    ctx: HandlerContext,
  ): Promise<CountAppConversationsResponse> {
    const { userId } = requireCaller(ctx);
    const n = await this.#o.conversations.count(userId, conversationFilter(req));
    return { $typeName: "workspace.v1.CountAppConversationsResponse", count: BigInt(n) };
  }

  async batchGetAppConversations(
    req: BatchGetAppConversationsRequest,
    ctx: HandlerContext,
  ): Promise<BatchGetAppConversationsResponse> {
    const { userId } = requireCaller(ctx);
    const ids = checkIds(req.ids);
    const records = await this.#o.conversations.getMany([...new Set(ids)], userId);
    const live = await this.#views.withLiveStatus(userId, records);
    const byId = new Map(live.map((c) => [c.id, c]));
    return {
      $typeName: "workspace.v1.BatchGetAppConversationsResponse",
      items: ids.map((id) => {
        const c = byId.get(id);
        return { $typeName: "workspace.v1.AppConversationSlot", ...(c ? { conversation: c } : {}) };
      }),
    };
  }

  async searchStartTasks(
    req: SearchStartTasksRequest,
    ctx: HandlerContext,
  ): Promise<SearchStartTasksResponse> {
    const { userId } = requireCaller(ctx);
    const ascending =
      req.sortOrder === AppConversationStartTaskSortOrder.CREATED_AT ||
      req.sortOrder === AppConversationStartTaskSortOrder.UPDATED_AT;
    const scope = `start-tasks:${userId}:${ascending ? "asc" : "desc"}`;
    const filter = startTaskFilter(req);
    const page = readPage(this.#o.tokens, scope, req.pageId, req.limit);
    const result = await this.#o.startTasks.search(userId, filter, page, ascending);
    return {
      $typeName: "workspace.v1.SearchStartTasksResponse",
      items: result.items.map(toTask),
      ...(result.next ? { nextPageId: this.#o.tokens.encode(result.next, scope) } : {}),
    };
  }

  async countStartTasks(req: CountStartTasksRequest, ctx: HandlerContext): Promise<CountStartTasksResponse> {
    const { userId } = requireCaller(ctx);
    const n = await this.#o.startTasks.count(userId, startTaskFilter(req));
    return { $typeName: "workspace.v1.CountStartTasksResponse", count: BigInt(n) };
  }

  async batchGetStartTasks(
    req: BatchGetStartTasksRequest,
    ctx: HandlerContext,
  ): Promise<BatchGetStartTasksResponse> {
    const { userId } = requireCaller(ctx);
    const ids = checkIds(req.ids);
    const records = await this.#o.startTasks.getMany([...new Set(ids)], userId);
    const byId = new Map(records.map((r) => [r.id, r]));
    return {
      $typeName: "workspace.v1.BatchGetStartTasksResponse",
      items: ids.map((id) => {
        const t = byId.get(id);
        return { $typeName: "workspace.v1.StartTaskSlot", ...(t ? { task: toTask(t) } : {}) };
      }),
    };
  }

  /**
   * One conversation with its live status; while it does not exist yet but a start named its id (the legacy
   * create), that start's task. Neither when the caller has no such conversation.
   */
  async getAppConversation(
    req: GetAppConversationRequest,
    ctx: HandlerContext,
  ): Promise<GetAppConversationResponse> {
    const { userId } = requireCaller(ctx);
    const id = checkId(req.id, "id");
    const record = await this.#o.conversations.get(id, userId);
    if (record !== null) {
      const [conversation] = await this.#views.withLiveStatus(userId, [record]);
      return {
        $typeName: "workspace.v1.GetAppConversationResponse",
        ...(conversation ? { conversation } : {}),
      };
    }
    const task = await this.#o.startTasks.findPending(userId, id);
    return {
      $typeName: "workspace.v1.GetAppConversationResponse",
      ...(task === null ? {} : { startTask: toTask(task) }),
    };
  }

  /**
   * The caller's microagent management conversations of one repository, newest first: trigger
   * MICROAGENT_MANAGEMENT and exactly that repository, without sub-conversations, leaving out those whose last
   * pull request is closed or merged (checked only when the conversation names a repository, a provider and a
   * pull request, as the reference does). INVALID_ARGUMENT for a missing repository or bad paging.
   */
  async searchMicroagentConversations(
    req: SearchMicroagentConversationsRequest,
    ctx: HandlerContext,
  ): Promise<SearchMicroagentConversationsResponse> {
    const { userId } = requireCaller(ctx);
    const repository = req.selectedRepository;
    if (repository.trim() === "")
      throw new ValidationError([
        { type: "missing", loc: ["query", "selected_repository"], msg: "Field required", input: null },
      ]);
    const scope = `microagent-conversations:${userId}:${repository}`;
    const page = readPage(this.#o.tokens, scope, req.pageId, req.limit ?? MICROAGENT_PAGE);
    const result = await this.#o.conversations.search(
      userId,
      { includeSubConversations: false, triggerEq: MICROAGENT_TRIGGER, selectedRepositoryEq: repository },
      page,
    );
    const checked = result.items.filter(
      (r) => r.prNumber.length > 0 && r.selectedRepository !== null && r.gitProvider !== null,
    );
    const open = await (this.#o.pullRequests?.open(
      userId,
      checked.map((r) => ({
        provider: r.gitProvider ?? "",
        repository: r.selectedRepository ?? "",
        number: r.prNumber.at(-1) ?? 0,
      })),
    ) ?? Promise.resolve(checked.map(() => true)));
    const closed = new Set(checked.filter((_, i) => open[i] === false).map((r) => r.id));
    return {
      $typeName: "workspace.v1.SearchMicroagentConversationsResponse",
      items: await this.#views.withLiveStatus(
        userId,
        result.items.filter((r) => !closed.has(r.id)),
      ),
      ...(result.next ? { nextPageId: this.#o.tokens.encode(result.next, scope) } : {}),
    };
  }

  /** Renames a conversation (title trimmed, 1..MAX_TITLE characters). NOT_FOUND for an unknown id. */
  async updateAppConversation(
    req: UpdateAppConversationRequest,
    ctx: HandlerContext,
  ): Promise<UpdateAppConversationResponse> {
    const { userId } = requireCaller(ctx);
    const id = checkId(req.id, "id");
    const patch: { title?: string } = {};
    if (req.title !== undefined) {
      const problem = titleViolation(req.title, ["title"]);
      if (problem !== null) throw new ValidationError([problem]);
      patch.title = req.title.trim();
    }
    const record = await this.#writes.update(userId, id, patch);
    const [conversation] = await this.#views.withLiveStatus(userId, [record]);
    return {
      $typeName: "workspace.v1.UpdateAppConversationResponse",
      ...(conversation ? { conversation } : {}),
    };
  }

  /**
   * Deletes a conversation with its sub-conversations and their events, then its sandbox when no remaining
   * conversation of the caller uses it. `deleted` false for an unknown id.
   */
  async deleteAppConversation(
    req: DeleteAppConversationRequest,
    ctx: HandlerContext,
  ): Promise<DeleteAppConversationResponse> {
    const { userId } = requireCaller(ctx);
    const id = checkId(req.id, "id");
    return {
      $typeName: "workspace.v1.DeleteAppConversationResponse",
      ...(await this.#writes.delete(userId, id)),
    };
  }
}
