import { describe, expect, it } from "vitest";
import {
  MAX_MCP_ARGS,
  MAX_MCP_ENV,
  MAX_MCP_SERVERS,
  type McpConfigInput,
  mcpConfigSchema,
  parseEnvString,
  ShlexError,
  shlexSplit,
  urlSplit,
  validateMcpUrl,
} from "../../src/codec/mcp-model.ts";
import type { FieldViolation } from "../../src/core/errors.ts";
import { isValidationError } from "../../src/core/model/schema.ts";
import { validate } from "../../src/core/model/validate.ts";

const LOC = ["body", "mcp_config"];

const parse = (input: unknown): McpConfigInput => validate(mcpConfigSchema, input, LOC);

function errs(input: unknown): FieldViolation[] {
  try {
    validate(mcpConfigSchema, input, LOC);
  } catch (e) {
    if (isValidationError(e)) return [...e.violations];
    throw e;
  }
  throw new Error(`expected a ValidationError for ${JSON.stringify(input)}`);
}

const valueError = (loc: (string | number)[], message: string, input: unknown): FieldViolation => ({
  type: "value_error",
  loc: [...LOC, ...loc],
  msg: `Value error, ${message}`,
  input,
  ctx: { error: {} },
});

const cases = (values: unknown[]): [unknown][] => values.map((v) => [v]);

