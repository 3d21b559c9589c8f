/**
 * The terminal chat's renderer (src/cli/chat-render.ts) on events the built-in agent sent (recorded in
 * fixtures/chat-events.json) and on events shaped as the OpenHands agent-server's SDK defines them; its diff
 * (chat-diff.ts), output cutting and text cleaning (chat-text.ts), status words and model failures
 * (chat-vocabulary.ts); and the start-task words and hints of src/cli/chat-start.ts.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { diffLines, unifiedDiff } from "../../src/cli/chat-diff.ts";
import { ChatRenderer } from "../../src/cli/chat-render.ts";
import { START_STEPS, startHint } from "../../src/cli/chat-start.ts";
import { cleanText, cutMiddle } from "../../src/cli/chat-text.ts";
import { explainError, statusWords } from "../../src/cli/chat-vocabulary.ts";

const recorded = JSON.parse(
  readFileSync(join(import.meta.dirname, "fixtures", "chat-events.json"), "utf8"),
) as Record<string, unknown[]>;

/** Renders events as the chat shows them (no colours), one string. */
function transcript(events: unknown[], renderer = new ChatRenderer()): string {
  return events
    .map((e) => renderer.render(e))
    .filter((t) => t !== null)
    .join("\n");
}

describe("the chat's rendering of recorded built-in agent events", () => {
  it("a turn with every tool: messages, task list, file edits as diffs, a command's output cut, errors, status", () => {
    expect(transcript(recorded.tools ?? [])).toBe(
      [
        "you: Write hello.py and run it",
        "· running",
        "agent: Let me plan.",
        "  ☰ tasks:",
        "    ▸ Write the script",
        "    ○ Run it",
        "    ✓ Look around",
        "  ✎ create /workspace/project/hello.py",
        "    @@ -0,0 +1,2 @@",
        "    +print('hello')",
        "    +print('world')",
        "  ✎ edit /workspace/project/hello.py",
        "    @@ -1,2 +1,3 @@",
        "     print('hello')",
        "    +print('there')",
        "     print('world')",
        "agent: Running it.",
        "  $ python3 hello.py; seq 1 40; ls /nonexistent",
        "    hello",
        "    there",
        "    world",
        "    1",
        "    2",
        "    3",
        "    … 25 more lines …",
        ...Array.from({ length: 12 }, (_, i) => `    ${29 + i}`),
        "    ls: cannot access '/nonexistent': No such file or directory",
        "    ✗ exit code 2",
        "  (thinking) It works.",
        '  ⚙ browser {"url":"x"}',
        "  ✗ browser: Tool 'browser' not found. Available: terminal, file_editor, task_tracker, think, finish.",
        "  ✎ read /workspace/project/hello.py",
        "agent: Done: hello.py prints three lines.",
        "· finished",
        "you: Thanks!",
        "· running",
        "agent: You are welcome.",
        "· finished",
      ].join("\n"),
    );
  });

  it("confirmation: the pending action is known while the agent waits, and the result repeats its command", () => {
    const events = recorded.confirmation ?? [];
    const r = new ChatRenderer();
    const waitingAt: number[] = [];
    const shown: string[] = [];
    events.forEach((e, i) => {
      const t = r.render(e);
      if (t !== null) shown.push(t);
      if (i === 0) expect(r.confirmationMode).toBe(true); // full_state: AlwaysConfirm
      if (t === "· waiting for your confirmation") {
        waitingAt.push(i);
        expect(r.pendingActions()).toHaveLength(1);
      }
    });
    expect(waitingAt).toHaveLength(2);
    expect(r.pendingActions()).toEqual([]);
    // What the chat asks about, at each wait.
    const at = (n: number) => {
      const replay = new ChatRenderer();
      for (const e of events.slice(0, n + 1)) replay.render(e);
      return replay.describePending();
    };
    expect(at(waitingAt[0] ?? 0)).toBe("  $ rm -rf build");
    expect(at(waitingAt[1] ?? 0)).toBe("  $ rm -rf /");
    expect(shown.join("\n")).toContain(
      [
        "· waiting for your confirmation",
        "· running",
        "  $ rm -rf build", // the result follows other lines: its command is shown again
        "    (no output)",
        "agent: Deleted.",
      ].join("\n"),
    );
    expect(shown.at(-1)).toBe("  ✗ rejected: Too dangerous");
    expect(r.status).toBe("idle");
  });

  it("a model that cannot be reached: said plainly, with the settings to check", () => {
    const text = transcript(recorded.unreachable ?? []);
    expect(text).toBe(
      [
        "you: Hello?",
        "· running",
        "✗ The model could not be reached.",
        "  APIConnectionError: LLM request failed: Connection error.. The model endpoint could not be reached; check the base URL.",
        "  Check llm_base_url (the model server's address, reachable from the sandbox) and llm_api_key in your settings (npm run cli -- settings get, then settings set KEY=VALUE).",
        "· stopped on an error (send a message to try again)",
      ].join("\n"),
    );
  });

  it("a pause during a model call: paused, then the kept answer", () => {
    expect(transcript(recorded.pause ?? [])).toBe(
      [
        "you: Take your time",
        "· running",
        "· paused (send a message or /resume to go on)",
        "agent: Slow answer",
        "· finished",
      ].join("\n"),
    );
  });

  it("the chat's own message is not shown twice; colours only when asked", () => {
    const r = new ChatRenderer();
    r.expectEcho("Thanks!");
    expect(transcript(recorded.tools ?? [], r)).not.toContain("you: Thanks!");
    expect(transcript(recorded.tools ?? [], r)).toContain("you: Write hello.py and run it");
    const colored = transcript(recorded.tools ?? [], new ChatRenderer({ color: true }));
    expect(colored).toContain("\u001b[32m    +print('there')\u001b[39m");
    expect(colored).toContain("\u001b[31m    ✗ exit code 2\u001b[39m");
    expect(transcript(recorded.tools ?? [])).not.toContain("\u001b[");
  });
});

