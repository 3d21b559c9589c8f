import { describe, expect, it } from "vitest";
import { ValidationError } from "../../src/core/errors.ts";
import { checkEventBatch, parseTimestampUs } from "../../src/domain/events/event-json.ts";
import { fallbackTitle } from "../../src/domain/events/event-service.ts";

const us = (iso: string) => Date.parse(iso) * 1000;

describe("agent event timestamps", () => {
  it("reads the SDK's naive microsecond timestamps as UTC and honours offsets", () => {
    expect(parseTimestampUs("2025-11-28T10:11:12.123456")).toBe(us("2025-11-28T10:11:12Z") + 123_456);
    expect(parseTimestampUs("2025-11-28T10:11:12Z")).toBe(us("2025-11-28T10:11:12Z"));
    expect(parseTimestampUs("2025-11-28T12:11:12.5+02:00")).toBe(us("2025-11-28T10:11:12Z") + 500_000);
    expect(parseTimestampUs("2025-11-28T05:11:12-0500")).toBe(us("2025-11-28T10:11:12Z"));
    expect(parseTimestampUs("2025-11-28 10:11")).toBe(us("2025-11-28T10:11:00Z"));
  });

  it("refuses what is not a date-time", () => {
    for (const bad of [
      "yesterday",
      "2025-02-30T00:00:00",
      "2025-13-01T00:00:00",
      "2025-11-28",
      "2025-11-28T24:00:00",
      "",
    ])
      expect(parseTimestampUs(bad), bad).toBeNull();
  });
});

describe("webhook event batches", () => {
  const ok = { kind: "MessageEvent", id: "e1", timestamp: "2025-11-28T10:00:00", source: "user", extra: [1] };

  it("keeps each event's JSON and the fields storage indexes", () => {
    const [e] = checkEventBatch([ok]);
    expect(e).toEqual({
      id: "e1",
      kind: "MessageEvent",
      source: "user",
      timestampUs: us("2025-11-28T10:00:00Z"),
      json: JSON.stringify(ok),
    });
  });

  it("reports every problem of every event at once", () => {
    try {
      checkEventBatch([
        ok,
        { ...ok, id: 3, kind: "Not a kind", source: "robot" },
        "x",
        { kind: "MessageEvent" },
      ]);
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(ValidationError);
      const locs = (err as ValidationError).violations.map((v) => v.loc.join("."));
      expect(locs).toEqual([
        "body.1.id",
        "body.1.kind",
        "body.1.source",
        "body.2",
        "body.3.id",
        "body.3.source",
        "body.3.timestamp",
      ]);
    }
    expect(() => checkEventBatch({ events: [] })).toThrow(ValidationError);
  });
});

describe("fallback title", () => {
  it("is the message, whitespace collapsed, cut to the length with an ellipsis", () => {
    expect(fallbackTitle("  Fix   the\nbuild ", 50)).toBe("Fix the build");
    expect(fallbackTitle("x".repeat(60), 50)).toBe(`${"x".repeat(47)}...`);
    expect(fallbackTitle("   ", 50)).toBeNull();
    expect(fallbackTitle(null, 50)).toBeNull();
  });
});
