// Table-driven validation of the REST body models: one table per model of (input, the 422 detail entries it
// yields as type and loc). A valid input yields no entry; an invalid one yields exactly the listed entries, in order.
import { describe, expect, it } from "vitest";
import { mcpConfigSchema } from "../../src/codec/mcp-model.ts";
import { isValidationError, type Schema } from "../../src/core/model/schema.ts";
import { validate } from "../../src/core/model/validate.ts";
import {
  addGitProvidersBodySchema,
  createSecretBodySchema,
  settingsBodySchema,
  updateSecretBodySchema,
} from "../../src/transports/rest/legacy-routes.ts";
import { startRequestBodySchema } from "../../src/transports/rest/v1-conversation-routes.ts";

type Row = [name: string, input: unknown, expected: [type: string, loc: (string | number)[]][]];

/** The detail entries (type, loc) a body yields, [] when it is valid. */
function details(schema: Schema<unknown>, input: unknown): [string, (string | number)[]][] {
  try {
    validate(schema, input, ["body"]);
    return [];
  } catch (e) {
    if (!isValidationError(e)) throw e;
    return e.violations.map((v) => [v.type, v.loc]);
  }
}

function table(title: string, schema: Schema<unknown>, rows: Row[]): void {
  describe(title, () => {
    it.each(rows)("%s", (_name, input, expected) => {
      expect(details(schema, input)).toEqual(expected);
    });
  });
}

const UUID = "0123456789abcdef0123456789abcdef";

table("Settings (POST /api/settings)", settingsBodySchema as Schema<unknown>, [
  ["empty body", {}, []],
  [
    "every kind of field",
    { language: "en", max_iterations: "30", confirmation_mode: "true", max_budget_per_task: 1.5 },
    [],
  ],
  [
    "nulls are accepted (they reset)",
    { language: null, llm_api_key: null, mcp_config: null, condenser_max_size: null },
    [],
  ],
  ["unknown keys are ignored", { no_such_field: 1 }, []],
  ["not an object", [], [["model_attributes_type", ["body"]]]],
  ["string for an int", { max_iterations: "many" }, [["int_parsing", ["body", "max_iterations"]]]],
  ["fraction for an int", { max_iterations: 1.5 }, [["int_from_float", ["body", "max_iterations"]]]],
  ["int32 bound", { condenser_max_size: 2 ** 31 }, [["less_than_equal", ["body", "condenser_max_size"]]]],
  [
    "condenser_max_size below 20",
    { condenser_max_size: 5 },
    [["value_error", ["body", "condenser_max_size"]]],
  ],
  ["bool that is not one", { confirmation_mode: "maybe" }, [["bool_parsing", ["body", "confirmation_mode"]]]],
  ["null for a defaulted bool is accepted (it reads as the default)", { enable_default_condenser: null }, []],
  [
    "unknown provider",
    { secrets_store: { provider_tokens: { gitea: { token: "t" } } } },
    [["enum", ["body", "secrets_store", "provider_tokens", "gitea", "[key]"]]],
  ],
  [
    "every problem at once, in field order",
    { llm_model: 1, max_iterations: "x", confirmation_mode: [] },
    [
      ["int_parsing", ["body", "max_iterations"]],
      ["bool_type", ["body", "confirmation_mode"]],
      ["string_type", ["body", "llm_model"]],
    ],
  ],
]);

table("MCP config", mcpConfigSchema as Schema<unknown>, [
  ["empty", {}, []],
  [
    "one server of each kind",
    {
      sse_servers: ["https://sse.example"],
      stdio_servers: [{ name: "fs", command: "npx" }],
      shttp_servers: [{ url: "https://h.example", timeout: 30 }],
    },
    [],
  ],
  ["list expected", { sse_servers: "https://x" }, [["list_type", ["body", "sse_servers"]]]],
  [
    "stdio server without a command",
    { stdio_servers: [{ name: "fs" }] },
    [["missing", ["body", "stdio_servers", 0, "command"]]],
  ],
]);

table("POST /api/add-git-providers", addGitProvidersBodySchema as Schema<unknown>, [
  ["tokens", { provider_tokens: { github: { token: "t", host: null } } }, []],
  ["provider_tokens may be absent", {}, []],
  [
    "unknown provider",
    { provider_tokens: { nope: {} } },
    [["enum", ["body", "provider_tokens", "nope", "[key]"]]],
  ],
  [
    "token not a string",
    { provider_tokens: { github: { token: 1 } } },
    [["string_type", ["body", "provider_tokens", "github", "token"]]],
  ],
]);

table("POST /api/secrets", createSecretBodySchema as Schema<unknown>, [
  ["name and value", { name: "A", value: "v" }, []],
  ["with a description", { name: "A", value: "v", description: "d" }, []],
  [
    "nothing",
    {},
    [
      ["missing", ["body", "name"]],
      ["missing", ["body", "value"]],
    ],
  ],
  ["value not a string", { name: "A", value: 1 }, [["string_type", ["body", "value"]]]],
]);

table("PUT /api/secrets/{id}", updateSecretBodySchema as Schema<unknown>, [
  ["a name", { name: "B" }, []],
  ["no name", { description: "d" }, [["missing", ["body", "name"]]]],
  ["name null", { name: null }, [["string_type", ["body", "name"]]]],
]);

table("POST /api/v1/app-conversations", startRequestBodySchema as Schema<unknown>, [
  ["empty", {}, []],
  [
    "ids with or without dashes",
    { conversation_id: UUID, parent_conversation_id: "01234567-89ab-cdef-0123-456789abcdef" },
    [],
  ],
  ["repository forms", { selected_repository: "octo/repo", selected_branch: "feature/x" }, []],
  ["malformed id", { conversation_id: "nope" }, [["uuid_parsing", ["body", "conversation_id"]]]],
  [
    "option-like repository",
    { selected_repository: "-x" },
    [["value_error", ["body", "selected_repository"]]],
  ],
  ["bad branch", { selected_branch: "a..b" }, [["value_error", ["body", "selected_branch"]]]],
  ["unknown provider", { git_provider: "gitea" }, [["enum", ["body", "git_provider"]]]],
  ["unknown trigger", { trigger: "nope" }, [["enum", ["body", "trigger"]]]],
  ["pr_number items", { pr_number: [1, "x"] }, [["int_parsing", ["body", "pr_number", 1]]]],
]);