describe("events as the OpenHands agent-server sends them", () => {
  const base = { timestamp: "2026-01-01T00:00:00.000000" };
  it("older tool names, the system prompt, MCP tools, unknown kinds, other errors", () => {
    const r = new ChatRenderer();
    const events = [
      {
        ...base,
        kind: "SystemPromptEvent",
        id: "s",
        source: "agent",
        system_prompt: { type: "text", text: "…" },
      },
      {
        ...base,
        kind: "ConversationStateUpdateEvent",
        id: "f",
        source: "environment",
        key: "full_state",
        value: { execution_status: "idle", confirmation_policy: { kind: "ConfirmRisky" } },
      },
      {
        ...base,
        kind: "ActionEvent",
        id: "a1",
        source: "agent",
        thought: [{ type: "text", text: "Checking." }],
        action: { kind: "ExecuteBashAction", command: "printf '\\033[31mred\\033[0m\\n'", is_input: false },
        tool_name: "execute_bash",
        tool_call_id: "c1",
        tool_call: { id: "c1", name: "execute_bash", arguments: "{}", origin: "completion" },
        llm_response_id: "r1",
        security_risk: "LOW",
      },
      { ...base, kind: "TokenEvent", id: "t", source: "agent", prompt_token_ids: [], response_token_ids: [] },
      {
        ...base,
        kind: "ObservationEvent",
        id: "o1",
        source: "environment",
        tool_name: "execute_bash",
        tool_call_id: "c1",
        action_id: "a1",
        observation: {
          kind: "ExecuteBashObservation",
          content: [{ type: "text", text: "\u001b[31mred\u001b[0m\r\n" }],
          exit_code: 0,
          metadata: { exit_code: 0, suffix: "" },
        },
      },
      {
        ...base,
        kind: "ActionEvent",
        id: "a2",
        source: "agent",
        thought: [],
        action: { kind: "MCPToolAction", data: { query: "weather" } },
        tool_name: "fetch_weather",
        tool_call_id: "c2",
        tool_call: {
          id: "c2",
          name: "fetch_weather",
          arguments: '{"query":"weather"}',
          origin: "completion",
        },
        llm_response_id: "r2",
        security_risk: "HIGH",
      },
    ];
    expect(transcript(events, r)).toBe(
      [
        "agent: Checking.",
        "  $ printf '\\033[31mred\\033[0m\\n'",
        "    red",
        '  ⚙ fetch_weather {"query":"weather"}',
      ].join("\n"),
    );
    expect(r.confirmationMode).toBe(true);
    expect(r.describePending()).toBe('  ⚙ fetch_weather {"query":"weather"}\n    (security risk: HIGH)');
    expect(
      r.render({
        ...base,
        kind: "ObservationEvent",
        id: "o2",
        source: "environment",
        tool_name: "fetch_weather",
        tool_call_id: "c2",
        action_id: "a2",
        observation: {
          kind: "MCPToolObservation",
          content: [{ type: "text", text: "sunny" }],
          is_error: false,
        },
      }),
    ).toBe("    sunny");
    expect(r.pendingActions()).toEqual([]);
    expect(r.render({ ...base, kind: "BrandNewEvent", id: "n", source: "agent" })).toBe("· BrandNewEvent");
    expect(r.render({ kind: 42 })).toBe("· (an event without a kind)");
    expect(r.render("text")).toBe("· (an event that is not an object)");
    expect(r.render({ ...base, kind: "StreamingDeltaEvent", id: "d", source: "agent" })).toBeNull();
    expect(
      r.render({
        ...base,
        kind: "ConversationErrorEvent",
        id: "e",
        source: "environment",
        code: "AuthenticationError",
        detail: "litellm.AuthenticationError: Incorrect API key provided",
      }),
    ).toContain("✗ The model provider refused the API key.");
    expect(
      r.render({
        ...base,
        kind: "ConversationErrorEvent",
        id: "e2",
        source: "environment",
        code: "MaxIterationsReached",
        detail: "The agent stopped after 3 iterations.",
      }),
    ).toBe("✗ error (MaxIterationsReached): The agent stopped after 3 iterations.");
    // Other state keys (stats, the agent) say nothing; only a change of the execution status is a line.
    expect(
      r.render({ ...base, kind: "ConversationStateUpdateEvent", id: "k", key: "stats", value: {} }),
    ).toBeNull();
    expect(
      r.render({
        ...base,
        kind: "ConversationStateUpdateEvent",
        id: "k2",
        key: "execution_status",
        value: "idle",
      }),
    ).toBeNull();
    expect(
      r.render({
        ...base,
        kind: "ConversationStateUpdateEvent",
        id: "k3",
        key: "execution_status",
        value: "stuck",
      }),
    ).toBe("· stuck (send a message to steer the agent)");
  });

  it("a file edit whose contents were left out (too large) is shown from the action's strings", () => {
    const r = new ChatRenderer();
    r.render({
      ...base,
      kind: "ActionEvent",
      id: "a",
      source: "agent",
      action: {
        kind: "FileEditorAction",
        command: "str_replace",
        path: "/w/big.txt",
        old_str: "a",
        new_str: "b",
      },
      tool_name: "file_editor",
      tool_call_id: "c",
    });
    expect(
      r.render({
        ...base,
        kind: "ObservationEvent",
        id: "o",
        tool_name: "file_editor",
        tool_call_id: "c",
        action_id: "a",
        observation: {
          kind: "FileEditorObservation",
          command: "str_replace",
          path: "/w/big.txt",
          old_content: null,
          new_content: null,
          content: [{ type: "text", text: "edited" }],
        },
      }),
    ).toBe("    @@ -1,1 +1,1 @@\n    -a\n    +b");
  });
});

