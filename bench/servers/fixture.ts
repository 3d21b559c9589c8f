import type { JsonValue } from "@bufbuild/protobuf";

/** What the baselines answer, captured from the service under test by bench/run.ts before they start. */
export interface Fixture {
  /** The session key the baselines accept (compared as a constant). */
  key: string;
  /** The service's GET /api/settings body. */
  restSettings: JsonValue;
  /** The service's GetSettingsResponse in the proto JSON form (Connect JSON). */
  rpcSettings: JsonValue;
}

/** Events per conversation of the events search benchmark's bulk load. */
export const EVENTS_PER_CONVERSATION = 1000;

/** The i-th conversation id of the events search benchmark (32 hex). */
export function benchEventConversation(i: number): string {
  return `be${i.toString(16).padStart(30, "0")}`;
}
