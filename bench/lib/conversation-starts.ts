// Conversation starts timed through the REST API (the conversations, events and agent-server scenarios).
import { request, sleep } from "./harness.ts";

/** A conversation start's body: no repository, a model (a start needs one; no message is run, so it is never called). */
export const START_BODY = JSON.stringify({ llm_model: "openai/bench" });

/**
 * Starts `n` conversations without repository one after another, each polled to READY: the time of each, start
 * request to READY. The user gets a model first (a start needs one).
 */
export async function timeConversationStarts(
  base: string,
  key: string,
  n: number,
  timeoutMs: number,
): Promise<number[]> {
  const stored = await request(
    base,
    key,
    "POST",
    "/api/settings",
    JSON.stringify({ llm_model: "openai/bench" }),
  );
  if (stored.status !== 200) throw new Error(`storing the model failed: ${stored.status} ${stored.text}`);
  const timings: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const res = await request(base, key, "POST", "/api/v1/app-conversations", START_BODY);
    let task = res.json as { id: string; status: string; detail?: string | null };
    const deadline = Date.now() + timeoutMs;
    while (task.status !== "READY" && task.status !== "ERROR" && Date.now() < deadline) {
      await sleep(2);
      const got = await request(base, key, "GET", `/api/v1/app-conversations/start-tasks?ids=${task.id}`);
      task = (got.json as (typeof task | null)[])[0] ?? task;
    }
    if (task.status !== "READY") throw new Error(`conversation start ended ${task.status}: ${task.detail}`);
    timings.push(performance.now() - t0);
  }
  return timings;
}
