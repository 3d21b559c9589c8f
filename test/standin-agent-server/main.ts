/**
 * Entry point of the stand-in agent-server, with the command line of software-agent-sdk v1.3.0's
 * `agent_server/__main__.py` (`--host` default 0.0.0.0, `--port` default 8000, `--reload` accepted and ignored)
 * and uvicorn's start-up: the configuration is read (a bad value stops with status 1), the boot delay passes (the
 * Python server's imports), the lifespan creates the conversations folder (failure: uvicorn's "Application
 * startup failed", status 3), then the socket listens (a port in use: status 1).
 */
import { readConfig, type StandinConfig } from "./config.ts";
import { StandinServer } from "./server.ts";

function usage(message: string): never {
  process.stderr.write(
    "usage: openhands-agent-server [-h] [--host HOST] [--port PORT] [--reload]\n" +
      `openhands-agent-server: error: ${message}\n`,
  );
  process.exit(2);
}

function parseArgs(argv: string[]): { host: string; port: number } {
  let host = "0.0.0.0";
  let port = 8000;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const [name, inline] = arg.includes("=")
      ? [arg.slice(0, arg.indexOf("=")), arg.slice(arg.indexOf("=") + 1)]
      : [arg];
    const value = (): string => {
      if (inline !== undefined) return inline;
      const next = argv[++i];
      if (next === undefined) usage(`argument ${name}: expected one argument`);
      return next;
    };
    if (name === "--host") host = value();
    else if (name === "--port") {
      const raw = value();
      if (!/^\s*[-+]?\d+\s*$/.test(raw)) usage(`argument --port: invalid int value: '${raw}'`);
      port = Number(raw);
    } else if (name === "--reload") {
      // accepted, as the real server does; there is nothing to reload
    } else if (name === "-h" || name === "--help") {
      process.stdout.write("usage: openhands-agent-server [-h] [--host HOST] [--port PORT] [--reload]\n");
      process.exit(0);
    } else usage(`unrecognized arguments: ${arg}`);
  }
  return { host, port };
}

const { host, port } = parseArgs(process.argv.slice(2));
let config: StandinConfig;
try {
  config = readConfig(process.env);
} catch (err) {
  process.stderr.write(`Error loading config: ${(err as Error).message}\n`);
  process.exit(1);
}
process.stdout.write(`🙌 Starting OpenHands Agent Server on ${host}:${port}\n`);
await new Promise((r) => setTimeout(r, config.bootDelayMs));

const server = new StandinServer(config);
process.stdout.write("INFO:     Waiting for application startup.\n");
try {
  server.prepareState();
} catch (err) {
  const e = err as NodeJS.ErrnoException;
  process.stderr.write(
    `ERROR:    Traceback (most recent call last): ... ${e.message}\n` +
      "ERROR:    Application startup failed. Exiting.\n",
  );
  process.exit(3);
}
process.stdout.write("INFO:     Application startup complete.\n");
try {
  const address = await server.listen(host, port);
  process.stdout.write(
    `INFO:     Uvicorn running on http://${host}:${address.port} (Press CTRL+C to quit)\n`,
  );
} catch (err) {
  process.stderr.write(`ERROR:    ${(err as Error).message}\n`);
  process.exit(1);
}

for (const signal of ["SIGTERM", "SIGINT"] as const) {
  process.once(signal, () => {
    process.stdout.write("INFO:     Shutting down\n");
    void server.close().then(() => process.exit(0));
  });
}
