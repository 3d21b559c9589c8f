import { Counter, Histogram, Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import type { Storage } from "../../src/ports/storage.ts";
import { instrumentStorage, LabelledHistogram, Metrics } from "../../src/server/metrics.ts";

const BUCKETS = [0.001, 0.01, 0.1, 1];
const OBSERVATIONS: [string, string, number][] = [
  ["GET", "200", 0.0004],
  ["GET", "200", 0.001], // on a bound: counted in that bucket (le is "less or equal")
  ["GET", "200", 0.05],
  ["POST", "422", 3],
  ["GET", "200", 0.2],
  ["POST", 'a"b\\c', 0.002], // label values are escaped like prom-client's
];

describe("LabelledHistogram", () => {
  it("renders exactly what prom-client's Histogram and Counter render for the same observations", async () => {
    const ours = new Registry();
    const histogram = new LabelledHistogram(
      ours,
      { name: "d_seconds", help: "latency", labelNames: ["method", "status"], buckets: BUCKETS },
      { name: "d_total", help: "requests" },
    );
    const theirs = new Registry();
    const h = new Histogram({
      name: "d_seconds",
      help: "latency",
      labelNames: ["method", "status"],
      buckets: BUCKETS,
      registers: [theirs],
    });
    const c = new Counter({
      name: "d_total",
      help: "requests",
      labelNames: ["method", "status"],
      registers: [theirs],
    });
    for (const [method, status, v] of OBSERVATIONS) {
      histogram.series(method, status).observe(v);
      h.observe({ method, status }, v);
      c.inc({ method, status });
    }
    expect(await ours.metrics()).toBe(await theirs.metrics());
  });

  it("keeps one series per label combination and refuses a wrong number of label values", () => {
    const histogram = new LabelledHistogram(new Registry(), {
      name: "x_seconds",
      help: "x",
      labelNames: ["a", "b"],
      buckets: BUCKETS,
    });
    expect(histogram.series("1", "2")).toBe(histogram.series("1", "2"));
    const three = new LabelledHistogram(new Registry(), {
      name: "y_seconds",
      help: "y",
      labelNames: ["a", "b", "c"],
      buckets: BUCKETS,
    });
    expect(three.series3("GET", "/x", 200)).toBe(three.series("GET", "/x", "200"));
    expect(three.series3("GET", "/x", 200)).toBe(three.series3("GET", "/x", "200"));
    expect(histogram.series("1", "2")).not.toBe(histogram.series("12", ""));
    expect(() => histogram.series("1")).toThrow(/expected 2 label values/);
  });
});

describe("Metrics", () => {
  it("counts HTTP requests by method, route and status, and RPCs by protocol, method and code", async () => {
    const m = new Metrics();
    m.http("GET", "/api/settings", 200, 0.002);
    m.http("GET", "/api/settings", 200, 0.003);
    m.http("GET", "/api/settings", 404, 0.001);
    m.http("POST", "/api/settings", 200, 0.004);
    m.rpc("grpc", "workspace.v1.SettingsService/GetSettings", "OK", 0.001);
    const text = await m.registry.metrics();
    expect(text).toContain('http_requests_total{method="GET",route="/api/settings",status="200"} 2');
    expect(text).toContain('http_requests_total{method="GET",route="/api/settings",status="404"} 1');
    expect(text).toContain('http_requests_total{method="POST",route="/api/settings",status="200"} 1');
    expect(text).toContain(
      'http_request_duration_seconds_sum{method="GET",route="/api/settings",status="200"} 0.005',
    );
    expect(text).toContain(
      'rpc_requests_total{protocol="grpc",method="workspace.v1.SettingsService/GetSettings",code="OK"} 1',
    );
    expect(text).toContain("# TYPE http_request_duration_seconds histogram");
    expect(text).toContain("# TYPE rpc_requests_total counter");
  });
});

describe("instrumentStorage", () => {
  it("times every repository method, own or inherited, and passes results and errors through unchanged", async () => {
    class Base {
      async inherited(x: number) {
        return x * 2;
      }
    }
    class Repo extends Base {
      calls = 0;
      async ok(a: number, b: number) {
        this.calls++;
        return a + b;
      }
      async rejects() {
        throw new Error("rejected");
      }
      throws(): Promise<never> {
        throw new Error("thrown");
      }
    }
    const repo = new Repo();
    const plain = { get: async (id: string) => ({ id }) };
    const metrics = new Metrics();
    const storage = instrumentStorage(
      {
        kind: "sqlite",
        userData: plain,
        apiKeys: repo,
        sandboxes: plain,
        conversations: plain,
        startTasks: plain,
        events: plain,
        ping: async () => {},
        close: async () => {},
      } as unknown as Storage,
      metrics,
    );
    const r = storage.apiKeys as unknown as Repo;
    expect(await r.ok(2, 3)).toBe(5);
    expect(repo.calls).toBe(1); // called on the repository itself
    expect(r.calls).toBe(1); // other properties read through
    expect(await r.inherited(4)).toBe(8);
    await expect(r.rejects()).rejects.toThrow("rejected");
    await expect(r.throws()).rejects.toThrow("thrown"); // a synchronous throw becomes a rejection
    expect(await (storage.userData as unknown as typeof plain).get("u")).toEqual({ id: "u" });
    const text = await metrics.registry.metrics();
    expect(text).toContain('storage_operation_duration_seconds_count{operation="apiKeys.ok",outcome="ok"} 1');
    expect(text).toContain(
      'storage_operation_duration_seconds_count{operation="apiKeys.inherited",outcome="ok"} 1',
    );
    expect(text).toContain(
      'storage_operation_duration_seconds_count{operation="apiKeys.rejects",outcome="error"} 1',
    );
    expect(text).toContain(
      'storage_operation_duration_seconds_count{operation="apiKeys.throws",outcome="error"} 1',
    );
    expect(text).toContain(
      'storage_operation_duration_seconds_count{operation="userData.get",outcome="ok"} 1',
    );
  });
});
