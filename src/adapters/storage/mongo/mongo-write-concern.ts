import type { WriteConcernSettings } from "mongodb";

/**
 * Options of every write: acknowledged by a majority of the replica set and journaled, so a write that resolved
 * survives a crash or a failover.
 */
export const DURABLE_WRITE: { readonly writeConcern: WriteConcernSettings } = Object.freeze({
  writeConcern: Object.freeze({ w: "majority", journal: true }),
});
