// Issue 38, F8: a conversation's custom secret (and the model key) shown by any tool, as it is or encoded, never
// reaches what the agent keeps and sends: its events (the search route), the saved events.jsonl, the service's
// webhook. The file editor shows a file holding the secret in clear and JSON-escaped; the terminal prints it in
// base64, URL-encoded and hex.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createAgentServer } from "../../agent/agent-server.ts";
import { SECRET_MASK, secretForms, secretMasker } from "../../agent/secret-mask.ts";
import { type FakeLlm, startFakeLlm } from "../helpers/fake-llm.ts";

const KEY = "secrets-test-key";
/** A custom secret with characters every encoding changes (a slash, a plus, a quote, a space). */
const SECRET = 'sk-Cust0m/Secret+"Val ue"-42';
const MODEL_KEY = "sk-model-key-0123456789";
const root = mkdtempSync(join(tmpdir(), "agent-secrets-"));
const workspace = join(root, "ws");
const stateDir = join(root, "state");
let llm: FakeLlm;
let agent: Server;
let base: string;
let hook: Server;
const hooked: string[] = [];

const listen = async (s: Server): Promise<string> => {
  await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));
  const address = s.address();
  if (typeof address !== "object" || address === null) throw new Error("no address");
  return `http://127.0.0.1:${address.port}`;
};

/** Every form of the secrets a reader could decode back. */
const leaks = (text: string): string[] =>
  [SECRET, MODEL_KEY].flatMap(secretForms).filter((form) => text.includes(form));

