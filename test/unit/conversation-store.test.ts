// The built-in agent's conversation store: what lands on disk (no secret in clear, the folder private), what comes
// back under the same session key, under another key (the masked settings, no secret), and after a cut last line.
import { appendFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ConversationStore } from "../../src/sandbox-agent/conversation-store.ts";

const root = mkdtempSync(join(tmpdir(), "conversation-store-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const id = "0123456789abcdef0123456789abcdef";
const body = {
  agent: {
    kind: "Agent",
    llm: {
      model: "openai/gpt",
      base_url: "http://llm",
      api_key: "sk-very-secret",
      aws_secret_access_key: "aws-x",
    },
  },
  secrets: { GITHUB_TOKEN: { kind: "StaticSecret", value: "ghp-secret-value" } },
  confirmation_policy: { kind: "AlwaysConfirm" },
  initial_message: { role: "user", content: [{ type: "text", text: "hi" }] },
};

describe("ConversationStore", () => {
  it("keeps secrets sealed, the folder private, and gives everything back under the same key", () => {
    const dir = join(root, "a");
    const store = new ConversationStore(dir, "session-key-1");
    store.create(id, body, { id, title: null, execution_status: "idle" });
    store.append(id, { kind: "MessageEvent", id: "e1" });
    store.append(id, { kind: "ActionEvent", id: "e2" });
    store.saveInfo(id, { id, title: "T", execution_status: "finished" });
    const folder = join(dir, id);
    expect(statSync(folder).mode & 0o777).toBe(0o700);
    const text = readdirSync(folder)
      .map((f) => readFileSync(join(folder, f), "utf8"))
      .join("\n");
    for (const secret of ["sk-very-secret", "aws-x", "ghp-secret-value", "session-key-1"])
      expect(text).not.toContain(secret);
    expect(text).toContain("openai/gpt");

    const [back] = new ConversationStore(dir, "session-key-1").loadAll();
    expect(back?.id).toBe(id);
    expect(back?.secretsRestored).toBe(true);
    expect(back?.body).toMatchObject({
      agent: { llm: { api_key: "sk-very-secret", aws_secret_access_key: "aws-x" } },
      secrets: body.secrets,
    });
    expect(back?.body.initial_message).toBeUndefined();
    expect(back?.record).toMatchObject({ title: "T", execution_status: "finished" });
    expect(back?.events.map((e) => e.id)).toEqual(["e1", "e2"]);
  });

  it("under another key: the settings without any secret; a cut last line ends the events", () => {
    const dir = join(root, "b");
    new ConversationStore(dir, "key-1").create(id, body, { id });
    const store = new ConversationStore(dir, "key-1");
    store.append(id, { kind: "MessageEvent", id: "e1" });
    appendFileSync(join(dir, id, "events.jsonl"), '{"kind":"Mess');
    const [other] = new ConversationStore(dir, "key-2").loadAll();
    expect(other?.secretsRestored).toBe(false);
    expect(other?.body).toMatchObject({ agent: { llm: { model: "openai/gpt", base_url: "http://llm" } } });
    expect(
      (other?.body.agent as { llm?: Record<string, unknown> } | undefined)?.llm?.api_key,
    ).toBeUndefined();
    expect(other?.body.secrets).toBeUndefined();
    expect(other?.events.map((e) => e.id)).toEqual(["e1"]);
  });

  it("ignores ids that are not conversation ids and forgets a deleted conversation", () => {
    const dir = join(root, "c");
    const store = new ConversationStore(dir, "k");
    store.create("../escape", body, {});
    store.create(id, body, {});
    // The .gitignore keeps the folder out of git's changes when it lies in the workspace's repository.
    expect(readdirSync(dir).sort()).toEqual([".gitignore", id]);
    store.delete(id);
    expect(store.loadAll()).toEqual([]);
  });
});
