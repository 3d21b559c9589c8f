// The access line built directly must be byte for byte the line pino writes for logger.info(entry, msg), for the
// loggers the server is given (Fastify's pino, with the production redaction), and fall back to pino itself where
// it cannot be.

import Fastify, { type FastifyBaseLogger, type FastifyServerOptions } from "fastify";
import { describe, expect, it, vi } from "vitest";
import { type AccessEntry, createAccessLog } from "../../src/server/access-log.ts";

function logger(options: Exclude<FastifyServerOptions["logger"], boolean | undefined> = {}) {
  const lines: string[] = [];
  const app = Fastify({
    logger: {
      level: "info",
      redact: {
        paths: ['req.headers["x-session-api-key"]', "req.headers.authorization"],
        censor: "[redacted]",
      },
      ...options,
      stream: { write: (l: string) => lines.push(l) },
    },
  });
  return { log: app.log as FastifyBaseLogger, lines };
}

const entries: [AccessEntry, string][] = [
  [
    {
      reqId: "req-1",
      method: "GET",
      url: "/api/settings",
      route: "/api/settings",
      statusCode: 200,
      ms: 1.25,
    },
    "request completed",
  ],
  [
    {
      reqId: 'q"uote\\back',
      method: "POST",
      url: '/api/secrets/a%20b?x="1"',
      route: "/api/secrets/:id",
      statusCode: 422,
      ms: 0,
    },
    "request completed",
  ],
  [
    {
      reqId: "ctl\u0001\t\n",
      method: "DELETE",
      url: "/é/ü/€/𝄞",
      route: "unmatched",
      statusCode: 404,
      ms: 12345.678901,
    },
    "request completed",
  ],
  [
    {
      reqId: "x".repeat(150),
      method: "POST",
      url: `/${"a".repeat(300)}`,
      route: "/x",
      statusCode: 500,
      ms: Number.NaN,
    },
    "request completed",
  ],
  [
    {
      reqId: "req-2",
      method: "POST",
      url: "/workspace.v1.SettingsService/GetSettings",
      route: "/workspace.v1.SettingsService/GetSettings",
      statusCode: 200,
      ms: 3.5,
      aborted: true,
    },
    "request aborted by the client",
  ],
];

/** The time field varies between the two writes: compare with it replaced. */
const untimed = (line: string | undefined) => line?.replace(/,"time":\d+/, ',"time":0');

describe("createAccessLog", () => {
  it("writes exactly pino's line for every entry", () => {
    const { log, lines } = logger();
    const access = createAccessLog(log);
    const info = vi.spyOn(log, "info");
    for (const [entry, msg] of entries) {
      access(entry, msg);
      expect(info).not.toHaveBeenCalled(); // built directly, not through pino's info
      log.info(entry, msg);
      info.mockClear();
      const [ours, pinos] = lines.splice(0);
      expect(untimed(ours)).toBe(untimed(pinos));
    }
  });

  it("follows the level, the bindings and a custom time function", () => {
    const { log, lines } = logger({ timestamp: () => ',"time":"fixed"', base: { service: "aws" } });
    const access = createAccessLog(log);
    const [entry, msg] = entries[0] as [AccessEntry, string];
    access(entry, msg);
    log.info(entry, msg);
    expect(lines[0]).toBe(lines[1]);
    expect(lines[0]).toContain('"service":"aws"');
    log.level = "warn";
    access(entry, msg);
    expect(lines).toHaveLength(2);
  });

  it("leaves what it cannot reproduce to pino", () => {
    for (const options of [
      { mixin: () => ({ extra: 1 }) },
      { formatters: { log: (o: Record<string, unknown>) => ({ ...o, formatted: true }) } },
      { messageKey: "message" },
      { nestedKey: "payload" },
      { serializers: { url: (u: string) => u.toUpperCase() } },
      { redact: ["url"] },
    ]) {
      const { log, lines } = logger(options);
      const access = createAccessLog(log);
      const [entry, msg] = entries[1] as [AccessEntry, string];
      access(entry, msg);
      log.info(entry, msg);
      expect(lines).toHaveLength(2);
      expect(untimed(lines[0])).toBe(untimed(lines[1]));
    }
  });

  it("writes nothing through a logger that is off", () => {
    const app = Fastify({ logger: false });
    const access = createAccessLog(app.log);
    expect(() => access(entries[0]?.[0] as AccessEntry, "request completed")).not.toThrow();
  });
});
