import { type DescField, getOption, hasOption } from "@bufbuild/protobuf";
import { behavior } from "../gen/workspace/v1/field_options_pb.js";

/** What a field's `(workspace.v1.behavior)` option declares (proto/workspace/v1/field_options.proto). */
export interface FieldFacts {
  /** Write-only secret: sealed at rest, never answered. */
  secret: boolean;
  /** The value answered while a boolean field is unset, and what resetting it restores. */
  defaultBool: boolean | undefined;
}

const NONE: FieldFacts = Object.freeze({ secret: false, defaultBool: undefined });

/** The field's declared behaviour (read once at start by the modules that derive their tables from it). */
export function fieldFacts(field: DescField): FieldFacts {
  if (!hasOption(field, behavior)) return NONE;
  const b = getOption(field, behavior);
  return { secret: b.secret, defaultBool: b.defaultBool };
}
