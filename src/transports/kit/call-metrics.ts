import { Code, ConnectError } from "@connectrpc/connect";

/** Observes one finished call: its method (`package.Service/Method`), code name ("OK" or connect's) and duration. */
export type CallObserver = (method: string, code: string, seconds: number) => void;

/** A call's code as metrics label it: "OK", else connect's code name ("NotFound", "Internal", ...). */
export function codeName(code: Code | 0): string {
  return code === 0 ? "OK" : (Code[code] ?? String(code));
}

/** The code name of a failed call's error. */
export function errorCodeName(err: unknown): string {
  return codeName(ConnectError.from(err).code);
}
