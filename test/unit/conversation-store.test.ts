// The built-in agent's conversation store: what lands on disk (no secret in clear, the folder private), what comes
// back under the same session key, under another key (the masked settings, no secret), and after a cut last line.
import { spawnSync } from "node:child_process";
import {
  appendFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { ConversationStore } from "../../agent/conversation-store.ts";

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

describe("ConversationStore: files the sandbox's user replaced (issue 38, F10)", () => {
  const storeModule = fileURLToPath(new URL("../../agent/conversation-store.ts", import.meta.url));
  /**
   * Runs `script` against a store on `dir` in a child process (a FIFO would block this one for good), with a
   * timeout: what it prints, or null when it did not finish in time.
   */
  const inChild = (dir: string, script: string): string | null => {
    const r = spawnSync(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        `import { ConversationStore } from ${JSON.stringify(storeModule)};
         const store = new ConversationStore(${JSON.stringify(dir)}, "session-key-1", (m) => console.error(m));
         ${script}`,
      ],
      { encoding: "utf8", timeout: 10_000 },
    );
    return r.error || r.signal ? null : r.stdout;
  };
  const mkfifo = (path: string) => {
    rmSync(path, { force: true });
    expect(spawnSync("mkfifo", [path]).status).toBe(0);
  };

  it("a FIFO in place of events.jsonl, start.json or info.json does not hold the load; the others load", () => {
    const dir = join(root, "fifo");
    const ids = ["1".repeat(32), "2".repeat(32), "3".repeat(32), "4".repeat(32)];
    const store = new ConversationStore(dir, "session-key-1");
    for (const c of ids) {
      store.create(c, body, { id: c, title: null, execution_status: "idle" });
      store.append(c, { kind: "MessageEvent", id: `e-${c}` });
    }
    mkfifo(join(dir, ids[0] as string, "events.jsonl"));
    mkfifo(join(dir, ids[1] as string, "start.json"));
    mkfifo(join(dir, ids[2] as string, "info.json"));
    const out = inChild(
      dir,
      "console.log(JSON.stringify(store.loadAll().map((c) => [c.id, c.events.length, c.record !== null])));",
    );
    expect(out, "the load did not finish").not.toBeNull();
    const loaded = JSON.parse(out ?? "[]") as [string, number, boolean][];
    // Those whose start request or events are not a regular file are skipped (logged), as an oversized events
    // file is; a record that is none is rebuilt from the start request; the untouched one loads whole.
    expect(loaded).toEqual([
      [ids[2], 1, false],
      [ids[3], 1, true],
    ]);
  });

  it("appending or saving to a FIFO or through a symlink does not block and writes nothing elsewhere", () => {
    const dir = join(root, "fifo-write");
    const c = "5".repeat(32);
    const elsewhere = join(root, "elsewhere");
    mkdirSync(elsewhere, { recursive: true });
    new ConversationStore(dir, "session-key-1").create(c, body, {
      id: c,
      title: null,
      execution_status: "idle",
    });
    mkfifo(join(dir, c, "events.jsonl"));
    rmSync(join(dir, c, "info.json"));
    symlinkSync(join(elsewhere, "info.json"), join(dir, c, "info.json"));
    symlinkSync(join(elsewhere, "tmp"), join(dir, c, "info.json.tmp"));
    writeFileSync(join(elsewhere, "keep"), "x");
    const out = inChild(
      dir,
      `store.append(${JSON.stringify(c)}, { kind: "MessageEvent", id: "e" });
       store.saveInfo(${JSON.stringify(c)}, { id: ${JSON.stringify(c)}, title: "T" });
       console.log("done");`,
    );
    expect(out).toBe("done\n");
    expect(readdirSync(elsewhere)).toEqual(["keep"]);
  });
});
