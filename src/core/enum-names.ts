import type { DescEnum, DescEnumValue } from "@bufbuild/protobuf";

/** A value's name without its enum's shared prefix: `CONVERSATION_TRIGGER_GUI` → `GUI`. */
export function unprefixedName(e: DescEnum, v: DescEnumValue): string {
  return v.name.slice(e.sharedPrefix?.length ?? 0);
}

/**
 * The names REST spells an enum's values with, from its descriptor: without the shared prefix, in declaration
 * order, the zero value (`*_UNSPECIFIED`) left out; lower-case where the reference writes them so ("gui").
 */
export function enumNames(e: DescEnum, spelling: "upper" | "lower"): readonly string[] {
  return e.values
    .filter((v) => v.number !== 0)
    .map((v) => (spelling === "lower" ? unprefixedName(e, v).toLowerCase() : unprefixedName(e, v)));
}
