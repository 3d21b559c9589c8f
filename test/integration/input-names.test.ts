// Input that cannot break an account: strings that are not well-formed Unicode are refused on every protocol and
// never stored; an account holding such strings from before can still be read and repaired; names such as
// `__proto__` or `constructor` are ordinary names end to end; REST and Connect store the same document for the
// same request.

import { fromJson } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SecretsService } from "../../src/gen/workspace/v1/secrets_pb.js";
import { SettingsSchema, SettingsService } from "../../src/gen/workspace/v1/settings_pb.js";
import type { UserData } from "../../src/ports/user-data-repository.ts";
import { connectClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t.close();
});

const LONE = "\ud800";

/** A request whose JSON text carries `\ud800` escapes (what JSON.stringify writes for a lone surrogate). */
async function raw(
  key: string,
  method: string,
  path: string,
  json: string,
  contentType = "application/json",
) {
  const r = await fetch(`${t.url}${path}`, {
    method,
    headers: { "x-session-api-key": key, "content-type": contentType },
    body: json,
  });
  const text = await r.text();
  return { status: r.status, type: r.headers.get("content-type"), body: JSON.parse(text) as unknown, text };
}

const stored = async (user: string) => (await t.storage.userData.get(user))?.value;

describe("strings that are not well-formed Unicode", () => {
  it("REST: 422 string_unicode at the field, nothing stored (secrets, settings fields, keys, anything)", async () => {
    const key = await t.keyFor("uni-rest");
    const secret = await raw(key, "POST", "/api/secrets", JSON.stringify({ name: LONE, value: "x" }));
    expect(secret.status).toBe(422);
    expect(secret.body).toEqual({
      detail: [
        {
          type: "string_unicode",
          loc: ["body", "name"],
          msg: "Input should be a valid string, unable to parse raw data as a unicode string",
          input: "\ufffd",
        },
      ],
    });
    // The error body itself is well-formed UTF-8 JSON (the bad input is echoed with U+FFFD).
    expect(secret.text.isWellFormed()).toBe(true);
    expect(secret.text).not.toContain("\\ud800");
    for (const [body, loc] of [
      [{ language: `a${LONE}` }, ["body", "language"]],
      [{ llm_model: `${LONE}x` }, ["body", "llm_model"]],
      [{ llm_api_key: LONE }, ["body", "llm_api_key"]],
      [{ git_user_name: "\udfff" }, ["body", "git_user_name"]],
      [
        { secrets_store: { custom_secrets: { [LONE]: { secret: "s" } } } },
        ["body", "secrets_store", "custom_secrets", "\ufffd", "[key]"],
      ],
      [
        { mcp_config: { stdio_servers: [{ name: "n", command: "c", env: { K: LONE } }] } },
        ["body", "mcp_config", "stdio_servers", 0, "env", "K"],
      ],
      [
        { mcp_config: { shttp_servers: [`https://h.example/${LONE}`] } },
        ["body", "mcp_config", "shttp_servers", 0],
      ],
      [{ unknown_key_ignored: LONE }, ["body", "unknown_key_ignored"]],
    ] as const) {
      const r = await raw(key, "POST", "/api/settings", JSON.stringify(body));
      expect(r.status, JSON.stringify(body)).toBe(422);
      const detail = (r.body as { detail: { type: string; loc: unknown[] }[] }).detail;
      expect(detail.map((d) => d.type)).toEqual(["string_unicode"]);
      expect(detail[0]?.loc).toEqual(loc);
    }
    const rename = await raw(key, "PUT", "/api/secrets/a", JSON.stringify({ name: LONE }));
    expect(rename.status).toBe(422);
    const v1 = await raw(
      key,
      "POST",
      "/api/v1/app-conversations",
      JSON.stringify({ initial_message: { content: [{ type: "text", text: LONE }] } }),
    );
    expect(v1.status).toBe(422);
    expect(JSON.stringify(v1.body)).toContain("string_unicode");
    expect(await stored("uni-rest")).toBeUndefined();
  });

  it("Connect JSON (the \\ud800 escape): INVALID_ARGUMENT with a field violation, nothing stored", async () => {
    const key = await t.keyFor("uni-connect");
    for (const [path, json] of [
      ["/workspace.v1.SecretsService/CreateSecret", JSON.stringify({ name: LONE, value: "x" })],
      ["/workspace.v1.SecretsService/CreateSecret", JSON.stringify({ name: "ok", value: `v${LONE}` })],
      ["/workspace.v1.SettingsService/StoreSettings", JSON.stringify({ settings: { language: LONE } })],
      [
        "/workspace.v1.SettingsService/StoreSettings",
        JSON.stringify({
          settings: { mcpConfig: { stdioServers: [{ name: "n", command: "c", env: { [LONE]: "v" } }] } },
        }),
      ],
      [
        "/workspace.v1.SettingsService/StoreSettings",
        JSON.stringify({ settings: { secretsStore: { customSecrets: { [LONE]: { description: "d" } } } } }),
      ],
    ] as const) {
      const r = await raw(key, "POST", path, json);
      expect(r.status, json).toBe(400);
      expect(r.type).toContain("application/json");
      expect((r.body as { code: string }).code).toBe("invalid_argument");
    }
    // Where the request decodes (a lone surrogate in a string field), the answer names the field.
    const named = await raw(
      key,
      "POST",
      "/workspace.v1.SecretsService/CreateSecret",
      JSON.stringify({ name: LONE, value: "x" }),
    );
    expect(JSON.stringify(named.body)).toMatch(/name/);
    expect(await stored("uni-connect")).toBeUndefined();
  });

  it("Connect client and gRPC clients cannot even send one: binary protobuf carries UTF-8", async () => {
    const key = await t.keyFor("uni-binary");
    const client = connectClient(SecretsService, t.url, key);
    await client.createSecret({ name: `n${LONE}`, value: "x" });
    const names = (await client.listSecrets({})).customSecrets.map((s) => s.name);
    expect(names).toEqual(["n\ufffd"]);
    expect(Object.keys((await stored("uni-binary"))?.customSecrets ?? {})).toEqual(["n\ufffd"]);
  });
});