describe("MCPConfig", () => {
  it("defaults the three lists to []", () => {
    expect(parse({})).toEqual({ sse_servers: [], stdio_servers: [], shttp_servers: [] });
  });

  it("validates a full config and fills item defaults", () => {
    const out = parse({
      sse_servers: ["https://a.example/sse", { url: " http://b.example ", api_key: "k", extra: "ignored" }],
      stdio_servers: [
        { name: " fetch ", command: " uvx ", args: "mcp-server-fetch --x 'a b'", env: "A=1, B_2 = two" },
      ],
      shttp_servers: [
        { url: "wss://c.example/mcp" },
        { url: "WS://d.example", timeout: "30", api_key: null },
      ],
    });
    expect(out).toEqual({
      sse_servers: [
        { url: "https://a.example/sse", api_key: null },
        { url: "http://b.example", api_key: "k" },
      ],
      stdio_servers: [
        {
          name: "fetch",
          command: "uvx",
          args: ["mcp-server-fetch", "--x", "a b"],
          env: { A: "1", B_2: " two" },
        },
      ],
      shttp_servers: [
        { url: "wss://c.example/mcp", api_key: null, timeout: 60 },
        { url: "WS://d.example", api_key: null, timeout: 30 },
      ],
    });
    expect(Object.keys(out.sse_servers[1]!)).toEqual(["url", "api_key"]);
  });

  it("forbids extra top-level keys", () => {
    expect(errs({ sse_servers: [], servers: [], __proto__x: 1 })).toEqual([
      { type: "extra_forbidden", loc: [...LOC, "servers"], msg: "Extra inputs are not permitted", input: [] },
      {
        type: "extra_forbidden",
        loc: [...LOC, "__proto__x"],
        msg: "Extra inputs are not permitted",
        input: 1,
      },
    ]);
  });

  it.each(cases([null, [], "x", 1]))("rejects a non-object %j", (input) => {
    expect(errs(input)).toEqual([
      {
        type: "model_attributes_type",
        loc: LOC,
        msg: "Input should be a valid dictionary or object to extract fields from",
        input,
      },
    ]);
  });

  it.each(cases(["https://a.example", null, { url: "https://a.example" }]))(
    "rejects server lists that are not arrays (%j)",
    (input) => {
      expect(errs({ sse_servers: input, stdio_servers: input, shttp_servers: input })).toEqual(
        ["sse_servers", "stdio_servers", "shttp_servers"].map((k) => ({
          type: "list_type",
          loc: [...LOC, k],
          msg: "Input should be a valid list",
          input,
        })),
      );
    },
  );

  it("reports every problem in one pass, in field then index order", () => {
    const stdio0 = { name: "bad name", command: "" };
    expect(
      errs({
        sse_servers: ["ftp://x", { api_key: 3 }],
        stdio_servers: [stdio0, "npx"],
        shttp_servers: [{ url: "https://ok", timeout: 0 }],
        nope: true,
      }),
    ).toEqual([
      valueError(["sse_servers", 0, "url"], "URL scheme must be http, https, ws, or wss", "ftp://x"),
      {
        type: "missing",
        loc: [...LOC, "sse_servers", 1, "url"],
        msg: "Field required",
        input: { api_key: 3 },
      },
      {
        type: "string_type",
        loc: [...LOC, "sse_servers", 1, "api_key"],
        msg: "Input should be a valid string",
        input: 3,
      },
      valueError(
        ["stdio_servers", 0, "name"],
        "Server name can only contain letters, numbers, hyphens, and underscores",
        "bad name",
      ),
      valueError(["stdio_servers", 0, "command"], "Command cannot be empty", ""),
      {
        type: "model_attributes_type",
        loc: [...LOC, "stdio_servers", 1],
        msg: "Input should be a valid dictionary or object to extract fields from",
        input: "npx",
      },
      valueError(["shttp_servers", 0, "timeout"], "Timeout must be positive", 0),
      { type: "extra_forbidden", loc: [...LOC, "nope"], msg: "Extra inputs are not permitted", input: true },
    ]);
  });

  it("caps list sizes", () => {
    const many = Array.from({ length: MAX_MCP_SERVERS + 1 }, () => "https://a.example");
    expect(errs({ shttp_servers: many })).toEqual([
      {
        type: "too_long",
        loc: [...LOC, "shttp_servers"],
        msg: `List should have at most ${MAX_MCP_SERVERS} items after validation, not ${MAX_MCP_SERVERS + 1}`,
        input: many,
        ctx: { field_type: "List", max_length: MAX_MCP_SERVERS, actual_length: MAX_MCP_SERVERS + 1 },
      },
    ]);
    expect(parse({ sse_servers: many.slice(1) }).sse_servers).toHaveLength(MAX_MCP_SERVERS);
  });

  it("never pollutes prototypes", () => {
    const input: unknown = JSON.parse(
      '{"__proto__": {"polluted": 1}, "stdio_servers": [{"name": "a", "command": "b", "__proto__": {"polluted": 2},' +
        ' "env": {"__proto__": "x", "constructor": "y"}}]}',
    );
    expect(errs(input)).toEqual([
      {
        type: "extra_forbidden",
        loc: [...LOC, "__proto__"],
        msg: "Extra inputs are not permitted",
        input: { polluted: 1 },
      },
    ]);
    const ok: unknown = JSON.parse(
      '{"stdio_servers": [{"name": "a", "command": "b", "__proto__": {"polluted": 2}, "env": {"__proto__": "x"}}]}',
    );
    const out = parse(ok);
    const env = out.stdio_servers[0]!.env;
    expect(Object.getPrototypeOf(env)).toBe(Object.prototype);
    expect(Object.keys(env)).toEqual(["__proto__"]);
    expect(Object.getOwnPropertyDescriptor(env, "__proto__")?.value).toBe("x");
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect((out.stdio_servers[0] as unknown as Record<string, unknown>).polluted).toBeUndefined();
    const fromString = parse({
      stdio_servers: [{ name: "a", command: "b", env: "__proto__=x,constructor=y" }],
    });
    expect(Object.keys(fromString.stdio_servers[0]!.env)).toEqual(["__proto__", "constructor"]);
    expect(Object.getPrototypeOf(fromString.stdio_servers[0]!.env)).toBe(Object.prototype);
  });

  it("rejects hostile nesting without overflowing", () => {
    let deep: unknown = "https://x";
    for (let i = 0; i < 50_000; i++) deep = [deep];
    const all = errs({ sse_servers: [deep] });
    expect(all).toHaveLength(1);
    expect(all[0]!.type).toBe("value_error");
    expect(all[0]!.msg).toBe("Value error, Input is nested too deeply (more than 32 levels)");
  });
});

