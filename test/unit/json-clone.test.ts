import { describe, expect, it } from "vitest";
import { cloneJson } from "../../src/core/json-clone.ts";

describe("cloneJson", () => {
  it("copies JSON values deeply: equal, independent, plain", () => {
    const source = JSON.parse(
      '{"a":1,"b":[1,{"c":null,"d":"x"}],"e":{"f":{"g":[true,false,1.5]}},"h":"","i":[]}',
    ) as Record<string, unknown>;
    const copy = cloneJson(source);
    expect(copy).toStrictEqual(source);
    expect(copy).not.toBe(source);
    expect(copy.b).not.toBe(source.b);
    ((copy.e as { f: { g: unknown[] } }).f.g as unknown[]).push("more");
    expect((source.e as { f: { g: unknown[] } }).f.g).toHaveLength(3);
    for (const v of [null, 0, "s", true]) expect(cloneJson(v)).toBe(v);
  });

  it("copies a __proto__ key as data, as JSON.parse does, without touching the prototype", () => {
    const source = JSON.parse('{"__proto__":{"polluted":true},"k":1}') as Record<string, unknown>;
    const copy = cloneJson(source);
    expect(Object.getPrototypeOf(copy)).toBe(Object.prototype);
    expect(Object.keys(copy)).toStrictEqual(["__proto__", "k"]);
    expect(Object.getOwnPropertyDescriptor(copy, "__proto__")?.value).toStrictEqual({ polluted: true });
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it("copies frozen documents into mutable ones", () => {
    const frozen = Object.freeze({ s: Object.freeze({ n: 1 }) });
    const copy = cloneJson(frozen) as { s: { n: number } };
    copy.s.n = 2;
    expect(copy.s.n).toBe(2);
    expect(frozen.s.n).toBe(1);
  });
});
