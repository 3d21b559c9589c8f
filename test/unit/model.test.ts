import { describe, expect, expectTypeOf, it } from "vitest";
import type { FieldViolation, ValidationError } from "../../src/core/errors.ts";
import { dict, list, nullable, object, union } from "../../src/core/model/containers.ts";
import { float, int } from "../../src/core/model/numbers.ts";
import { expectedList, pyRepr, pyStrip } from "../../src/core/model/py-text.ts";
import { anyValue, bool, enumOf, literal, str } from "../../src/core/model/scalars.ts";
import {
  INVALID,
  type Infer,
  isValidationError,
  jsonInvalid,
  MAX_ISSUES,
  missingBody,
  type Schema,
  ValueError,
} from "../../src/core/model/schema.ts";
import { parseModel, validate } from "../../src/core/model/validate.ts";
import { annotate, before as beforeValidator, refine, transform } from "../../src/core/model/validators.ts";

const LOC = ["body", "f"];

/** it.each rows for single values (it.each would spread array values into arguments). */
const cases = (values: unknown[]): [unknown][] => values.map((v) => [v]);

/** The violations validate() throws (fails the test when it does not throw a ValidationError). */
function errs(schema: Schema<unknown>, input: unknown, loc: (string | number)[] = LOC): FieldViolation[] {
  try {
    validate(schema, input, loc);
  } catch (e) {
    if (isValidationError(e)) return [...e.violations];
    throw e;
  }
  throw new Error(`expected a ValidationError for ${JSON.stringify(input)}`);
}

/** The single violation for input. */
function err(schema: Schema<unknown>, input: unknown): FieldViolation {
  const all = errs(schema, input);
  expect(all).toHaveLength(1);
  return all[0]!;
}

const ok = <T>(schema: Schema<T>, input: unknown): T => validate(schema, input, LOC);

describe("str", () => {
  it("accepts strings unchanged", () => {
    expect(ok(str(), "  a b  ")).toBe("  a b  ");
    expect(ok(str(), "")).toBe("");
  });

  it.each(cases([5, 1.5, true, null, [], {}, ["a"]]))(
    "rejects %j with string_type (no number coercion)",
    (input) => {
      expect(err(str(), input)).toEqual({
        type: "string_type",
        loc: LOC,
        msg: "Input should be a valid string",
        input,
      });
    },
  );

  it("trims with Python whitespace when asked", () => {
    expect(ok(str({ trim: true }), " \t\x1c x \u3000\n")).toBe("x");
    expect(pyStrip("\ufeffx")).toBe("\ufeffx"); // not whitespace for Python
  });

  it("reports string_too_short with singular/plural and the original input", () => {
    expect(err(str({ trim: true, minLength: 1 }), "   ")).toEqual({
      type: "string_too_short",
      loc: LOC,
      msg: "String should have at least 1 character",
      input: "   ",
      ctx: { min_length: 1 },
    });
    expect(err(str({ minLength: 3 }), "ab")).toEqual({
      type: "string_too_short",
      loc: LOC,
      msg: "String should have at least 3 characters",
      input: "ab",
      ctx: { min_length: 3 },
    });
  });

  it("reports string_too_long and counts code points like Python", () => {
    expect(ok(str({ maxLength: 2 }), "😀😀")).toBe("😀😀");
    expect(err(str({ maxLength: 2 }), "abc")).toEqual({
      type: "string_too_long",
      loc: LOC,
      msg: "String should have at most 2 characters",
      input: "abc",
      ctx: { max_length: 2 },
    });
    expect(err(str({ maxLength: 1 }), "ab").msg).toBe("String should have at most 1 character");
  });

  it("reports string_pattern_mismatch", () => {
    expect(ok(str({ pattern: /^[a-z]+$/ }), "abc")).toBe("abc");
    expect(err(str({ pattern: /^[a-z]+$/ }), "aB")).toEqual({
      type: "string_pattern_mismatch",
      loc: LOC,
      msg: "String should match pattern '^[a-z]+$'",
      input: "aB",
      ctx: { pattern: "^[a-z]+$" },
    });
  });
});

