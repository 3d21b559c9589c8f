/**
 * The sandbox of a conversation start: getting one RUNNING for it (a new one under an id saved first, the one the
 * request or its parent names, or, resumed, the one this start created), guarding it while the start uses it, and
 * pausing the one it created when the start fails. One job of a start (see conversation-start.ts).
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { ACTIVE_STATUSES } from "../../ports/sandbox-repository.ts";
import type { SlotWait } from "../sandboxes/sandbox-lifecycle.ts";
import type { LiveSandbox } from "../sandboxes/sandbox-state.ts";
import type { StartSandboxes } from "./ports.ts";
import { LeaseLostError, StartError, type StartProgress } from "./start-progress.ts";

export interface StartSandboxOptions {
  sandboxes: StartSandboxes;
  progress: StartProgress;
  /** How long the start waits for a sandbox to start, or for a running slot. */
  sandboxStartMs: number;
  /** The start's own signal (a shutdown hands it over). */
  signal: AbortSignal;
  log: (msg: string, data?: Record<string, unknown>) => void;
}

/** The sandbox one start runs in. */
export class StartSandbox {
  readonly #o: StartSandboxOptions;

  constructor(options: StartSandboxOptions) {
    this.#o = options;
  }

  /** A RUNNING sandbox: a new one, or the given one (resumed when PAUSED, waited for when STARTING). */
  async acquire(sandboxId: string | null): Promise<LiveSandbox> {
    const { progress, signal, sandboxStartMs } = this.#o;
    const owner = progress.task.ownerId;
    const s = this.#o.sandboxes;
    let live: LiveSandbox;
    // When every running slot of the user is held by a starting sandbox, the start waits for one (and says so).
    const wait: SlotWait = {
      onWait: (detail) => progress.save({ status: "WAITING_FOR_SANDBOX", detail }),
      waitMs: sandboxStartMs,
      signal,
    };
    const planned = sandboxId === null ? (progress.plan.sandboxId ?? null) : null;
    const existing = planned === null ? null : await s.get(owner, planned);
    // The task names the planned sandbox once it was created: gone since means deleted, not never started.
    if (planned !== null && existing === null && progress.task.sandboxId === planned)
      throw new StartError(`Sandbox ${planned} was deleted while the conversation was starting`);
    if (sandboxId === null && existing === null) {
      // A new sandbox, under an id saved first: a resumed start finds it rather than starting a second one.
      // A warm sandbox when the runtime has one: its id is taken (for good) here, and saved as the plan's.
      const id = planned ?? (await s.newSandboxId(owner));
      if (planned === null) await progress.savePlan({ sandboxId: id });
      try {
        live = await s.start(owner, undefined, id, wait);
      } catch (err) {
        if (err instanceof LeaseLostError || signal.aborted) throw err;
        throw new StartError(
          `Could not start a sandbox: ${err instanceof Error ? err.message : String(err)}`,
        );
      }
      await progress.save({ status: "WAITING_FOR_SANDBOX", sandboxId: live.record.id, detail: null });
    } else if (existing !== null) {
      // Resumed: the sandbox this start created. Started again when the server starting it died before it ran.
      await progress.save({ status: "WAITING_FOR_SANDBOX", sandboxId: existing.record.id });
      live =
        existing.status === "STARTING" && existing.handle === null
          ? await s.restartUnstarted(owner, existing.record.id)
          : existing.status === "PAUSED"
            ? await this.#resume(existing.record.id, wait)
            : existing;
    } else {
      const given = sandboxId ?? "";
      const found = await s.get(owner, given);
      if (found === null) throw new StartError(`Sandbox ${given} not found`);
      await progress.save({ status: "WAITING_FOR_SANDBOX", sandboxId: given });
      // Paused, or in error because its agent ended: resumed (the agent then starts again on its workspace).
      live = found.status === "PAUSED" || found.status === "ERROR" ? await this.#resume(given, wait) : found;
    }
    const id = live.record.id;
    // Also a sandbox holding its slot whose agent does not answer yet (a loaded machine): wait for it.
    if (
      live.status === "STARTING" ||
      (live.status === "ERROR" && ACTIVE_STATUSES.includes(live.record.status))
    ) {
      const settled = await abortable(s.waitUntilSettled(owner, id, sandboxStartMs), signal);
      if (settled === null)
        throw new StartError(`Sandbox ${id} was deleted while the conversation was starting`);
      live = settled;
      if (live.status === "STARTING")
        throw new StartError(`Sandbox ${id} did not start within ${Math.round(sandboxStartMs / 1000)} s`);
    }
    signal.throwIfAborted();
    if (live.status !== "RUNNING")
      throw new StartError(
        sandboxId === null
          ? `Sandbox ${id} failed to start (status ${live.status}${live.reason ? `: ${live.reason}` : ""}); see the server log`
          : `Sandbox ${id} cannot be used: its status is ${live.status}`,
      );
    return live;
  }

  /**
   * Checks the sandbox's recorded status every second while the start uses it: once it no longer holds its
   * running slot (another start or resume of the user evicted it, or it was deleted), `lost` is aborted with the
   * reason, so that the agent calls in flight stop at once instead of waiting for a paused agent.
   */
  guard(id: string, lost: AbortController): NodeJS.Timeout {
    const timer = setInterval(() => {
      void this.#o.sandboxes.recordedStatus(this.#o.progress.task.ownerId, id).then(
        (status) => {
          if (status !== null && ACTIVE_STATUSES.includes(status)) return;
          lost.abort(
            new StartError(
              status === "PAUSED"
                ? `Sandbox ${id} was paused while the conversation was starting: another start or resume took its running slot (the running limit was reached). Resume the sandbox and start the conversation again`
                : `Sandbox ${id} was ${status === null || status === "MISSING" ? "deleted" : `set ${status}`} while the conversation was starting`,
            ),
          );
        },
        () => undefined,
      );
    }, 1000);
    timer.unref();
    return timer;
  }

  /**
   * A failed start pauses the sandbox it created (before its ERROR is saved, so whoever sees the ERROR sees the
   * sandbox paused): it stops holding one of the user's running slots, and its workspace stays for a look (resume
   * it) until the user deletes it. A sandbox the request named, or a parent conversation's, is left as it is.
   */
  async pauseCreated(): Promise<void> {
    const { progress } = this.#o;
    const id = progress.plan.sandboxId;
    if (id === undefined || progress.task.sandboxId !== id) return;
    try {
      await this.#o.sandboxes.pause(progress.task.ownerId, id);
    } catch (err) {
      // Deleted meanwhile, or storage down: the sweep settles a sandbox whose process is gone.
      this.#o.log("could not pause the sandbox of a failed start", {
        taskId: progress.task.id,
        sandboxId: id,
        error: String(err),
      });
    }
  }

  /** Resumes the sandbox; a refusal (FAILED_PRECONDITION: it cannot be started again) fails the start with why. */
  async #resume(id: string, wait: SlotWait): Promise<LiveSandbox> {
    try {
      return await this.#o.sandboxes.resume(this.#o.progress.task.ownerId, id, wait);
    } catch (err) {
      if (err instanceof LeaseLostError || this.#o.signal.aborted) throw err;
      if (err instanceof ConnectError && err.code === Code.FailedPrecondition)
        throw new StartError(`Sandbox ${id} cannot be used: ${err.rawMessage}`);
      throw err;
    }
  }
}

/** Resolves like `p`, or rejects as soon as `signal` aborts. */
function abortable<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(e);
      },
    );
  });
}
