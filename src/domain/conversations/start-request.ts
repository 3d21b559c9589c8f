import { create } from "@bufbuild/protobuf";
import { type FieldViolation, ValidationError } from "../../core/errors.ts";
import { parseHexId } from "../../core/ids.ts";
import { valueError } from "../../core/model/schema.ts";
import { uuidViolation } from "../../core/model-formats.ts";
import {
  type AppConversationStartRequest,
  AppConversationStartRequestSchema,
} from "../../gen/workspace/v1/app_conversation_pb.js";
import { titleViolation } from "./title.ts";
import { branchProblem, localRepositoryProblem, repositoryProblem } from "./workspace-commands.ts";

/** A request field's name as violations locate it (the proto's, from the descriptor). */
const NAME = (local: keyof typeof AppConversationStartRequestSchema.field): string =>
  AppConversationStartRequestSchema.field[local].name;

/**
 * Validates what the binder cannot (for RPC callers too) and normalises ids to 32 hex. INVALID_ARGUMENT with
 * violations located at the request's field names.
 */
export function checkStartRequest(
  req: AppConversationStartRequest | undefined,
  localRoots?: readonly string[],
): AppConversationStartRequest {
  const r: AppConversationStartRequest = req ? { ...req } : create(AppConversationStartRequestSchema);
  const issues: FieldViolation[] = [];
  for (const field of ["conversationId", "parentConversationId"] as const) {
    const raw = r[field];
    if (raw === undefined) continue;
    const id = parseHexId(raw);
    if (id === null) issues.push(uuidViolation([NAME(field)], raw));
    else r[field] = id;
  }
  if (r.sandboxId === "") delete r.sandboxId;
  const title = r.title === undefined ? null : titleViolation(r.title, [NAME("title")]);
  if (title !== null) issues.push(title);
  const repoProblem = r.selectedRepository
    ? (repositoryProblem(r.selectedRepository) ??
      (localRoots === undefined ? null : localRepositoryProblem(r.selectedRepository, localRoots)))
    : null;
  if (repoProblem !== null)
    issues.push(valueError([NAME("selectedRepository")], repoProblem, r.selectedRepository));
  const branch = r.selectedBranch ? branchProblem(r.selectedBranch) : null;
  if (branch !== null) issues.push(valueError([NAME("selectedBranch")], branch, r.selectedBranch));
  r.initialMessage?.content.forEach((c, i) => {
    if (c.content.case === undefined)
      issues.push(
        valueError([NAME("initialMessage"), "content", i], "a content part must be text or image", null),
      );
  });
  if (issues.length > 0) throw new ValidationError(issues);
  return r;
}
