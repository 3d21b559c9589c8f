/**
 * The well-formed Unicode rule of `model/well-formed.ts` applied to request messages, where every protocol passes
 * through: a Connect or gRPC-Web JSON body can carry a lone surrogate (a `"\ud800"` escape), and a REST binder may
 * build a request from parts no schema read. Binary protobuf cannot (protobuf-es decodes strings from UTF-8).
 */
import type { DescField, DescMessage, DescService } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { type FieldViolation, ValidationError } from "./errors.ts";
import { type Loc, MAX_ISSUES, report } from "./model/schema.ts";
import { checkWellFormed, stringUnicode } from "./model/well-formed.ts";

/** Every string (and string map key) of a request message that is not well-formed, at its proto field path. */
export function illFormedStrings(desc: DescMessage, message: unknown): FieldViolation[] {
  const issues: FieldViolation[] = [];
  walkMessage(desc, message, [], issues, 0);
  return issues;
}

/** Protobuf messages nest at most this deep here (the decoders' own limit is 100). */
const MAX_DEPTH = 100;

// Every request of every protocol is walked, so the walk allocates nothing while all is well: `path` is one stack
// of field names and indexes, pushed and popped around each step; `violation()` (model/schema.ts) copies the loc it keeps.

function checkString(value: unknown, path: Loc, issues: FieldViolation[]): void {
  if (typeof value === "string" && !value.isWellFormed()) report(issues, stringUnicode(path, value));
}

function walkMessage(
  desc: DescMessage,
  message: unknown,
  path: Loc,
  issues: FieldViolation[],
  depth: number,
): void {
  if (typeof message !== "object" || message === null || issues.length >= MAX_ISSUES) return;
  // Well-known types that protobuf-es represents as plain JSON (google.protobuf.Struct / Value / ListValue).
  if (!("$typeName" in message) || depth > MAX_DEPTH) {
    checkWellFormed(message, path, issues);
    return;
  }
  const m = message as Record<string, unknown>;
  for (const field of desc.fields) {
    let value: unknown;
    if (field.oneof === undefined) value = m[field.localName];
    else {
      const o = m[field.oneof.localName] as { case?: string; value?: unknown } | undefined;
      if (o?.case !== field.localName) continue;
      value = o.value;
    }
    if (value === undefined || value === null) continue;
    path.push(field.name);
    walkField(field, value, path, issues, depth);
    path.pop();
  }
}

function walkField(
  field: DescField,
  value: unknown,
  path: Loc,
  issues: FieldViolation[],
  depth: number,
): void {
  switch (field.fieldKind) {
    case "scalar":
      checkString(value, path, issues);
      return;
    case "message":
      walkMessage(field.message, value, path, issues, depth + 1);
      return;
    case "list":
      if (!Array.isArray(value) || field.listKind === "enum") return;
      for (let i = 0; i < value.length; i++) {
        path.push(i);
        if (field.listKind === "scalar") checkString(value[i], path, issues);
        else walkMessage(field.message, value[i], path, issues, depth + 1);
        path.pop();
      }
      return;
    case "map":
      if (typeof value !== "object" || value === null) return;
      for (const key in value as Record<string, unknown>) {
        if (!Object.hasOwn(value, key)) continue;
        const item = (value as Record<string, unknown>)[key];
        path.push(key);
        if (!key.isWellFormed()) report(issues, stringUnicode([...path, "[key]"], key));
        if (field.mapKind === "scalar") checkString(item, path, issues);
        else if (field.mapKind === "message") walkMessage(field.message, item, path, issues, depth + 1);
        path.pop();
      }
      return;
    default:
      return;
  }
}

type Method = (req: unknown, ctx: unknown) => unknown;

/**
 * The implementation with every request checked first: a request holding a string that is not well-formed Unicode
 * is refused with INVALID_ARGUMENT (`string_unicode` violations) before the method runs, so it is never stored.
 */
export function wellFormedRequests<S extends DescService>(desc: S, impl: ServiceImpl<S>): ServiceImpl<S> {
  const out: Record<string, Method> = {};
  const source = impl as unknown as Record<string, Method | undefined>;
  for (const method of desc.methods) {
    const fn = source[method.localName];
    if (fn === undefined) continue;
    const call = fn.bind(impl);
    const input = method.input;
    if (method.methodKind === "unary") {
      out[method.localName] = (req, ctx) => {
        const issues = illFormedStrings(input, req);
        return issues.length > 0 ? Promise.reject(new ValidationError(issues)) : call(req, ctx);
      };
    } else if (method.methodKind === "server_streaming") {
      out[method.localName] = async function* (req: unknown, ctx: unknown) {
        const issues = illFormedStrings(input, req);
        if (issues.length > 0) throw new ValidationError(issues);
        yield* call(req, ctx) as AsyncIterable<unknown>;
      };
    } else {
      out[method.localName] = call;
    }
  }
  return out as unknown as ServiceImpl<S>;
}
