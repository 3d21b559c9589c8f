// The conversation JSON faces compiled from the descriptors: the start request's echo (also the stored format) is
// the reference's JSON, reads back to the same message, and a stored field that no longer validates is left out
// instead of failing the read.
import { create, equals } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  startRequestCodec,
  startRequestFromJson,
  startRequestJson,
} from "../../src/domain/conversations/conversation-codecs.ts";
import {
  AgentType,
  AppConversationStartRequestSchema,
  ConversationTrigger,
  MessageRole,
} from "../../src/gen/workspace/v1/app_conversation_pb.js";
import { ProviderType } from "../../src/gen/workspace/v1/provider_pb.js";

const ID = "0123456789abcdef0123456789abcdef";

describe("start request JSON (compiled from the descriptor)", () => {
  it("writes every field in declaration order, null where unset, with the reference's spellings", () => {
    const json = startRequestJson(create(AppConversationStartRequestSchema));
    expect(Object.keys(json)).toEqual(AppConversationStartRequestSchema.fields.map((f) => f.name));
    expect(json).toMatchObject({
      conversation_id: null,
      initial_message: null,
      processors: null,
      git_provider: null,
      trigger: null,
      pr_number: [],
      agent_type: "default",
    });
  });

  it("round-trips a full request through the stored JSON", () => {
    const request = create(AppConversationStartRequestSchema, {
      sandboxId: "sb",
      conversationId: ID,
      initialMessage: {
        role: MessageRole.USER,
        content: [{ content: { case: "text", value: { text: "hi", cachePrompt: true } } }],
        run: true,
      },
      systemMessageSuffix: "suffix",
      processors: [{ kind: "x" }],
      llmModel: "m",
      selectedRepository: "owner/repo",
      selectedBranch: "main",
      gitProvider: ProviderType.GITLAB,
      title: "T",
      trigger: ConversationTrigger.OPENHANDS_API,
      prNumber: [3],
      parentConversationId: ID,
      agentType: AgentType.PLAN,
    });
    const json = startRequestJson(request);
    expect(json).toMatchObject({
      conversation_id: "01234567-89ab-cdef-0123-456789abcdef",
      initial_message: {
        role: "user",
        content: [{ type: "text", text: "hi", cache_prompt: true }],
        run: true,
      },
      git_provider: "gitlab",
      trigger: "openhands_api",
      agent_type: "plan",
    });
    const back = startRequestFromJson(JSON.parse(JSON.stringify(json)));
    expect(equals(AppConversationStartRequestSchema, back, request)).toBe(true);
  });

  it("leaves out a stored field that does not validate and keeps the others", () => {
    const back = startRequestFromJson({ title: "", llm_model: "m", trigger: "no-such", agent_type: "plan" });
    expect(back.title).toBeUndefined();
    expect(back.trigger).toBeUndefined();
    expect(back.llmModel).toBe("m");
    expect(back.agentType).toBe(AgentType.PLAN);
    expect(startRequestCodec.fromStored({})).toEqual({ agent_type: "AGENT_TYPE_DEFAULT" });
  });
});