describe("int (lax)", () => {
  it.each<[unknown, number]>([
    [5, 5],
    [-3, -3],
    [1.0, 1],
    [true, 1],
    [false, 0],
    ["10", 10],
    [" 7 ", 7],
    ["\t-12\n", -12],
    ["+3", 3],
    ["007", 7],
    ["1_000", 1000],
    ["10.00", 10],
    ["-0", 0],
    [1e15, 1e15],
  ])("accepts %j as %d", (input, expected) => {
    const v = ok(int(), input);
    expect(v).toBe(expected);
    expect(Object.is(v, -0)).toBe(false);
  });

  it.each(cases(["1.5", "abc", "", " ", "1e3", "1.", ".0", "--1", "+-1", "_1", "1__0", "1_", "0x10", "１"]))(
    "rejects string %j with int_parsing",
    (input) => {
      expect(err(int(), input)).toEqual({
        type: "int_parsing",
        loc: LOC,
        msg: "Input should be a valid integer, unable to parse string as an integer",
        input,
      });
    },
  );

  it("rejects fractional numbers with int_from_float", () => {
    expect(err(int(), 1.5)).toEqual({
      type: "int_from_float",
      loc: LOC,
      msg: "Input should be a valid integer, got a number with a fractional part",
      input: 1.5,
    });
  });

  it.each(cases([null, [], {}, [1], { a: 1 }]))("rejects %j with int_type", (input) => {
    expect(err(int(), input)).toEqual({
      type: "int_type",
      loc: LOC,
      msg: "Input should be a valid integer",
      input,
    });
  });

  it("reports finite_number and int_parsing_size like pydantic-core", () => {
    expect(err(int(), Number.POSITIVE_INFINITY)).toEqual({
      type: "finite_number",
      loc: LOC,
      msg: "Input should be a finite number",
      input: Number.POSITIVE_INFINITY,
    });
    expect(err(int(), 1e20)).toEqual({
      type: "int_parsing_size",
      loc: LOC,
      msg: "Unable to parse input string as an integer, exceeded maximum size",
      input: 1e20,
    });
    const huge = "9".repeat(4301);
    expect(err(int(), huge).type).toBe("int_parsing_size");
  });

  it("bounds values to safe integers by default and to int32 with bits: 32", () => {
    expect(ok(int(), Number.MAX_SAFE_INTEGER)).toBe(Number.MAX_SAFE_INTEGER);
    expect(err(int(), 2 ** 53)).toEqual({
      type: "less_than_equal",
      loc: LOC,
      msg: `Input should be less than or equal to ${Number.MAX_SAFE_INTEGER}`,
      input: 2 ** 53,
      ctx: { le: Number.MAX_SAFE_INTEGER },
    });
    expect(err(int(), "-9007199254740993").type).toBe("greater_than_equal");
    expect(ok(int({ bits: 32 }), 2147483647)).toBe(2147483647);
    expect(err(int({ bits: 32 }), "2147483648")).toEqual({
      type: "less_than_equal",
      loc: LOC,
      msg: "Input should be less than or equal to 2147483647",
      input: "2147483648",
      ctx: { le: 2147483647 },
    });
    expect(err(int({ bits: 32 }), -2147483649).ctx).toEqual({ ge: -2147483648 });
  });

  it.each<[bound: Record<string, number>, input: unknown, type: string, msg: string]>([
    [{ ge: 1 }, "0", "greater_than_equal", "Input should be greater than or equal to 1"],
    [{ le: 100 }, 101, "less_than_equal", "Input should be less than or equal to 100"],
    [{ gt: 0 }, "0", "greater_than", "Input should be greater than 0"],
    [{ lt: 10 }, 10, "less_than", "Input should be less than 10"],
  ])("reports %j for %j as %s with the original input and ctx", (bound, input, type, msg) => {
    expect(err(int(bound), input)).toEqual({ type, loc: LOC, msg, input, ctx: bound });
  });

  it("accepts values on an inclusive bound", () => {
    expect(ok(int({ ge: 1, le: 100 }), "100")).toBe(100);
  });
});

