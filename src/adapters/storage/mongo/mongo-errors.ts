import {
  MongoClientClosedError,
  MongoError,
  MongoNetworkError,
  MongoNotConnectedError,
  MongoOperationTimeoutError,
  MongoServerClosedError,
  MongoServerError,
  MongoServerSelectionError,
  MongoTopologyClosedError,
} from "mongodb";
import { StorageUnavailableError } from "../../../core/errors.ts";

/** Driver errors meaning "no usable server right now" (network, server selection, closed client). */
const UNAVAILABLE_CLASSES = [
  MongoNetworkError, // includes MongoNetworkTimeoutError
  MongoServerSelectionError,
  MongoNotConnectedError,
  MongoTopologyClosedError,
  MongoClientClosedError,
  MongoServerClosedError,
  MongoOperationTimeoutError,
] as const;

/**
 * Server error codes of a node that cannot serve the write now (stepping down, shutting down, unreachable
 * peers, a majority write concern that could not be satisfied).
 */
const UNAVAILABLE_SERVER_CODES = new Set([
  6, // HostUnreachable
  7, // HostNotFound
  64, // WriteConcernFailed (timeout waiting for a majority)
  89, // NetworkTimeout
  91, // ShutdownInProgress
  100, // UnsatisfiableWriteConcern
  189, // PrimarySteppedDown
  10107, // NotWritablePrimary
  11600, // InterruptedAtShutdown
  11602, // InterruptedDueToReplStateChange
  13435, // NotPrimaryNoSecondaryOk
  13436, // NotPrimaryOrSecondary
]);

/** True for errors that mean the database cannot be reached or cannot serve requests at the moment. */
export function isMongoUnavailable(error: unknown): boolean {
  if (UNAVAILABLE_CLASSES.some((cls) => error instanceof cls)) return true;
  if (error instanceof MongoError && typeof error.code === "number")
    return UNAVAILABLE_SERVER_CODES.has(error.code);
  return false;
}

/** Maps unavailability errors to StorageUnavailableError (with the driver error as cause); keeps all others. */
export function toMongoStorageError(error: unknown): unknown {
  return isMongoUnavailable(error) ? new StorageUnavailableError(error) : error;
}

/** True for a duplicate key error (E11000) on any unique index, `_id` included. */
export function isDuplicateKeyError(error: unknown): boolean {
  return error instanceof MongoServerError && error.code === 11000;
}

/** Runs one database operation, rejecting with {@link toMongoStorageError} of what it throws. */
export async function guarded<T>(operation: () => Promise<T>): Promise<T> {
  try {
    return await operation();
  } catch (error: unknown) {
    throw toMongoStorageError(error);
  }
}