describe("sse / shttp servers", () => {
  it.each<[string, string]>([
    ["", "URL cannot be empty"],
    ["   \t", "URL cannot be empty"],
    ["example.com/sse", "URL must include a scheme (http:// or https://)"],
    ["//example.com/sse", "URL must include a scheme (http:// or https://)"],
    ["1http://example.com", "URL must include a scheme (http:// or https://)"],
    ["localhost:8080", "URL must include a valid domain/host"],
    ["http://", "URL must include a valid domain/host"],
    ["http:/example.com", "URL must include a valid domain/host"],
    ["mailto:me@example.com", "URL must include a valid domain/host"],
    ["ftp://example.com", "URL scheme must be http, https, ws, or wss"],
    ["file:///etc/passwd", "URL must include a valid domain/host"],
    ["javascript://x", "URL scheme must be http, https, ws, or wss"],
    ["http://[::1", "Invalid IPv6 URL"],
    ["http://::1]/", "Invalid IPv6 URL"],
    ["http://[1.2.3.4]/", "An IPv4 address cannot be in brackets"],
    ["http://[zz]/", "'zz' does not appear to be an IPv4 or IPv6 address"],
    ["http://[1:2:3]/", "'1:2:3' does not appear to be an IPv4 or IPv6 address"],
    ["http://[vx.y]/", "IPvFuture address is invalid"],
    ["http://a\u2100b/", "netloc 'a\u2100b' contains invalid characters under NFKC normalization"],
  ])("rejects %j: %s", (url, message) => {
    expect(errs({ sse_servers: [url] })).toEqual([valueError(["sse_servers", 0, "url"], message, url)]);
    expect(errs({ shttp_servers: [{ url }] })).toEqual([
      valueError(["shttp_servers", 0, "url"], message, url),
    ]);
  });

  it.each([
    "http://localhost:3000/sse",
    "https://mcp.example.com/sse?x=1#f",
    "ws://h",
    "WSS://h/path",
    "HtTpS://h",
    "http://[::1]:8080/",
    "http://[fe80::1%25eth0]/",
    "http://[::ffff:1.2.3.4]/",
    "http://[v1.x]/",
    "http://user:pass@host/",
    "http://:80",
  ])("accepts %j", (url) => {
    expect(parse({ sse_servers: [url] }).sse_servers[0]!.url).toBe(url);
  });

  it("stores the trimmed URL and reports the untrimmed input", () => {
    expect(parse({ sse_servers: ["  https://a.example/sse \n"] }).sse_servers[0]!.url).toBe(
      "https://a.example/sse",
    );
    expect(errs({ sse_servers: [" ftp://x "] })).toEqual([
      valueError(["sse_servers", 0, "url"], "URL scheme must be http, https, ws, or wss", " ftp://x "),
    ]);
  });

  it.each(cases([5, null, true, ["https://x"]]))("rejects a non-string url %j with string_type", (url) => {
    expect(errs({ shttp_servers: [{ url }] })).toEqual([
      {
        type: "string_type",
        loc: [...LOC, "shttp_servers", 0, "url"],
        msg: "Input should be a valid string",
        input: url,
      },
    ]);
  });

  it.each(cases([5, null, true, ["https://x"]]))("rejects a non-object, non-string entry %j", (entry) => {
    expect(errs({ sse_servers: [entry] })).toEqual([
      {
        type: "model_attributes_type",
        loc: [...LOC, "sse_servers", 0],
        msg: "Input should be a valid dictionary or object to extract fields from",
        input: entry,
      },
    ]);
  });

  it("reports a missing url with the item as input", () => {
    expect(errs({ shttp_servers: [{ timeout: 5 }] })).toEqual([
      {
        type: "missing",
        loc: [...LOC, "shttp_servers", 0, "url"],
        msg: "Field required",
        input: { timeout: 5 },
      },
    ]);
  });

  it("validates api_key as a nullable string", () => {
    expect(parse({ sse_servers: [{ url: "http://h", api_key: null }] }).sse_servers[0]!.api_key).toBeNull();
    expect(errs({ sse_servers: [{ url: "http://h", api_key: 12 }] })).toEqual([
      {
        type: "string_type",
        loc: [...LOC, "sse_servers", 0, "api_key"],
        msg: "Input should be a valid string",
        input: 12,
      },
    ]);
  });

  it.each<[unknown, number | null]>([
    [1, 1],
    [3600, 3600],
    ["120", 120],
    [" 5 ", 5],
    [2.0, 2],
    [true, 1],
    [null, null],
  ])("accepts timeout %j as %j", (timeout, expected) => {
    expect(parse({ shttp_servers: [{ url: "http://h", timeout }] }).shttp_servers[0]!.timeout).toBe(expected);
  });

  it.each<[unknown, FieldViolation]>([
    [0, valueError(["shttp_servers", 0, "timeout"], "Timeout must be positive", 0)],
    [-5, valueError(["shttp_servers", 0, "timeout"], "Timeout must be positive", -5)],
    [false, valueError(["shttp_servers", 0, "timeout"], "Timeout must be positive", false)],
    [3601, valueError(["shttp_servers", 0, "timeout"], "Timeout cannot exceed 3600 seconds", 3601)],
    ["4000", valueError(["shttp_servers", 0, "timeout"], "Timeout cannot exceed 3600 seconds", "4000")],
    [
      "abc",
      {
        type: "int_parsing",
        loc: [...LOC, "shttp_servers", 0, "timeout"],
        msg: "Input should be a valid integer, unable to parse string as an integer",
        input: "abc",
      },
    ],
    [
      1.5,
      {
        type: "int_from_float",
        loc: [...LOC, "shttp_servers", 0, "timeout"],
        msg: "Input should be a valid integer, got a number with a fractional part",
        input: 1.5,
      },
    ],
    [
      [],
      {
        type: "int_type",
        loc: [...LOC, "shttp_servers", 0, "timeout"],
        msg: "Input should be a valid integer",
        input: [],
      },
    ],
  ])("rejects timeout %j", (timeout, expected) => {
    expect(errs({ shttp_servers: [{ url: "http://h", timeout }] })).toEqual([expected]);
  });
});