describe("float (lax)", () => {
  it.each<[unknown, number]>([
    [1.5, 1.5],
    [3, 3],
    [true, 1],
    [false, 0],
    ["1.5", 1.5],
    [" 2e3 ", 2000],
    [".5", 0.5],
    ["5.", 5],
    ["-1E-2", -0.01],
    ["1_000.5", 1000.5],
  ])("accepts %j as %d", (input, expected) => {
    expect(ok(float(), input)).toBe(expected);
  });

  it.each(cases(["abc", "", "1.2.3", "0x1p3", "1,5", " 1_0"]))(
    "rejects string %j with float_parsing",
    (input) => {
      expect(err(float(), input)).toEqual({
        type: "float_parsing",
        loc: LOC,
        msg: "Input should be a valid number, unable to parse string as a number",
        input,
      });
    },
  );

  it.each(cases(["nan", "NaN", "inf", "-Infinity", "+INF", "1e400"]))(
    "rejects %j with finite_number",
    (input) => {
      expect(err(float(), input)).toEqual({
        type: "finite_number",
        loc: LOC,
        msg: "Input should be a finite number",
        input,
      });
    },
  );

  it.each(cases([null, [], {}]))("rejects %j with float_type", (input) => {
    expect(err(float(), input)).toEqual({
      type: "float_type",
      loc: LOC,
      msg: "Input should be a valid number",
      input,
    });
  });

  it("applies bounds", () => {
    expect(err(float({ gt: 0.5 }), "0.5")).toEqual({
      type: "greater_than",
      loc: LOC,
      msg: "Input should be greater than 0.5",
      input: "0.5",
      ctx: { gt: 0.5 },
    });
    expect(ok(float({ ge: 0, le: 1 }), 1)).toBe(1);
  });
});

describe("bool (lax)", () => {
  it.each<[unknown, boolean]>([
    [true, true],
    [false, false],
    [0, false],
    [1, true],
    [1.0, true],
    ["0", false],
    ["off", false],
    ["F", false],
    ["False", false],
    ["n", false],
    ["NO", false],
    ["1", true],
    ["On", true],
    ["t", true],
    ["TRUE", true],
    ["y", true],
    ["Yes", true],
  ])("accepts %j as %s", (input, expected) => {
    expect(ok(bool(), input)).toBe(expected);
  });

  it.each(cases(["maybe", "", " true", "2", "tru", 2, -1, 2.0]))("rejects %j with bool_parsing", (input) => {
    expect(err(bool(), input)).toEqual({
      type: "bool_parsing",
      loc: LOC,
      msg: "Input should be a valid boolean, unable to interpret input",
      input,
    });
  });

  it.each(cases([null, 0.5, [], {}, [true]]))("rejects %j with bool_type", (input) => {
    expect(err(bool(), input)).toEqual({
      type: "bool_type",
      loc: LOC,
      msg: "Input should be a valid boolean",
      input,
    });
  });
});

describe("enumOf / literal", () => {
  const provider = enumOf(["github", "gitlab", "bitbucket"]);

  it("accepts members only", () => {
    expect(ok(provider, "gitlab")).toBe("gitlab");
    expectTypeOf(ok(provider, "gitlab")).toEqualTypeOf<"github" | "gitlab" | "bitbucket">();
  });

  it.each(cases(["GitHub", "", 1, null]))("rejects %j with enum and the expected list", (input) => {
    expect(err(provider, input)).toEqual({
      type: "enum",
      loc: LOC,
      msg: "Input should be 'github', 'gitlab' or 'bitbucket'",
      input,
      ctx: { expected: "'github', 'gitlab' or 'bitbucket'" },
    });
  });

  it("formats one and two values, and Python reprs", () => {
    expect(expectedList(["a"])).toBe("'a'");
    expect(expectedList(["a", "b"])).toBe("'a' or 'b'");
    expect(pyRepr("it's")).toBe(`"it's"`);
    expect(pyRepr(`'"`)).toBe(`'\\'"'`);
    expect(pyRepr("a\nb\\")).toBe("'a\\nb\\\\'");
    expect(err(enumOf(["only"]), "x").msg).toBe("Input should be 'only'");
  });

  it("literal uses literal_error", () => {
    expect(err(literal(["a", "b"]), "c")).toEqual({
      type: "literal_error",
      loc: LOC,
      msg: "Input should be 'a' or 'b'",
      input: "c",
      ctx: { expected: "'a' or 'b'" },
    });
  });
});

