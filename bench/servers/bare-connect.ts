// Baseline of the Connect benchmark: a bare connect-node handler (connectNodeAdapter on node:http, HTTP/1.1)
// answering GetSettings with the same message from memory after the same header key check. Argument: the
// fixture file. Prints {port, pid}.

import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { fromJson } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { GetSettingsResponseSchema, SettingsService } from "../../src/gen/workspace/v1/settings_pb.js";
import type { Fixture } from "./fixture.ts";

const fixture = JSON.parse(readFileSync(process.argv[2] ?? "", "utf8")) as Fixture;
const response = fromJson(GetSettingsResponseSchema, fixture.rpcSettings);

const handler = connectNodeAdapter({
  routes: (router) =>
    router.service(SettingsService, {
      getSettings: (_req, ctx) => {
        if (ctx.requestHeader.get("x-session-api-key") !== fixture.key)
          throw new ConnectError("Unauthorized", Code.Unauthenticated);
        return response;
      },
    }),
});
const server = createServer(handler);
await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
const address = server.address();
const port = typeof address === "object" && address !== null ? address.port : 0;
process.stdout.write(`${JSON.stringify({ port, pid: process.pid })}\n`);
process.on("SIGTERM", () => server.close(() => process.exit(0)));
