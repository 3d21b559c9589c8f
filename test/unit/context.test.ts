import { createContextKey } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { callerKey, callerValues } from "../../src/core/context.ts";

describe("callerValues", () => {
  it("answers the caller it was made with, and behaves as connect's ContextValues for every key", () => {
    const caller = { userId: "u", keyId: "k" };
    const other = createContextKey<number>(7);
    const values = callerValues(caller);
    expect(values.get(callerKey)).toBe(caller);
    expect(values.get(other)).toBe(7); // the key's default until set
    expect(values.set(other, 0).get(other)).toBe(0); // a falsy value is a value
    values.delete(other);
    expect(values.get(other)).toBe(7);
    const next = { userId: "v", keyId: "l" };
    expect(values.set(callerKey, next).get(callerKey)).toBe(next);
    values.delete(callerKey);
    expect(values.get(callerKey)).toBeUndefined();
  });
});
