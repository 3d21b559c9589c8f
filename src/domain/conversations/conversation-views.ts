/**
 * Conversations and start tasks as the API shows them: a stored conversation with its sandbox's live status and,
 * while that runs, the agent's execution status, its URL and session key; a stored start task as a message. The
 * reads of the conversation RPCs (app-conversation-service.ts) answer through it.
 */
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  executionStatusFromName,
  metricsFromJson,
  providerFromName,
  toPbTaskStatus,
  triggerFromName,
} from "../../codec/conversation-json.ts";
import type {
  AppConversation,
  AppConversationStartTask,
} from "../../gen/workspace/v1/app_conversation_pb.js";
import { SandboxStatus } from "../../gen/workspace/v1/sandbox_pb.js";
import type { AgentClient } from "../../ports/agent-client.ts";
import type { ConversationRecord, StartTaskRecord } from "../../ports/conversation-repository.ts";
import type { LiveSandbox } from "../sandboxes/sandbox-state.ts";
import { startRequestFromJson } from "./conversation-codecs.ts";
import type { SandboxReader } from "./ports.ts";

export interface ConversationViewsOptions {
  sandboxes: SandboxReader;
  agent: Pick<AgentClient, "getConversations">;
  /** How long a listing waits for an agent server's execution status. */
  liveStatusTimeoutMs: number;
}

/** Stored conversations with their live status. */
export class ConversationViews {
  readonly #o: ConversationViewsOptions;

  constructor(options: ConversationViewsOptions) {
    this.#o = options;
  }

  /** Stored conversations plus live sandbox status and, for RUNNING sandboxes, the agent's execution status. */
  async withLiveStatus(userId: string, records: ConversationRecord[]): Promise<AppConversation[]> {
    if (records.length === 0) return [];
    const sandboxes = await this.#o.sandboxes.getMany(userId, [...new Set(records.map((r) => r.sandboxId))]);
    const execution = new Map<string, string | null>();
    const timeoutMs = this.#o.liveStatusTimeoutMs;
    await Promise.all(
      [...sandboxes.values()].map(async (live) => {
        if (live.status !== "RUNNING" || live.handle === null) return;
        const ids = records.filter((r) => r.sandboxId === live.record.id).map((r) => r.id);
        try {
          const endpoint = {
            url: live.handle.agentUrl,
            sessionApiKey: this.#o.sandboxes.sessionKey(live.record),
          };
          const infos = await this.#o.agent.getConversations(endpoint, ids, timeoutMs);
          infos.forEach((info, i) => {
            const id = ids[i];
            if (info && id !== undefined) execution.set(id, info.executionStatus);
          });
        } catch {
          // A slow or failing agent never fails the listing: the status stays null.
        }
      }),
    );
    return records.map((r) =>
      this.#toConversation(r, sandboxes.get(r.sandboxId), execution.get(r.id) ?? null),
    );
  }

  #toConversation(
    r: ConversationRecord,
    live: LiveSandbox | undefined,
    execution: string | null,
  ): AppConversation {
    const info = live ? this.#o.sandboxes.toInfo(live) : undefined;
    const agentUrl = info?.exposedUrls.find((u) => u.name === "AGENT_SERVER")?.url;
    const running = info?.status === SandboxStatus.RUNNING;
    const executionStatus = running ? executionStatusFromName(execution) : undefined;
    return {
      $typeName: "workspace.v1.AppConversation",
      id: r.id,
      createdByUserId: r.ownerId,
      sandboxId: r.sandboxId,
      ...(r.selectedRepository === null ? {} : { selectedRepository: r.selectedRepository }),
      ...(r.selectedBranch === null ? {} : { selectedBranch: r.selectedBranch }),
      gitProvider: providerFromName(r.gitProvider),
      ...(r.title === null ? {} : { title: r.title }),
      trigger: triggerFromName(r.trigger),
      prNumber: [...r.prNumber],
      ...(r.llmModel === null ? {} : { llmModel: r.llmModel }),
      metrics: metricsFromJson(r.metrics),
      ...(r.parentConversationId === null ? {} : { parentConversationId: r.parentConversationId }),
      subConversationIds: [...r.subConversationIds],
      createdAt: timestampFromDate(r.createdAt),
      updatedAt: timestampFromDate(r.updatedAt),
      sandboxStatus: info?.status ?? SandboxStatus.MISSING,
      executionStatus,
      ...(running && agentUrl !== undefined
        ? { conversationUrl: `${agentUrl.replace(/\/$/, "")}/api/conversations/${r.id}` }
        : {}),
      ...(running && info?.sessionApiKey !== undefined ? { sessionApiKey: info.sessionApiKey } : {}),
    };
  }
}

/** A stored task as a message. */
export function toTask(r: StartTaskRecord): AppConversationStartTask {
  return {
    $typeName: "workspace.v1.AppConversationStartTask",
    id: r.id,
    createdByUserId: r.ownerId,
    status: toPbTaskStatus(r.status),
    ...(r.detail === null ? {} : { detail: r.detail }),
    ...(r.appConversationId === null ? {} : { appConversationId: r.appConversationId }),
    ...(r.sandboxId === null ? {} : { sandboxId: r.sandboxId }),
    ...(r.agentServerUrl === null ? {} : { agentServerUrl: r.agentServerUrl }),
    request: startRequestFromJson(r.request),
    createdAt: timestampFromDate(r.createdAt),
    updatedAt: timestampFromDate(r.updatedAt),
  };
}