describe("an account holding such strings from before", () => {
  it("can still be read (U+FFFD shown) and repaired through the API", async () => {
    const user = "legacy";
    const key = await t.keyFor(user);
    // Stored before the rule existed: written straight into storage.
    expect((await call(t.url, key, "POST", "/api/secrets", { name: "good", value: "v" })).status).toBe(201);
    expect(
      (
        await call(t.url, key, "POST", "/api/settings", {
          language: "en",
          mcp_config: { stdio_servers: [{ name: "fs", command: "npx", env: { K: "v" } }] },
        })
      ).status,
    ).toBe(200);
    const before = await t.storage.userData.get(user);
    const doc = structuredClone(before?.value) as UserData;
    const settings = doc.settings as Record<string, unknown>;
    settings.language = `x${LONE}`;
    settings.git_user_name = "\udc00";
    const mcp = settings.mcp_config as { stdio_servers: { name: string; env: Record<string, string> }[] };
    const server = mcp.stdio_servers[0];
    if (server === undefined) throw new Error("no server");
    server.env[`K${LONE}`] = server.env.K as string;
    const good = doc.customSecrets.good;
    if (good === undefined) throw new Error("no secret");
    doc.customSecrets[LONE] = { ...good, description: `d${LONE}` };
    doc.providerTokens.github = { token: null, host: `h${LONE}.example`, userId: "u" };
    expect(await t.storage.userData.compareAndSet(user, before?.version ?? 0, doc)).toBe(true);

    // Read: REST and Connect answer 200 with U+FFFD in place of each lone surrogate.
    const rest = await call(t.url, key, "GET", "/api/settings");
    expect(rest.status).toBe(200);
    expect(rest.text.isWellFormed()).toBe(true);
    const body = rest.body as Record<string, unknown>;
    expect(body.language).toBe("x\ufffd");
    expect(body.git_user_name).toBe("\ufffd");
    expect(body.secrets_store).toMatchObject({ custom_secrets: { "\ufffd": { description: "d\ufffd" } } });
    expect(body.provider_tokens_set).toEqual({ github: "h\ufffd.example" });
    const connect = connectClient(SettingsService, t.url, key);
    const viaConnect = await connect.getSettings({});
    expect(viaConnect.settings?.language).toBe("x\ufffd");
    expect(viaConnect.settings?.mcpConfig?.stdioServers[0]?.env).toHaveProperty("K\ufffd");
    const list = await call(t.url, key, "GET", "/api/secrets");
    expect(list.status).toBe(200);
    expect(list.body).toEqual({
      custom_secrets: [
        { name: "good", description: "" },
        { name: "\ufffd", description: "d\ufffd" },
      ],
    });

    // Repair: overwrite the settings fields, delete the secret by the name it is listed under.
    expect(
      (await call(t.url, key, "POST", "/api/settings", { language: "de", git_user_name: null })).status,
    ).toBe(200);
    expect(
      (
        await call(t.url, key, "POST", "/api/settings", {
          mcp_config: { stdio_servers: [{ name: "fs", command: "npx", env: { K: "**********" } }] },
        })
      ).status,
    ).toBe(200);
    expect((await call(t.url, key, "DELETE", `/api/secrets/${encodeURIComponent("\ufffd")}`)).status).toBe(
      200,
    );
    expect((await call(t.url, key, "POST", "/api/unset-provider-tokens")).status).toBe(200);
    const after = (await stored(user)) as UserData;
    expect(JSON.stringify(after).includes("\\ud800")).toBe(false);
    expect(JSON.stringify(after).includes("\\udc00")).toBe(false);
    expect(Object.keys(after.customSecrets)).toEqual(["good"]);
    const again = await call(t.url, key, "GET", "/api/settings");
    expect(again.body).toMatchObject({ language: "de", git_user_name: null });
  });
});