describe("nullable", () => {
  it("accepts null and passes other values to the inner schema", () => {
    expect(ok(nullable(bool()), null)).toBeNull();
    expect(ok(nullable(int()), "3")).toBe(3);
    expect(err(nullable(bool()), "x").type).toBe("bool_parsing");
  });

  it("a non-nullable field given null reports the inner type error", () => {
    expect(err(object({ b: { schema: bool() } }), { b: null })).toEqual({
      type: "bool_type",
      loc: [...LOC, "b"],
      msg: "Input should be a valid boolean",
      input: null,
    });
  });
});

describe("list", () => {
  it("validates items and reports each at its index, in order", () => {
    expect(ok(list(int()), ["1", 2, true])).toEqual([1, 2, 1]);
    expect(errs(list(int()), [1, "x", 2, null])).toEqual([
      {
        type: "int_parsing",
        loc: [...LOC, 1],
        msg: "Input should be a valid integer, unable to parse string as an integer",
        input: "x",
      },
      { type: "int_type", loc: [...LOC, 3], msg: "Input should be a valid integer", input: null },
    ]);
  });

  it.each(cases(["abc", null, { 0: 1 }, 5]))("rejects %j with list_type", (input) => {
    expect(err(list(str()), input)).toEqual({
      type: "list_type",
      loc: LOC,
      msg: "Input should be a valid list",
      input,
    });
  });

  it("caps the length before validating items", () => {
    const input = [1, 2, "x"];
    expect(err(list(int(), { maxItems: 2 }), input)).toEqual({
      type: "too_long",
      loc: LOC,
      msg: "List should have at most 2 items after validation, not 3",
      input,
      ctx: { field_type: "List", max_length: 2, actual_length: 3 },
    });
    expect(err(list(int(), { minItems: 1 }), [])).toEqual({
      type: "too_short",
      loc: LOC,
      msg: "List should have at least 1 item after validation, not 0",
      input: [],
      ctx: { field_type: "List", min_length: 1, actual_length: 0 },
    });
  });
});

describe("dict", () => {
  it.each(cases([null, [], "a", 1, true]))("rejects %j with dict_type", (input) => {
    expect(err(dict(str()), input)).toEqual({
      type: "dict_type",
      loc: LOC,
      msg: "Input should be a valid dictionary",
      input,
    });
  });

  it("validates keys at [key, '[key]'] and values at [key]", () => {
    const schema = dict(object({ host: { schema: nullable(str()) } }), { key: enumOf(["github", "gitlab"]) });
    expect(ok(schema, { github: { host: null } })).toEqual({ github: { host: null } });
    expect(errs(schema, { github: { host: 1 }, gitea: {} })).toEqual([
      {
        type: "string_type",
        loc: [...LOC, "github", "host"],
        msg: "Input should be a valid string",
        input: 1,
      },
      {
        type: "enum",
        loc: [...LOC, "gitea", "[key]"],
        msg: "Input should be 'github' or 'gitlab'",
        input: "gitea",
        ctx: { expected: "'github' or 'gitlab'" },
      },
    ]);
  });

  it("caps the number of entries", () => {
    const input = { a: "1", b: "2" };
    expect(err(dict(str(), { maxProperties: 1 }), input)).toEqual({
      type: "too_long",
      loc: LOC,
      msg: "Dictionary should have at most 1 item after validation, not 2",
      input,
      ctx: { field_type: "Dictionary", max_length: 1, actual_length: 2 },
    });
  });

  it("keeps __proto__ / constructor as own data keys without touching prototypes", () => {
    const input: unknown = JSON.parse(
      '{"__proto__": {"polluted": "yes"}, "constructor": {"prototype": {"x": 1}}}',
    );
    const out = ok(dict(anyValue()), input);
    expect(Object.getPrototypeOf(out)).toBe(Object.prototype);
    expect(Object.keys(out)).toEqual(["__proto__", "constructor"]);
    expect(Object.getOwnPropertyDescriptor(out, "__proto__")?.value).toEqual({ polluted: "yes" });
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect((out as { polluted?: unknown }).polluted).toBeUndefined();
    expect(JSON.parse(JSON.stringify(out))).toEqual(input);
  });
});

