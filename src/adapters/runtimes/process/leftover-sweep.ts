/**
 * The sweep of what servers that died left of their warm agents (see warm-agents.ts): run by whichever server
 * starts next on a workspace root, and then periodically by every server on it (an agent normally exits with its
 * server, when its stdin closes; one that did not would otherwise run until the next server start). One job of the
 * process runtime.
 */
import { sweepWarmAgents } from "./warm-agents.ts";

export interface LeftoverSweepOptions {
  workspaceRoot: string;
  /** Period of the sweep (0: only once, at construction). */
  everyMs: number;
  /** Removes a left warm agent's workspace folder with its processes. */
  removeFolder: (folder: string) => Promise<unknown>;
  log: (msg: string, data?: object) => void;
}

/** Sweeps at construction and then every `everyMs`, one sweep at a time, until {@link close}. */
export class LeftoverSweep {
  readonly #o: LeftoverSweepOptions;
  /** The sweep made at construction: a warm pool fills once it is done. */
  readonly first: Promise<void>;
  readonly #timer: NodeJS.Timeout | null;
  #sweeping: Promise<void> | null = null;

  constructor(options: LeftoverSweepOptions) {
    this.#o = options;
    this.first = this.#sweep();
    this.#timer =
      options.everyMs > 0
        ? setInterval(() => {
            this.#sweeping ??= this.#sweep().finally(() => {
              this.#sweeping = null;
            });
          }, options.everyMs)
        : null;
    this.#timer?.unref();
  }

  /** Stops the periodic sweep; settles once a sweep in progress ended. */
  async close(): Promise<void> {
    if (this.#timer !== null) clearInterval(this.#timer);
    await this.#sweeping;
  }

  #sweep(): Promise<void> {
    const { workspaceRoot, removeFolder, log } = this.#o;
    return sweepWarmAgents(
      workspaceRoot,
      async (folder) => {
        await removeFolder(folder);
      },
      log,
    ).catch((e: unknown) => log("warm agents: sweep failed", { error: String(e) }));
  }
}
