/**
 * The conversation RPCs' ids and filters read from their requests: ids normalised to 32 hex (INVALID_ARGUMENT
 * located at each malformed one) and the search and count filters of conversations and start tasks.
 */
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { type FieldViolation, ValidationError } from "../../core/errors.ts";
import { parseHexId } from "../../core/ids.ts";
import { uuidViolation } from "../../core/model-formats.ts";
import type {
  CountAppConversationsRequest,
  CountStartTasksRequest,
  SearchAppConversationsRequest,
  SearchStartTasksRequest,
} from "../../gen/workspace/v1/app_conversation_pb.js";
import type { ConversationFilter, StartTaskFilter } from "../../ports/conversation-repository.ts";
import { checkBatch } from "../paging.ts";

/** One id normalised to 32 hex, or INVALID_ARGUMENT located at `field`. */
export function checkId(raw: string, field: string): string {
  const id = parseHexId(raw);
  if (id === null) throw new ValidationError([uuidViolation([field], raw)]);
  return id;
}

/** Normalised ids (32 hex) or INVALID_ARGUMENT listing every malformed one; at most 100. */
export function checkIds(ids: readonly string[]): string[] {
  checkBatch(ids, "ids");
  const issues: FieldViolation[] = [];
  const out = ids.map((raw, i) => {
    const id = parseHexId(raw);
    if (id === null) issues.push(uuidViolation(["ids", i], raw));
    return id ?? "";
  });
  if (issues.length > 0) throw new ValidationError(issues);
  return out;
}

const date = (t: { seconds: bigint; nanos: number } | undefined): Date | undefined =>
  t === undefined ? undefined : timestampDate(t as never);

export function conversationFilter(
  req: CountAppConversationsRequest | SearchAppConversationsRequest,
): ConversationFilter {
  const f: ConversationFilter = { includeSubConversations: req.includeSubConversations ?? false };
  if (req.titleContains !== undefined && req.titleContains !== "") f.titleContains = req.titleContains;
  const set = (key: "createdAtGte" | "createdAtLt" | "updatedAtGte" | "updatedAtLt") => {
    const d = date(req[key]);
    if (d !== undefined) f[key] = d;
  };
  set("createdAtGte");
  set("createdAtLt");
  set("updatedAtGte");
  set("updatedAtLt");
  if (req.sandboxIdEq !== undefined && req.sandboxIdEq !== "") f.sandboxIdEq = req.sandboxIdEq;
  return f;
}

export function startTaskFilter(req: CountStartTasksRequest | SearchStartTasksRequest): StartTaskFilter {
  const f: StartTaskFilter = {};
  if (req.conversationIdEq !== undefined && req.conversationIdEq !== "") {
    const id = parseHexId(req.conversationIdEq);
    if (id === null) throw new ValidationError([uuidViolation(["conversation_id_eq"], req.conversationIdEq)]);
    f.conversationIdEq = id;
  }
  const gte = date(req.createdAtGte);
  if (gte !== undefined) f.createdAtGte = gte;
  return f;
}
