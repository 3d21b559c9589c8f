/**
 * The entry points of `src/core/model/`: `validate` (throws `ValidationError`) and `parseModel` (into an existing
 * issues list). Both reject inputs nested too deeply before parsing, check every string for well-formed Unicode,
 * and turn an unexpected failure inside a validator into a violation.
 */

import { type FieldViolation, ValidationError } from "../errors.ts";
import {
  INVALID,
  type Invalid,
  isValidationError,
  type Loc,
  MAX_ISSUES,
  report,
  type Schema,
  valueError,
} from "./schema.ts";
import { checkWellFormed } from "./well-formed.ts";

/** Default nesting limit of `validate()` (containers inside containers). */
export const DEFAULT_MAX_DEPTH = 32;
/** Containers visited by the depth check before the input is declared too complex (defends against shared refs). */
const MAX_CONTAINERS = 1_000_000;

/**
 * Path (relative to the input) of the first container nested deeper than maxDepth, or undefined. The check recurses
 * at most maxDepth deep and the path search is iterative, so a hostile input cannot overflow the stack here; shared
 * references are bounded by a visit budget.
 */
function findTooDeep(input: unknown, maxDepth: number): Loc | undefined {
  if (typeof input !== "object" || input === null) return undefined;
  containerBudget = MAX_CONTAINERS;
  // The common case (nothing too deep) without allocating; the path is worked out only for an input that fails.
  // (A maxDepth too large to recurse into safely goes straight to the iterative search.)
  return maxDepth <= MAX_RECURSIVE_DEPTH && withinDepth(input, 1, maxDepth)
    ? undefined
    : pathTooDeep(input, maxDepth);
}

const MAX_RECURSIVE_DEPTH = 1000;

/** Containers withinDepth may still visit in the current check (single-threaded, reset by findTooDeep). */
let containerBudget = 0;

/** Whether no container in `value` is nested deeper than maxDepth (recursion is bounded by maxDepth). */
function withinDepth(value: object, depth: number, maxDepth: number): boolean {
  if (depth > maxDepth || --containerBudget < 0) return false;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const child: unknown = value[i];
      if (typeof child === "object" && child !== null && !withinDepth(child, depth + 1, maxDepth))
        return false;
    }
    return true;
  }
  for (const key of Object.keys(value)) {
    const child: unknown = (value as Record<string, unknown>)[key];
    if (typeof child === "object" && child !== null && !withinDepth(child, depth + 1, maxDepth)) return false;
  }
  return true;
}

/** findTooDeep's answer for an input known to fail: the path of the first offending container, iteratively. */
function pathTooDeep(input: object, maxDepth: number): Loc | undefined {
  interface Node {
    value: object;
    depth: number;
    parent: Node | undefined;
    key: string | number;
  }
  const pathOf = (n: Node): Loc => {
    const path: Loc = [];
    for (let c: Node | undefined = n; c?.parent !== undefined; c = c.parent) path.push(c.key);
    return path.reverse();
  };
  const stack: Node[] = [{ value: input, depth: 1, parent: undefined, key: "" }];
  let visited = 0;
  for (let node = stack.pop(); node !== undefined; node = stack.pop()) {
    if (node.depth > maxDepth || ++visited > MAX_CONTAINERS) return pathOf(node);
    const children: [string | number, unknown][] = Array.isArray(node.value)
      ? node.value.map((v, i): [number, unknown] => [i, v])
      : Object.entries(node.value);
    for (let i = children.length - 1; i >= 0; i--) {
      const [key, child] = children[i]!;
      if (typeof child === "object" && child !== null) {
        stack.push({ value: child, depth: node.depth + 1, parent: node, key });
      }
    }
  }
  return undefined;
}

export interface ValidateOptions {
  /** Containers nested deeper than this are rejected before validation (default 32). */
  maxDepth?: number;
}

/** validate()'s core: depth pre-check, then parse; exceptions other than ValidationError become a violation. */
function run<T>(
  schema: Schema<T>,
  input: unknown,
  loc: Loc,
  issues: FieldViolation[],
  opts: ValidateOptions,
): T | Invalid {
  const maxDepth = opts.maxDepth ?? DEFAULT_MAX_DEPTH;
  const deep = findTooDeep(input, maxDepth);
  if (deep !== undefined) {
    report(
      issues,
      valueError([...loc, ...deep], `Input is nested too deeply (more than ${maxDepth} levels)`, null),
    );
    return INVALID;
  }
  const before = issues.length;
  // Every string and key of the input, including those a schema passes through unread (`anyValue`, dict keys).
  if (!checkWellFormed(input, loc, issues)) return INVALID;
  let out: T | Invalid;
  try {
    out = schema.parse(input, loc, issues);
  } catch (e) {
    if (isValidationError(e)) for (const v of e.violations) report(issues, v);
    out = INVALID;
  }
  if (out === INVALID || issues.length > before) {
    if (issues.length === before) report(issues, valueError(loc, "Input could not be validated", null));
    return INVALID;
  }
  return out;
}

/**
 * Parses input into an existing issues list (to combine several parts of one request into one report) with the
 * same protections as `validate()`: returns the value, or undefined when anything was reported.
 */
export function parseModel<T>(
  schema: Schema<T>,
  input: unknown,
  loc: Loc,
  issues: FieldViolation[],
  opts: ValidateOptions = {},
): T | undefined {
  const out = run(schema, input, loc, issues, opts);
  return out === INVALID ? undefined : out;
}

/**
 * Validates input against schema and returns the output, or throws `ValidationError` carrying every violation
 * (at most `MAX_ISSUES`). Never throws anything else: an input nested deeper than `maxDepth` is one
 * `value_error`, and an unexpected failure inside a validator becomes a generic `value_error` at loc.
 */
export function validate<T>(schema: Schema<T>, input: unknown, loc: Loc, opts: ValidateOptions = {}): T {
  const issues: FieldViolation[] = [];
  const out = run(schema, input, loc, issues, opts);
  if (out === INVALID) {
    if (issues.length === 0) issues.push(valueError(loc, "Input could not be validated", null));
    throw new ValidationError(issues.slice(0, MAX_ISSUES));
  }
  return out;
}
