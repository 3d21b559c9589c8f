import { spawn } from "node:child_process";
import { chmodSync, cpSync, existsSync, readdirSync, renameSync } from "node:fs";
import { join } from "node:path";

/** Where the built-in agent's binaries are in PATH for the warm-up run. */
const WARM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

export interface CompileCacheOptions {
  /** The built-in agent's command (the cache is warmed only when it runs on this server's Node). */
  agentCommand: readonly string[];
  /** The server's uid (node names the cache subfolder after the uid that wrote it). */
  ownUid: number;
  log: (msg: string, data?: Record<string, unknown>) => void;
}

/**
 * Node's compile cache of the built-in agent (NODE_COMPILE_CACHE), filled once by the server and shared read-only
 * with isolated sandboxes, so that an agent's start skips compiling its modules.
 */
export class CompileCache {
  readonly #o: CompileCacheOptions;
  #warming: Promise<void> | null = null;
  /** The cache's subfolder written by the warm-up (node names it `<version and flags>-<uid>`). */
  #warmed: string | null = null;

  constructor(options: CompileCacheOptions) {
    this.#o = options;
  }

  /** Gives a sandbox uid its own copy of the warm cache (node only reads the subfolder named after its uid). */
  share(dir: string, uid: number): void {
    if (this.#warmed === null || uid === this.#o.ownUid) return;
    const target = join(dir, this.#warmed.replace(/-\d+$/, `-${uid}`));
    if (existsSync(target)) return;
    try {
      cpSync(join(dir, this.#warmed), `${target}.tmp`, { recursive: true });
      renameSync(`${target}.tmp`, target);
    } catch (e: unknown) {
      this.#o.log("compile cache not shared", { error: String(e) });
    }
  }

  /**
   * Fills the compile cache isolated agents read (once per instance, in the background): runs the built-in agent
   * outside any sandbox without a key, so that it loads its modules and exits at once (node writes the cache at
   * exit), then makes the entries readable by every sandbox uid. Only this server's own agent code runs.
   */
  warm(dir: string): void {
    if (this.#warming || this.#o.agentCommand[0] !== process.execPath) return;
    this.#warming = new Promise<void>((done) => {
      const child = spawn(process.execPath, this.#o.agentCommand.slice(1), {
        env: { PATH: WARM_PATH, NODE_COMPILE_CACHE: dir },
        stdio: "ignore",
      });
      const finish = (): void => {
        try {
          for (const entry of readdirSync(dir, { recursive: true, withFileTypes: true })) {
            chmodSync(join(entry.parentPath, entry.name), entry.isDirectory() ? 0o755 : 0o644);
          }
          this.#warmed = readdirSync(dir).find((name) => name.endsWith(`-${this.#o.ownUid}`)) ?? null;
        } catch (e: unknown) {
          this.#o.log("compile cache not readable by sandboxes", { error: String(e) });
        }
        done();
      };
      child.once("error", finish);
      child.once("exit", finish);
    });
  }
}
