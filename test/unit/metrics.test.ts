import { describe, expect, it } from "vitest";
import type { Storage } from "../../src/ports/storage.ts";
import { instrumentStorage, Metrics } from "../../src/server/metrics.ts";

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

  it("keeps answer times by protocol and method as a Prometheus histogram (cumulative buckets, sum, count)", async () => {
    const m = new Metrics();
    const method = "workspace.v1.SettingsService/GetSettings";
    m.answer("rest", method, 0.00012);
    m.answer("rest", method, 0.0003); // on a bound: counted in it
    m.answer("rest", method, 2); // above every bound: +Inf only
    m.answer("grpc", method, 0.00004);
    const json = await m.registry.getMetricsAsJSON();
    const values = (json.find((x) => x.name === "rpc_answer_duration_seconds")?.values ?? []) as {
      metricName?: string;
      labels: Record<string, string | number>;
      value: number;
    }[];
    /** The value of one series: metric name suffix, protocol and (for a bucket) its bound. */
    const value = (suffix: string, protocol: string, le?: number | string): number | undefined =>
      values.find(
        (v) =>
          v.metricName === `rpc_answer_duration_seconds${suffix}` &&
          v.labels.protocol === protocol &&
          v.labels.method === method &&
          (le === undefined || v.labels.le === le),
      )?.value;
    expect(value("_bucket", "rest", 0.0001)).toBe(0);
    expect(value("_bucket", "rest", 0.00015)).toBe(1);
    expect(value("_bucket", "rest", 0.0003)).toBe(2);
    expect(value("_bucket", "rest", 1)).toBe(2);
    expect(value("_bucket", "rest", "+Inf")).toBe(3);
    expect(value("_count", "rest")).toBe(3);
    expect(value("_sum", "rest")).toBeCloseTo(2.00042, 10);
    expect(value("_bucket", "grpc", 0.00005)).toBe(1);
    expect(await m.registry.metrics()).toContain("# TYPE rpc_answer_duration_seconds histogram");
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
        changes: plain,
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
