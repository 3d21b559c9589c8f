/**
 * A conversation held as the OpenHands UI holds it, on the embedded default (process runtime, built-in agent), with
 * a scripted OpenAI-compatible model set in the user's LLM settings: the start through the service, the agent's
 * events on its websocket, the same events in the service's event store (through the webhooks), the status in the
 * conversation list, and the file the agent wrote.
 */
import { describe, expect, it } from "vitest";
import WebSocket from "ws";
import { useBuiltinAgentApp } from "../helpers/builtin-agent-app.ts";
import { uiAgentBase, uiSocketUrl } from "../helpers/ui-urls.ts";
import { until } from "../helpers/until.ts";

type Ev = { kind: string; id: string; key?: string; value?: unknown; [k: string]: unknown };

const fx = useBuiltinAgentApp("builtin-agent-e2e-", "sk-test-key");
const { api } = fx;

describe("a conversation with the built-in agent through the service", () => {
  it("runs the user's first message with their model; the websocket and the service's event store agree", async () => {
    fx.llm.script(
      {
        content: "Writing it.",
        toolCalls: [{ name: "terminal", arguments: { command: "echo 42 > answer.txt" } }],
      },
      { content: "The answer is in answer.txt." },
    );
    const task = await fx.startSettled({
      initial_message: { role: "user", content: [{ type: "text", text: "Write 42 to answer.txt" }] },
    });
    expect(task.detail ?? null).toBeNull();
    const id = task.app_conversation_id ?? "";
    const [app] = (await api("GET", `/api/v1/app-conversations?ids=${id}`)).body as {
      conversation_url: string;
      session_api_key: string;
    }[];
    // The agent is reached through the service's own origin: the URL is relative, as the UI resolves it.
    expect(app?.conversation_url).toBe(`/api/conversations/${id}`);

    // The UI's websocket (conversation-websocket-context.tsx): resend_all and the key in the query.
    const events: Ev[] = [];
    const ws = new WebSocket(
      `${uiSocketUrl(id, app?.conversation_url, fx.t.url)}?resend_all=true&session_api_key=${app?.session_api_key}`,
    );
    ws.on("message", (d) => events.push(JSON.parse(d.toString()) as Ev));
    await new Promise<void>((r, j) => ws.once("open", () => r()).once("error", j));
    await until(
      () => events,
      (es) => es.some((e) => e.key === "execution_status" && e.value === "finished"),
    );
    ws.close();
    const shown = events.slice(1); // after the full_state snapshot
    expect(events[0]).toMatchObject({ kind: "ConversationStateUpdateEvent", key: "full_state" });
    expect(shown.map((e) => (e.key === "execution_status" ? `state:${String(e.value)}` : e.kind))).toEqual([
      "MessageEvent",
      "state:idle",
      "state:running",
      "ActionEvent",
      "ObservationEvent",
      "MessageEvent",
      "state:finished",
    ]);
    expect(fx.llm.requests.at(-1)?.authorization).toBe("Bearer sk-test-key");
    expect(fx.llm.requests.at(-1)?.body.model).toBe("fake-model");

    // The service's event store (webhooks) holds the same events in the same order.
    const stored = await until(
      async () =>
        (
          (await api("GET", `/api/v1/events/search?conversation_id__eq=${id}&limit=100`)).body as {
            items: Ev[];
          }
        ).items,
      (items) => items.length >= shown.length,
    );
    expect(stored.map((e) => e.id)).toEqual(shown.map((e) => e.id));
    expect((await api("GET", `/api/v1/events/count?conversation_id__eq=${id}`)).body).toBe(shown.length);

    // The conversation list shows the agent's status.
    const listed = await until(
      async () =>
        (
          (await api("GET", `/api/v1/app-conversations?ids=${id}`)).body as {
            execution_status: string | null;
          }[]
        )[0],
      (c) => c?.execution_status === "finished",
    );
    expect(listed?.execution_status).toBe("finished");

    // The file is in the sandbox's workspace.
    const cat = await fetch(
      new URL("/api/bash/execute_bash_command", uiAgentBase(app?.conversation_url, fx.t.url)),
      {
        method: "POST",
        headers: { "x-session-api-key": app?.session_api_key ?? "" },
        body: JSON.stringify({ command: "cat answer.txt" }),
      },
    );
    expect(await cat.json()).toMatchObject({ exit_code: 0, stdout: "42\n" });
  }, 60_000);
});
