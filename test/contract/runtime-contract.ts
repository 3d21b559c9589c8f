import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { probeAlive } from "../../src/adapters/runtimes/agent-health.ts";
import type {
  RuntimeHandle,
  RuntimeSpec,
  RuntimeState,
  SandboxRuntime,
} from "../../src/ports/sandbox-runtime.ts";

/** Specs the suite needs from each runtime. */
export type ContractSpecKind =
  /** Runs the built-in agent; `initialEnv` must contain CONTRACT_FOO=bar. */
  | "agent"
  /** Exits with status 1 shortly (~0.2 s) after start. */
  | "crash";

/** Runtime-specific operations and expectations the shared suite cannot express itself. */
export interface RuntimeContractHooks {
  /** Makes the sandbox vanish behind the runtime's back (SIGKILL the process, force-remove the container). */
  destroyBehindBack(handle: RuntimeHandle): Promise<void>;
  /** Expected state after destroyBehindBack, seen by the instance that started it and by a fresh instance. */
  afterDestroy: { sameInstance: RuntimeState; freshInstance: RuntimeState };
  /** Descriptions of anything left of the sandbox (process, container, workspace, volume); empty when clean. */
  leftovers(handle: RuntimeHandle): Promise<string[]>;
  /** Absolute workspace path as seen by the agent (commands run there by default). */
  workspacePath(handle: RuntimeHandle): string;
  /** Removes everything the suite's runtimes created (afterAll). */
  cleanup(): Promise<void>;
  /** Timeout for waitHealthy (default 15 s). */
  healthyTimeoutMs?: number;
}

interface CommandResult {
  exit_code: number;
  stdout: string;
  stderr: string;
}

