import { spawn } from "node:child_process";
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

/**
 * Runs a host tool as a child process (the event loop free meanwhile), `input` on its stdin; resolves with its
 * stdout, rejects with its stderr when it fails.
 */
export function runTool(file: string, args: readonly string[], input?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, {
      stdio: [input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
      timeout: 30_000,
    });
    let out = "";
    let err = "";
    child.stdout?.on("data", (c: Buffer) => {
      out += c.toString();
    });
    child.stderr?.on("data", (c: Buffer) => {
      err += c.toString();
    });
    child.on("error", reject);
    child.on("close", (code, sig) => {
      if (code === 0) resolve(out);
      else
        reject(new Error(`${file} ${args.join(" ")}: ${err.trim().slice(0, 300) || `exit ${code ?? sig}`}`));
    });
    if (input !== undefined) child.stdin?.end(input);
  });
}
