import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { requireCaller } from "../../core/context.ts";
import { invalid } from "../../core/errors.ts";
import type { PageTokens } from "../../core/page-token.ts";
import type {
  BatchGetSandboxSpecsRequest,
  BatchGetSandboxSpecsResponse,
  SandboxSpecInfo,
  SandboxSpecService as SandboxSpecServiceDesc,
  SearchSandboxSpecsRequest,
  SearchSandboxSpecsResponse,
} from "../../gen/workspace/v1/sandbox_spec_pb.js";
import type { RuntimeSpec } from "../../ports/sandbox-runtime.ts";
import { checkBatch, readPage } from "../paging.ts";

/** A configured spec: what the runtime needs plus when it was loaded. */
export interface SandboxSpec extends RuntimeSpec {
  createdAt: Date;
}

/** The read-only list of sandbox templates from configuration; the first is the default. */
export class SandboxSpecService implements ServiceImpl<typeof SandboxSpecServiceDesc> {
  readonly #specs: readonly SandboxSpec[];
  readonly #tokens: PageTokens;

  constructor(specs: readonly SandboxSpec[], tokens: PageTokens) {
    if (specs.length === 0) throw new Error("at least one sandbox spec is required");
    this.#specs = specs;
    this.#tokens = tokens;
  }

  /** Every configured spec, the default first. */
  all(): readonly SandboxSpec[] {
    return this.#specs;
  }

  /** The spec with this id (the default when undefined); INVALID_ARGUMENT on ["query","sandbox_spec_id"]. */
  resolve(id: string | undefined): SandboxSpec {
    if (id === undefined || id === "") return this.#specs[0] as SandboxSpec;
    const spec = this.#specs.find((s) => s.id === id);
    if (spec === undefined) {
      throw invalid(
        ["query", "sandbox_spec_id"],
        `Value error, unknown sandbox spec: ${id}`,
        "value_error",
        id,
        { error: {} },
      );
    }
    return spec;
  }

  async searchSandboxSpecs(
    req: SearchSandboxSpecsRequest,
    ctx: HandlerContext,
  ): Promise<SearchSandboxSpecsResponse> {
    requireCaller(ctx);
    const page = readPage(this.#tokens, "sandbox-specs", req.pageId, req.limit);
    // Specs keep their configured order; the cursor's id is the index of the last spec returned.
    const start = page.after === null ? 0 : Number(page.after.id) + 1;
    const items = this.#specs.slice(start, start + page.limit);
    const more = start + page.limit < this.#specs.length;
    const next = more
      ? this.#tokens.encode({ createdAt: new Date(0), id: String(start + page.limit - 1) }, "sandbox-specs")
      : undefined;
    return {
      $typeName: "workspace.v1.SearchSandboxSpecsResponse",
      items: items.map(toSpecInfo),
      ...(next === undefined ? {} : { nextPageId: next }),
    };
  }

  async batchGetSandboxSpecs(
    req: BatchGetSandboxSpecsRequest,
    ctx: HandlerContext,
  ): Promise<BatchGetSandboxSpecsResponse> {
    requireCaller(ctx);
    checkBatch(req.id, "id");
    return {
      $typeName: "workspace.v1.BatchGetSandboxSpecsResponse",
      items: req.id.map((id) => {
        const spec = this.#specs.find((s) => s.id === id);
        return { $typeName: "workspace.v1.SandboxSpecSlot", ...(spec ? { spec: toSpecInfo(spec) } : {}) };
      }),
    };
  }
}

function toSpecInfo(s: SandboxSpec): SandboxSpecInfo {
  return {
    $typeName: "workspace.v1.SandboxSpecInfo",
    id: s.id,
    command: [...s.command],
    createdAt: timestampFromDate(s.createdAt),
    initialEnv: { ...s.initialEnv },
    workingDir: s.workingDir,
  };
}