describe("object", () => {
  const model = object(
    {
      name: { schema: str(), required: true },
      count: { schema: int() },
      flag: { schema: bool(), default: true },
      tags: { schema: list(str()), default: [], fillDefaults: true },
      mode: { schema: nullable(enumOf(["a", "b"])), default: null, fillDefaults: true },
    },
    { title: "Thing" },
  );

  it("types required and default-filled fields as present, others optional", () => {
    expectTypeOf<Infer<typeof model>>().toEqualTypeOf<{
      name: string;
      tags: string[];
      mode: "a" | "b" | null;
      count?: number;
      flag?: boolean;
    }>();
  });

  it("leaves absent optional fields absent and fills only fillDefaults fields (fresh copies)", () => {
    const a = ok(model, { name: "x" });
    expect(a).toEqual({ name: "x", tags: [], mode: null });
    expect(Object.keys(a)).toEqual(["name", "tags", "mode"]);
    expect("flag" in a).toBe(false);
    a.tags.push("mutated");
    expect(ok(model, { name: "y" }).tags).toEqual([]);
  });

  it("keeps explicit nulls distinct from absent keys", () => {
    const s = object({ a: { schema: nullable(str()) }, b: { schema: nullable(str()) } });
    const out = ok(s, { a: null });
    expect(out).toEqual({ a: null });
    expect(Object.hasOwn(out, "a")).toBe(true);
    expect(Object.hasOwn(out, "b")).toBe(false);
  });

  it("reports a missing required field with the whole object as input", () => {
    const input = { count: 1 };
    expect(err(model, input)).toEqual({
      type: "missing",
      loc: [...LOC, "name"],
      msg: "Field required",
      input,
    });
  });

  it.each(cases([null, [], "x", 3, true]))("rejects %j with model_attributes_type", (input) => {
    expect(err(model, input)).toEqual({
      type: "model_attributes_type",
      loc: LOC,
      msg: "Input should be a valid dictionary or object to extract fields from",
      input,
    });
  });

  it("ignores extra keys by default", () => {
    expect(ok(model, { name: "x", other: 1 })).toEqual({ name: "x", tags: [], mode: null });
  });

  it("reports all problems at once: fields in declaration order, then extras in input order", () => {
    const strict = object(
      { a: { schema: int(), required: true }, b: { schema: bool() }, c: { schema: str(), required: true } },
      { extra: "forbid" },
    );
    const input = { zz: 1, b: "maybe", a: "x", yy: [1] };
    expect(errs(strict, input)).toEqual([
      {
        type: "int_parsing",
        loc: [...LOC, "a"],
        msg: "Input should be a valid integer, unable to parse string as an integer",
        input: "x",
      },
      {
        type: "bool_parsing",
        loc: [...LOC, "b"],
        msg: "Input should be a valid boolean, unable to interpret input",
        input: "maybe",
      },
      { type: "missing", loc: [...LOC, "c"], msg: "Field required", input },
      { type: "extra_forbidden", loc: [...LOC, "zz"], msg: "Extra inputs are not permitted", input: 1 },
      { type: "extra_forbidden", loc: [...LOC, "yy"], msg: "Extra inputs are not permitted", input: [1] },
    ]);
  });

  it("reports nested locations", () => {
    const outer = object({ inner: { schema: list(object({ v: { schema: int(), required: true } })) } });
    expect(errs(outer, { inner: [{ v: 1 }, {}, { v: "z" }] })).toEqual([
      { type: "missing", loc: [...LOC, "inner", 1, "v"], msg: "Field required", input: {} },
      {
        type: "int_parsing",
        loc: [...LOC, "inner", 2, "v"],
        msg: "Input should be a valid integer, unable to parse string as an integer",
        input: "z",
      },
    ]);
  });

  it("never reads inherited properties and never pollutes prototypes", () => {
    const s = object({
      constructor: { schema: str() },
      toString: { schema: str(), required: true },
      ["__proto__"]: { schema: anyValue() },
    } as const);
    const input: unknown = JSON.parse('{"__proto__": {"polluted": true}}');
    expect(errs(s, input)).toEqual([
      { type: "missing", loc: [...LOC, "toString"], msg: "Field required", input },
    ]);
    const out = ok(s, JSON.parse('{"toString": "t", "__proto__": {"polluted": true}}'));
    expect(Object.getPrototypeOf(out)).toBe(Object.prototype);
    expect(Object.keys(out)).toEqual(["toString", "__proto__"]);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    const forbid = object({ a: { schema: int() } }, { extra: "forbid" });
    expect(errs(forbid, JSON.parse('{"__proto__": {"x": 1}}'))).toEqual([
      {
        type: "extra_forbidden",
        loc: [...LOC, "__proto__"],
        msg: "Extra inputs are not permitted",
        input: { x: 1 },
      },
    ]);
  });

  it("accepts null-prototype objects but not class instances", () => {
    const input = Object.create(null) as Record<string, unknown>;
    input.name = "n";
    expect(ok(model, input).name).toBe("n");
    expect(err(model, new Date(0)).type).toBe("model_attributes_type");
    expect(err(model, new Map()).type).toBe("model_attributes_type");
  });
});

