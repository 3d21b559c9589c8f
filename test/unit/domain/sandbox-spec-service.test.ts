// SandboxSpecService: the configured spec list, paging with signed page ids, batch gets.
import { create } from "@bufbuild/protobuf";
import { Code, type ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { ValidationError } from "../../../src/core/errors.ts";
import { type SandboxSpec, SandboxSpecService } from "../../../src/domain/sandboxes/sandbox-spec-service.ts";
import {
  BatchGetSandboxSpecsRequestSchema,
  SearchSandboxSpecsRequestSchema,
} from "../../../src/gen/workspace/v1/sandbox_spec_pb.js";
import { callAs, testCrypto } from "../../helpers/fakes/index.ts";

const spec = (id: string): SandboxSpec => ({
  id,
  command: ["agent", id],
  initialEnv: { SPEC: id },
  workingDir: "/workspace",
  createdAt: new Date(0),
});
const specs = ["default", "b", "c", "d", "e"].map(spec);
const alice = callAs("alice");

describe("SandboxSpecService", () => {
  it("needs at least one spec; resolve answers the default for none and INVALID_ARGUMENT for an unknown id", () => {
    const { tokens } = testCrypto();
    expect(() => new SandboxSpecService([], tokens)).toThrow();
    const service = new SandboxSpecService(specs, tokens);
    expect(service.resolve(undefined).id).toBe("default");
    expect(service.resolve("").id).toBe("default");
    expect(service.resolve("c").id).toBe("c");
    const err = (() => {
      try {
        service.resolve("zz");
      } catch (e) {
        return e;
      }
      return null;
    })();
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).violations.map((v) => [v.type, v.loc])).toEqual([
      ["value_error", ["query", "sandbox_spec_id"]],
    ]);
  });

  it("pages through the specs in configured order; a page id of another server is refused", async () => {
    const service = new SandboxSpecService(specs, testCrypto().tokens);
    const seen: string[] = [];
    let pageId: string | undefined;
    for (let i = 0; i < 5; i++) {
      const page = await service.searchSandboxSpecs(
        create(SearchSandboxSpecsRequestSchema, { limit: 2, ...(pageId ? { pageId } : {}) }),
        alice,
      );
      seen.push(...page.items.map((s) => s.id));
      pageId = page.nextPageId;
      if (pageId === undefined) break;
    }
    expect(seen).toEqual(["default", "b", "c", "d", "e"]);
    const first = await service.searchSandboxSpecs(
      create(SearchSandboxSpecsRequestSchema, { limit: 2 }),
      alice,
    );
    const other = new SandboxSpecService(specs, testCrypto().tokens);
    const err = await other
      .searchSandboxSpecs(create(SearchSandboxSpecsRequestSchema, { pageId: first.nextPageId ?? "" }), alice)
      .catch((e: unknown) => e);
    expect((err as ValidationError).violations.map((v) => v.loc)).toEqual([["query", "page_id"]]);
  });

  it("limits outside 1..100 are INVALID_ARGUMENT; batch gets keep order with empty slots, at most 100 ids", async () => {
    const service = new SandboxSpecService(specs, testCrypto().tokens);
    for (const [limit, type] of [
      [0, "greater_than_equal"],
      [101, "less_than_equal"],
    ] as const) {
      const err = await service
        .searchSandboxSpecs(create(SearchSandboxSpecsRequestSchema, { limit }), alice)
        .catch((e: unknown) => e);
      expect((err as ValidationError).violations.map((v) => [v.type, v.loc])).toEqual([
        [type, ["query", "limit"]],
      ]);
    }
    const got = await service.batchGetSandboxSpecs(
      create(BatchGetSandboxSpecsRequestSchema, { id: ["c", "x", "default"] }),
      alice,
    );
    expect(got.items.map((s) => s.spec?.id ?? null)).toEqual(["c", null, "default"]);
    expect(got.items[0]?.spec?.initialEnv).toEqual({ SPEC: "c" });
    for (const [ids, type] of [
      [[], "missing"],
      [Array.from({ length: 101 }, (_, i) => `s${i}`), "too_long"],
    ] as const) {
      const err = await service
        .batchGetSandboxSpecs(create(BatchGetSandboxSpecsRequestSchema, { id: [...ids] }), alice)
        .catch((e: unknown) => e);
      expect((err as ValidationError).violations.map((v) => [v.type, v.loc])).toEqual([
        [type, ["query", "id"]],
      ]);
    }
    const unauth = await service
      .searchSandboxSpecs(create(SearchSandboxSpecsRequestSchema), callAs(null))
      .catch((e: unknown) => e);
    expect((unauth as ConnectError).code).toBe(Code.Unauthenticated);
  });
});