describe("stdio servers", () => {
  const server = (fields: Record<string, unknown>) => ({
    stdio_servers: [{ name: "s", command: "c", ...fields }],
  });
  const stdioErrs = (fields: Record<string, unknown>) => errs(server(fields));
  const stdioOut = (fields: Record<string, unknown>) => parse(server(fields)).stdio_servers[0]!;

  it("fills args and env defaults", () => {
    expect(stdioOut({})).toEqual({ name: "s", command: "c", args: [], env: {} });
  });

  it("requires name and command", () => {
    const input = { args: [] };
    expect(errs({ stdio_servers: [input] })).toEqual([
      { type: "missing", loc: [...LOC, "stdio_servers", 0, "name"], msg: "Field required", input },
      { type: "missing", loc: [...LOC, "stdio_servers", 0, "command"], msg: "Field required", input },
    ]);
  });

  it("trims and checks the name", () => {
    expect(stdioOut({ name: "  my-server_2 " }).name).toBe("my-server_2");
    expect(stdioErrs({ name: " \t " })).toEqual([
      valueError(["stdio_servers", 0, "name"], "Server name cannot be empty", " \t "),
    ]);
    for (const name of ["a.b", "a b", "ä", "x/y", "a\nb"]) {
      expect(stdioErrs({ name })).toEqual([
        valueError(
          ["stdio_servers", 0, "name"],
          "Server name can only contain letters, numbers, hyphens, and underscores",
          name,
        ),
      ]);
    }
    expect(stdioErrs({ name: 7 })).toEqual([
      {
        type: "string_type",
        loc: [...LOC, "stdio_servers", 0, "name"],
        msg: "Input should be a valid string",
        input: 7,
      },
    ]);
  });

  it("trims and checks the command", () => {
    expect(stdioOut({ command: " /usr/bin/npx\t" }).command).toBe("/usr/bin/npx");
    expect(stdioOut({ command: "a\tb" }).command).toBe("a\tb"); // only a space is refused, like the reference
    expect(stdioErrs({ command: "  " })).toEqual([
      valueError(["stdio_servers", 0, "command"], "Command cannot be empty", "  "),
    ]);
    expect(stdioErrs({ command: "npx -y pkg" })).toEqual([
      valueError(
        ["stdio_servers", 0, "command"],
        "Command should be a single executable without spaces (use arguments field for parameters)",
        "npx -y pkg",
      ),
    ]);
    expect(stdioErrs({ command: null })).toEqual([
      {
        type: "string_type",
        loc: [...LOC, "stdio_servers", 0, "command"],
        msg: "Input should be a valid string",
        input: null,
      },
    ]);
  });

  it.each<[unknown, string[]]>([
    [
      ["-y", "pkg"],
      ["-y", "pkg"],
    ],
    ["-y mcp-remote https://example.com", ["-y", "mcp-remote", "https://example.com"]],
    ['--config "path with spaces" --debug', ["--config", "path with spaces", "--debug"]],
    ["   ", []],
    ["", []],
    [null, []],
    [false, []],
    [0, []],
    [{}, []],
    [[], []],
  ])("accepts args %j", (args, expected) => {
    expect(stdioOut({ args }).args).toEqual(expected);
  });

  it("rejects bad args", () => {
    expect(stdioErrs({ args: "--x 'unterminated" })).toEqual([
      valueError(
        ["stdio_servers", 0, "args"],
        `Invalid argument format: No closing quotation. Use shell-like format, e.g., "arg1 arg2" or '--config "value with spaces"'`,
        "--x 'unterminated",
      ),
    ]);
    expect(stdioErrs({ args: "a\\" })[0]!.msg).toBe(
      `Value error, Invalid argument format: No escaped character. Use shell-like format, e.g., "arg1 arg2" or '--config "value with spaces"'`,
    );
    expect(stdioErrs({ args: ["ok", 1, null] })).toEqual([
      {
        type: "string_type",
        loc: [...LOC, "stdio_servers", 0, "args", 1],
        msg: "Input should be a valid string",
        input: 1,
      },
      {
        type: "string_type",
        loc: [...LOC, "stdio_servers", 0, "args", 2],
        msg: "Input should be a valid string",
        input: null,
      },
    ]);
    expect(stdioErrs({ args: { a: 1 } })).toEqual([
      {
        type: "list_type",
        loc: [...LOC, "stdio_servers", 0, "args"],
        msg: "Input should be a valid list",
        input: { a: 1 },
      },
    ]);
    const many = Array.from({ length: MAX_MCP_ARGS + 1 }, (_, i) => `a${i}`);
    expect(stdioErrs({ args: many.join(" ") })).toEqual([
      {
        type: "too_long",
        loc: [...LOC, "stdio_servers", 0, "args"],
        msg: `List should have at most ${MAX_MCP_ARGS} items after validation, not ${MAX_MCP_ARGS + 1}`,
        input: many,
        ctx: { field_type: "List", max_length: MAX_MCP_ARGS, actual_length: MAX_MCP_ARGS + 1 },
      },
    ]);
  });

  it.each<[unknown, Record<string, string>]>([
    [
      { API_KEY: "x", _b: "" },
      { API_KEY: "x", _b: "" },
    ],
    ["A=1,B=2", { A: "1", B: "2" }],
    [" A = x=y , ,B=", { A: " x=y", B: "" }],
    ["A=1,A=2", { A: "2" }],
    ["  ", {}],
    [null, {}],
    [[], {}],
  ])("accepts env %j", (env, expected) => {
    expect(stdioOut({ env }).env).toEqual(expected);
  });

  it.each<[string, string]>([
    ["A=1,B", "Environment variable 'B' must be in KEY=VALUE format"],
    ["=v", "Environment variable key cannot be empty"],
    [" =v", "Environment variable key cannot be empty"],
    [
      "1A=v",
      "Invalid environment variable name '1A'. Must start with letter or underscore, contain only alphanumeric characters and underscores",
    ],
    [
      "A-B=v",
      "Invalid environment variable name 'A-B'. Must start with letter or underscore, contain only alphanumeric characters and underscores",
    ],
  ])("rejects env string %j", (env, message) => {
    expect(stdioErrs({ env })).toEqual([valueError(["stdio_servers", 0, "env"], message, env)]);
  });

  it("validates env object keys and values", () => {
    expect(stdioErrs({ env: { "1A": "x", OK: 5, "": "y" } })).toEqual([
      valueError(
        ["stdio_servers", 0, "env", "1A", "[key]"],
        "Invalid environment variable name '1A'. Must start with letter or underscore, contain only alphanumeric characters and underscores",
        "1A",
      ),
      {
        type: "string_type",
        loc: [...LOC, "stdio_servers", 0, "env", "OK"],
        msg: "Input should be a valid string",
        input: 5,
      },
      valueError(["stdio_servers", 0, "env", "", "[key]"], "Environment variable key cannot be empty", ""),
    ]);
    expect(stdioErrs({ env: ["A=1"] })).toEqual([
      {
        type: "dict_type",
        loc: [...LOC, "stdio_servers", 0, "env"],
        msg: "Input should be a valid dictionary",
        input: ["A=1"],
      },
    ]);
    const many = Object.fromEntries(Array.from({ length: MAX_MCP_ENV + 1 }, (_, i) => [`K${i}`, "v"]));
    expect(stdioErrs({ env: many })[0]).toMatchObject({
      type: "too_long",
      loc: [...LOC, "stdio_servers", 0, "env"],
      msg: `Dictionary should have at most ${MAX_MCP_ENV} items after validation, not ${MAX_MCP_ENV + 1}`,
    });
  });

  it("reports all stdio field problems of one item together", () => {
    expect(stdioErrs({ name: "", command: "a b", args: "'x", env: "NOPE" })).toEqual([
      valueError(["stdio_servers", 0, "name"], "Server name cannot be empty", ""),
      valueError(
        ["stdio_servers", 0, "command"],
        "Command should be a single executable without spaces (use arguments field for parameters)",
        "a b",
      ),
      valueError(
        ["stdio_servers", 0, "args"],
        `Invalid argument format: No closing quotation. Use shell-like format, e.g., "arg1 arg2" or '--config "value with spaces"'`,
        "'x",
      ),
      valueError(
        ["stdio_servers", 0, "env"],
        "Environment variable 'NOPE' must be in KEY=VALUE format",
        "NOPE",
      ),
    ]);
  });
});

