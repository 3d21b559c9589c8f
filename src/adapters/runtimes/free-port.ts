import { createServer, type Server } from "node:net";

/**
 * A TCP port that is free on `host` right now: binds port 0, reads the port the kernel chose and closes.
 * Another process may take it before the sandbox binds it; the kernel hands out ephemeral ports in turn, so
 * that is rare, and a sandbox that cannot bind never becomes healthy (the caller's timeout reports it).
 */
export async function freePort(host: string): Promise<number> {
  const { server, port } = await listeningSocket(host);
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/**
 * The command with every `{port}` placeholder replaced by the port and every `{host}` by the address the agent
 * should listen on (default loopback).
 */
export function withPort(command: readonly string[], port: number, host = "127.0.0.1"): string[] {
  return command.map((arg) => arg.replaceAll("{port}", String(port)).replaceAll("{host}", host));
}

/**
 * A TCP socket listening on a free port of `host`, to hand to a sandbox agent as an inherited descriptor (the
 * agent's LISTEN_FD): the port cannot be taken in between, and connections made before the agent runs wait in the
 * socket's backlog until it accepts them. The caller passes the server's descriptor in `stdio` and closes its own
 * copy right after the spawn, before its event loop could accept anything on it.
 */
export function listeningSocket(host: string): Promise<{ server: Server; port: number }> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once("error", reject);
    server.listen({ host, port: 0, exclusive: true }, () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      if (port > 0) resolve({ server, port });
      else server.close(() => reject(new Error("no port assigned")));
    });
  });
}
