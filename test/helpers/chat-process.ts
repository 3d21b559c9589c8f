/** The terminal chat (`npm run cli -- chat`, src/cli/chat.ts) as a child process, for the chat's e2e tests. */
import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";
import { join } from "node:path";

const cli = join(import.meta.dirname, "..", "..", "src", "cli", "main.ts");

/** The chat as a child process: what it printed, and waits for what it prints next. */
export class ChatProcess {
  readonly proc: ChildProcessWithoutNullStreams;
  stdout = "";
  stderr = "";
  /** Where the next expect() starts looking: output already matched is not matched again. */
  #cursor = 0;
  readonly exited: Promise<number | null>;

  constructor(url: string, key: string, args: string[]) {
    this.proc = spawn(process.execPath, [cli, "chat", "--url", url, "--key", key, ...args], {
      env: { PATH: process.env.PATH ?? "" },
    });
    this.proc.stdout.on("data", (d: Buffer) => {
      this.stdout += d.toString();
    });
    this.proc.stderr.on("data", (d: Buffer) => {
      this.stderr += d.toString();
    });
    this.exited = new Promise((resolve) => this.proc.on("close", (code) => resolve(code)));
  }

  /** Waits until the output after the last match holds `pattern`; returns the text up to the match's end. */
  async expect(pattern: string | RegExp, ms = 30_000): Promise<string> {
    const deadline = Date.now() + ms;
    for (;;) {
      const rest = this.stdout.slice(this.#cursor);
      const match =
        typeof pattern === "string"
          ? rest.includes(pattern)
            ? { index: rest.indexOf(pattern), length: pattern.length }
            : null
          : (() => {
              const m = pattern.exec(rest);
              return m === null ? null : { index: m.index, length: m[0].length };
            })();
      if (match !== null) {
        const upTo = rest.slice(0, match.index + match.length);
        this.#cursor += match.index + match.length;
        return upTo;
      }
      if (Date.now() > deadline || this.proc.exitCode !== null)
        throw new Error(
          `the chat did not print ${String(pattern)}${this.proc.exitCode !== null ? ` (it exited with ${this.proc.exitCode})` : ""}; after the last match it printed:\n${rest}\nstderr:\n${this.stderr}`,
        );
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  send(line: string): void {
    this.proc.stdin.write(`${line}\n`);
  }

  async exitCode(ms = 15_000): Promise<number | null> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`the chat did not exit; it printed:\n${this.stdout}`)), ms);
    });
    try {
      return await Promise.race([this.exited, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }
}
