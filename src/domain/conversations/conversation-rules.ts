import { list } from "../../core/model/containers.ts";
import { int } from "../../core/model/numbers.ts";
import { str } from "../../core/model/scalars.ts";
import type { Schema } from "../../core/model/schema.ts";
import { refine } from "../../core/model/validators.ts";
import { uuidHex } from "../../core/model-formats.ts";
import { TITLE_MODEL } from "./title.ts";
import { branchProblem, repositoryProblem } from "./workspace-commands.ts";

/**
 * The constraints on AppConversationStartRequest fields beyond their proto type, declared once, by field name: the
 * REST body model validates each field with its rule (the reference's 422). The service applies the same checks
 * (`repositoryProblem`, `branchProblem`, `titleProblem`, the id parsers) to every protocol's request.
 */
export const START_REQUEST_RULES: Readonly<Record<string, Schema<unknown>>> = {
  conversation_id: uuidHex(),
  selected_repository: refine(str(), (v) => (v === "" ? null : repositoryProblem(v))),
  selected_branch: refine(str(), (v) => (v === "" ? null : branchProblem(v))),
  title: TITLE_MODEL,
  pr_number: list(int({ bits: 32 }), { maxItems: 1000 }),
  parent_conversation_id: uuidHex(),
};
