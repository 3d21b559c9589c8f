import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import type { Storage } from "../ports/storage.ts";

const BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** Prometheus metrics of one server (its own registry: several apps in one process do not collide). */
export class Metrics {
  readonly registry = new Registry();
  readonly httpRequests = new Counter({
    name: "http_requests_total",
    help: "HTTP requests by method, route and status",
    labelNames: ["method", "route", "status"] as const,
    registers: [this.registry],
  });
  readonly httpDuration = new Histogram({
    name: "http_request_duration_seconds",
    help: "HTTP request latency by method, route and status",
    labelNames: ["method", "route", "status"] as const,
    buckets: BUCKETS,
    registers: [this.registry],
  });
  readonly rpcRequests = new Counter({
    name: "rpc_requests_total",
    help: "RPCs by protocol, method and code",
    labelNames: ["protocol", "method", "code"] as const,
    registers: [this.registry],
  });
  readonly rpcDuration = new Histogram({
    name: "rpc_duration_seconds",
    help: "RPC latency by protocol, method and code",
    labelNames: ["protocol", "method", "code"] as const,
    buckets: BUCKETS,
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

  rpc(protocol: string, method: string, code: string, seconds: number): void {
    this.rpcRequests.inc({ protocol, method, code });
    this.rpcDuration.observe({ protocol, method, code }, seconds);
  }
}

/**
 * The same storage with every repository method timed into `storage_operation_duration_seconds`
 * (`operation` = "<repository>.<method>"). Behaviour is unchanged: results and errors pass through.
 */
export function instrumentStorage(storage: Storage, metrics: Metrics): Storage {
  const wrap = <T extends object>(name: string, repo: T): T =>
    new Proxy(repo, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver) as unknown;
        if (typeof value !== "function" || typeof prop !== "string") return value;
        const operation = `${name}.${prop}`;
        return async (...args: unknown[]) => {
          const end = metrics.storageDuration.startTimer({ operation });
          try {
            const result = await (value as (...a: unknown[]) => unknown).apply(target, args);
            end({ outcome: "ok" });
            return result;
          } catch (err) {
            end({ outcome: "error" });
            throw err;
          }
        };
      },
    });
  return {
    kind: storage.kind,
    userData: wrap("userData", storage.userData),
    apiKeys: wrap("apiKeys", storage.apiKeys),
    sandboxes: wrap("sandboxes", storage.sandboxes),
    conversations: wrap("conversations", storage.conversations),
    startTasks: wrap("startTasks", storage.startTasks),
    ping: () => storage.ping(),
    close: () => storage.close(),
  };
}