describe("refine / transform / before", () => {
  it("refine reports value_error with the original input", () => {
    const condenser = nullable(
      refine(int(), (v) => (v < 20 ? "condenser_max_size must be at least 20" : null)),
    );
    expect(ok(condenser, "25")).toBe(25);
    expect(ok(condenser, null)).toBeNull();
    expect(err(condenser, "5")).toEqual({
      type: "value_error",
      loc: LOC,
      msg: "Value error, condenser_max_size must be at least 20",
      input: "5",
      ctx: { error: {} },
    });
  });

  it("refine does not run when the inner schema fails", () => {
    let calls = 0;
    const s = refine(int(), () => {
      calls++;
      return null;
    });
    expect(err(s, "x").type).toBe("int_parsing");
    expect(calls).toBe(0);
  });

  it("transform maps the value and may throw ValueError", () => {
    const s = transform(str(), (v) => {
      if (v === "bad") throw new ValueError("no bad");
      return v.length;
    });
    expect(ok(s, "abc")).toBe(3);
    expect(err(s, "bad")).toEqual({
      type: "value_error",
      loc: LOC,
      msg: "Value error, no bad",
      input: "bad",
      ctx: { error: {} },
    });
  });

  it("before preprocesses the raw input and reports ValueErrors with the raw input", () => {
    const s = beforeValidator((v) => {
      if (v === "boom") throw new ValueError("exploded");
      return typeof v === "string" ? v.split(",") : v;
    }, list(int()));
    expect(ok(s, "1,2")).toEqual([1, 2]);
    expect(ok(s, [3])).toEqual([3]);
    expect(err(s, "boom")).toEqual({
      type: "value_error",
      loc: LOC,
      msg: "Value error, exploded",
      input: "boom",
      ctx: { error: {} },
    });
    expect(err(s, "1,x").loc).toEqual([...LOC, 1]);
  });
});

describe("union", () => {
  const s = union([
    { tag: "list[str]", schema: list(str()) },
    { tag: "str", schema: str() },
  ]);

  it("returns the first member that accepts", () => {
    expect(ok(s, ["a"])).toEqual(["a"]);
    expect(ok(s, "a")).toBe("a");
    expectTypeOf(ok(s, "a")).toEqualTypeOf<string | string[]>();
  });

  it("reports every member's errors under its tag", () => {
    expect(errs(s, 5)).toEqual([
      { type: "list_type", loc: [...LOC, "list[str]"], msg: "Input should be a valid list", input: 5 },
      { type: "string_type", loc: [...LOC, "str"], msg: "Input should be a valid string", input: 5 },
    ]);
  });
});