describe("names that are Object.prototype's own", () => {
  const NAMES = ["__proto__", "constructor", "prototype", "toString", "hasOwnProperty", "valueOf"];

  it("work as secret names over REST: created, listed, renamed, deleted", async () => {
    const key = await t.keyFor("proto-rest");
    for (const name of NAMES) {
      const r = await call(t.url, key, "POST", "/api/secrets", { name, value: `v-${name}` });
      expect(r.status, name).toBe(201);
    }
    const list = await call(t.url, key, "GET", "/api/secrets");
    expect((list.body as { custom_secrets: { name: string }[] }).custom_secrets.map((s) => s.name)).toEqual(
      NAMES,
    );
    expect((await call(t.url, key, "POST", "/api/secrets", { name: "__proto__", value: "x" })).status).toBe(
      400,
    );
    expect((await call(t.url, key, "PUT", "/api/secrets/__proto__", { name: "renamed" })).status).toBe(200);
    expect((await call(t.url, key, "PUT", "/api/secrets/renamed", { name: "__proto__" })).status).toBe(200);
    expect((await call(t.url, key, "DELETE", "/api/secrets/constructor")).status).toBe(200);
    expect((await call(t.url, key, "DELETE", "/api/secrets/constructor")).status).toBe(404);
    expect((await call(t.url, key, "DELETE", "/api/secrets/isPrototypeOf")).status).toBe(404);
    const secrets = (await stored("proto-rest"))?.customSecrets ?? {};
    expect(Object.keys(secrets).sort()).toEqual(NAMES.filter((n) => n !== "constructor").sort());
    expect(Object.getPrototypeOf(secrets)).toBe(Object.prototype);
    const opened = await t.app.services.secrets.openAll("proto-rest");
    expect(Object.hasOwn(opened, "__proto__")).toBe(true);
    expect(Object.getOwnPropertyDescriptor(opened, "__proto__")?.value).toBe("v-__proto__");
  });

  it("work as custom-secret keys, MCP server names and env keys in settings, over REST and Connect", async () => {
    const entries = Object.fromEntries(NAMES.map((n) => [n, { secret: `s-${n}`, description: n }]));
    const env = Object.fromEntries(NAMES.filter((n) => /^[A-Za-z_]/.test(n)).map((n) => [n, `e-${n}`]));
    const body = {
      secrets_store: { custom_secrets: entries },
      mcp_config: { stdio_servers: [{ name: "__proto__", command: "npx", env }] },
    };
    const restKey = await t.keyFor("proto-settings-rest");
    // JSON.stringify keeps an own "__proto__" key (the entries were built with Object.fromEntries).
    expect(JSON.stringify(body)).toContain('"__proto__":{"secret"');
    expect((await call(t.url, restKey, "POST", "/api/settings", body)).status).toBe(200);
    const rpcKey = await t.keyFor("proto-settings-rpc");
    await connectClient(SettingsService, t.url, rpcKey).storeSettings({
      settings: fromJson(SettingsSchema, {
        secrets_store: { custom_secrets: entries },
        mcp_config: body.mcp_config,
      }),
    });
    for (const key of [restKey, rpcKey]) {
      const g = await call(t.url, key, "GET", "/api/settings");
      expect(g.status).toBe(200);
      const b = g.body as {
        secrets_store: { custom_secrets: Record<string, unknown> };
        mcp_config: { stdio_servers: { name: string; env: Record<string, string> }[] };
      };
      expect(Object.keys(b.secrets_store.custom_secrets)).toEqual(NAMES);
      expect(b.mcp_config.stdio_servers[0]?.name).toBe("__proto__");
      expect(Object.keys(b.mcp_config.stdio_servers[0]?.env ?? {})).toEqual(Object.keys(env));
    }
    for (const user of ["proto-settings-rest", "proto-settings-rpc"]) {
      const doc = (await stored(user)) as UserData;
      expect(Object.keys(doc.customSecrets)).toEqual(NAMES);
      const opened = t.app.services.settings.openMcp(user, doc.settings?.mcp_config);
      expect(opened?.stdio_servers[0]?.env).toEqual(env);
    }
  });

  it("are refused with 422 where names come from a fixed set (provider names)", async () => {
    const key = await t.keyFor("proto-providers");
    for (const name of NAMES) {
      const r = await raw(
        key,
        "POST",
        "/api/add-git-providers",
        `{"provider_tokens":{"${name}":{"token":"t"}}}`,
      );
      expect(r.status, name).toBe(422);
      expect(JSON.stringify(r.body)).toContain('"enum"');
    }
    expect(await stored("proto-providers")).toBeUndefined();
  });
});