beforeAll(async () => {
  mkdirSync(workspace, { recursive: true });
  writeFileSync(join(workspace, "config.txt"), `token=${SECRET}\nmodel=${MODEL_KEY}\n`);
  writeFileSync(join(workspace, "config.json"), JSON.stringify({ token: SECRET }));
  llm = await startFakeLlm();
  hook = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => {
      body += c.toString();
    });
    req.on("end", () => {
      hooked.push(body);
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  const hookUrl = await listen(hook);
  agent = createAgentServer({
    sessionApiKey: KEY,
    workspaceDir: workspace,
    stateDir,
    webhook: { baseUrl: `${hookUrl}/hooks`, flushDelayMs: 10 },
  });
  base = await listen(agent);
});

afterAll(async () => {
  agent.closeAllConnections();
  await new Promise((resolve) => agent.close(resolve));
  hook.closeAllConnections();
  await new Promise((resolve) => hook.close(resolve));
  await llm.close();
  rmSync(root, { recursive: true, force: true });
});

describe("secret masking (issue 38, F8)", () => {
  it("masks a value and its encodings, at any offset of a longer base64 text; leaves short values and other text", () => {
    const mask = secretMasker([SECRET, "ab"]);
    const bytes = Buffer.from(SECRET);
    for (let pre = 0; pre < 4; pre++)
      for (const tail of ["", "\n", "xy"]) {
        const text = Buffer.concat([Buffer.from("p".repeat(pre)), bytes, Buffer.from(tail)]);
        for (const encoded of [text.toString("base64"), text.toString("base64url")])
          expect(leaks(mask(encoded)), encoded).toEqual([]);
      }
    for (const shown of [
      SECRET,
      JSON.stringify({ t: SECRET }),
      encodeURIComponent(SECRET),
      new URLSearchParams({ t: SECRET }).toString(),
      bytes.toString("hex"),
      bytes.toString("hex").toUpperCase(),
    ])
      expect(mask(shown), shown).toContain(SECRET_MASK);
    expect(mask("ab cd, nothing else")).toBe("ab cd, nothing else");
  });

  it("masks a secret in base64 wrapped over lines (as `base64` prints more than 57 bytes), at every offset", () => {
    const long = `${SECRET}-${"k".repeat(70)}`;
    const mask = secretMasker([long]);
    for (let pre = 0; pre < 80; pre += 7) {
      const encoded = Buffer.from(`${"p".repeat(pre)}${long}\n`).toString("base64");
      for (const width of [76, 64]) {
        const wrapped = `before\n${encoded.replace(new RegExp(`(.{${width}})`, "g"), "$1\n")}\n[exit 0]`;
        expect(wrapped.split("\n").length).toBeGreaterThan(3);
        const shown = mask(wrapped);
        expect(shown, wrapped).toContain(SECRET_MASK);
        // Nothing of the value's encoding is left on any line: decoded, the shown block holds no part of it.
        expect(Buffer.from(shown.replace(/[^A-Za-z0-9+/]/g, ""), "base64").toString("latin1")).not.toContain(
          "kkkkkkkk",
        );
        expect(shown.startsWith("before\n") && shown.endsWith("\n[exit 0]")).toBe(true);
      }
    }
    // Ordinary wrapped base64 is left as it is.
    const other = Buffer.from("x".repeat(200))
      .toString("base64")
      .replace(/(.{76})/g, "$1\n");
    expect(mask(other)).toBe(other);
  });

  it("no tool output holds a secret in any common encoding: not the events, the saved file, nor the webhook", async () => {
    const b64 = (cmd: string) => `printf %s "$MY_SECRET" | ${cmd}`;
    llm.script(
      {
        toolCalls: [
          { name: "file_editor", arguments: { command: "view", path: join(workspace, "config.txt") } },
        ],
      },
      {
        toolCalls: [
          { name: "file_editor", arguments: { command: "view", path: join(workspace, "config.json") } },
        ],
      },
      {
        toolCalls: [
          {
            name: "terminal",
            arguments: {
              command: [
                b64("base64"),
                `printf 'x%s\\n' "$MY_SECRET" | base64`,
                b64("base64 | tr '+/' '-_'"),
                b64("od -An -tx1 | tr -d ' \\n'"),
                `${process.execPath} -e 'console.log(encodeURIComponent(process.env.MY_SECRET))'`,
                `${process.execPath} -e 'console.log(JSON.stringify({s: process.env.MY_SECRET}))'`,
              ].join("; echo; "),
            },
          },
        ],
      },
      { content: "done" },
    );
    const started = await fetch(`${base}/api/conversations`, {
      method: "POST",
      headers: { "x-session-api-key": KEY, "content-type": "application/json" },
      body: JSON.stringify({
        agent: {
          kind: "Agent",
          llm: { model: "openai/fake-model", base_url: llm.url, api_key: MODEL_KEY, num_retries: 0 },
        },
        workspace: { kind: "LocalWorkspace", working_dir: workspace },
        secrets: { MY_SECRET: { kind: "StaticSecret", value: SECRET } },
        initial_message: { role: "user", content: [{ type: "text", text: "show the config" }], run: true },
      }),
    });
    expect(started.status).toBe(200);
    const id = ((await started.json()) as { id: string }).id.replaceAll("-", "");
    let events = "";
    for (let i = 0; i < 500; i++) {
      const r = await fetch(`${base}/api/conversations/${id}/events/search?limit=100`, {
        headers: { "x-session-api-key": KEY },
      });
      events = await r.text();
      if (events.includes('"value":"finished"')) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(events).toContain('"value":"finished"');
    // The tools did show the secret: masked, in each observation.
    const observations = (JSON.parse(events) as { items: { kind: string }[] }).items.filter(
      (e) => e.kind === "ObservationEvent",
    );
    expect(observations).toHaveLength(3);
    for (const o of observations) expect(JSON.stringify(o)).toContain(SECRET_MASK);
    expect(leaks(events)).toEqual([]);
    await new Promise((r) => setTimeout(r, 300)); // the webhook's last batch
    expect(hooked.join("\n")).toContain("ObservationEvent");
    expect(leaks(hooked.join("\n"))).toEqual([]);
    const saved = readFileSync(join(stateDir, id, "events.jsonl"));
    expect(leaks(saved.toString("utf8"))).toEqual([]);
    // The model never saw them either (its history is rebuilt from the masked events).
    expect(leaks(JSON.stringify(llm.requests.map((r) => r.body.messages)))).toEqual([]);
  });
});
