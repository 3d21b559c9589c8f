import { request } from "node:http";
import { setTimeout as sleep } from "node:timers/promises";

/**
 * One `GET <agentUrl>/alive`: true on a 2xx answer within `timeoutMs`, false on anything else (refused, reset,
 * timeout, other status). A fresh connection each time (no keep-alive): a paused or restarted agent must not be
 * mistaken for a live one through a pooled socket.
 */
export function probeAlive(agentUrl: string, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    let done = false;
    const finish = (ok: boolean): void => {
      if (!done) {
        done = true;
        clearTimeout(timer);
        req.destroy();
        resolve(ok);
      }
    };
    const req = request(new URL("/alive", agentUrl), { method: "GET", agent: false }, (res) => {
      const ok = res.statusCode !== undefined && res.statusCode >= 200 && res.statusCode < 300;
      res.resume();
      res.on("end", () => finish(ok));
      res.on("error", () => finish(false));
    });
    const timer = setTimeout(() => finish(false), timeoutMs);
    req.on("error", () => finish(false));
    req.end();
  });
}

/**
 * Polls {@link probeAlive} every `intervalMs` until it answers (true), `timeoutMs` passes or `gaveUp()` says the
 * sandbox is gone (false).
 */
export async function pollAlive(
  agentUrl: string,
  timeoutMs: number,
  options: { intervalMs: number; gaveUp?: () => boolean | Promise<boolean> },
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const left = deadline - Date.now();
    if (await probeAlive(agentUrl, Math.max(1, Math.min(left, 1000)))) return true;
    if (Date.now() >= deadline || (await options.gaveUp?.())) return false;
    await sleep(Math.min(options.intervalMs, Math.max(0, deadline - Date.now())));
  }
}