describe("shlexSplit (Python shlex.split)", () => {
  it.each<[string, string[]]>([
    ["a b  c", ["a", "b", "c"]],
    [" \t\r\n", []],
    ['a "b c" d', ["a", "b c", "d"]],
    ["'a\\b'", ["a\\b"]],
    ['"a\\b"', ["a\\b"]],
    ['"a\\\\b"', ["a\\b"]],
    ['"a\\"b"', ['a"b']],
    ["a\\ b", ["a b"]],
    ["a\\'b", ["a'b"]],
    ['a"b c"d', ["ab cd"]],
    ["'' x \"\"", ["", "x", ""]],
    ["a # b", ["a", "#", "b"]],
    ["a\\\nb", ["a\nb"]],
  ])("splits %j", (input, expected) => {
    expect(shlexSplit(input)).toEqual(expected);
  });

  it("raises the Python messages", () => {
    expect(() => shlexSplit('"open')).toThrow("No closing quotation");
    expect(() => shlexSplit("'open")).toThrow("No closing quotation");
    expect(() => shlexSplit("end\\")).toThrow("No escaped character");
    expect(() => shlexSplit('"x\\')).toThrow("No escaped character");
    expect(() => shlexSplit(`it's""`)).toThrow(ShlexError);
  });
});

describe("helpers", () => {
  it("urlSplit finds scheme and netloc like urllib", () => {
    expect(urlSplit("HTTP://Host:80/p?q#f")).toEqual({ scheme: "http", netloc: "Host:80" });
    expect(urlSplit("\x01 http://h")).toEqual({ scheme: "http", netloc: "h" });
    expect(urlSplit("ht\ttp://h\n/x")).toEqual({ scheme: "http", netloc: "h" });
    expect(urlSplit("a_b://h")).toEqual({ scheme: "", netloc: "" });
    expect(urlSplit("//h/x")).toEqual({ scheme: "", netloc: "h" });
  });

  it("validateMcpUrl returns the trimmed URL", () => {
    expect(validateMcpUrl("\u3000https://h/x ")).toBe("https://h/x");
  });

  it("parseEnvString", () => {
    expect({ ...parseEnvString("A=1, B=2") }).toEqual({ A: "1", B: "2" });
  });
});

