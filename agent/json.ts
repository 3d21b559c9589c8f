/** The JSON objects the agent passes around: request bodies, events, conversation records. */
export type Json = Record<string, unknown>;
