import { writeSync } from "node:fs";

/** Lines buffered in one turn past which they are written at once, without waiting for the end of the turn. */
const MAX_BUFFERED_CHARS = 1 << 20;

/**
 * The log stream of the server (pino writes each line to it): the lines of one event-loop turn are written to `fd`
 * together, with one synchronous `write(2)` in the turn's check phase.
 *
 * Why not pino's own destinations: the synchronous one (pino's default) costs a `write(2)` per line, ~10% of the
 * CPU of a REST call in the benchmarks; the asynchronous one (sonic-boom, `sync: false`) measures the byte length
 * of its whole growing buffer string on every line, which allocated ~6 KB per 200-byte line under load and moved
 * the cost into the garbage collector. Here a line costs an array push; the write happens at the end of the same
 * turn (no added latency worth the name: the turn is already done answering), in order, and is synchronous like
 * pino's default, so a line is out before the process can exit. A busy pipe (EAGAIN) is retried, a short write
 * continued; what is still buffered is written on process exit and by `flush()`.
 */
export class LogDestination {
  readonly #fd: number;
  #lines: string[] = [];
  #chars = 0;
  #scheduled = false;

  constructor(fd = 1) {
    this.#fd = fd;
    process.once("exit", () => this.flush());
  }

  write(line: string): boolean {
    this.#lines.push(line);
    this.#chars += line.length;
    if (this.#chars >= MAX_BUFFERED_CHARS) this.flush();
    else if (!this.#scheduled) {
      this.#scheduled = true;
      setImmediate(this.#endOfTurn);
    }
    return true;
  }

  /** Writes out everything buffered, synchronously. */
  flush(): void {
    if (this.#lines.length === 0) return;
    const data = Buffer.from(this.#lines.length === 1 ? (this.#lines[0] as string) : this.#lines.join(""));
    this.#lines = [];
    this.#chars = 0;
    writeAll(this.#fd, data);
  }

  readonly #endOfTurn = (): void => {
    this.#scheduled = false;
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
