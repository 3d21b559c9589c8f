// The Docker runtime's unpause: the states in which the container is already not paused count as done.
import { describe, expect, it } from "vitest";
import { unpause } from "../../src/adapters/runtimes/docker/docker-runtime.ts";

/** An error shaped as docker-modem makes them (statusCode plus "(HTTP code N) …" message). */
const engineError = (statusCode: number, message: string) =>
  Object.assign(new Error(`(HTTP code ${statusCode}) ${message}`), { statusCode });
const failing = (e: unknown) => ({ unpause: () => Promise.reject(e) });

describe("docker unpause", () => {
  it("unpauses, and treats gone (404), conflict (409) and the engine's 500 'is not paused' as done", async () => {
    let calls = 0;
    await unpause({ unpause: async () => void calls++ });
    expect(calls).toBe(1);
    await unpause(failing(engineError(404, "no such container")));
    await unpause(failing(engineError(409, "Container abc is not paused")));
    await unpause(failing(engineError(500, "server error - Container abc is not paused ")));
  });

  it("passes every other failure on", async () => {
    await expect(unpause(failing(engineError(500, "server error - cgroup write failed")))).rejects.toThrow(
      /cgroup/,
    );
    await expect(unpause(failing(engineError(503, "unavailable")))).rejects.toThrow(/unavailable/);
    await expect(unpause(failing(new Error("socket hang up")))).rejects.toThrow(/hang up/);
  });
});
