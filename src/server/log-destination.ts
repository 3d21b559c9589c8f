import { writeSync } from "node:fs";

/**
 * Most bytes written at once: Linux's PIPE_BUF. A write of at most this many bytes to a pipe is never split nor
 * intermixed with another process's (the workers of `WORKERS=N` share their stdout).
 */
const MAX_WRITE_BYTES = 4096;
/** How long a line may wait in the buffer before it is written. */
export const LOG_FLUSH_DELAY_MS = 50;

/**
 * The log stream of the server (pino writes each line to it): whole lines are buffered and written to `fd`
 * together, with one synchronous `write(2)` of at most 4 KiB, once the next line would not fit or 50 ms after the
 * first buffered line, whichever comes first, and on process exit.
 *
 * Why not pino's own destinations: the synchronous one (pino's default) costs a `write(2)` per line, ~10% of the
 * CPU of a REST call in the benchmarks; the asynchronous one (sonic-boom, `sync: false`) measures the byte length
 * of its whole growing buffer string on every line, which allocated ~6 KB per 200-byte line under load and moved
 * the cost into the garbage collector. Here a line costs an array push and, under load, some 17 access lines share
 * one `write(2)` (writing at the end of every event-loop turn instead, a few lines at a time under the GET load,
 * cost ~2 µs of a ~48 µs GET /api/settings, measured with `bench/profile.ts`). Lines stay in order; a busy pipe
 * (EAGAIN) is retried, a short write continued. What is buffered is written on process exit (also after an
 * uncaught exception) and by `flush()`; only a process killed outright (SIGKILL, abort) loses its last 50 ms of
 * lines.
 */
export class LogDestination {
  readonly #fd: number;
  #lines: string[] = [];
  /** Characters buffered: the bytes, for the ASCII lines pino writes (flush() checks the bytes). */
  #chars = 0;
  #timer: NodeJS.Timeout | undefined;

  constructor(fd = 1) {
    this.#fd = fd;
    process.once("exit", () => this.flush());
  }

  write(line: string): boolean {
    if (this.#chars + line.length > MAX_WRITE_BYTES) this.flush();
    this.#lines.push(line);
    this.#chars += line.length;
    if (this.#chars >= MAX_WRITE_BYTES) this.flush();
    // Unref'd: a pending flush does not keep the process alive (the exit hook writes what is left).
    else this.#timer ??= setTimeout(this.#onTimer, LOG_FLUSH_DELAY_MS).unref();
    return true;
  }

  /** Writes out everything buffered, synchronously. */
  flush(): void {
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
    const lines = this.#lines;
    if (lines.length === 0) return;
    this.#lines = [];
    this.#chars = 0;
    const data = Buffer.from(lines.length === 1 ? (lines[0] as string) : lines.join(""));
    if (data.length <= MAX_WRITE_BYTES || lines.length === 1) writeAll(this.#fd, data);
    // Non-ASCII text made the batch longer in bytes than in characters: one line per write instead.
    else for (const line of lines) writeAll(this.#fd, Buffer.from(line));
  }

  readonly #onTimer = (): void => {
    this.#timer = undefined;
    this.flush();
  };
}

const pause = new Int32Array(new SharedArrayBuffer(4));

/** Writes all of `data`, continuing short writes and retrying a busy non-blocking pipe; drops it if `fd` is gone. */
function writeAll(fd: number, data: Buffer): void {
  let offset = 0;
  let busy = 0;
  while (offset < data.length) {
    try {
      offset += writeSync(fd, data, offset);
      busy = 0;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      // A reader slower than the log (EAGAIN on a non-blocking pipe): wait for it, as pino's destination does,
      // but not forever.
      if ((code === "EAGAIN" || code === "EBUSY") && busy++ < 10_000) {
        Atomics.wait(pause, 0, 0, 1);
        continue;
      }
      // The reader went away (EPIPE) or the descriptor is closed: nothing more can be written.
      return;
    }
  }
}
