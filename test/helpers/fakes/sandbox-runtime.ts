import type {
  RuntimeHandle,
  RuntimeStartRequest,
  RuntimeState,
  SandboxRuntime,
} from "../../../src/ports/sandbox-runtime.ts";

/**
 * A sandbox runtime that runs nothing: each started sandbox is an entry in a map whose state the test controls.
 * `healthy` decides what waitHealthy answers (a value, or a promise the test resolves later); `failStart` makes the
 * next start reject. Every call is recorded in `calls`.
 */
export class FakeSandboxRuntime implements SandboxRuntime {
  readonly kind = "process" as const;
  readonly states = new Map<string, RuntimeState>();
  readonly calls: string[] = [];
  readonly started: RuntimeStartRequest[] = [];
  healthy: boolean | (() => Promise<boolean>) = true;
  failStart: Error | null = null;
  #port = 40_000;

  async start(request: RuntimeStartRequest): Promise<RuntimeHandle> {
    this.calls.push(`start:${request.sandboxId}`);
    if (this.failStart !== null) throw this.failStart;
    this.started.push(request);
    const port = this.#port++;
    this.states.set(request.sandboxId, "starting");
    return { data: { sandboxId: request.sandboxId }, agentUrl: `http://127.0.0.1:${port}`, port };
  }

  async waitHealthy(handle: RuntimeHandle): Promise<boolean> {
    const id = FakeSandboxRuntime.idOf(handle);
    const ok = typeof this.healthy === "function" ? await this.healthy() : this.healthy;
    if (this.states.get(id) === "starting") this.states.set(id, ok ? "running" : "error");
    return ok;
  }

  async inspect(handle: RuntimeHandle, options?: { probe?: boolean }): Promise<RuntimeState> {
    const state = this.states.get(FakeSandboxRuntime.idOf(handle)) ?? "missing";
    // Without a probe, a live sandbox that does not answer yet is not told from one that does.
    return options?.probe === false && state === "starting" ? "running" : state;
  }

  async pause(handle: RuntimeHandle): Promise<void> {
    const id = FakeSandboxRuntime.idOf(handle);
    this.calls.push(`pause:${id}`);
    if (this.states.has(id)) this.states.set(id, "paused");
  }

  async resume(handle: RuntimeHandle): Promise<RuntimeHandle> {
    const id = FakeSandboxRuntime.idOf(handle);
    this.calls.push(`resume:${id}`);
    if (this.states.has(id)) this.states.set(id, "starting");
    return handle;
  }

  async remove(handle: RuntimeHandle): Promise<void> {
    const id = FakeSandboxRuntime.idOf(handle);
    this.calls.push(`remove:${id}`);
    this.states.delete(id);
  }

  async removeBySandboxId(sandboxId: string): Promise<number> {
    this.calls.push(`removeBySandboxId:${sandboxId}`);
    return this.states.delete(sandboxId) ? 1 : 0;
  }

  async ping(): Promise<void> {}
  async close(): Promise<void> {}

  static idOf(handle: RuntimeHandle): string {
    return String(handle.data.sandboxId);
  }
}
