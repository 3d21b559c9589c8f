// The lazy per-request logger: no child logger until something logs through it, and then the same lines a
// Fastify request child writes (request id bound).

import Fastify from "fastify";
import { describe, expect, it } from "vitest";
import { LazyRequestLogger } from "../../src/server/request-logger.ts";

function pinoWithLines() {
  const lines: Record<string, unknown>[] = [];
  const app = Fastify({
    logger: { level: "info", stream: { write: (l: string) => lines.push(JSON.parse(l)) } },
  });
  return { log: app.log, lines };
}

describe("LazyRequestLogger", () => {
  it("makes the child only when it logs, and writes what the child would", () => {
    const { log, lines } = pinoWithLines();
    let children = 0;
    const counting = Object.create(log, {
      child: {
        value: (b: Record<string, unknown>, o?: object) => {
          children++;
          return log.child(b, o);
        },
      },
    }) as typeof log;
    const lazy = new LazyRequestLogger(counting, { reqId: "req-7" }, {});
    expect(lazy.level).toBe("info");
    expect(children).toBe(0);
    lazy.debug("below the level");
    lazy.error({ err: new Error("boom") }, "request failed");
    lazy.warn("plain message %s", "with args");
    expect(children).toBe(1);
    const direct = log.child({ reqId: "req-7" });
    direct.error({ err: new Error("boom") }, "request failed");
    const [a, b, c] = lines;
    expect(a).toMatchObject({ level: 50, reqId: "req-7", msg: "request failed", err: { message: "boom" } });
    expect(Object.keys(a ?? {})).toEqual(Object.keys(c ?? {}));
    expect(b).toMatchObject({ level: 40, reqId: "req-7", msg: "plain message with args" });
    expect(lines).toHaveLength(3);
    lazy.level = "debug";
    lazy.debug("now shown");
    expect(lines.at(-1)).toMatchObject({ level: 20, reqId: "req-7", msg: "now shown" });
    expect(log.level).toBe("info"); // the parent is untouched
    expect(lazy.child({ part: "x" }).info("nested")).toBeUndefined();
    expect(lines.at(-1)).toMatchObject({ reqId: "req-7", part: "x", msg: "nested" });
  });
});
