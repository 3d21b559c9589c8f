// A settings reader in its own process, for `npm run soak`: while the soak's users load the server, it reads the
// same user's settings over REST (fetch), Connect (connect-node) and gRPC (grpc-js) in turn, one call at a time,
// every `intervalMs`, and prints the latencies per protocol as one JSON line when its stdin closes. Its event loop
// does nothing else, so its figures are the server's answer time plus one idle client's cost; the users' own figures
// also hold the wait in the soak process's busy event loop (docs/reliability.md, "Reads per protocol under load").
import { setTimeout as sleep } from "node:timers/promises";
import { SettingsService } from "../../src/gen/workspace/v1/settings_pb.js";
import { connectClient, grpcClient } from "../../test/helpers/rpc-clients.ts";

interface ProbeConfig {
  base: string;
  grpcAddress: string;
  key: string;
  intervalMs: number;
}

const config = JSON.parse(process.argv[2] ?? "{}") as ProbeConfig;
// Reads as Connect GETs (useHttpGet), as in the soak.
const connect = connectClient(SettingsService, config.base, config.key, "connect", true);
const grpc = grpcClient(SettingsService, config.grpcAddress);
const calls: Record<string, () => Promise<unknown>> = {
  REST: async () => {
    const res = await fetch(`${config.base}/api/settings`, { headers: { "x-session-api-key": config.key } });
    await res.arrayBuffer();
    if (res.status !== 200) throw new Error(`status ${res.status}`);
  },
  Connect: () => connect.getSettings({}),
  gRPC: () => grpc.unary("GetSettings", {}, config.key),
};
const ms: Record<string, number[]> = { REST: [], Connect: [], gRPC: [] };
let failed = 0;
let stop = false;
process.stdin.on("end", () => {
  stop = true;
});
process.stdin.resume();
while (!stop) {
  for (const [name, call] of Object.entries(calls)) {
    const t0 = performance.now();
    try {
      await call();
      ms[name]?.push(performance.now() - t0);
    } catch {
      failed++; // the server being restarted
    }
    await sleep(config.intervalMs);
  }
}
grpc.raw.close();
process.stdout.write(`${JSON.stringify({ ms, failed })}\n`);
process.exit(0);
