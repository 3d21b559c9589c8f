import { collectDefaultMetrics, Gauge, type Metric, Registry } from "prom-client";
import type { Storage } from "../ports/storage.ts";

const BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/**
 * One histogram series (one combination of label values): observing is a bucket search and three additions. The
 * series is looked up once per combination and kept, so the hot path never builds label objects or hashes them,
 * which prom-client's `observe(labels, v)` does on every call (~15% of a REST GET's CPU in the benchmarks).
 */
export class Series {
  readonly labels: Readonly<Record<string, string>>;
  /** Per bucket (not cumulative); the last one is +Inf. */
  readonly counts: Float64Array;
  sum = 0;
  count = 0;
  readonly #bounds: readonly number[];

  constructor(labels: Record<string, string>, bounds: readonly number[]) {
    this.labels = labels;
    this.#bounds = bounds;
    this.counts = new Float64Array(bounds.length + 1);
  }

  observe(value: number): void {
    const bounds = this.#bounds;
    let i = 0;
    while (i < bounds.length && value > (bounds[i] as number)) i++;
    this.counts[i] = (this.counts[i] as number) + 1;
    this.sum += value;
    this.count++;
  }
}

type Value = { value: number; labels: Record<string, string | number>; metricName?: string };

/**
 * A labelled histogram, plus optionally the counter of its observations, registered with a prom-client registry
 * through prom-client's metric interface (`get()` answering name, help, type and values): prom-client renders
 * them with the other metrics, the series keep the counts.
 */
export class LabelledHistogram {
  readonly #series = new Map<string, Series>();
  readonly #nested = new Map<string, Map<string, Map<string | number, Series>>>();
  readonly #labelNames: readonly string[];
  readonly #bounds: readonly number[];

  constructor(
    registry: Registry,
    options: { name: string; help: string; labelNames: readonly string[]; buckets: readonly number[] },
    counter?: { name: string; help: string },
  ) {
    this.#labelNames = options.labelNames;
    this.#bounds = options.buckets;
    const all = (): Series[] => [...this.#series.values()];
    registry.registerMetric(
      asMetric(options.name, options.help, "histogram", () =>
        all().flatMap((s) => {
          const out: Value[] = [];
          let acc = 0;
          this.#bounds.forEach((le, i) => {
            acc += s.counts[i] as number;
            out.push({ value: acc, labels: { le, ...s.labels }, metricName: `${options.name}_bucket` });
          });
          out.push(
            { value: s.count, labels: { le: "+Inf", ...s.labels }, metricName: `${options.name}_bucket` },
            { value: s.sum, labels: { ...s.labels }, metricName: `${options.name}_sum` },
            { value: s.count, labels: { ...s.labels }, metricName: `${options.name}_count` },
          );
          return out;
        }),
      ),
    );
    if (counter !== undefined)
      registry.registerMetric(
        asMetric(counter.name, counter.help, "counter", () =>
          all().map((s) => ({ value: s.count, labels: { ...s.labels } })),
        ),
      );
  }

  /**
   * The series of three label values (a histogram with three labels), found through nested maps: no key string
   * is built per call, which matters on the per-request paths. A number is labelled as its decimal string.
   */
  series3(a: string, b: string, c: string | number): Series {
    let byB = this.#nested.get(a);
    if (byB === undefined) {
      byB = new Map();
      this.#nested.set(a, byB);
    }
    let byC = byB.get(b);
    if (byC === undefined) {
      byC = new Map();
      byB.set(b, byC);
    }
    let s = byC.get(c);
    if (s === undefined) {
      s = this.series(a, b, String(c));
      byC.set(c, s);
    }
    return s;
  }

  /** The series of these label values (in labelNames order), made on first use. */
  series(...values: string[]): Series {
    const key = values.join("\u0000");
    let s = this.#series.get(key);
    if (s === undefined) {
      if (values.length !== this.#labelNames.length)
        throw new Error(`expected ${this.#labelNames.length} label values, got ${values.length}`);
      const labels: Record<string, string> = {};
      this.#labelNames.forEach((n, i) => {
        labels[n] = values[i] as string;
      });
      s = new Series(labels, this.#bounds);
      this.#series.set(key, s);
    }
    return s;
  }
}