describe("validate / parseModel", () => {
  it("returns the value or throws a ValidationError with every violation", () => {
    expect(validate(int(), "4", ["query", "limit"])).toBe(4);
    try {
      validate(int({ gt: 0 }), "0", ["query", "limit"]);
      expect.unreachable();
    } catch (e) {
      expect(isValidationError(e)).toBe(true);
      expect(e).toBeInstanceOf(Error);
      expect((e as ValidationError).violations).toEqual([
        {
          type: "greater_than",
          loc: ["query", "limit"],
          msg: "Input should be greater than 0",
          input: "0",
          ctx: { gt: 0 },
        },
      ]);
      expect((e as ValidationError).message).toContain("limit: Input should be greater than 0");
    }
  });

  it("caps the number of reported issues", () => {
    const input = Array.from({ length: 500 }, () => "x");
    const all = errs(list(int()), input);
    expect(all).toHaveLength(MAX_ISSUES);
    expect(all[MAX_ISSUES - 1]!.loc).toEqual([...LOC, MAX_ISSUES - 1]);
  });

  it("rejects deeply nested input with one value_error instead of overflowing", () => {
    let deep: unknown = 1;
    for (let i = 0; i < 100_000; i++) deep = [deep];
    const all = errs(anyValue(), { a: deep });
    expect(all).toHaveLength(1);
    expect(all[0]).toMatchObject({
      type: "value_error",
      msg: "Value error, Input is nested too deeply (more than 32 levels)",
      input: null,
      ctx: { error: {} },
    });
    expect(all[0]!.loc).toEqual([...LOC, "a", ...Array.from({ length: 31 }, () => 0)]);
    // 32 levels are fine
    let ok32: unknown = 1;
    for (let i = 0; i < 32; i++) ok32 = [ok32];
    expect(ok(anyValue(), ok32)).toBe(ok32);
    expect(errs(anyValue(), [ok32])).toHaveLength(1);
    expect(validate(anyValue(), [ok32], LOC, { maxDepth: 40 })).toEqual([ok32]);
  });

  it("handles cyclic and heavily shared structures without hanging", () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(errs(anyValue(), cyclic)[0]!.type).toBe("value_error");
    let shared: unknown = [];
    for (let i = 0; i < 30; i++) shared = [shared, shared];
    expect(errs(anyValue(), shared)[0]!.type).toBe("value_error");
  });

  it("converts unexpected exceptions into a ValidationError", () => {
    const broken = transform(str(), () => {
      throw new TypeError("bug");
    });
    expect(errs(broken, "a")).toEqual([
      {
        type: "value_error",
        loc: LOC,
        msg: "Value error, Input could not be validated",
        input: null,
        ctx: { error: {} },
      },
    ]);
    const lying: Schema<number> = { parse: () => INVALID, jsonSchema: () => ({}) };
    expect(errs(lying, 1)[0]!.msg).toBe("Value error, Input could not be validated");
  });

  it("parseModel appends to an existing issue list", () => {
    const issues: FieldViolation[] = [];
    expect(parseModel(int(), "1", ["body", "a"], issues)).toBe(1);
    expect(parseModel(int(), "x", ["body", "b"], issues)).toBeUndefined();
    expect(parseModel(bool(), "x", ["body", "c"], issues)).toBeUndefined();
    expect(issues.map((i) => i.loc)).toEqual([
      ["body", "b"],
      ["body", "c"],
    ]);
  });
});

describe("body-level violations", () => {
  it("jsonInvalid", () => {
    expect(jsonInvalid(5)).toEqual({
      type: "json_invalid",
      loc: ["body", 5],
      msg: "JSON decode error",
      input: {},
      ctx: { error: "Expecting value" },
    });
    expect(jsonInvalid(0, "Expecting property name enclosed in double quotes").ctx).toEqual({
      error: "Expecting property name enclosed in double quotes",
    });
  });

  it("missingBody", () => {
    expect(missingBody()).toEqual({ type: "missing", loc: ["body"], msg: "Field required", input: null });
  });
});

