/**
 * The terminal chat (`npm run cli -- chat`, src/cli/chat.ts) driven as a person would, as a child process with its
 * input and output piped, against a real app on the embedded default (process runtime, built-in agent) and a
 * scripted model: a new conversation with its start shown, a tool call and its output, file edits as diffs, a
 * follow-up, confirmation mode answered y and n, attaching to an existing conversation (its sandbox paused first),
 * Ctrl-C pausing the agent, --json, a model that cannot be reached, and a start that fails. Every wait is for an
 * output line, with a deadline.
 */
import { createServer } from "node:net";
import { describe, expect, it } from "vitest";
import { useBuiltinAgentApp } from "../helpers/builtin-agent-app.ts";
import { ChatProcess } from "../helpers/chat-process.ts";
import { call } from "../helpers/test-app.ts";
import { until } from "../helpers/until.ts";

const fx = useBuiltinAgentApp("cli-chat-e2e-", "sk-chat-key");

/** The chat as a child process against this suite's app, as alice unless `key` names another user. */
const Chat = class extends ChatProcess {
  constructor(args: string[], key = fx.key) {
    super(fx.t.url, key, args);
  }
};

/** A user with the scripted model in their settings (and more settings). */
async function userWith(name: string, settings: Record<string, unknown>): Promise<string> {
  const key = await fx.t.keyFor(name);
  const saved = await call(fx.t.url, key, "POST", "/api/settings", {
    llm_model: "openai/fake-model",
    llm_base_url: fx.llm.url,
    llm_api_key: "sk-chat-key",
    ...settings,
  });
  expect(saved.status, saved.text).toBe(200);
  return key;
}