describe("diffs, long output and text from the sandbox", () => {
  it("unified diff hunks with 3 lines of context, merged when close, split when far apart", () => {
    expect(unifiedDiff("a\nb\n", "a\nb\n")).toEqual([]);
    const old = Array.from({ length: 20 }, (_, i) => `line ${i + 1}`);
    const changed = [...old];
    changed[1] = "LINE 2";
    changed.splice(15, 1);
    expect(unifiedDiff(`${old.join("\n")}\n`, `${changed.join("\n")}\n`)).toEqual([
      "@@ -1,5 +1,5 @@",
      " line 1",
      "-line 2",
      "+LINE 2",
      " line 3",
      " line 4",
      " line 5",
      "@@ -13,7 +13,6 @@",
      " line 13",
      " line 14",
      " line 15",
      "-line 16",
      " line 17",
      " line 18",
      " line 19",
    ]);
    expect(unifiedDiff("", "new\n")).toEqual(["@@ -0,0 +1,1 @@", "+new"]);
    expect(unifiedDiff("gone\n", "")).toEqual(["@@ -1,1 +0,0 @@", "-gone"]);
    expect(diffLines(["a", "b", "c"], ["a", "x", "c"]).map((d) => `${d.op}${d.line}`)).toEqual([
      " a",
      "-b",
      "+x",
      " c",
    ]);
  });

  it("long output keeps its head and tail; long lines and diffs are cut", () => {
    const lines = Array.from({ length: 100 }, (_, i) => String(i + 1));
    const cut = cutMiddle(lines, 20);
    expect(cut.head).toEqual(["1", "2", "3", "4", "5", "6"]);
    expect(cut.tail).toEqual(lines.slice(87));
    expect(cut.hidden).toBe(81);
    const r = new ChatRenderer({ maxOutputLines: 5, maxLineLength: 10, maxDiffLines: 3 });
    r.render({
      kind: "ActionEvent",
      id: "a",
      action: { kind: "TerminalAction", command: "x" },
      tool_name: "terminal",
    });
    const shown = r.render({
      kind: "ObservationEvent",
      id: "o",
      tool_name: "terminal",
      action_id: "a",
      observation: {
        kind: "TerminalObservation",
        content: [{ type: "text", text: `${"y".repeat(30)}\n${lines.join("\n")}` }],
      },
    });
    expect(shown).toBe(["    yyyyyyyyy…", "    … 97 more lines …", "    98", "    99", "    100"].join("\n"));
    r.render({
      kind: "ActionEvent",
      id: "b",
      action: { kind: "FileEditorAction", command: "create", path: "/f" },
      tool_name: "file_editor",
    });
    expect(
      r.render({
        kind: "ObservationEvent",
        id: "p",
        tool_name: "file_editor",
        action_id: "b",
        observation: {
          kind: "FileEditorObservation",
          command: "create",
          path: "/f",
          new_content: "1\n2\n3\n4\n",
        },
      }),
    ).toBe(["    @@ -0,0 +1,4 @@", "    +1", "    +2", "    … 2 more diff lines …"].join("\n"));
  });

  it("escape sequences and control characters from the sandbox are not passed to the terminal", () => {
    expect(cleanText("\u001b[31mred\u001b[0m and \u001b]0;window title\u0007plain\u0008")).toBe(
      "red and plain",
    );
    expect(cleanText("10%\r50%\r100%\r\ndone\r\n")).toBe("100%\ndone\n");
    expect(cleanText("a\tb\u0000c")).toBe("a  bc");
  });

  it("model errors are explained by kind; other errors are not", () => {
    expect(explainError("APIConnectionError", "Connection error.")?.hint).toContain("llm_base_url");
    expect(explainError("APIConnectionTimeoutError", "Request timed out.")?.headline).toBe(
      "The model could not be reached.",
    );
    expect(explainError("AuthenticationError", "LLM request failed with status 401")?.hint).toContain(
      "llm_api_key",
    );
    expect(explainError("RateLimitError", "LLM request failed with status 429")?.headline).toContain(
      "rate-limiting",
    );
    expect(explainError("LLMConfigurationError", "No LLM model is set")?.hint).toContain("llm_model");
    expect(explainError("AgentRestarted", "The agent was restarted")).toBeNull();
  });

  it("statuses and start steps in words, and hints for a failed start", () => {
    expect(statusWords("idle")).toBeNull();
    expect(statusWords("waiting_for_confirmation")).toBe("waiting for your confirmation");
    expect(START_STEPS.WAITING_FOR_SANDBOX).toBe("waiting for a sandbox");
    expect(startHint("No LLM model is set: choose one in the settings (llm_model, …)")).toContain(
      "settings set llm_model=",
    );
    expect(startHint("Sandbox limit reached: 20")).toContain("sandboxes delete");
    expect(startHint("git clone failed: repository not found")).toContain("--repo");
    expect(startHint("something else")).toBeNull();
  });
});