describe("jsonSchema", () => {
  const js = mcpConfigSchema.jsonSchema();

  it("is an object schema with additionalProperties false and the three lists", () => {
    expect(js).toMatchObject({ type: "object", title: "MCPConfig", additionalProperties: false });
    expect(js.required).toBeUndefined();
    const props = js.properties as Record<string, Record<string, unknown>>;
    expect(Object.keys(props)).toEqual(["sse_servers", "stdio_servers", "shttp_servers"]);
    for (const p of Object.values(props)) {
      expect(p).toMatchObject({ type: "array", maxItems: MAX_MCP_SERVERS, default: [] });
    }
  });

  it("describes items, including the string shorthand and string forms of args/env", () => {
    const props = js.properties as Record<string, { items: Record<string, unknown> }>;
    const sse = props.sse_servers!.items as { anyOf: Record<string, unknown>[] };
    expect(sse.anyOf[0]).toEqual({ type: "string" });
    expect(sse.anyOf[1]).toMatchObject({
      type: "object",
      title: "MCPSSEServerConfig",
      required: ["url"],
      properties: {
        url: { type: "string" },
        api_key: { anyOf: [{ type: "string" }, { type: "null" }], default: null },
      },
    });
    expect(sse.anyOf[1]!.additionalProperties).toBeUndefined();
    const stdio = props.stdio_servers!.items;
    expect(stdio).toMatchObject({ type: "object", required: ["name", "command"] });
    const stdioProps = stdio.properties as Record<string, Record<string, unknown>>;
    expect(stdioProps.name).toMatchObject({ type: "string", pattern: "^[a-zA-Z0-9_-]+$" });
    expect(stdioProps.args).toMatchObject({ anyOf: [{ type: "array" }, { type: "string" }], default: [] });
    expect(stdioProps.env).toMatchObject({ anyOf: [{ type: "object" }, { type: "string" }], default: {} });
    const shttp = props.shttp_servers!.items as { anyOf: Record<string, Record<string, unknown>>[] };
    expect((shttp.anyOf[1]!.properties as Record<string, unknown>).timeout).toMatchObject({
      anyOf: [{ type: "integer" }, { type: "null" }],
      default: 60,
    });
  });

  it("round-trips through JSON", () => {
    expect(JSON.parse(JSON.stringify(js))).toEqual(js);
  });
});
