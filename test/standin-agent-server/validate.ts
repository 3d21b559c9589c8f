/**
 * Request validation with the verdicts of the agent-server's pydantic models (software-agent-sdk v1.3.0):
 * `agent_server/models.py` (StartConversationRequest, SendMessageRequest, ...), `sdk/llm/llm.py` (LLM, extra keys
 * forbidden), `sdk/agent/base.py` (AgentBase), `sdk/tool/spec.py` (Tool), `sdk/context/condenser/*`,
 * `sdk/security/confirmation_policy.py`, `sdk/conversation/secret_source.py`, `sdk/workspace/*`, `sdk/llm/message.py`.
 *
 * Errors use pydantic's error objects (`type`, `loc`, `msg`, `input`, optional `ctx`) so a 422 looks like FastAPI's
 * `{"detail": [...]}`, input echoed (secrets included) as the real server does. Values come back normalised the
 * way the models store them (defaults filled, `service_id` read as `usage_id`, unknown keys of non-strict models
 * dropped). The lax-mode coercions are the common ones (numeric strings to numbers, "true"/"false" to booleans).
 */

export type Loc = (string | number)[];
export interface PydanticError {
  type: string;
  loc: Loc;
  msg: string;
  input: unknown;
  ctx?: Record<string, unknown>;
}
export type Json = Record<string, unknown>;

/** A Python-side exception that FastAPI's generic handler turns into a 500 (e.g. a KeyError in a discriminator). */
export class PythonException extends Error {}

class Ctx {
  readonly errors: PydanticError[] = [];
  add(type: string, loc: Loc, msg: string, input: unknown, ctx?: Record<string, unknown>): undefined {
    this.errors.push(ctx === undefined ? { type, loc, msg, input } : { type, loc, msg, input, ctx });
    return undefined;
  }
}

const isObj = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);
const quoteList = (values: readonly string[]): string => {
  const q = values.map((v) => `'${v}'`);
  return q.length <= 1 ? (q[0] ?? "") : `${q.slice(0, -1).join(", ")} or ${q[q.length - 1]}`;
};

// ---- scalar fields ----

function str(c: Ctx, v: unknown, loc: Loc): string | undefined {
  if (typeof v === "string") return v;
  return c.add("string_type", loc, "Input should be a valid string", v);
}
function optStr(c: Ctx, v: unknown, loc: Loc): string | null | undefined {
  return v === null ? null : str(c, v, loc);
}
function bool(c: Ctx, v: unknown, loc: Loc): boolean | undefined {
  if (typeof v === "boolean") return v;
  if (v === 0 || v === 1) return v === 1;
  if (typeof v === "string") {
    const s = v.trim().toLowerCase();
    if (["1", "true", "t", "yes", "y", "on"].includes(s)) return true;
    if (["0", "false", "f", "no", "n", "off"].includes(s)) return false;
    return c.add("bool_parsing", loc, "Input should be a valid boolean, unable to interpret input", v);
  }
  return c.add("bool_type", loc, "Input should be a valid boolean", v);
}
interface Bounds {
  ge?: number;
  gt?: number;
  le?: number;
}
function bounded(c: Ctx, n: number, v: unknown, loc: Loc, b: Bounds): number | undefined {
  if (b.gt !== undefined && !(n > b.gt))
    return c.add("greater_than", loc, `Input should be greater than ${b.gt}`, v, { gt: b.gt });
  if (b.ge !== undefined && !(n >= b.ge))
    return c.add("greater_than_equal", loc, `Input should be greater than or equal to ${b.ge}`, v, {
      ge: b.ge,
    });
  if (b.le !== undefined && !(n <= b.le))
    return c.add("less_than_equal", loc, `Input should be less than or equal to ${b.le}`, v, { le: b.le });
  return n;
}
function int(c: Ctx, v: unknown, loc: Loc, b: Bounds = {}): number | undefined {
  let n: number;
  if (typeof v === "boolean") n = v ? 1 : 0;
  else if (typeof v === "number") {
    if (!Number.isFinite(v)) return c.add("finite_number", loc, "Input should be a finite number", v);
    if (!Number.isInteger(v))
      return c.add(
        "int_from_float",
        loc,
        "Input should be a valid integer, got a number with a fractional part",
        v,
      );
    n = v;
  } else if (typeof v === "string") {
    if (!/^\s*[-+]?\d+\s*$/.test(v))
      return c.add(
        "int_parsing",
        loc,
        "Input should be a valid integer, unable to parse string as an integer",
        v,
      );
    n = Number(v);
  } else return c.add("int_type", loc, "Input should be a valid integer", v);
  return bounded(c, n, v, loc, b);
}
function optInt(c: Ctx, v: unknown, loc: Loc, b: Bounds = {}): number | null | undefined {
  return v === null ? null : int(c, v, loc, b);
}
function float(c: Ctx, v: unknown, loc: Loc, b: Bounds = {}): number | undefined {
  let n: number;
  if (typeof v === "boolean") n = v ? 1 : 0;
  else if (typeof v === "number") n = v;
  else if (typeof v === "string") {
    n = Number(v.trim());
    if (v.trim() === "" || Number.isNaN(n))
      return c.add(
        "float_parsing",
        loc,
        "Input should be a valid number, unable to parse string as a number",
        v,
      );
  } else return c.add("float_type", loc, "Input should be a valid number", v);
  return bounded(c, n, v, loc, b);
}
function optFloat(c: Ctx, v: unknown, loc: Loc, b: Bounds = {}): number | null | undefined {
  return v === null ? null : float(c, v, loc, b);
}
function literal<T extends string>(c: Ctx, v: unknown, loc: Loc, values: readonly T[]): T | undefined {
  if (typeof v === "string" && (values as readonly string[]).includes(v)) return v as T;
  const expected = quoteList(values);
  return c.add("literal_error", loc, `Input should be ${expected}`, v, { expected });
}
function dict(c: Ctx, v: unknown, loc: Loc): Json | undefined {
  if (isObj(v)) return { ...v };
  return c.add("dict_type", loc, "Input should be a valid dictionary", v);
}
function strDict(c: Ctx, v: unknown, loc: Loc): Record<string, string> | undefined {
  const d = dict(c, v, loc);
  if (d === undefined) return undefined;
  const out: Record<string, string> = {};
  for (const [k, val] of Object.entries(d)) {
    const s = str(c, val, [...loc, k]);
    if (s !== undefined) out[k] = s;
  }
  return out;
}
function list(c: Ctx, v: unknown, loc: Loc): unknown[] | undefined {
  if (Array.isArray(v)) return v;
  return c.add("list_type", loc, "Input should be a valid list", v);
}
function strList(c: Ctx, v: unknown, loc: Loc): string[] | undefined {
  const l = list(c, v, loc);
  if (l === undefined) return undefined;
  const out: string[] = [];
  l.forEach((item, i) => {
    const s = str(c, item, [...loc, i]);
    if (s !== undefined) out.push(s);
  });
  return out;
}
/** A pydantic model field: the input must be a dict (else `model_type`). */
function model(c: Ctx, v: unknown, loc: Loc, className: string): Json | undefined {
  if (isObj(v)) return v;
  return c.add("model_type", loc, `Input should be a valid dictionary or instance of ${className}`, v, {
    class_name: className,
  });
}
function missing(c: Ctx, obj: Json, key: string, loc: Loc): boolean {
  if (key in obj) return false;
  c.add("missing", [...loc, key], "Field required", obj);
  return true;
}
function forbidExtra(c: Ctx, obj: Json, loc: Loc, allowed: readonly string[]): void {
  for (const [k, v] of Object.entries(obj))
    if (!allowed.includes(k)) c.add("extra_forbidden", [...loc, k], "Extra inputs are not permitted", v);
}
function valueError(c: Ctx, loc: Loc, message: string, input: unknown): undefined {
  return c.add("value_error", loc, `Value error, ${message}`, input, { error: {} });
}

