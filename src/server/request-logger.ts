import type { FastifyBaseLogger, LogLevel } from "fastify";

type Bindings = Parameters<FastifyBaseLogger["child"]>[0];
type ChildLoggerOptions = NonNullable<Parameters<FastifyBaseLogger["child"]>[1]>;

/** Any of pino's call forms: (obj, msg?, ...args) or (msg, ...args). */
type LogArgs = [obj: unknown, msg?: string, ...args: unknown[]];

/**
 * Fastify's per-request logger (`req.log`), made on first use. Fastify makes a child logger with the request id
 * for every request; here almost no request ever logs through it (the access line is written by the server's
 * parent logger with the request id in it, see app.ts), so the child is made only when something does log
 * (an error, a Fastify warning). What it writes is the same as the child's would be.
 */
export class LazyRequestLogger implements FastifyBaseLogger {
  readonly #parent: FastifyBaseLogger;
  readonly #bindings: Bindings;
  readonly #options: ChildLoggerOptions;
  #child: FastifyBaseLogger | undefined;

  constructor(parent: FastifyBaseLogger, bindings: Bindings, options: ChildLoggerOptions) {
    this.#parent = parent;
    this.#bindings = bindings;
    this.#options = options;
  }

  get #log(): FastifyBaseLogger {
    this.#child ??= this.#parent.child(this.#bindings, this.#options);
    return this.#child;
  }

  get level(): LogLevel {
    return (this.#child ?? this.#parent).level as LogLevel;
  }

  set level(level: LogLevel) {
    this.#log.level = level;
  }

  // Prototype methods, not per-instance closures: one small object per request is the point.
  fatal(...args: LogArgs): void {
    this.#log.fatal(...args);
  }
  error(...args: LogArgs): void {
    this.#log.error(...args);
  }
  warn(...args: LogArgs): void {
    this.#log.warn(...args);
  }
  info(...args: LogArgs): void {
    this.#log.info(...args);
  }
  debug(...args: LogArgs): void {
    this.#log.debug(...args);
  }
  trace(...args: LogArgs): void {
    this.#log.trace(...args);
  }
  silent(...args: LogArgs): void {
    this.#log.silent(...args);
  }

  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.#log.child(bindings, options);
  }
}
