import { Code, ConnectError } from "@connectrpc/connect";

/** Observes one finished call: its method (`package.Service/Method`), code name ("OK" or connect's) and duration. */
export type CallObserver = (method: string, code: string, seconds: number) => void;

/**
 * Observes one call answered OK: its method and the time from its handler's start (the request read and admitted)
 * to its answer's body encoded, as it is handed to the transport (REST: serialized by Fastify, at its onSend;
 * Connect: encoded, before its head is built; gRPC: the message encoded, before grpc-js writes the response headers,
 * the message and, after them, the status). The service's work and each protocol's decoding and encoding are in
 * it; the transport's headers, the socket's writes and the event-loop passes around them are not.
 */
export type AnswerObserver = (method: string, seconds: number) => void;

/** A call's code as metrics label it: "OK", else connect's code name ("NotFound", "Internal", ...). */
export function codeName(code: Code | 0): string {
  return code === 0 ? "OK" : (Code[code] ?? String(code));
}

/** The code name of a failed call's error. */
export function errorCodeName(err: unknown): string {
  return codeName(ConnectError.from(err).code);
}