const post = async (
  handle: RuntimeHandle,
  path: string,
  body: unknown,
  key: string | null,
): Promise<{ status: number; json: unknown }> => {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (key !== null) headers["x-session-api-key"] = key;
  const res = await fetch(new URL(path, handle.agentUrl), {
    method: "POST",
    headers,
    body: JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
};

/**
 * The behaviour every {@link SandboxRuntime} must show: lifecycle, the built-in agent's endpoints, pause/resume,
 * removal without leftovers, crashes, and reconciliation by a fresh runtime instance from stored handle data.
 * `makeRuntime` is called once for the suite and again for each "fresh instance" (a server restart).
 */
export function describeRuntimeContract(
  name: string,
  makeRuntime: () => SandboxRuntime,
  makeSpec: (kind: ContractSpecKind) => RuntimeSpec,
  hooks: RuntimeContractHooks,
): void {
  describe(`sandbox runtime contract: ${name}`, () => {
    const healthyTimeout = hooks.healthyTimeoutMs ?? 15_000;
    let runtime: SandboxRuntime;
    const fresh: SandboxRuntime[] = [];
    const newId = (): string => `ct${randomBytes(6).toString("hex")}`;
    const newKey = (): string => randomBytes(16).toString("base64url");
    /** A handle as it comes back from storage: JSON round-tripped. */
    const stored = (handle: RuntimeHandle): RuntimeHandle =>
      JSON.parse(JSON.stringify(handle)) as RuntimeHandle;
    const freshRuntime = (): SandboxRuntime => {
      const r = makeRuntime();
      fresh.push(r);
      return r;
    };

    const startHealthy = async (
      spec = makeSpec("agent"),
    ): Promise<{ handle: RuntimeHandle; key: string }> => {
      const key = newKey();
      const handle = await runtime.start({ sandboxId: newId(), spec, sessionApiKey: key });
      expect(await runtime.waitHealthy(handle, healthyTimeout)).toBe(true);
      return { handle, key };
    };

    beforeAll(() => {
      runtime = makeRuntime();
    });
    afterAll(async () => {
      await hooks.cleanup();
      for (const r of [runtime, ...fresh]) await r?.close();
    });

    describe("a healthy sandbox and its agent", () => {
      let handle: RuntimeHandle;
      let key: string;
      const exec = async (body: Record<string, unknown>): Promise<CommandResult> => {
        const res = await post(handle, "/api/bash/execute_bash_command", body, key);
        expect(res.status).toBe(200);
        return res.json as CommandResult;
      };

      beforeAll(async () => {
        ({ handle, key } = await startHealthy());
      });
      afterAll(async () => {
        await runtime.remove(handle);
      });

      it("starts, reports running, and keeps JSON-only handle data with the agent's URL", async () => {
        expect(await runtime.inspect(handle)).toBe("running");
        expect(stored(handle)).toEqual(handle);
        const url = new URL(handle.agentUrl);
        const gateway = handle.hostGateway?.split(".").map(Number);
        if (gateway?.length === 4)
          // In a network of its own: the sandbox's address, its gateway's neighbour on their /30.
          expect(url.hostname).toBe([gateway[0], gateway[1], gateway[2], (gateway[3] ?? 0) + 1].join("."));
        else expect(url.hostname).toBe("127.0.0.1");
        expect(Number(url.port)).toBe(handle.port);
      });

      it("answers /alive and /health without a key", async () => {
        const alive = await fetch(new URL("/alive", handle.agentUrl));
        expect(alive.status).toBe(200);
        expect(await alive.json()).toEqual({ status: "ok" });
        const health = await fetch(new URL("/health", handle.agentUrl));
        expect(await health.json()).toBe("OK");
      });

      it("requires the session key for everything else", async () => {
        const none = await post(handle, "/api/bash/execute_bash_command", { command: "true" }, null);
        expect(none).toEqual({ status: 401, json: { detail: "Unauthorized" } });
        const wrong = await post(handle, "/api/bash/execute_bash_command", { command: "true" }, `${key}x`);
        expect(wrong.status).toBe(401);
        const conv = await fetch(new URL("/api/conversations?ids=a", handle.agentUrl));
        expect(conv.status).toBe(401);
      });

      it("runs commands in the workspace with the spec's environment and keeps files between commands", async () => {
        const pwd = await exec({ command: "pwd; echo $CONTRACT_FOO; echo oops >&2; exit 3" });
        expect(pwd).toEqual({
          exit_code: 3,
          stdout: `${hooks.workspacePath(handle)}\nbar\n`,
          stderr: "oops\n",
        });
        expect((await exec({ command: "mkdir -p sub && echo hello > sub/f.txt" })).exit_code).toBe(0);
        expect(await exec({ command: "cat f.txt; pwd", cwd: "sub" })).toEqual({
          exit_code: 0,
          stdout: `hello\n${hooks.workspacePath(handle)}/sub\n`,
          stderr: "",
        });
      });

      it("does not hand the session key to commands", async () => {
        const env = await exec({ command: "env" });
        expect(env.stdout).not.toContain(key);
      });

      it("honours the command timeout", async () => {
        const t0 = Date.now();
        const res = await exec({ command: "echo started; sleep 20", timeout: 0.5 });
        expect(Date.now() - t0).toBeLessThan(5000);
        expect(res.exit_code).toBe(-1);
        expect(res.stdout).toBe("started\n");
        expect(res.stderr).toMatch(/timed out/);
      });

      it("caps command output", async () => {
        const res = await exec({ command: "yes | head -c 3000000" });
        expect(res.exit_code).toBe(0);
        expect(res.stdout.length).toBeLessThan(1024 * 1024 + 200);
        expect(res.stdout.length).toBeGreaterThan(1024 * 1024 - 10);
        expect(res.stdout).toMatch(/\[output truncated: \d+ more bytes\]$/);
      });

      it("creates and lists conversations", async () => {
        const created = await post(handle, "/api/conversations", { agent: { kind: "Agent" } }, key);
        expect(created.status).toBe(200);
        const conv = created.json as { id: string; execution_status: string };
        expect(conv.id).toMatch(/^[0-9a-f]{32}$/);
        expect(conv.execution_status).toBe("idle");
        const res = await fetch(
          new URL(`/api/conversations?ids=${conv.id}&ids=${"0".repeat(32)}`, handle.agentUrl),
          {
            headers: { "x-session-api-key": key },
          },
        );
        const list = (await res.json()) as unknown[];
        expect(list).toHaveLength(2);
        expect(list[0]).toMatchObject({ id: conv.id, execution_status: "idle" });
        expect(list[1]).toBeNull();
      });
    });

    describe("pause and resume", () => {
      let handle: RuntimeHandle;
      beforeAll(async () => {
        ({ handle } = await startHealthy());
      });
      afterAll(async () => {
        await runtime.remove(handle);
      });

      it("pauses: the state is paused and the agent does not answer; pausing again is a no-op", async () => {
        await runtime.pause(handle);
        expect(await runtime.inspect(handle)).toBe("paused");
        expect(await probeAlive(handle.agentUrl, 300)).toBe(false);
        await runtime.pause(handle);
        expect(await runtime.inspect(handle)).toBe("paused");
      });

      it("resumes: running again and answering; resuming a running sandbox is a no-op", async () => {
        const resumed = await runtime.resume(handle);
        expect(await runtime.waitHealthy(resumed, healthyTimeout)).toBe(true);
        expect(await runtime.inspect(resumed)).toBe("running");
        handle = await runtime.resume(resumed);
        expect(await runtime.inspect(handle)).toBe("running");
      });

      it("a fresh runtime instance pauses and resumes it from stored handle data", async () => {
        const other = freshRuntime();
        await other.pause(stored(handle));
        expect(await runtime.inspect(handle)).toBe("paused");
        handle = await other.resume(stored(handle));
        expect(await other.waitHealthy(handle, healthyTimeout)).toBe(true);
        expect(await other.inspect(handle)).toBe("running");
      });
    });

    describe("removal", () => {
      it("removes a running sandbox completely; removing again is a no-op", async () => {
        const { handle } = await startHealthy();
        await runtime.remove(handle);
        expect(await runtime.inspect(handle)).toBe("missing");
        expect(await hooks.leftovers(handle)).toEqual([]);
        expect(await probeAlive(handle.agentUrl, 300)).toBe(false);
        await runtime.remove(handle);
        await expect(runtime.pause(handle)).rejects.toThrow();
        await expect(runtime.resume(handle)).rejects.toThrow();
      });

      it("removes a paused sandbox completely", async () => {
        const { handle } = await startHealthy();
        await runtime.pause(handle);
        await runtime.remove(handle);
        expect(await runtime.inspect(handle)).toBe("missing");
        expect(await hooks.leftovers(handle)).toEqual([]);
      });

      it("removes by sandbox id alone (no handle), running or paused, with a fresh instance; idempotent", async () => {
        const start = async (): Promise<{ id: string; handle: RuntimeHandle }> => {
          const id = newId();
          const handle = await runtime.start({
            sandboxId: id,
            spec: makeSpec("agent"),
            sessionApiKey: newKey(),
          });
          expect(await runtime.waitHealthy(handle, healthyTimeout)).toBe(true);
          return { id, handle };
        };
        const running = await start();
        const paused = await start();
        await runtime.pause(paused.handle);
        const restarted = freshRuntime();
        expect(await restarted.removeBySandboxId(running.id)).toBeGreaterThan(0);
        expect(await restarted.removeBySandboxId(paused.id)).toBeGreaterThan(0);
        for (const s of [running, paused]) {
          expect(await restarted.inspect(stored(s.handle))).toBe("missing");
          expect(await hooks.leftovers(s.handle)).toEqual([]);
        }
        expect(await restarted.removeBySandboxId(running.id)).toBe(0);
        expect(await restarted.removeBySandboxId(newId())).toBe(0);
      });

      it("removes with a fresh runtime instance", async () => {
        const { handle } = await startHealthy();
        await freshRuntime().remove(stored(handle));
        expect(await runtime.inspect(handle)).toBe("missing");
        expect(await hooks.leftovers(handle)).toEqual([]);
      });
    });

    describe("failures", () => {
      it("a sandbox whose command exits with status 1 never becomes healthy and is reported as error", async () => {
        const handle = await runtime.start({
          sandboxId: newId(),
          spec: makeSpec("crash"),
          sessionApiKey: newKey(),
        });
        const t0 = Date.now();
        expect(await runtime.waitHealthy(handle, 10_000)).toBe(false);
        // waitHealthy notices the exit instead of waiting for its full timeout.
        expect(Date.now() - t0).toBeLessThan(5000);
        expect(await runtime.inspect(handle)).toBe("error");
        await runtime.remove(handle);
        expect(await runtime.inspect(handle)).toBe("missing");
        expect(await hooks.leftovers(handle)).toEqual([]);
      });

      it(`a sandbox destroyed behind the runtime's back is ${hooks.afterDestroy.sameInstance}`, async () => {
        const { handle } = await startHealthy();
        await hooks.destroyBehindBack(handle);
        expect(await runtime.inspect(handle)).toBe(hooks.afterDestroy.sameInstance);
        await runtime.remove(handle);
        expect(await runtime.inspect(handle)).toBe("missing");
        expect(await hooks.leftovers(handle)).toEqual([]);
      });

      it("never throws from inspect or remove for handle data it does not understand", async () => {
        const bogus: RuntimeHandle = { data: { nonsense: true }, agentUrl: "http://127.0.0.1:9", port: 9 };
        expect(await runtime.inspect(bogus)).toBe("missing");
        await runtime.remove(bogus);
      });
    });

    describe("reconciliation after a server restart", () => {
      it(`a fresh instance sees a live sandbox as running and a destroyed one as ${hooks.afterDestroy.freshInstance}`, async () => {
        const live = await startHealthy();
        const doomed = await startHealthy();
        await hooks.destroyBehindBack(doomed.handle);
        const restarted = freshRuntime();
        expect(await restarted.inspect(stored(live.handle))).toBe("running");
        expect(await restarted.inspect(stored(doomed.handle))).toBe(hooks.afterDestroy.freshInstance);
        await restarted.remove(stored(live.handle));
        await restarted.remove(stored(doomed.handle));
        expect(await hooks.leftovers(live.handle)).toEqual([]);
        expect(await hooks.leftovers(doomed.handle)).toEqual([]);
      });

      it("a fresh instance sees a paused sandbox as paused", async () => {
        const { handle } = await startHealthy();
        await runtime.pause(handle);
        expect(await freshRuntime().inspect(stored(handle))).toBe("paused");
        await runtime.remove(handle);
      });
    });
  });
}
