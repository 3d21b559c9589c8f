import type { FastifyBaseLogger } from "fastify";
import pino from "pino";

/** One answered (or abandoned) request, as the access line reports it. */
export interface AccessEntry {
  reqId: string;
  method: string;
  url: string;
  route: string;
  statusCode: number;
  ms: number;
  /** The client went away before the answer was complete. */
  aborted?: boolean;
}

export type AccessLog = (entry: AccessEntry, msg: string) => void;

const S = pino.symbols;
/** Present at runtime (pino 10), missing from pino's type declarations. */
const msgPrefixSym = (S as unknown as Record<string, symbol | undefined>).msgPrefixSym;
/** The keys an access line writes; a serializer or stringifier configured for one of them takes pino's own path. */
const KEYS = ["reqId", "method", "url", "route", "statusCode", "ms", "aborted"];

type PinoInternals = Record<symbol, unknown> & {
  isLevelEnabled?: (level: string) => boolean;
  levels?: { values?: Record<string, number> };
};

/**
 * The access line of every request, written at info level through the server's logger: exactly the line
 * `logger.info(entry, msg)` writes, built directly. pino's generic path (a loop over the object's keys, a
 * serializer and a stringifier lookup and string escaping per value, and the line assembled from many small
 * strings) cost ~2–3 µs and ~1.5 KB of garbage per request in the REST benchmarks, for a line whose keys and
 * value types never change. pino's own parts of the line are used as pino keeps them (the level prefix, the time
 * function, the bindings, the line end, the destination), so its configuration still applies. A logger this
 * cannot reproduce exactly (not pino, or with a mixin, a log formatter, a stream-write hook, a message prefix,
 * a nested key, another message key, a serializer or stringifier for one of these keys, a destination that wants
 * metadata, custom level numbers) gets `logger.info(entry, msg)`.
 */
export function createAccessLog(logger: FastifyBaseLogger): AccessLog {
  const slow: AccessLog = (entry, msg) => logger.info(entry, msg);
  const l = logger as unknown as PinoInternals;
  const info = l.levels?.values?.info;
  const prefix = (l[S.lsCacheSym] as Record<number, string> | undefined)?.[info ?? -1];
  const time = l[S.timeSym] as (() => string) | undefined;
  const stream = l[S.streamSym] as ({ write(line: string): unknown } & Record<symbol, unknown>) | undefined;
  const chindings = l[S.chindingsSym]; // checked here, read per line (setBindings changes it)
  const end = l[S.endSym];
  const serializers = (l[S.serializersSym] ?? {}) as Record<string, unknown>;
  const stringifiers = (l[S.stringifiersSym] ?? {}) as Record<string | symbol, unknown>;
  const formatters = (l[S.formattersSym] ?? {}) as { log?: unknown };
  const hooks = (l[S.hooksSym] ?? {}) as { streamWrite?: unknown };
  const exact =
    info === 30 &&
    typeof prefix === "string" &&
    typeof time === "function" &&
    typeof chindings === "string" &&
    typeof end === "string" &&
    typeof stream?.write === "function" &&
    stream[S.needsMetadataGsym] !== true &&
    typeof l.isLevelEnabled === "function" &&
    l[S.mixinSym] === undefined &&
    formatters.log === undefined &&
    hooks.streamWrite === undefined &&
    msgPrefixSym !== undefined &&
    l[msgPrefixSym] === undefined &&
    !l[S.nestedKeySym] &&
    l[S.messageKeySym] === "msg" &&
    stringifiers[S.wildcardFirstSym] === undefined &&
    KEYS.every((k) => serializers[k] === undefined && stringifiers[k] === undefined);
  if (!exact) return slow;
  const enabled = (l.isLevelEnabled as (level: string) => boolean).bind(logger);
  const str = JSON.stringify;
  return (e, msg) => {
    if (!enabled("info")) return;
    stream.write(
      `${prefix}${time.call(logger)}${l[S.chindingsSym] as string},"reqId":${str(e.reqId)},"method":${str(e.method)},"url":${str(e.url)},"route":${str(e.route)},"statusCode":${e.statusCode},"ms":${Number.isFinite(e.ms) ? e.ms : null}${e.aborted === true ? ',"aborted":true' : ""},"msg":${str(msg)}${end}`,
    );
  };
}