describe("REST and Connect store the same document for the same request", () => {
  it("including an SHTTP timeout of none (REST null, message 0) and the default (absent over both)", async () => {
    const mcp = {
      sse_servers: ["https://s.example/sse"],
      stdio_servers: [{ name: "fs", command: "npx", args: "-y  @mcp/fs", env: "A=1,B=2" }],
      shttp_servers: [
        { url: "https://none.example", timeout: null },
        { url: "https://default.example" },
        { url: " https://thirty.example ", timeout: "30" },
      ],
    };
    const restKey = await t.keyFor("diff-rest");
    expect(
      (
        await call(t.url, restKey, "POST", "/api/settings", {
          language: "fr",
          max_iterations: "7",
          mcp_config: mcp,
        })
      ).status,
    ).toBe(200);
    const rpcKey = await t.keyFor("diff-rpc");
    await connectClient(SettingsService, t.url, rpcKey).storeSettings({
      settings: fromJson(SettingsSchema, {
        language: "fr",
        max_iterations: 7,
        mcp_config: {
          sse_servers: [{ url: "https://s.example/sse" }],
          stdio_servers: [{ name: "fs", command: "npx", args: ["-y", "@mcp/fs"], env: { A: "1", B: "2" } }],
          shttp_servers: [
            { url: "https://none.example", timeout: 0 },
            { url: "https://default.example" },
            { url: "https://thirty.example", timeout: 30 },
          ],
        },
      }),
    });
    // Sealed values differ by nonce and user: compare the documents with the MCP secrets opened.
    const opened = async (user: string) => {
      const doc = (await stored(user)) as UserData;
      const settings = {
        ...doc.settings,
        mcp_config: t.app.services.settings.openMcp(user, doc.settings?.mcp_config),
      };
      return { ...doc, settings };
    };
    const [rest, rpc] = [await opened("diff-rest"), await opened("diff-rpc")];
    expect(rest).toEqual(rpc);
    expect(rest.settings.mcp_config?.stdio_servers[0]?.env).toEqual({ A: "1", B: "2" });
    expect(rest.settings.mcp_config?.shttp_servers).toEqual([
      { url: "https://none.example", api_key: null, timeout: null },
      { url: "https://default.example", api_key: null, timeout: 60 },
      { url: "https://thirty.example", api_key: null, timeout: 30 },
    ]);
    // Read back: REST shows null, Connect the message's 0; both answer the same view.
    const g = await call(t.url, rpcKey, "GET", "/api/settings");
    expect(
      (g.body as { mcp_config: { shttp_servers: { timeout: unknown }[] } }).mcp_config.shttp_servers,
    ).toEqual([
      { url: "https://none.example", api_key: null, timeout: null },
      { url: "https://default.example", api_key: null, timeout: 60 },
      { url: "https://thirty.example", api_key: null, timeout: 30 },
    ]);
    const c = await connectClient(SettingsService, t.url, restKey).getSettings({});
    expect(c.settings?.mcpConfig?.shttpServers.map((s) => s.timeout)).toEqual([0, 60, 30]);
  });
});