describe("jsonSchema", () => {
  it("describes primitives with their constraints", () => {
    expect(str({ minLength: 1, maxLength: 5, pattern: /^a/ }).jsonSchema()).toEqual({
      type: "string",
      minLength: 1,
      maxLength: 5,
      pattern: "^a",
    });
    expect(int({ ge: 1, le: 100 }).jsonSchema()).toEqual({ type: "integer", minimum: 1, maximum: 100 });
    expect(int({ gt: 0, lt: 10, bits: 32 }).jsonSchema()).toEqual({
      type: "integer",
      exclusiveMinimum: 0,
      exclusiveMaximum: 10,
      format: "int32",
    });
    expect(float().jsonSchema()).toEqual({ type: "number" });
    expect(bool({ description: "d" }).jsonSchema()).toEqual({ type: "boolean", description: "d" });
    expect(enumOf(["a", "b"], { title: "E" }).jsonSchema()).toEqual({
      type: "string",
      enum: ["a", "b"],
      title: "E",
    });
    expect(literal(["a"]).jsonSchema()).toEqual({ const: "a", type: "string" });
    expect(nullable(int()).jsonSchema()).toEqual({ anyOf: [{ type: "integer" }, { type: "null" }] });
    expect(list(str(), { maxItems: 3 }).jsonSchema()).toEqual({
      type: "array",
      items: { type: "string" },
      maxItems: 3,
    });
    expect(dict(int(), { key: enumOf(["x"]), maxProperties: 2 }).jsonSchema()).toEqual({
      type: "object",
      additionalProperties: { type: "integer" },
      propertyNames: { type: "string", enum: ["x"] },
      maxProperties: 2,
    });
    expect(
      union([
        { tag: "int", schema: int() },
        { tag: "str", schema: str() },
      ]).jsonSchema(),
    ).toEqual({
      anyOf: [{ type: "integer" }, { type: "string" }],
    });
    expect(annotate(str(), { format: "uri" }).jsonSchema()).toEqual({ type: "string", format: "uri" });
    expect(anyValue().jsonSchema()).toEqual({});
  });

  it("describes objects: properties, titles, defaults, required, additionalProperties", () => {
    const s = object(
      {
        api_key: { schema: nullable(str()), default: null },
        url: { schema: str(), required: true, description: "Where" },
        v1_enabled: { schema: bool(), default: true },
        items: { schema: list(int()), defaultFactory: () => [] },
      },
      { title: "Thing", extra: "forbid" },
    );
    expect(s.jsonSchema()).toEqual({
      type: "object",
      title: "Thing",
      properties: {
        api_key: { anyOf: [{ type: "string" }, { type: "null" }], title: "Api Key", default: null },
        url: { type: "string", title: "Url", description: "Where" },
        v1_enabled: { type: "boolean", title: "V1 Enabled", default: true },
        items: { type: "array", items: { type: "integer" }, title: "Items", default: [] },
      },
      required: ["url"],
      additionalProperties: false,
    });
    expect(object({ a: { schema: str() } }).jsonSchema()).toEqual({
      type: "object",
      properties: { a: { type: "string", title: "A" } },
    });
    expect(JSON.parse(JSON.stringify(s.jsonSchema()))).toEqual(s.jsonSchema());
  });

  it("refine / transform / before keep the inner schema unless overridden", () => {
    expect(refine(int({ ge: 1 }), () => null).jsonSchema()).toEqual({ type: "integer", minimum: 1 });
    expect(transform(str(), (v) => v.length).jsonSchema()).toEqual({ type: "string" });
    expect(beforeValidator((v) => v, str()).jsonSchema()).toEqual({ type: "string" });
    expect(
      beforeValidator((v) => v, str(), { jsonSchema: () => ({ type: ["string", "number"] }) }).jsonSchema(),
    ).toEqual({
      type: ["string", "number"],
    });
  });
});
