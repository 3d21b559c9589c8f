/**
 * What the person types into the terminal chat, before the session acts on it: the commands' help, messages
 * written over several lines, and the answer to a confirmation question.
 */

export const HELP = `Commands:
  /exit, /quit     leave (the conversation goes on in its sandbox; attach again with chat ID)
  /pause           pause the agent (as Ctrl-C while it runs)
  /resume          let a paused agent go on (a new message does too)
  /status          the conversation's id and status
  /help            this text
A line is sent as a message. End a line with \\ to go on to the next one, or put several lines between
two lines of """. Ctrl-C pauses the agent while it runs; a second Ctrl-C leaves; so does Ctrl-D.`;

/** A message written over several lines: a line ending in `\` goes on to the next; lines between two `"""` are one. */
export class MessageDraft {
  /** Lines of the message being written, or null. */
  #lines: string[] | null = null;
  #fenced = false;

  /** Whether a message is being written over several lines. */
  get open(): boolean {
    return this.#lines !== null;
  }

  /** Drops the message being written. */
  clear(): void {
    this.#lines = null;
    this.#fenced = false;
  }

  /**
   * Takes a typed line: the message it completes, "more" when a message goes on (or starts) with it, or undefined
   * for a line outside a multi-line message (a message or a command of its own).
   */
  take(line: string): { message: string } | "more" | undefined {
    if (this.#lines !== null) {
      if (this.#fenced) {
        if (line.trim() !== '"""') {
          this.#lines.push(line);
          return "more";
        }
      } else if (line.endsWith("\\")) {
        this.#lines.push(line.slice(0, -1));
        return "more";
      } else this.#lines.push(line);
      const message = this.#lines.join("\n");
      this.clear();
      return { message };
    }
    if (line.trim() === '"""') {
      this.#lines = [];
      this.#fenced = true;
      return "more";
    }
    if (line.endsWith("\\")) {
      this.#lines = [line.slice(0, -1)];
      this.#fenced = false;
      return "more";
    }
    return undefined;
  }
}

/** An answer to a confirmation question: y or n, after n perhaps a reason ("n use a dry run first"); else null. */
export function parseAnswer(line: string): { accept: boolean; reason: string } | null {
  const m = /^\s*(y|yes|n|no)(?:\b[\s,:.-]*(.*))?$/i.exec(line);
  if (m === null) return null;
  return { accept: (m[1] ?? "").toLowerCase().startsWith("y"), reason: (m[2] ?? "").trim() };
}
