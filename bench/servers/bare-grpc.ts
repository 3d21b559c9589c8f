// Baseline of the gRPC benchmark: a bare @grpc/grpc-js server with the service's own service definition
// (grpcServiceDefinition, same descriptors and serializers) answering GetSettings with the same message from
// memory after the same metadata key check. Argument: the fixture file. Prints {grpcPort, pid}.
import { readFileSync } from "node:fs";
import { fromJson } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { GetSettingsResponseSchema, SettingsService } from "../../src/gen/workspace/v1/settings_pb.js";
import { grpcServiceDefinition } from "../../src/transports/grpc/grpc-server.ts";
import type { Fixture } from "./fixture.ts";

const fixture = JSON.parse(readFileSync(process.argv[2] ?? "", "utf8")) as Fixture;
const response = fromJson(GetSettingsResponseSchema, fixture.rpcSettings);

const server = new grpc.Server({
  "grpc.max_receive_message_length": 4 * 1024 * 1024,
  "grpc.keepalive_permit_without_calls": 1,
});
server.addService(grpcServiceDefinition(SettingsService), {
  GetSettings: (call: grpc.ServerUnaryCall<unknown, unknown>, callback: grpc.sendUnaryData<unknown>) => {
    if (call.metadata.get("x-session-api-key")[0] !== fixture.key) {
      callback({ code: grpc.status.UNAUTHENTICATED, details: "Unauthorized" });
      return;
    }
    callback(null, response);
  },
});
const grpcPort = await new Promise<number>((resolve, reject) =>
  server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, port) =>
    err ? reject(err) : resolve(port),
  ),
);
process.stdout.write(`${JSON.stringify({ grpcPort, pid: process.pid })}\n`);
process.on("SIGTERM", () => server.tryShutdown(() => process.exit(0)));
