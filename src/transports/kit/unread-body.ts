import type { IncomingMessage, ServerResponse } from "node:http";

/**
 * An answer written while the request's body has not all arrived (a refused key, a refused or oversized body)
 * closes the connection, so that the server neither waits for the rest nor reuses the connection. Decided when the
 * head is written: a body that has arrived by then keeps the connection open.
 */
export function closeIfBodyUnread(req: IncomingMessage, res: ServerResponse): void {
  const writeHead = res.writeHead;
  let decided = false;
  res.writeHead = function (this: ServerResponse, ...args: Parameters<ServerResponse["writeHead"]>) {
    if (!decided) {
      decided = true;
      if (!req.complete) this.shouldKeepAlive = false;
    }
    return (writeHead as (...a: unknown[]) => ServerResponse).apply(this, args);
  } as ServerResponse["writeHead"];
}