const HEX32 = /^[0-9a-fA-F]{32}$/;
const DASHED = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
/** A UUID as pydantic reads it (32 hex digits, dashed, braced or urn:uuid:), as 32 lower-case hex digits. */
export function parseUuid(v: string): string | null {
  let s = v.trim();
  if (s.toLowerCase().startsWith("urn:uuid:")) s = s.slice(9);
  if (s.startsWith("{") && s.endsWith("}")) s = s.slice(1, -1);
  if (HEX32.test(s) || DASHED.test(s)) return s.replaceAll("-", "").toLowerCase();
  return null;
}
function uuid(c: Ctx, v: unknown, loc: Loc): string | undefined {
  if (typeof v !== "string")
    return c.add("uuid_type", loc, "UUID input should be a string, bytes or UUID object", v);
  const hex = parseUuid(v);
  if (hex === null)
    return c.add("uuid_parsing", loc, "Input should be a valid UUID, unable to parse string as a UUID", v, {
      error: "invalid UUID",
    });
  return hex;
}
/** 32 hex digits → the dashed form pydantic prints for a plain UUID field. */
export function dashed(hex: string): string {
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

// ---- SecretStr ----

/** `validate_secret`: empty, blank or the mask become None. */
function secret(c: Ctx, v: unknown, loc: Loc): string | null | undefined {
  if (v === null) return null;
  const s = str(c, v, loc);
  if (s === undefined) return undefined;
  return s.trim() === "" || s === "**********" ? null : s;
}

// ---- discriminated unions (DiscriminatedUnionMixin, `kind`) ----

/**
 * A union of several concrete classes tagged by `kind_of()`: a dict without `kind` raises KeyError inside the
 * discriminator, which pydantic does not convert, so FastAPI answers 500 with `'kind'`.
 */
function tagged<T>(
  c: Ctx,
  v: unknown,
  loc: Loc,
  members: Record<string, (obj: Json, loc: Loc) => T | undefined>,
): T | undefined {
  // kind_of() on a non-dict returns the class name of the value (str, int, list, ...), never a member's.
  if (!isObj(v)) return unionTagInvalid(c, loc, pyTypeName(v), v, Object.keys(members));
  if (!("kind" in v)) throw new PythonException("'kind'");
  const tag = v.kind;
  const member = typeof tag === "string" ? members[tag] : undefined;
  if (member === undefined) return unionTagInvalid(c, loc, String(tag), v, Object.keys(members));
  return member(v, [...loc, tag as string]);
}
function unionTagInvalid(c: Ctx, loc: Loc, tag: string, v: unknown, tags: string[]): undefined {
  const expected = tags.map((t) => `'${t}'`).join(", ");
  return c.add(
    "union_tag_invalid",
    loc,
    `Input tag '${tag}' found using kind_of() does not match any of the expected tags: ${expected}`,
    v,
    { discriminator: "kind_of()", tag, expected_tags: expected },
  );
}
/** A concrete class's own `kind`: Literal[ClassName], defaulting to it. */
function ownKind(c: Ctx, obj: Json, loc: Loc, name: string): string {
  if ("kind" in obj) literal(c, obj.kind, [...loc, "kind"], [name]);
  return name;
}

// ---- LLM (sdk/llm/llm.py) ----

const LLM_DEFAULTS: Json = {
  model: "claude-sonnet-4-20250514",
  api_key: null,
  base_url: null,
  api_version: null,
  aws_access_key_id: null,
  aws_secret_access_key: null,
  aws_region_name: null,
  openrouter_site_url: "https://docs.all-hands.dev/",
  openrouter_app_name: "OpenHands",
  num_retries: 5,
  retry_multiplier: 8.0,
  retry_min_wait: 8,
  retry_max_wait: 64,
  timeout: null,
  max_message_chars: 30000,
  temperature: null,
  top_p: 1.0,
  top_k: null,
  custom_llm_provider: null,
  max_input_tokens: null,
  max_output_tokens: null,
  extra_headers: null,
  input_cost_per_token: null,
  output_cost_per_token: null,
  ollama_base_url: null,
  drop_params: true,
  modify_params: true,
  disable_vision: null,
  disable_stop_word: false,
  caching_prompt: true,
  log_completions: false,
  log_completions_folder: "logs/completions",
  custom_tokenizer: null,
  native_tool_calling: true,
  force_string_serializer: null,
  reasoning_effort: "high",
  reasoning_summary: null,
  enable_encrypted_reasoning: false,
  extended_thinking_budget: 200000,
  seed: null,
  safety_settings: null,
  usage_id: "default",
  litellm_extra_body: {},
};
/** The keys the LLM model accepts (`extra="forbid"`); `service_id` is the other alias of `usage_id`. */
export const LLM_FIELDS: readonly string[] = [...Object.keys(LLM_DEFAULTS), "service_id"];

function validateLlm(c: Ctx, v: unknown, loc: Loc): Json | undefined {
  const raw = model(c, v, loc, "LLM");
  if (raw === undefined) return undefined;
  // The before-validator `_coerce_inputs` runs first: a falsy model is a value error on the whole LLM.
  const modelVal = raw.model;
  if (modelVal === undefined || modelVal === null || modelVal === "" || modelVal === 0 || modelVal === false)
    return valueError(c, loc, "model must be specified in LLM", v);
  if (typeof modelVal !== "string")
    throw new PythonException(`'${pyTypeName(modelVal)}' object has no attribute 'startswith'`);
  const d: Json = { ...raw };
  if (modelVal.startsWith("azure") && !d.api_version) d.api_version = "2024-12-01-preview";
  if (modelVal.startsWith("openhands/")) {
    d.model = `litellm_proxy/${modelVal.slice("openhands/".length)}`;
    d.base_url = "https://llm-proxy.app.all-hands.dev/";
  }
  if (modelVal.startsWith("huggingface") && ("top_p" in d ? d.top_p : 1.0) === 1.0) d.top_p = 0.9;
  const before = c.errors.length;
  forbidExtra(c, d, loc, LLM_FIELDS);
  const out: Json = { ...LLM_DEFAULTS };
  const at = (k: string): Loc => [...loc, k];
  const has = (k: string): boolean => k in d;
  if (has("model")) out.model = str(c, d.model, at("model"));
  for (const k of ["api_key", "aws_access_key_id", "aws_secret_access_key"])
    if (has(k)) out[k] = secret(c, d[k], at(k));
  for (const k of [
    "base_url",
    "api_version",
    "aws_region_name",
    "custom_llm_provider",
    "ollama_base_url",
    "custom_tokenizer",
  ])
    if (has(k)) out[k] = optStr(c, d[k], at(k));
  for (const k of ["openrouter_site_url", "openrouter_app_name", "log_completions_folder"])
    if (has(k)) out[k] = str(c, d[k], at(k));
  if (has("num_retries")) out.num_retries = int(c, d.num_retries, at("num_retries"), { ge: 0 });
  if (has("retry_multiplier"))
    out.retry_multiplier = float(c, d.retry_multiplier, at("retry_multiplier"), { ge: 0 });
  for (const k of ["retry_min_wait", "retry_max_wait"]) if (has(k)) out[k] = int(c, d[k], at(k), { ge: 0 });
  if (has("timeout")) out.timeout = optInt(c, d.timeout, at("timeout"), { ge: 0 });
  if (has("max_message_chars"))
    out.max_message_chars = int(c, d.max_message_chars, at("max_message_chars"), { ge: 1 });
  if (has("temperature")) out.temperature = optFloat(c, d.temperature, at("temperature"), { ge: 0 });
  if (has("top_p")) out.top_p = optFloat(c, d.top_p, at("top_p"), { ge: 0, le: 1 });
  if (has("top_k")) out.top_k = optFloat(c, d.top_k, at("top_k"), { ge: 0 });
  for (const k of ["max_input_tokens", "max_output_tokens"])
    if (has(k)) out[k] = optInt(c, d[k], at(k), { ge: 1 });
  if (has("extra_headers"))
    out.extra_headers = d.extra_headers === null ? null : strDict(c, d.extra_headers, at("extra_headers"));
  for (const k of ["input_cost_per_token", "output_cost_per_token"])
    if (has(k)) out[k] = optFloat(c, d[k], at(k), { ge: 0 });
  for (const k of [
    "drop_params",
    "modify_params",
    "caching_prompt",
    "log_completions",
    "native_tool_calling",
    "enable_encrypted_reasoning",
  ])
    if (has(k)) out[k] = bool(c, d[k], at(k));
  for (const k of ["disable_vision", "disable_stop_word", "force_string_serializer"])
    if (has(k)) out[k] = d[k] === null ? null : bool(c, d[k], at(k));
  if (has("reasoning_effort"))
    out.reasoning_effort =
      d.reasoning_effort === null
        ? null
        : literal(c, d.reasoning_effort, at("reasoning_effort"), ["low", "medium", "high", "none"]);
  if (has("reasoning_summary"))
    out.reasoning_summary =
      d.reasoning_summary === null
        ? null
        : literal(c, d.reasoning_summary, at("reasoning_summary"), ["auto", "concise", "detailed"]);
  if (has("extended_thinking_budget"))
    out.extended_thinking_budget = optInt(c, d.extended_thinking_budget, at("extended_thinking_budget"));
  if (has("seed")) out.seed = optInt(c, d.seed, at("seed"));
  if (has("safety_settings")) {
    if (d.safety_settings === null) out.safety_settings = null;
    else {
      const l = list(c, d.safety_settings, at("safety_settings"));
      out.safety_settings = l?.map((item, i) => strDict(c, item, [...loc, "safety_settings", i]));
    }
  }
  // usage_id: validation_alias AliasChoices("usage_id", "service_id"); the first present alias wins.
  if (has("usage_id")) out.usage_id = str(c, d.usage_id, at("usage_id"));
  else if (has("service_id")) out.usage_id = str(c, d.service_id, at("service_id"));
  if (has("litellm_extra_body"))
    out.litellm_extra_body = dict(c, d.litellm_extra_body, at("litellm_extra_body"));
  return c.errors.length === before ? out : undefined;
}
function pyTypeName(v: unknown): string {
  if (v === null || v === undefined) return "NoneType";
  if (typeof v === "number") return Number.isInteger(v) ? "int" : "float";
  if (typeof v === "boolean") return "bool";
  if (Array.isArray(v)) return "list";
  return typeof v === "object" ? "dict" : "str";
}

// ---- Agent (sdk/agent/base.py, agent.py) ----

function validateTool(c: Ctx, v: unknown, loc: Loc): Json | undefined {
  const t = model(c, v, loc, "Tool");
  if (t === undefined) return undefined;
  const out: Json = { name: undefined, params: {} };
  if (!missing(c, t, "name", loc)) {
    const name = str(c, t.name, [...loc, "name"]);
    if (name !== undefined && name.trim() === "")
      valueError(c, [...loc, "name"], "Tool name cannot be empty", t.name);
    out.name = name;
  }
  if ("params" in t) out.params = t.params === null ? {} : dict(c, t.params, [...loc, "params"]);
  return out;
}

/** Skill (sdk/context/skills/skill.py): name, content, trigger (tagged by `type`), source, mcp_tools, inputs. */
function validateSkill(c: Ctx, v: unknown, loc: Loc): Json | undefined {
  const skill = model(c, v, loc, "Skill");
  if (skill === undefined) return undefined;
  const out: Json = {
    name: undefined,
    content: undefined,
    trigger: null,
    source: null,
    mcp_tools: null,
    inputs: [],
  };
  if (!missing(c, skill, "name", loc)) out.name = str(c, skill.name, [...loc, "name"]);
  if (!missing(c, skill, "content", loc)) out.content = str(c, skill.content, [...loc, "content"]);
  if ("trigger" in skill && skill.trigger !== null) {
    const tl: Loc = [...loc, "trigger"];
    const t = skill.trigger;
    if (!isObj(t)) {
      c.add(
        "model_attributes_type",
        tl,
        "Input should be a valid dictionary or object to extract fields from",
        t,
      );
    } else if (!("type" in t)) {
      c.add("union_tag_not_found", tl, "Unable to extract tag using discriminator 'type'", t, {
        discriminator: "'type'",
      });
    } else if (t.type === "keyword" || t.type === "task") {
      const field = t.type === "keyword" ? "keywords" : "triggers";
      const ml: Loc = [...tl, t.type];
      if (!missing(c, t, field, ml)) strList(c, t[field], [...ml, field]);
      out.trigger = t;
    } else {
      const expected = "'keyword', 'task'";
      c.add(
        "union_tag_invalid",
        tl,
        `Input tag '${String(t.type)}' found using 'type' does not match any of the expected tags: ${expected}`,
        t,
        { discriminator: "'type'", tag: String(t.type), expected_tags: expected },
      );
    }
  }
  if ("source" in skill) out.source = optStr(c, skill.source, [...loc, "source"]);
  if ("mcp_tools" in skill)
    out.mcp_tools = skill.mcp_tools === null ? null : dict(c, skill.mcp_tools, [...loc, "mcp_tools"]);
  if ("inputs" in skill)
    out.inputs = list(c, skill.inputs, [...loc, "inputs"])?.map((input, i) => {
      const il: Loc = [...loc, "inputs", i];
      const o = model(c, input, il, "InputMetadata");
      if (o === undefined) return undefined;
      if (!missing(c, o, "name", il)) str(c, o.name, [...il, "name"]);
      if (!missing(c, o, "description", il)) str(c, o.description, [...il, "description"]);
      return o;
    });
  return out;
}

function validateAgentContext(c: Ctx, v: unknown, loc: Loc): Json | null | undefined {
  if (v === null) return null;
  const a = model(c, v, loc, "AgentContext");
  if (a === undefined) return undefined;
  const out: Json = {
    skills: [],
    system_message_suffix: null,
    user_message_suffix: null,
    load_user_skills: false,
  };
  if ("skills" in a) {
    const sl: Loc = [...loc, "skills"];
    const before = c.errors.length;
    const skills = list(c, a.skills, sl)?.map((s, i) => validateSkill(c, s, [...sl, i]));
    if (skills !== undefined && c.errors.length === before) {
      // field_validator("skills"): names must be unique.
      const seen = new Set<unknown>();
      for (const skill of skills as Json[]) {
        if (seen.has(skill.name)) {
          valueError(c, sl, `Duplicate skill name found: ${String(skill.name)}`, a.skills);
          break;
        }
        seen.add(skill.name);
      }
    }
    out.skills = skills;
  }
  for (const k of ["system_message_suffix", "user_message_suffix"])
    if (k in a) out[k] = optStr(c, a[k], [...loc, k]);
  if ("load_user_skills" in a)
    out.load_user_skills = bool(c, a.load_user_skills, [...loc, "load_user_skills"]);
  return out;
}

const CONDENSERS: Record<string, (c: Ctx, obj: Json, loc: Loc) => Json | undefined> = {
  LLMSummarizingCondenser: (c, obj, loc) => {
    const before = c.errors.length;
    const out: Json = {
      kind: ownKind(c, obj, loc, "LLMSummarizingCondenser"),
      llm: undefined,
      max_size: 120,
      keep_first: 4,
    };
    if (!missing(c, obj, "llm", loc)) out.llm = validateLlm(c, obj.llm, [...loc, "llm"]);
    if ("max_size" in obj) out.max_size = int(c, obj.max_size, [...loc, "max_size"], { gt: 0 });
    if ("keep_first" in obj) out.keep_first = int(c, obj.keep_first, [...loc, "keep_first"], { ge: 0 });
    if (c.errors.length !== before) return undefined;
    // model_validator(mode="after"): room must be left between the kept head and the summarised tail.
    if (Math.floor((out.max_size as number) / 2) - (out.keep_first as number) - 1 <= 0)
      return valueError(
        c,
        loc,
        "keep_first must be less than max_size // 2 to leave room for condensation",
        obj,
      );
    return out;
  },
  NoOpCondenser: (c, obj, loc) => ({ kind: ownKind(c, obj, loc, "NoOpCondenser") }),
  PipelineCondenser: (c, obj, loc) => {
    const out: Json = { kind: ownKind(c, obj, loc, "PipelineCondenser"), condensers: undefined };
    if (!missing(c, obj, "condensers", loc)) {
      const l = list(c, obj.condensers, [...loc, "condensers"]);
      out.condensers = l?.map((item, i) => validateCondenser(c, item, [...loc, "condensers", i]));
    }
    return out;
  },
};
function validateCondenser(c: Ctx, v: unknown, loc: Loc): Json | undefined {
  const members: Record<string, (obj: Json, loc: Loc) => Json | undefined> = {};
  for (const [name, fn] of Object.entries(CONDENSERS)) members[name] = (obj, l) => fn(c, obj, l);
  return tagged(c, v, loc, members);
}

function validateAgent(c: Ctx, v: unknown, loc: Loc): Json | undefined {
  // AgentBase has one concrete subclass (Agent), so the field is validated as Agent: kind is Literal["Agent"].
  const a = model(c, v, loc, "Agent");
  if (a === undefined) return undefined;
  const out: Json = {
    kind: ownKind(c, a, loc, "Agent"),
    llm: undefined,
    tools: [],
    mcp_config: {},
    filter_tools_regex: null,
    agent_context: null,
    system_prompt_filename: "system_prompt.j2",
    system_prompt_kwargs: {},
    condenser: null,
  };
  if (!missing(c, a, "llm", loc)) out.llm = validateLlm(c, a.llm, [...loc, "llm"]);
  if ("tools" in a)
    out.tools = list(c, a.tools, [...loc, "tools"])?.map((t, i) => validateTool(c, t, [...loc, "tools", i]));
  if ("mcp_config" in a) out.mcp_config = dict(c, a.mcp_config, [...loc, "mcp_config"]);
  if ("filter_tools_regex" in a)
    out.filter_tools_regex = optStr(c, a.filter_tools_regex, [...loc, "filter_tools_regex"]);
  if ("agent_context" in a)
    out.agent_context = validateAgentContext(c, a.agent_context, [...loc, "agent_context"]);
  if ("system_prompt_filename" in a)
    out.system_prompt_filename = str(c, a.system_prompt_filename, [...loc, "system_prompt_filename"]);
  if ("system_prompt_kwargs" in a)
    out.system_prompt_kwargs = dict(c, a.system_prompt_kwargs, [...loc, "system_prompt_kwargs"]);
  if ("condenser" in a)
    out.condenser = a.condenser === null ? null : validateCondenser(c, a.condenser, [...loc, "condenser"]);
  // Other keys (agent_type, security_analyzer, ...) are ignored: AgentBase does not forbid extras.
  return out;
}

// ---- confirmation policy, secrets, workspace ----

function validatePolicy(c: Ctx, v: unknown, loc: Loc): Json | undefined {
  return tagged(c, v, loc, {
    AlwaysConfirm: (obj, l) => ({ kind: ownKind(c, obj, l, "AlwaysConfirm") }),
    ConfirmRisky: (obj, l) => {
      const out: Json = {
        kind: ownKind(c, obj, l, "ConfirmRisky"),
        threshold: "HIGH",
        confirm_unknown: true,
      };
      if ("threshold" in obj) {
        const t = literal(c, obj.threshold, [...l, "threshold"], ["UNKNOWN", "LOW", "MEDIUM", "HIGH"]);
        if (t === "UNKNOWN") valueError(c, [...l, "threshold"], "Threshold cannot be UNKNOWN", obj.threshold);
        out.threshold = t;
      }
      if ("confirm_unknown" in obj)
        out.confirm_unknown = bool(c, obj.confirm_unknown, [...l, "confirm_unknown"]);
      return out;
    },
    NeverConfirm: (obj, l) => ({ kind: ownKind(c, obj, l, "NeverConfirm") }),
  });
}

function validateSecretSource(c: Ctx, v: unknown, loc: Loc): Json | undefined {
  const description = (obj: Json, l: Loc): string | null | undefined =>
    "description" in obj ? optStr(c, obj.description, [...l, "description"]) : null;
  return tagged(c, v, loc, {
    LookupSecret: (obj, l) => {
      const out: Json = {
        kind: ownKind(c, obj, l, "LookupSecret"),
        description: description(obj, l),
        url: undefined,
        headers: {},
      };
      if (!missing(c, obj, "url", l)) out.url = str(c, obj.url, [...l, "url"]);
      if ("headers" in obj) out.headers = strDict(c, obj.headers, [...l, "headers"]);
      return out;
    },
    StaticSecret: (obj, l) => {
      const out: Json = {
        kind: ownKind(c, obj, l, "StaticSecret"),
        description: description(obj, l),
        value: undefined,
      };
      if (!missing(c, obj, "value", l)) out.value = secret(c, obj.value, [...l, "value"]);
      return out;
    },
  });
}

function validateWorkspace(c: Ctx, v: unknown, loc: Loc): Json | undefined {
  const w = model(c, v, loc, "LocalWorkspace");
  if (w === undefined) return undefined;
  const out: Json = { kind: ownKind(c, w, loc, "LocalWorkspace"), working_dir: undefined };
  if (!missing(c, w, "working_dir", loc)) out.working_dir = str(c, w.working_dir, [...loc, "working_dir"]);
  return out;
}

// ---- messages (sdk/llm/message.py, agent_server/models.py SendMessageRequest) ----

function validateContentItem(c: Ctx, v: unknown, loc: Loc): Json | undefined {
  // `TextContent | ImageContent` is a smart (untagged) union: the first member that validates wins; when none
  // does, pydantic reports every member's errors under the member's name.
  const tries: [string, (cc: Ctx, l: Loc) => Json | undefined][] = [
    [
      "TextContent",
      (cc, l) => {
        const o = model(cc, v, l, "TextContent");
        if (o === undefined) return undefined;
        const out: Json = { cache_prompt: false, type: "text", text: undefined };
        if ("cache_prompt" in o) out.cache_prompt = bool(cc, o.cache_prompt, [...l, "cache_prompt"]);
        if ("type" in o) out.type = literal(cc, o.type, [...l, "type"], ["text"]);
        if (!missing(cc, o, "text", l)) out.text = str(cc, o.text, [...l, "text"]);
        forbidExtra(cc, o, l, ["cache_prompt", "type", "text", "meta", "_meta"]);
        return out;
      },
    ],
    [
      "ImageContent",
      (cc, l) => {
        const o = model(cc, v, l, "ImageContent");
        if (o === undefined) return undefined;
        const out: Json = { cache_prompt: false, type: "image", image_urls: undefined };
        if ("cache_prompt" in o) out.cache_prompt = bool(cc, o.cache_prompt, [...l, "cache_prompt"]);
        if ("type" in o) out.type = literal(cc, o.type, [...l, "type"], ["image"]);
        if (!missing(cc, o, "image_urls", l))
          out.image_urls = strList(cc, o.image_urls, [...l, "image_urls"]);
        return out;
      },
    ],
  ];
  const all: PydanticError[] = [];
  for (const [name, fn] of tries) {
    const cc = new Ctx();
    const out = fn(cc, [...loc, name]);
    if (cc.errors.length === 0) return out;
    all.push(...cc.errors);
  }
  c.errors.push(...all);
  return undefined;
}

function validateMessage(c: Ctx, v: unknown, loc: Loc): Json | undefined {
  const m = model(c, v, loc, "SendMessageRequest");
  if (m === undefined) return undefined;
  const out: Json = { role: "user", content: [], run: false };
  if ("role" in m) out.role = literal(c, m.role, [...loc, "role"], ["user", "system", "assistant", "tool"]);
  if ("content" in m)
    out.content = list(c, m.content, [...loc, "content"])?.map((item, i) =>
      validateContentItem(c, item, [...loc, "content", i]),
    );
  if ("run" in m) out.run = bool(c, m.run, [...loc, "run"]);
  return out;
}

// ---- request bodies ----

export type Verdict<T> = { ok: true; value: T } | { ok: false; errors: PydanticError[] };

function run<T>(fn: (c: Ctx) => T | undefined): Verdict<T> {
  const c = new Ctx();
  const value = fn(c);
  if (c.errors.length > 0 || value === undefined) return { ok: false, errors: c.errors };
  return { ok: true, value };
}
/** A request body that is not a JSON object: FastAPI's error for a model body. */
function bodyModel(c: Ctx, body: unknown): Json | undefined {
  // No body, an empty one and JSON null are all a missing body for FastAPI.
  if (body === undefined || body === null) return c.add("missing", ["body"], "Field required", null);
  if (isObj(body)) return body;
  return c.add(
    "model_attributes_type",
    ["body"],
    "Input should be a valid dictionary or object to extract fields from",
    body,
  );
}

/** StartConversationRequest (agent_server/models.py). Throws PythonException for the server's 500 cases. */
export function validateStartConversation(body: unknown): Verdict<Json> {
  return run((c) => {
    const b = bodyModel(c, body);
    if (b === undefined) return undefined;
    const loc: Loc = ["body"];
    const out: Json = {
      agent: undefined,
      workspace: undefined,
      conversation_id: null,
      confirmation_policy: { kind: "NeverConfirm" },
      initial_message: null,
      max_iterations: 500,
      stuck_detection: true,
      secrets: {},
    };
    if (!missing(c, b, "agent", loc)) out.agent = validateAgent(c, b.agent, ["body", "agent"]);
    if (!missing(c, b, "workspace", loc))
      out.workspace = validateWorkspace(c, b.workspace, ["body", "workspace"]);
    if ("conversation_id" in b)
      out.conversation_id =
        b.conversation_id === null ? null : uuid(c, b.conversation_id, ["body", "conversation_id"]);
    if ("confirmation_policy" in b)
      out.confirmation_policy = validatePolicy(c, b.confirmation_policy, ["body", "confirmation_policy"]);
    if ("initial_message" in b)
      out.initial_message =
        b.initial_message === null
          ? null
          : validateMessage(c, b.initial_message, ["body", "initial_message"]);
    if ("max_iterations" in b)
      out.max_iterations = int(c, b.max_iterations, ["body", "max_iterations"], { ge: 1 });
    if ("stuck_detection" in b) out.stuck_detection = bool(c, b.stuck_detection, ["body", "stuck_detection"]);
    if ("secrets" in b) {
      const d = dict(c, b.secrets, ["body", "secrets"]);
      if (d !== undefined) {
        const secrets: Json = {};
        for (const [k, val] of Object.entries(d))
          secrets[k] = validateSecretSource(c, val, ["body", "secrets", k]);
        out.secrets = secrets;
      }
    }
    return out;
  });
}

/** SendMessageRequest, the body of POST /api/conversations/{id}/events. */
export function validateSendMessage(body: unknown): Verdict<Json> {
  return run((c) => {
    const b = bodyModel(c, body);
    return b === undefined ? undefined : validateMessage(c, b, ["body"]);
  });
}

/** UpdateConversationRequest: title, 1..200 characters. */
export function validateUpdateConversation(body: unknown): Verdict<{ title: string }> {
  return run((c) => {
    const b = bodyModel(c, body);
    if (b === undefined || missing(c, b, "title", ["body"])) return undefined;
    const title = str(c, b.title, ["body", "title"]);
    if (title === undefined) return undefined;
    const n = [...title].length;
    if (n < 1)
      return c.add("string_too_short", ["body", "title"], "String should have at least 1 character", title, {
        min_length: 1,
      });
    if (n > 200)
      return c.add("string_too_long", ["body", "title"], "String should have at most 200 characters", title, {
        max_length: 200,
      });
    return { title };
  });
}

/** GenerateTitleRequest: max_length 1..200 (default 50), an optional LLM. */
export function validateGenerateTitle(body: unknown): Verdict<{ max_length: number; llm: Json | null }> {
  return run((c) => {
    const b = bodyModel(c, body);
    if (b === undefined) return undefined;
    const out = { max_length: 50, llm: null as Json | null };
    if ("max_length" in b) {
      const n = int(c, b.max_length, ["body", "max_length"], { ge: 1, le: 200 });
      if (n !== undefined) out.max_length = n;
    }
    if ("llm" in b && b.llm !== null) out.llm = validateLlm(c, b.llm, ["body", "llm"]) ?? null;
    return out;
  });
}

/** ConfirmationResponseRequest: accept (required), reason. */
export function validateConfirmationResponse(body: unknown): Verdict<{ accept: boolean; reason: string }> {
  return run((c) => {
    const b = bodyModel(c, body);
    if (b === undefined) return undefined;
    const out = { accept: false, reason: "User rejected the action." };
    if (!missing(c, b, "accept", ["body"])) {
      const a = bool(c, b.accept, ["body", "accept"]);
      if (a !== undefined) out.accept = a;
    }
    if ("reason" in b) {
      const r = str(c, b.reason, ["body", "reason"]);
      if (r !== undefined) out.reason = r;
    }
    return out;
  });
}

/** ExecuteBashRequest: command (required), cwd, timeout (default 300 s, no bound). */
export function validateExecuteBash(
  body: unknown,
): Verdict<{ command: string; cwd: string | null; timeout: number }> {
  return run((c) => {
    const b = bodyModel(c, body);
    if (b === undefined) return undefined;
    const out = { command: "", cwd: null as string | null, timeout: 300 };
    if (!missing(c, b, "command", ["body"])) {
      const s = str(c, b.command, ["body", "command"]);
      if (s !== undefined) out.command = s;
    }
    if ("cwd" in b) out.cwd = optStr(c, b.cwd, ["body", "cwd"]) ?? null;
    if ("timeout" in b) {
      const n = int(c, b.timeout, ["body", "timeout"]);
      if (n !== undefined) out.timeout = n;
    }
    return out;
  });
}

/** A path parameter typed UUID (`conversation_id: UUID`). */
export function validatePathUuid(name: string, value: string): Verdict<string> {
  return run((c) => uuid(c, value, ["path", name]));
}

/** Query parameter `ids: list[UUID]` (required). */
export function validateIdsQuery(values: string[]): Verdict<string[]> {
  return run((c) => {
    if (values.length === 0) return c.add("missing", ["query", "ids"], "Field required", null);
    const out: string[] = [];
    values.forEach((v, i) => {
      const id = uuid(c, v, ["query", "ids", i]);
      if (id !== undefined) out.push(id);
    });
    return out;
  });
}

/** An int query parameter with bounds (e.g. `limit`, gt=0). */
export function validateIntQuery(name: string, value: string, b: Bounds): Verdict<number> {
  return run((c) => int(c, value, ["query", name], b));
}
/** An enum query parameter. */
export function validateEnumQuery<T extends string>(
  name: string,
  value: string,
  values: readonly T[],
): Verdict<T> {
  return run((c) => {
    if ((values as readonly string[]).includes(value)) return value as T;
    const expected = quoteList(values);
    return c.add("enum", ["query", name], `Input should be ${expected}`, value, { expected });
  });
}

// ---- MCP (sdk/mcp/utils.py create_mcp_tools → fastmcp MCPConfig → MCPConfigTransport) ----

/**
 * What the agent's initialisation does with a non-empty `mcp_config` before any tool is listed: fastmcp's
 * MCPConfig wraps root-level server entries (dicts with `command` or `url`) under `mcpServers`; each server must
 * be a stdio server (`command`) or a remote one (`url`); no server at all raises "No MCP servers defined in the
 * config". Returns the Python exception text the real server answers 500 with, or null when the config is usable.
 * An empty dict is falsy and never reaches fastmcp.
 */
export function mcpConfigProblem(config: Json): string | null {
  if (Object.keys(config).length === 0) return null;
  let values: Json = config;
  if (!("mcpServers" in values)) {
    const hasServers = Object.values(values).some((v) => isObj(v) && ("command" in v || "url" in v));
    if (hasServers) values = { mcpServers: values };
  }
  const servers = values.mcpServers ?? {};
  const problems: string[] = [];
  if (!isObj(servers)) {
    problems.push(
      `mcpServers\n  Input should be a valid dictionary [type=dict_type, input_value=${pyRepr(servers)}]`,
    );
  } else {
    for (const [name, server] of Object.entries(servers)) {
      const where = `mcpServers.${name}`;
      if (!isObj(server)) {
        problems.push(
          `${where}\n  Input should be a valid dictionary [type=model_type, input_value=${pyRepr(server)}]`,
        );
        continue;
      }
      const c = new Ctx();
      if ("command" in server) {
        str(c, server.command, ["command"]);
        if ("args" in server) strList(c, server.args, ["args"]);
        if ("env" in server) dict(c, server.env, ["env"]);
        if ("transport" in server) literal(c, server.transport, ["transport"], ["stdio"]);
      } else if ("url" in server) {
        str(c, server.url, ["url"]);
        if ("transport" in server && server.transport !== null)
          literal(c, server.transport, ["transport"], ["http", "streamable-http", "sse"]);
        if ("headers" in server) strDict(c, server.headers, ["headers"]);
      } else {
        c.add("missing", ["command"], "Field required", server);
        c.add("missing", ["url"], "Field required", server);
      }
      for (const e of c.errors)
        problems.push(
          `${where}.${e.loc.join(".")}\n  ${e.msg} [type=${e.type}, input_value=${pyRepr(e.input)}]`,
        );
    }
    if (problems.length === 0 && Object.keys(servers).length === 0)
      return "No MCP servers defined in the config";
  }
  if (problems.length === 0) return null;
  return `${problems.length} validation error${problems.length === 1 ? "" : "s"} for MCPConfig\n${problems.join("\n")}`;
}
function pyRepr(v: unknown): string {
  if (typeof v === "string") return `'${v}'`;
  if (v === null || v === undefined) return "None";
  if (typeof v === "boolean") return v ? "True" : "False";
  return JSON.stringify(v) ?? String(v);
}
