import { randomBytes } from "node:crypto";
import { createHandlerContext, type HandlerContext } from "@connectrpc/connect";
import { callerValues } from "../../../src/core/context.ts";
import { PageTokens } from "../../../src/core/page-token.ts";
import { SecretBox } from "../../../src/core/secret-box.ts";
import { ChangeFeed } from "../../../src/domain/change-feed.ts";
import { SettingsService as SettingsServiceDesc } from "../../../src/gen/workspace/v1/settings_pb.js";
import { InMemoryChangeLog } from "./change-log.ts";

export { FakeAgentClient } from "./agent-client.ts";
export { InMemoryApiKeyRepository } from "./api-key-repository.ts";
export { InMemoryChangeLog } from "./change-log.ts";
export { InMemoryConversationRepository, InMemoryStartTaskRepository } from "./conversation-repository.ts";
export { InMemoryEventRepository } from "./event-repository.ts";
export { FakeGitVerifier } from "./git-verifier.ts";
export { InMemorySandboxRepository } from "./sandbox-repository.ts";
export { FakeSandboxRuntime } from "./sandbox-runtime.ts";
export { InMemoryUserDataRepository } from "./user-data-repository.ts";

/** A fresh encryption box and page-token signer. */
export function testCrypto(): { box: SecretBox; tokens: PageTokens } {
  const box = new SecretBox(randomBytes(32));
  return { box, tokens: new PageTokens(box.derive("page-tokens")) };
}

/**
 * The handler context of a call made by `userId` (connect's own createHandlerContext, as a transport would build
 * it after authentication); without a user, the call is unauthenticated.
 */
export function callAs(userId: string | null, signal?: AbortSignal): HandlerContext {
  return createHandlerContext({
    service: SettingsServiceDesc,
    method: SettingsServiceDesc.method.getSettings,
    protocolName: "test",
    requestMethod: "POST",
    url: "http://127.0.0.1/test",
    ...(signal === undefined ? {} : { requestSignal: signal }),
    ...(userId === null ? {} : { contextValues: callerValues({ userId, keyId: `key-${userId}` }) }),
  });
}

/** A change feed over a fresh in-memory log (one store's log, as every server sharing it would follow it). */
export function testChangeFeed(log = new InMemoryChangeLog()): ChangeFeed {
  return new ChangeFeed(log, { pollMs: 5 });
}
