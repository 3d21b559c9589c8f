import { subscribe, unsubscribe } from "node:diagnostics_channel";
import type { ServerHttp2Stream } from "node:http2";
import type { Code } from "@connectrpc/connect";
import { type CallObserver, codeName } from "../kit/call-metrics.ts";

const START = "http2.server.stream.start";
const CLOSE = "http2.server.stream.close";

/**
 * The time of each gRPC call from its HTTP/2 stream's start (the request headers received) to the stream's close
 * (the status sent in the trailers), as REST and Connect calls are timed from the request head to the last byte of
 * the answer. A unary call's handler returns a turn of the event loop before its call ends: grpc-js sends the
 * status once the message is written, and Node writes a stream's trailers one event-loop iteration after its last
 * DATA frame, so a call timed from the handler alone leaves out one iteration of the server's loop, which on a
 * busy server is most of what a gRPC call costs (docs/performance.md, "Reads under mixed load"). The part up to
 * the message (the handler to its answer, as on the other protocols) is timed by the handler itself
 * (GrpcServerOptions.onAnswer).
 *
 * Read through node:diagnostics_channel (Node's http2 stream channels); the streams of other listeners of the
 * process are told apart by their local port. Where Node publishes no such channel, {@link active} stays false
 * and the handlers time their calls themselves (from the handler to its answer).
 */
export class GrpcCallTiming {
  readonly #paths: ReadonlyMap<string, string>;
  readonly #observe: CallObserver;
  readonly #started = new WeakMap<ServerHttp2Stream, { at: number; method: string }>();
  #active = false;

  /** `methods`: the served methods' names (`package.Service/Method`); other paths are not timed. */
  constructor(methods: Iterable<string>, observe: CallObserver) {
    this.#paths = new Map([...methods].map((m) => [`/${m}`, m]));
    this.#observe = observe;
  }

  /** Whether calls are timed here (Node published a stream start of the attached listener). */
  get active(): boolean {
    return this.#active;
  }

  /** Times the calls of the listener on `port` until the returned function is called. */
  attach(port: number): () => void {
    const onStart = (message: unknown): void => {
      const { stream, headers } = message as { stream: ServerHttp2Stream; headers: Record<string, unknown> };
      if (stream.session?.socket?.localPort !== port) return;
      this.#active = true;
      const path = headers[":path"];
      const method = typeof path === "string" ? this.#paths.get(path) : undefined;
      if (method !== undefined) this.#started.set(stream, { at: performance.now(), method });
    };
    const onClose = (message: unknown): void => {
      const { stream } = message as { stream: ServerHttp2Stream };
      const started = this.#started.get(stream);
      if (started === undefined) return;
      this.#started.delete(stream);
      // The status a call ended with: in the trailers, or in the headers of a trailers-only answer; none when the
      // stream was reset before an answer (the client went away).
      const status = stream.sentTrailers?.["grpc-status"] ?? stream.sentHeaders?.["grpc-status"];
      const code = status === undefined ? "Canceled" : codeName(Number(status) as Code);
      this.#observe(started.method, code, (performance.now() - started.at) / 1000);
    };
    subscribe(START, onStart);
    subscribe(CLOSE, onClose);
    return () => {
      unsubscribe(START, onStart);
      unsubscribe(CLOSE, onClose);
    };
  }
}
