/**
 * A git provider's failures as the API's one error model: one provider's failure (`toConnectError`), and what is
 * answered when several providers were asked and none answered (`aggregateFailure`, `throwTellingFailure`). Never
 * carries a token.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { GitProviderError } from "../../ports/git-provider.ts";

/** A provider failure as the API's one error model. Never carries the token. */
export function toConnectError(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  if (!(err instanceof GitProviderError))
    return new ConnectError("The git provider answered something unexpected", Code.Unavailable);
  switch (err.kind) {
    case "unauthorized":
      return new ConnectError(err.message, Code.Unauthenticated);
    case "forbidden":
      return new ConnectError(err.message, Code.PermissionDenied);
    case "not_found":
      return new ConnectError(err.message, Code.NotFound);
    case "rate_limited":
      // Retry-After only when the provider (or the remembered limit) said when.
      return new ConnectError(
        err.message,
        Code.ResourceExhausted,
        err.retryAfterSeconds === null ? undefined : { "retry-after": String(err.retryAfterSeconds) },
      );
    case "cancelled":
      return new ConnectError(err.message, Code.Canceled);
    default:
      return new ConnectError(err.message, Code.Unavailable);
  }
}

/** One provider call, its failure as the API's error model. */
export async function providerCall<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw toConnectError(err);
  }
}

/**
 * When every provider failed: 401 only if every one rejected its token, else the first failure that says more
 * (rate limit, unavailable, timeout, forbidden).
 */
export function aggregateFailure(failures: unknown[], allRejected: string): ConnectError {
  const telling = failures.find((f) => !(f instanceof GitProviderError && f.kind === "unauthorized"));
  return telling === undefined
    ? new ConnectError(allRejected, Code.Unauthenticated)
    : toConnectError(telling);
}

/**
 * Of the failures of several providers, one that says more than "not found" (a rate limit, a provider that did
 * not answer in time or at all, a cancelled call) is answered as such.
 */
export function throwTellingFailure(failures: readonly unknown[]): void {
  const telling = failures.find(
    (f) =>
      f instanceof GitProviderError &&
      (f.kind === "rate_limited" ||
        f.kind === "timeout" ||
        f.kind === "unavailable" ||
        f.kind === "cancelled"),
  );
  if (telling !== undefined) throw toConnectError(telling);
}
