import type { JsonObject } from "@bufbuild/protobuf";
import type { FieldViolation } from "../../core/errors.ts";
import { int } from "../../core/model/numbers.ts";
import type { Schema } from "../../core/model/schema.ts";
import { parseModel } from "../../core/model/validate.ts";
import { refine } from "../../core/model/validators.ts";

/** The int32 range: what a REST number must fit to become a proto int32. */
export const INT32 = { ge: -2147483648, le: 2147483647 } as const;

/** The smallest condenser size the reference accepts (its message says so). */
export const MIN_CONDENSER_SIZE = 20;

/**
 * The constraints on settings fields beyond their proto type, declared once: the REST model validates a field with
 * its rule (the 422 the reference answers), and StoreSettings checks the same rule for every protocol (gRPC and
 * Connect send proto values, which the REST model never sees). A field without a rule needs no entry.
 */
export const SETTINGS_RULES: Readonly<Record<string, Schema<number>>> = {
  // The agent-server refuses fewer than one iteration (its StartConversationRequest): refused when stored.
  max_iterations: int({ ge: 1, le: INT32.le }),
  condenser_max_size: refine(int(INT32), (v) =>
    v < MIN_CONDENSER_SIZE ? `condenser_max_size must be at least ${MIN_CONDENSER_SIZE}` : null,
  ),
};

/** Checks the rules on the present fields of a settings JSON object (proto field names), pushing violations. */
export function checkSettingsRules(settings: JsonObject, issues: FieldViolation[]): void {
  for (const [field, rule] of Object.entries(SETTINGS_RULES)) {
    const value = settings[field];
    if (value !== undefined && value !== null) parseModel(rule, value, [field], issues);
  }
}
