/**
 * The typed readers `loadConfig` (config.ts) parses the environment with. None throws: each reports a bad value as a
 * problem and returns its fallback, so that every problem of an environment is reported at once (fixing them one
 * start at a time is a slow loop).
 */

export type Env = Record<string, string | undefined>;

export interface EnvReader {
  /** Every problem reported so far, in the order found. */
  readonly problems: string[];
  fail(message: string): void;
  /** A port number 0-65535; unset or empty: fallback. */
  port(name: string, fallback: number): number;
  /** An integer min-max; unset or empty: fallback. */
  int(name: string, fallback: number, min: number, max: number): number;
  /** true/false (also 1/0, yes/no, on/off, any case); unset or empty: fallback. */
  flag(name: string, fallback: boolean): boolean;
}

export function envReader(env: Env): EnvReader {
  const problems: string[] = [];
  const fail = (message: string): void => {
    problems.push(message);
  };
  const port = (name: string, fallback: number): number => {
    const raw = env[name];
    if (raw === undefined || raw === "") return fallback;
    const n = Number(raw);
    if (Number.isInteger(n) && n >= 0 && n <= 65535) return n;
    fail(`${name} must be a port number 0-65535, got ${JSON.stringify(raw)}`);
    return fallback;
  };
  const int = (name: string, fallback: number, min: number, max: number): number => {
    const raw = env[name];
    if (raw === undefined || raw === "") return fallback;
    const n = Number(raw);
    if (Number.isInteger(n) && n >= min && n <= max) return n;
    fail(`${name} must be an integer ${min}-${max}, got ${JSON.stringify(raw)}`);
    return fallback;
  };
  const flag = (name: string, fallback: boolean): boolean => {
    const raw = env[name]?.trim().toLowerCase();
    if (raw === undefined || raw === "") return fallback;
    if (["1", "true", "yes", "on"].includes(raw)) return true;
    if (["0", "false", "no", "off"].includes(raw)) return false;
    fail(`${name} must be true or false, got ${JSON.stringify(env[name])}`);
    return fallback;
  };
  return { problems, fail, port, int, flag };
}

/** A comma-separated list, entries trimmed, empty ones dropped. */
export function commaList(raw: string | undefined): string[] {
  return (raw ?? "")
    .split(",")
    .map((e) => e.trim())
    .filter((e) => e !== "");
}
