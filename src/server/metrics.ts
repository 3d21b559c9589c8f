import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import type { Storage } from "../ports/storage.ts";

// From 0.1 ms: a read answered from memory takes a few hundred µs of the server's time, which the soak compares
// per protocol (bench/soak.ts).
const BUCKETS = [
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
];

// Finer below a millisecond: the part of a read between its handler and its answer takes a few hundred µs, and the
// soak compares its p50 across protocols within 1.5×.
const ANSWER_BUCKETS = [
  0.00005, 0.0001, 0.00015, 0.0002, 0.0003, 0.0004, 0.0005, 0.00075, 0.001, 0.0015, 0.0025, 0.005, 0.01,
  0.025, 0.1, 1,
];

/** Prometheus metrics of one server (its own registry: several apps in one process do not collide). */
export class Metrics {
  readonly registry = new Registry();
  readonly #httpDuration = new Histogram({
    name: "http_request_duration_seconds",
    help: "HTTP request latency by method, route and status",
    labelNames: ["method", "route", "status"] as const,
    buckets: BUCKETS,
    registers: [this.registry],
  });
  readonly #httpTotal = new Counter({
    name: "http_requests_total",
    help: "HTTP requests by method, route and status",
    labelNames: ["method", "route", "status"] as const,
    registers: [this.registry],
  });
  readonly #rpcDuration = new Histogram({
    name: "rpc_duration_seconds",
    help: "RPC latency by protocol, method and code",
    labelNames: ["protocol", "method", "code"] as const,
    buckets: BUCKETS,
    registers: [this.registry],
  });
  readonly #rpcTotal = new Counter({
    name: "rpc_requests_total",
    help: "RPCs by protocol, method and code",
    labelNames: ["protocol", "method", "code"] as const,
    registers: [this.registry],
  });
  /**
   * From a call's handler start to its answer handed to the transport, by protocol and method, OK calls only (the
   * soak compares its p50 across protocols; bench/soak.ts).
   */
  readonly #answerDuration = new Histogram({
    name: "rpc_answer_duration_seconds",
    help: "Time from a call's handler start to its answer handed to the transport, by protocol and method (OK calls)",
    labelNames: ["protocol", "method"] as const,
    buckets: ANSWER_BUCKETS,
    registers: [this.registry],
  });
  readonly storageDuration = new Histogram({
    name: "storage_operation_duration_seconds",
    help: "Storage latency by repository operation",
    labelNames: ["operation", "outcome"] as const,
    buckets: BUCKETS,
    registers: [this.registry],
  });

  constructor() {
    // Not one of prom-client's metric classes, but what its registry reads of one (name, get, reset).
    collectDefaultMetrics({ register: this.registry });
  }

  /** A gauge whose value is computed at scrape time, labelled by status. */
  statusGauge(name: string, help: string, count: () => Promise<Record<string, number>>): void {
    new Gauge({
      name,
      help,
      labelNames: ["status"] as const,
      registers: [this.registry],
      async collect() {
        for (const [status, n] of Object.entries(await count())) this.set({ status }, n);
      },
    });
  }

  /** A gauge read at scrape time. */
  gauge(name: string, help: string, read: () => number): void {
    new Gauge({
      name,
      help,
      registers: [this.registry],
      collect() {
        this.set(read());
      },
    });
  }

  /** prom-client's series of each label combination seen (labels() hashes its labels on every call). */
  readonly #series = new Map<string, { duration: { observe(v: number): void }; total: { inc(): void } }>();

  /** One answered HTTP request. */
  http(method: string, route: string, status: number, seconds: number): void {
    const key = `http ${method} ${status} ${route}`;
    let series = this.#series.get(key);
    if (series === undefined) {
      const labels = { method, route, status: String(status) };
      series = { duration: this.#httpDuration.labels(labels), total: this.#httpTotal.labels(labels) };
      this.#series.set(key, series);
    }
    series.duration.observe(seconds);
    series.total.inc();
  }

  /**
   * One call answered OK, timed from its handler's start to its answer handed to the transport (REST, Connect and
   * gRPC alike: the same part of a call on every protocol, without what each protocol's framing and the server's
   * event loop add after it; see AnswerObserver).
   */
  answer(protocol: string, method: string, seconds: number): void {
    this.#answerDuration.observe({ protocol, method }, seconds);
  }

  /** One finished RPC. */
  rpc(protocol: string, method: string, code: string, seconds: number): void {
    const key = `rpc ${protocol} ${code} ${method}`;
    let series = this.#series.get(key);
    if (series === undefined) {
      const labels = { protocol, method, code };
      series = { duration: this.#rpcDuration.labels(labels), total: this.#rpcTotal.labels(labels) };
      this.#series.set(key, series);
    }
    series.duration.observe(seconds);
    series.total.inc();
  }
}

/**
 * The same storage with every repository method (but the user data's synchronous `changeToken`) timed into `storage_operation_duration_seconds`
 * (`operation` = "<repository>.<method>"). Behaviour is unchanged: results and errors pass through.
 */
export function instrumentStorage(storage: Storage, metrics: Metrics): Storage {
  /** `method` timed by outcome (its promise's; a synchronous throw becomes a rejection). */
  const timed = (operation: string, method: (...a: unknown[]) => unknown) => {
    const ok = metrics.storageDuration.labels({ operation, outcome: "ok" });
    const failed = metrics.storageDuration.labels({ operation, outcome: "error" });
    return (...args: unknown[]): Promise<unknown> => {
      const started = performance.now();
      const fail = (err: unknown): Promise<never> => {
        failed.observe((performance.now() - started) / 1000);
        return Promise.reject(err);
      };
      let result: unknown;
      try {
        result = method(...args);
      } catch (err) {
        return fail(err);
      }
      return Promise.resolve(result).then((value) => {
        ok.observe((performance.now() - started) / 1000);
        return value;
      }, fail);
    };
  };
  // A plain object with every method of the repository (own or inherited) wrapped once, up front: a Proxy would
  // run its trap on every method lookup of every request.
  // `untimed`: synchronous methods (not storage operations), passed through as they are.
  const wrap = <T extends object>(name: string, repo: T, untimed: readonly string[] = []): T => {
    const out: Record<string, unknown> = {};
    for (let o: object | null = repo; o !== null && o !== Object.prototype; o = Object.getPrototypeOf(o)) {
      for (const key of Object.getOwnPropertyNames(o)) {
        if (key === "constructor" || Object.hasOwn(out, key)) continue;
        const value = (repo as Record<string, unknown>)[key];
        if (typeof value === "function" && untimed.includes(key))
          out[key] = (value as (...a: unknown[]) => unknown).bind(repo);
        else if (typeof value === "function")
          out[key] = timed(`${name}.${key}`, (value as (...a: unknown[]) => unknown).bind(repo));
        else
          Object.defineProperty(out, key, {
            get: () => (repo as Record<string, unknown>)[key],
            enumerable: true,
          });
      }
    }
    return out as T;
  };
  return {
    kind: storage.kind,
    userData: wrap("userData", storage.userData, ["changeToken"]),
    apiKeys: wrap("apiKeys", storage.apiKeys),
    sandboxes: wrap("sandboxes", storage.sandboxes),
    conversations: wrap("conversations", storage.conversations),
    startTasks: wrap("startTasks", storage.startTasks),
    events: wrap("events", storage.events),
    changes: wrap("changes", storage.changes, ["subscribe"]),
    ping: () => storage.ping(),
    checkWritable: () => storage.checkWritable(),
    compact: () => storage.compact(),
    close: () => storage.close(),
  };
}
