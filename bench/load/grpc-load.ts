// gRPC load generator (@grpc/grpc-js client), run as its own process. Keeps `inFlight` GetSettings calls
// outstanding on one channel for the duration and counts completed calls. Argument: a GrpcLoadConfig as JSON.
// Prints one LoadResult as a JSON line.
import * as grpc from "@grpc/grpc-js";
import { SettingsService } from "../../src/gen/workspace/v1/settings_pb.js";
import { grpcServiceDefinition } from "../../src/transports/grpc/grpc-server.ts";
import { type GrpcLoadConfig, type LoadResult, percentile } from "../lib/bench-util.ts";

const config = JSON.parse(process.argv[2] ?? "{}") as GrpcLoadConfig;
const method = grpcServiceDefinition(SettingsService).GetSettings;
if (method === undefined) throw new Error("no GetSettings in the service definition");

const client = new grpc.Client(config.address, grpc.credentials.createInsecure());
const metadata = new grpc.Metadata();
metadata.set("x-session-api-key", config.key);

const call = (): Promise<void> =>
  new Promise((resolve, reject) => {
    client.makeUnaryRequest(
      method.path,
      method.requestSerialize,
      method.responseDeserialize,
      {},
      metadata,
      (err) => (err ? reject(err) : resolve()),
    );
  });

await new Promise<void>((resolve, reject) =>
  client.waitForReady(Date.now() + 10_000, (err) => (err ? reject(err) : resolve())),
);

const latencies: number[] = [];
let ok = 0;
let failed = 0;
const started = performance.now();
const deadline = started + config.durationS * 1000;
const loop = async (): Promise<void> => {
  while (performance.now() < deadline) {
    const t = performance.now();
    try {
      await call();
      ok++;
      latencies.push(performance.now() - t);
    } catch {
      failed++;
    }
  }
};
await Promise.all(Array.from({ length: config.inFlight }, loop));
const durationS = (performance.now() - started) / 1000;
client.close();

const out: LoadResult = {
  rps: ok / durationS,
  ok,
  failed,
  durationS,
  p50Ms: percentile(latencies, 50),
  p99Ms: percentile(latencies, 99),
};
process.stdout.write(`${JSON.stringify(out)}\n`);
