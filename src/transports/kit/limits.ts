/** The limits every protocol enforces alike (REST, Connect, gRPC-Web on the HTTP port; gRPC on its own). */
export interface TransportLimits {
  /** Largest request body or message, after decompression. */
  readonly maxMessageBytes: number;
  /** Open server-streaming calls per API key. */
  readonly maxStreamsPerKey: number;
  /** Open server-streaming calls on the server. */
  readonly maxStreams: number;
  /** Open connections per listener (the HTTP port and the gRPC port each). */
  readonly maxConnections: number;
  /** Time allowed for a whole HTTP request (headers and body) to arrive. */
  readonly requestTimeoutMs: number;
  /** Time allowed for an HTTP request's headers to arrive. */
  readonly headersTimeoutMs: number;
  /** How often an open stream checks that its key is still valid (the key cache period). */
  readonly keyRecheckMs: number;
  /**
   * Largest event batch an agent server may post to its webhook (default 32 MiB): browser screenshots make a
   * batch of five events several MiB.
   */
  readonly maxWebhookBytes?: number;
}

export const DEFAULT_LIMITS: TransportLimits = Object.freeze({
  maxMessageBytes: 1024 * 1024,
  maxStreamsPerKey: 16,
  maxStreams: 1000,
  maxConnections: 10_000,
  requestTimeoutMs: 30_000,
  headersTimeoutMs: 10_000,
  keyRecheckMs: 5_000,
  maxWebhookBytes: 32 * 1024 * 1024,
});
