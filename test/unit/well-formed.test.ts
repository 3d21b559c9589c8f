// The well-formed Unicode rule: the JSON check of the validator, the request-message check every protocol passes
// through, and how stored data from before the rule is shown.

import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import type { FieldViolation } from "../../src/core/errors.ts";
import { dict, object } from "../../src/core/model/containers.ts";
import { str } from "../../src/core/model/scalars.ts";
import { validate } from "../../src/core/model/validate.ts";
import { checkWellFormed, toWellFormedJson } from "../../src/core/model/well-formed.ts";
import { illFormedStrings, wellFormedRequests } from "../../src/core/well-formed-request.ts";
import { CreateSecretRequestSchema, SecretsService } from "../../src/gen/workspace/v1/secrets_pb.js";
import { SettingsSchema, StoreSettingsRequestSchema } from "../../src/gen/workspace/v1/settings_pb.js";

const MSG = "Input should be a valid string, unable to parse raw data as a unicode string";

describe("checkWellFormed (JSON values)", () => {
  it.each([
    ["plain string", "abc", []],
    ["emoji (a surrogate pair)", "😀", []],
    ["U+FFFD", "\ufffd", []],
    ["lone high surrogate", "\ud800", [[[]]]],
    ["lone low surrogate", "a\udc00b", [[[]]]],
    ["reversed pair", "\ude00\ud83d", [[[]]]],
    ["nested value", { a: [1, { b: "\ud800" }] }, [[["a", 1, "b"]]]],
    ["key", { "\ud800": 1 }, [[["\ufffd", "[key]"]]]],
    ["several", ["\ud800", { k: "\udfff" }], [[[0]], [[1, "k"]]]],
    ["numbers and nulls", { a: null, b: 1, c: true }, []],
  ] as [string, unknown, [(string | number)[]][]][])("%s", (_name, input, expected) => {
    const issues: FieldViolation[] = [];
    expect(checkWellFormed(input, [], issues)).toBe(expected.length === 0);
    expect(issues.map((i) => i.loc).sort()).toEqual(expected.map(([loc]) => loc).sort());
    for (const i of issues) {
      expect(i.type).toBe("string_unicode");
      expect(i.msg).toBe(MSG);
      expect(JSON.stringify(i).isWellFormed()).toBe(true);
      expect(String(i.input).isWellFormed()).toBe(true);
    }
  });

  it("validate() reports it at the field, also for keys and for values no schema reads", () => {
    const schema = object({ name: { schema: str() }, tags: { schema: dict(str()) } });
    const fail = (input: unknown) => {
      try {
        validate(schema, input, ["body"]);
      } catch (e) {
        return (e as { violations: FieldViolation[] }).violations;
      }
      return [];
    };
    expect(fail({ name: "\ud800" })).toEqual([
      { type: "string_unicode", loc: ["body", "name"], msg: MSG, input: "\ufffd" },
    ]);
    expect(fail({ tags: { "\udc00": "v" } })[0]?.loc).toEqual(["body", "tags", "\ufffd", "[key]"]);
    expect(fail({ ignored: ["\ud800"] })[0]?.loc).toEqual(["body", "ignored", 0]);
    expect(fail({ name: "ok", tags: { a: "b" } })).toEqual([]);
  });
});

describe("toWellFormedJson (stored data shown)", () => {
  it("returns the value itself when already well-formed, a repaired copy otherwise", () => {
    const good = { a: ["x", { b: "😀" }], c: 1 };
    expect(toWellFormedJson(good)).toBe(good);
    const bad = { a: ["x", { b: "\ud800" }], "k\udc00": "v" };
    const shown = toWellFormedJson(bad);
    expect(shown).toEqual({ a: ["x", { b: "\ufffd" }], "k\ufffd": "v" });
    expect(bad.a[1]).toEqual({ b: "\ud800" });
    const proto = JSON.parse('{"__proto__":{"x":"\\ud800"}}') as Record<string, unknown>;
    const repaired = toWellFormedJson(proto);
    expect(Object.hasOwn(repaired, "__proto__")).toBe(true);
    expect(Object.getOwnPropertyDescriptor(repaired, "__proto__")?.value).toEqual({ x: "\ufffd" });
  });
});

describe("request messages", () => {
  it("finds every ill-formed string, map key and list item at its proto path", () => {
    const req = create(StoreSettingsRequestSchema, {
      settings: create(SettingsSchema, {
        language: "\ud800",
        mcpConfig: {
          stdioServers: [
            { name: "n", command: "c", args: ["ok", "\udc00"], env: { "\ud800": "v", K: "\ud800" } },
          ],
        },
        secretsStore: { customSecrets: { good: { secret: "s", description: "\ud800" } } },
      }),
      resetFields: ["\ud800"],
    });
    expect(illFormedStrings(StoreSettingsRequestSchema, req).map((v) => v.loc)).toEqual([
      ["settings", "language"],
      ["settings", "secrets_store", "custom_secrets", "good", "description"],
      ["settings", "mcp_config", "stdio_servers", 0, "args", 1],
      ["settings", "mcp_config", "stdio_servers", 0, "env", "\ufffd", "[key]"],
      ["settings", "mcp_config", "stdio_servers", 0, "env", "K"],
      ["reset_fields", 0],
    ]);
    expect(
      illFormedStrings(CreateSecretRequestSchema, create(CreateSecretRequestSchema, { name: "ok" })),
    ).toEqual([]);
  });

  it("wellFormedRequests refuses such a request before the method runs", async () => {
    let calls = 0;
    const impl = wellFormedRequests(SecretsService, {
      createSecret: async () => {
        calls++;
        return { message: "created" };
      },
    } as unknown as ServiceImpl<typeof SecretsService>);
    const call = impl.createSecret as (req: unknown, ctx: unknown) => Promise<unknown>;
    await expect(
      call(create(CreateSecretRequestSchema, { name: "\ud800", value: "v" }), {}),
    ).rejects.toMatchObject({ code: 3, violations: [{ type: "string_unicode", loc: ["name"] }] });
    expect(calls).toBe(0);
    await expect(call(create(CreateSecretRequestSchema, { name: "n", value: "v" }), {})).resolves.toEqual({
      message: "created",
    });
    expect(calls).toBe(1);
  });
});