/** A loopback port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const address = server.address();
  await new Promise((r) => server.close(r));
  if (typeof address !== "object" || address === null) throw new Error("no port");
  return address.port;
}

let firstConversation = "";

describe("npm run cli -- chat", () => {
  it("starts a conversation, shows a command and its output and the file edits as diffs, and answers a follow-up", async () => {
    fx.llm.script(
      {
        content: "Let me compute it.",
        toolCalls: [{ name: "terminal", arguments: { command: "echo chat-$((40+2))" } }],
      },
      {
        toolCalls: [
          {
            name: "file_editor",
            arguments: {
              command: "create",
              path: "/workspace/project/notes.txt",
              file_text: "alpha\nbeta\n",
            },
          },
        ],
      },
      {
        toolCalls: [
          {
            name: "file_editor",
            arguments: {
              command: "str_replace",
              path: "/workspace/project/notes.txt",
              old_str: "beta",
              new_str: "gamma",
            },
          },
        ],
      },
      {
        toolCalls: [
          {
            name: "task_tracker",
            arguments: {
              command: "plan",
              task_list: [
                { title: "Compute", status: "done" },
                { title: "Write it down", status: "in_progress" },
              ],
            },
          },
        ],
      },
      { content: "The answer is 42; it is in notes.txt." },
      { content: "You are welcome." },
    );
    const chat = new Chat([]);
    // The start task's steps as words, then the conversation's id.
    await chat.expect("Starting a conversation…");
    const ready = await chat.expect(/Conversation ([0-9a-f]{32}) is ready/);
    firstConversation = /([0-9a-f]{32}) is ready/.exec(ready)?.[1] ?? "";
    await chat.expect("Type a message");
    chat.send("What is 40+2? Write it down.");
    await chat.expect("you: What is 40+2? Write it down.");
    await chat.expect("· running");
    await chat.expect("agent: Let me compute it.");
    await chat.expect("$ echo chat-$((40+2))");
    await chat.expect("    chat-42");
    // The new file, then the edit, as unified diffs.
    await chat.expect("✎ create /workspace/project/notes.txt");
    await chat.expect("@@ -0,0 +1,2 @@\n    +alpha\n    +beta");
    await chat.expect("✎ edit /workspace/project/notes.txt");
    await chat.expect("@@ -1,2 +1,2 @@\n     alpha\n    -beta\n    +gamma");
    await chat.expect("☰ tasks:");
    await chat.expect("✓ Compute");
    await chat.expect("▸ Write it down");
    await chat.expect("agent: The answer is 42; it is in notes.txt.");
    await chat.expect("· finished");

    chat.send("Thanks!");
    await chat.expect("you: Thanks!");
    await chat.expect("agent: You are welcome.");
    await chat.expect("· finished");
    chat.send("/exit");
    expect(await chat.exitCode()).toBe(0);
    await chat.expect(`Attach again with: npm run cli -- chat ${firstConversation}`);
    // A person reads no JSON.
    expect(chat.stdout).not.toMatch(/"kind"|\{"/);
    expect(chat.stderr).toBe("");
    // The model saw the follow-up with the whole history.
    expect(JSON.stringify(fx.llm.requests.at(-1)?.body.messages.at(-1))).toContain("Thanks!");
  }, 90_000);

  it("attaches to a conversation by id: resumes its paused sandbox, shows its history, and --json prints events", async () => {
    expect(firstConversation).not.toBe("");
    const [conversation] = (await fx.api("GET", `/api/v1/app-conversations?ids=${firstConversation}`))
      .body as {
      sandbox_id: string;
    }[];
    const paused = await fx.api("POST", `/api/v1/sandboxes/${conversation?.sandbox_id}/pause`);
    expect(paused.status).toBe(200);

    const chat = new Chat([firstConversation]);
    chat.proc.stdin.end(); // piped input that ends: the chat leaves once the history is shown
    await chat.expect("Its sandbox is paused: resuming it…");
    await chat.expect(`Conversation ${firstConversation} "What is 40+2? Write it down."`);
    await chat.expect("you: What is 40+2? Write it down.");
    await chat.expect("    chat-42");
    await chat.expect("-beta\n    +gamma");
    await chat.expect("agent: The answer is 42; it is in notes.txt.");
    await chat.expect("you: Thanks!");
    await chat.expect("agent: You are welcome.");
    await chat.expect("· finished");
    expect(await chat.exitCode()).toBe(0);

    const json = new Chat([firstConversation, "--json"]);
    json.proc.stdin.end();
    expect(await json.exitCode()).toBe(0);
    const events = json.stdout
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line) as { kind: string; key?: string });
    expect(events[0]).toMatchObject({ kind: "ConversationStateUpdateEvent", key: "full_state" });
    const kinds = events.map((e) => e.kind);
    expect(kinds).toContain("ActionEvent");
    expect(kinds).toContain("ObservationEvent");
    expect(kinds.filter((k) => k === "MessageEvent").length).toBe(4);
    // The chat's own lines go to stderr.
    expect(json.stderr).toContain(`Conversation ${firstConversation}`);
  }, 90_000);

  it("Ctrl-C pauses the running agent (its command finishes), a second Ctrl-C leaves", async () => {
    fx.llm.script({
      content: "This takes a moment.",
      toolCalls: [{ name: "terminal", arguments: { command: "sleep 3; echo slept-well" } }],
    });
    const requests = fx.llm.requests.length;
    const chat = new Chat(["-m", "Sleep for a bit"]);
    await chat.expect("you: Sleep for a bit");
    await chat.expect("$ sleep 3; echo slept-well");
    chat.proc.kill("SIGINT");
    await chat.expect("pausing the agent… (Ctrl-C again leaves)");
    await chat.expect("· paused (send a message or /resume to go on)");
    // The command that ran when the pause came finishes, and nothing more is asked of the model.
    await chat.expect("    slept-well");
    chat.proc.kill("SIGINT");
    expect(await chat.exitCode()).toBe(0);
    expect(fx.llm.requests.length).toBe(requests + 1);
    const id = /Conversation ([0-9a-f]{32}) is ready/.exec(chat.stdout)?.[1];
    const listed = await until(
      async () =>
        (
          (await fx.api("GET", `/api/v1/app-conversations?ids=${id}`)).body as { execution_status: string }[]
        )[0],
      (c) => c?.execution_status === "paused",
    );
    expect(listed?.execution_status).toBe("paused");
  }, 60_000);

  it("confirmation mode: shows the pending action and asks; y runs it, n rejects it with the reason", async () => {
    const key = await userWith("confirming-user", { confirmation_mode: true });
    fx.llm.script(
      {
        content: "Removing it.",
        toolCalls: [{ name: "terminal", arguments: { command: "echo removed-$((1+1))" } }],
      },
      { content: "Done." },
      {
        toolCalls: [
          {
            name: "file_editor",
            arguments: { command: "create", path: "/workspace/project/danger.txt", file_text: "boom\n" },
          },
        ],
      },
    );
    const chat = new Chat(["-m", "Remove the build folder"], key);
    await chat.expect("you: Remove the build folder");
    await chat.expect("· waiting for your confirmation");
    await chat.expect("The agent asks to run:\n  $ echo removed-$((1+1))");
    await chat.expect("Allow it?");
    chat.send("maybe");
    await chat.expect("Answer y (run it) or n (do not)");
    chat.send("y");
    await chat.expect("· allowed");
    await chat.expect("    removed-2");
    await chat.expect("agent: Done.");
    await chat.expect("· finished");

    const requests = fx.llm.requests.length;
    chat.send("Now write danger.txt");
    await chat.expect(
      "The agent asks to run:\n  ✎ create /workspace/project/danger.txt\n    @@ -0,0 +1,1 @@\n    +boom",
    );
    await chat.expect("Allow it?");
    chat.send("n not that file");
    await chat.expect("✗ rejected: not that file");
    chat.send("/exit");
    expect(await chat.exitCode()).toBe(0);
    // Rejected: the file was not written and the model was not asked again.
    expect(fx.llm.requests.length).toBe(requests + 1);
    const id = /Conversation ([0-9a-f]{32}) is ready/.exec(chat.stdout)?.[1] ?? "";
    const [c] = (await call(fx.t.url, key, "GET", `/api/v1/app-conversations?ids=${id}`)).body as {
      session_api_key: string;
    }[];
    const ls = await call(fx.t.url, c?.session_api_key, "POST", "/api/bash/execute_bash_command", {
      command: "ls danger.txt",
    });
    expect((ls.body as { exit_code: number }).exit_code).not.toBe(0);
  }, 60_000);

  it("a model that cannot be reached is said plainly, with what to check in the settings", async () => {
    const key = await userWith("unreachable-model-user", {
      llm_base_url: `http://127.0.0.1:${await closedPort()}/v1`,
    });
    const chat = new Chat(["-m", "Hello?"], key);
    await chat.expect("you: Hello?");
    // The model client retries a refused connection a few times (about 8 s) before the agent gives up.
    await chat.expect("✗ The model could not be reached.", 60_000);
    await chat.expect(/Check llm_base_url .* and llm_api_key in your settings/);
    await chat.expect("· stopped on an error (send a message to try again)");
    chat.proc.stdin.end();
    expect(await chat.exitCode()).toBe(0);
  }, 90_000);

  it("a start that fails says why and what to do (exit 1); usage errors exit 2", async () => {
    const key = await fx.t.keyFor("no-model-user");
    const chat = new Chat([], key);
    expect(await chat.exitCode()).toBe(1);
    expect(chat.stdout).toContain("The conversation could not start: No LLM model is set");
    expect(chat.stdout).toContain("npm run cli -- settings set llm_model=");

    const unknown = new Chat(["0123456789abcdef0123456789abcdef"]);
    expect(await unknown.exitCode()).toBe(1);
    expect(unknown.stdout).toContain("there is no conversation 0123456789abcdef0123456789abcdef");

    const twoIds = new Chat(["a", "b"]);
    expect(await twoIds.exitCode()).toBe(2);
    expect(twoIds.stderr).toContain("chat takes one conversation id at most");
  }, 30_000);
});
