import { Ajv2020 } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openApiPath } from "../../src/transports/rest/openapi.ts";
import { RPC_ONLY } from "../../src/transports/rest/rest-route.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

type Doc = {
  paths: Record<
    string,
    Record<
      string,
      {
        requestBody?: { content: { "application/json": { schema: object } } };
        responses: Record<string, { content?: { "application/json": { schema: object } } }>;
      }
    >
  >;
  components: { schemas: Record<string, object> };
};

let t: TestApp;
let key: string;
let doc: Doc;
const ajv = new Ajv2020({ strict: false, allErrors: true });
(addFormats as unknown as (a: Ajv2020) => void)(ajv);
const checked = new Set<string>();

beforeAll(async () => {
  t = await startTestApp();
  key = await t.keyFor("openapi");
  doc = (await call(t.url, undefined, "GET", "/openapi.json")).body as Doc;
});
afterAll(async () => {
  await t.close();
});

/** The documented operation for a concrete method + path. */
function operation(method: string, path: string) {
  const bare = path.split("?")[0] ?? "";
  for (const [template, ops] of Object.entries(doc.paths)) {
    const re = new RegExp(`^${template.replace(/\{[^}]+\}/g, "[^/]+")}$`);
    const op = ops[method.toLowerCase()];
    if (re.test(bare) && op) return { template, op };
  }
  throw new Error(`${method} ${bare} is not documented`);
}

function validate(schema: object, value: unknown, what: string): void {
  const check = ajv.compile({ ...schema, components: doc.components });
  if (!check(value))
    throw new Error(
      `${what} does not match its documented schema: ${ajv.errorsText(check.errors)}\n${JSON.stringify(value).slice(0, 500)}`,
    );
}

/** A real request through the server, checked against the document on both sides. */
async function exchange(method: string, path: string, body?: unknown, invalidOnPurpose = false) {
  const { template, op } = operation(method, path);
  if (body !== undefined && op.requestBody && !invalidOnPurpose)
    validate(op.requestBody.content["application/json"].schema, body, `request of ${method} ${template}`);
  const r = await call(t.url, key, method, path, body);
  const documented = op.responses[String(r.status)] ?? op.responses[`${String(r.status)[0]}XX`];
  expect(documented, `${method} ${template} answered undocumented ${r.status}`).toBeDefined();
  const schema = documented?.content?.["application/json"]?.schema;
  if (schema) validate(schema, r.body, `response ${r.status} of ${method} ${template}`);
  checked.add(`${method} ${template} ${r.status}`);
  return r;
}

describe("OpenAPI document", () => {
  it("is OpenAPI 3.1 and documents every REST route of the route table", () => {
    expect((doc as unknown as { openapi: string }).openapi).toBe("3.1.0");
    for (const r of t.app.routes) {
      const path = openApiPath(r.url);
      expect(doc.paths[path]?.[r.method.toLowerCase()], `${r.method} ${path}`).toBeDefined();
    }
  });

  it("every RPC is either routed over REST or explicitly RPC-only", () => {
    const routed = new Set(t.app.routes.map((r) => `${r.rpc.parent.typeName}/${r.rpc.localName}`));
    for (const b of t.app.bindings) {
      for (const m of b.desc.methods) {
        const name = `${b.desc.typeName}/${m.name}`;
        expect(
          routed.has(`${b.desc.typeName}/${m.localName}`) || RPC_ONLY.has(name),
          `${name} has no REST route`,
        ).toBe(true);
      }
    }
  });

  it("accepts the real requests and responses of a settings, secrets and sandboxes session", async () => {
    expect((await exchange("GET", "/api/settings")).status).toBe(404);
    await exchange("POST", "/api/settings", {
      language: "en",
      llm_model: "m",
      llm_api_key: "k",
      max_budget_per_task: 1.5,
      mcp_config: {
        sse_servers: ["https://a.example"],
        stdio_servers: [{ name: "fs", command: "npx", args: ["x"], env: { K: "v" } }],
        shttp_servers: [{ url: "https://b.example", api_key: "s", timeout: 10 }],
      },
      secrets_store: {
        provider_tokens: { github: { token: "t", host: "github.example" } },
        custom_secrets: { A: { secret: "v", description: "d" } },
      },
    });
    expect((await exchange("GET", "/api/settings")).status).toBe(200);
    await exchange("POST", "/api/settings", { max_iterations: "ten" }, true); // 422
    await exchange("POST", "/api/add-git-providers", {
      provider_tokens: { gitlab: { token: "x", host: "" } },
    });
    await exchange("POST", "/api/unset-provider-tokens");
    await exchange("POST", "/api/secrets", { name: "S1", value: "v", description: "d" });
    await exchange("POST", "/api/secrets", { name: "S1", value: "v" }); // 400
    await exchange("GET", "/api/secrets");
    await exchange("PUT", "/api/secrets/S1", { name: "S2", description: null });
    await exchange("DELETE", "/api/secrets/S2");
    await exchange("DELETE", "/api/secrets/S2"); // 404

    await exchange("GET", "/api/v1/sandbox-specs/search?limit=10");
    await exchange("GET", "/api/v1/sandbox-specs?id=workspace-agent&id=none");
    const started = await exchange("POST", "/api/v1/sandboxes");
    const id = (started.body as { id: string }).id;
    for (let i = 0; i < 200; i++) {
      const r = await exchange("GET", `/api/v1/sandboxes?id=${id}&id=unknown`);
      if ((r.body as { status: string }[])[0]?.status === "RUNNING") break;
      await new Promise((r) => setTimeout(r, 20));
    }
    await exchange("GET", "/api/v1/sandboxes/search?limit=1");
    await exchange("GET", "/api/v1/sandboxes/search?limit=0"); // 422
    await exchange("POST", `/api/v1/sandboxes/${id}/pause`, {});
    await exchange("GET", `/api/v1/sandboxes?id=${id}`); // PAUSED: nulls
    await exchange("POST", `/api/v1/sandboxes/${id}/resume`, {});
    await exchange("DELETE", `/api/v1/sandboxes/${id}`);
    await exchange("POST", `/api/v1/sandboxes/${id}/pause`); // 404
    expect(checked.size).toBeGreaterThan(20);
  });

  it("serves interactive docs at /docs, with their assets and the same document, from the npm package", async () => {
    const r = await fetch(`${t.url}/docs`, { redirect: "follow" });
    expect(r.status).toBe(200);
    expect(r.headers.get("content-type")).toContain("text/html");
    expect(await r.text()).toContain("swagger-ui");
    const js = await fetch(`${t.url}/docs/static/swagger-ui-bundle.js`);
    expect(js.status).toBe(200);
    expect(js.headers.get("content-type")).toContain("javascript");
    expect((await js.arrayBuffer()).byteLength).toBeGreaterThan(100_000);
    const json = await fetch(`${t.url}/docs/json`);
    expect(await json.json()).toStrictEqual(doc);
    expect((await fetch(`${t.url}/docs/static/no-such-file.js`)).status).toBe(404);
  });
});
