// The one Connect error answer (src/transports/connect/connect-errors.ts): statuses from ERROR_TABLE, which equal connect's own
// mapping (connect-node answers the calls it serves with codeToHttpStatus), connect's error JSON, internal errors
// masked, the error's metadata and the service's trailers as headers.
import { Code, ConnectError } from "@connectrpc/connect";
import { codeToHttpStatus } from "@connectrpc/connect/protocol-connect";
import { describe, expect, it } from "vitest";
import { connectErrorAnswer } from "../../src/transports/connect/connect-errors.ts";
import { connectHttpStatusOf, INTERNAL_MESSAGE } from "../../src/transports/kit/errors.ts";

const CODES = Object.values(Code).filter((c): c is Code => typeof c === "number");
const json = (b: Uint8Array) => JSON.parse(Buffer.from(b).toString()) as Record<string, unknown>;

describe("Connect error answers", () => {
  it.each(CODES)("code %i: the table's Connect status is connect's own", (code) => {
    expect(connectHttpStatusOf(code)).toBe(codeToHttpStatus(code));
    expect(connectErrorAnswer(new ConnectError("m", code)).status).toBe(codeToHttpStatus(code));
  });

  it("writes connect's error JSON with the code's name and the raw message", () => {
    const a = connectErrorAnswer(new ConnectError("no such thing", Code.NotFound));
    expect(a.status).toBe(404);
    expect(a.header.get("content-type")).toBe("application/json");
    expect(json(a.body)).toEqual({ code: "not_found", message: "no such thing" });
  });

  it("masks an internal error and any non-Connect error alike", () => {
    for (const err of [new Error("db path /secret"), new ConnectError("stack", Code.Internal)]) {
      const a = connectErrorAnswer(err);
      expect(a.status).toBe(500);
      expect(json(a.body)).toEqual({ code: "internal", message: INTERNAL_MESSAGE });
    }
  });

  it("carries the given headers, the error's metadata and the trailers; a protocol problem keeps its status", () => {
    const err = new ConnectError("slow down", Code.ResourceExhausted, { "retry-after": "1" });
    const a = connectErrorAnswer(err, {
      header: { "x-request-id": "r1" },
      trailer: new Headers({ "x-t": "v" }),
    });
    expect(a.status).toBe(429);
    expect(a.header.get("retry-after")).toBe("1");
    expect(a.header.get("x-request-id")).toBe("r1");
    expect(a.header.get("trailer-x-t")).toBe("v");
    const p = connectErrorAnswer(new ConnectError("use POST", Code.InvalidArgument), {
      status: 405,
      header: { allow: "POST" },
    });
    expect(p.status).toBe(405);
    expect(p.header.get("allow")).toBe("POST");
    expect(json(p.body)).toEqual({ code: "invalid_argument", message: "use POST" });
  });
});