/** prom-client's metric interface (what Registry#metrics reads) over a function listing the values. */
function asMetric(name: string, help: string, type: "histogram" | "counter", values: () => Value[]): Metric {
  const metric = {
    name,
    help,
    type,
    aggregator: "sum",
    get: async () => ({ name, help, type, aggregator: "sum", values: values() }),
    reset: () => {},
  };
  return metric as unknown as Metric;
}

/** Prometheus metrics of one server (its own registry: several apps in one process do not collide). */
export class Metrics {
  readonly registry = new Registry();
  /** `http_request_duration_seconds` and `http_requests_total` by method, route and status. */
  readonly #http = new LabelledHistogram(
    this.registry,
    {
      name: "http_request_duration_seconds",
      help: "HTTP request latency by method, route and status",
      labelNames: ["method", "route", "status"],
      buckets: BUCKETS,
    },
    { name: "http_requests_total", help: "HTTP requests by method, route and status" },
  );
  /** `rpc_duration_seconds` and `rpc_requests_total` by protocol, method and code. */
  readonly #rpc = new LabelledHistogram(
    this.registry,
    {
      name: "rpc_duration_seconds",
      help: "RPC latency by protocol, method and code",
      labelNames: ["protocol", "method", "code"],
      buckets: BUCKETS,
    },
    { name: "rpc_requests_total", help: "RPCs by protocol, method and code" },
  );
  readonly storageDuration = new LabelledHistogram(this.registry, {
    name: "storage_operation_duration_seconds",
    help: "Storage latency by repository operation",
    labelNames: ["operation", "outcome"],
    buckets: BUCKETS,
  });

  constructor() {
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

  /** One answered HTTP request. */
  http(method: string, route: string, status: number, seconds: number): void {
    this.#http.series3(method, route, status).observe(seconds);
  }

  rpc(protocol: string, method: string, code: string, seconds: number): void {
    this.#rpc.series3(protocol, method, code).observe(seconds);
  }
}

/**
 * The same storage with every repository method timed into `storage_operation_duration_seconds`
 * (`operation` = "<repository>.<method>"). Behaviour is unchanged: results and errors pass through.
 */
export function instrumentStorage(storage: Storage, metrics: Metrics): Storage {
  /** `method` timed into its two series (its promise's outcome; a synchronous throw becomes a rejection). */
  const timed = (operation: string, method: (...a: unknown[]) => unknown) => {
    const ok = metrics.storageDuration.series(operation, "ok");
    const failed = metrics.storageDuration.series(operation, "error");
    return (...args: unknown[]): Promise<unknown> => {
      const started = performance.now();
      let result: unknown;
      try {
        result = method(...args);
      } catch (err) {
        failed.observe((performance.now() - started) / 1000);
        return Promise.reject(err);
      }
      return Promise.resolve(result).then(
        (value) => {
          ok.observe((performance.now() - started) / 1000);
          return value;
        },
        (err: unknown) => {
          failed.observe((performance.now() - started) / 1000);
          throw err;
        },
      );
    };
  };
  // A plain object with every method of the repository (own or inherited) wrapped once, up front: a Proxy would
  // run its trap on every method lookup of every request.
  const wrap = <T extends object>(name: string, repo: T): T => {
    const out: Record<string, unknown> = {};
    for (let o: object | null = repo; o !== null && o !== Object.prototype; o = Object.getPrototypeOf(o)) {
      for (const key of Object.getOwnPropertyNames(o)) {
        if (key === "constructor" || Object.hasOwn(out, key)) continue;
        const value = (repo as Record<string, unknown>)[key];
        if (typeof value === "function")
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
    userData: wrap("userData", storage.userData),
    apiKeys: wrap("apiKeys", storage.apiKeys),
    sandboxes: wrap("sandboxes", storage.sandboxes),
    conversations: wrap("conversations", storage.conversations),
    startTasks: wrap("startTasks", storage.startTasks),
    events: wrap("events", storage.events),
    ping: () => storage.ping(),
    close: () => storage.close(),
  };
}
