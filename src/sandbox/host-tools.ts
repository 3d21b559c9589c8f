import { findExecutable } from "./process/bwrap.ts";

/**
 * The absolute paths of the host tools `names` (looked up on `searchPath`) when this process runs as root and all
 * are found; else why not: `notRoot`, or which tools are missing.
 */
export function rootTools<const N extends string>(
  names: readonly N[],
  searchPath: string,
  notRoot: string,
): Record<N, string> | string {
  if (process.getuid?.() !== 0) return notRoot;
  const found: Partial<Record<N, string>> = {};
  const missing: string[] = [];
  for (const name of names) {
    const path = findExecutable(name, searchPath);
    if (path === null) missing.push(name);
    else found[name] = path;
  }
  return missing.length > 0 ? `${missing.join(", ")} not found` : (found as Record<N, string>);
}

/**
 * `subject` when `trial` works on this host (what the trial made is always undone by `undo`), else `failure` with
 * the trial's error.
 */
export function afterTrial<T>(subject: T, trial: () => void, undo: () => void, failure: string): T | string {
  try {
    trial();
    return subject;
  } catch (e: unknown) {
    return `${failure}: ${(e as Error).message}`;
  } finally {
    undo();
  }
}
